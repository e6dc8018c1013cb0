"""The model interface: its wire JSON both ways, the scripted model's choice of step, and the
choice of a provider's model by configuration."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.core.errors import AgentLoadError
from reconciler.core.runs.messages import (
    Block,
    Message,
    ModelRequest,
    ModelResponse,
    ModelWireError,
    TextBlock,
    TextDelta,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseDelta,
    Usage,
    block_from_json,
    block_to_json,
    delta_to_json,
    message_from_json,
    message_to_json,
    response_from_json,
    response_to_json,
    usage_from_json,
    usage_to_json,
)
from reconciler.runtime.agent import load_agent
from reconciler.runtime.anthropic import AnthropicModel
from reconciler.runtime.model_choice import model_from_environment
from reconciler.runtime.openai import OpenAIModel
from reconciler.runtime.scripted import (
    DEFAULT_USAGE,
    EXHAUSTED_TEXT,
    ScriptedModel,
    call,
    say,
    tool_use,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10)
blocks: st.SearchStrategy[Block] = st.one_of(
    st.builds(TextBlock, st.text()),
    st.builds(ToolUseBlock, st.text(min_size=1), st.text(min_size=1),
              st.dictionaries(st.text(), json_values, max_size=4)),
    st.builds(ToolResultBlock, st.text(min_size=1), st.text(), st.booleans()))
counts = st.integers(min_value=0, max_value=10**9)
usages = st.builds(Usage, counts, counts, counts, counts)
messages = st.builds(Message, st.sampled_from(["user", "assistant"]),
                     st.lists(blocks, max_size=4).map(tuple))


def through_text(data: dict[str, Any]) -> Any:
    """As it comes back from a journal or the network: serialized, then parsed."""
    return json.loads(json.dumps(data))


@given(blocks)
def test_a_block_survives_its_json(block: Block) -> None:
    assert block_from_json(through_text(block_to_json(block))) == block


@given(messages)
def test_a_message_survives_its_json(message: Message) -> None:
    assert message_from_json(through_text(message_to_json(message))) == message


@given(usages)
def test_usage_survives_its_json(usage: Usage) -> None:
    assert usage_from_json(through_text(usage_to_json(usage))) == usage


@given(st.builds(ModelResponse, st.lists(blocks, max_size=4).map(tuple),
                 st.sampled_from(["end_turn", "tool_use", "max_tokens"]), usages))
def test_a_response_survives_its_json(response: ModelResponse) -> None:
    assert response_from_json(through_text(response_to_json(response))) == response


def test_blocks_have_the_messages_api_wire_shape() -> None:
    assert block_to_json(TextBlock("hi")) == {"type": "text", "text": "hi"}
    assert block_to_json(ToolUseBlock("toolu_1", "pay", {"amount": 5})) == {
        "type": "tool_use", "id": "toolu_1", "name": "pay", "input": {"amount": 5}}
    assert block_to_json(ToolResultBlock("toolu_1", "declined", is_error=True)) == {
        "type": "tool_result", "tool_use_id": "toolu_1", "content": "declined", "is_error": True}


def test_a_tool_result_without_is_error_is_not_an_error() -> None:
    block = block_from_json({"type": "tool_result", "tool_use_id": "t", "content": "ok"})
    assert block == ToolResultBlock("t", "ok", is_error=False)


def test_missing_or_null_cache_counts_are_zero() -> None:
    usage = usage_from_json({"input_tokens": 7, "output_tokens": 2,
                             "cache_read_input_tokens": None})
    assert usage == Usage(input_tokens=7, output_tokens=2)


@pytest.mark.parametrize(("data", "names"), [
    ({"text": "no type"}, "'type' is missing"),
    ({"type": "image", "source": {}}, "unsupported content block type 'image'"),
    ({"type": "text", "text": 3}, "'text' must be a string"),
    ({"type": "tool_use", "id": "t", "name": "pay", "input": []}, "'input' must be an object"),
    ({"type": "tool_use", "name": "pay", "input": {}}, "'id' is missing"),
    ({"type": "tool_result", "tool_use_id": "t", "content": "x", "is_error": "yes"},
     "'is_error' must be a boolean"),
])
def test_a_malformed_block_is_a_wire_error_naming_the_field(data: dict[str, Any],
                                                            names: str) -> None:
    with pytest.raises(ModelWireError, match=names):
        block_from_json(data)


@pytest.mark.parametrize(("data", "names"), [
    ({"role": "system", "content": []}, "'role' must be 'user' or 'assistant'"),
    ({"role": "user", "content": "plain text"}, "'content' must be an array"),
    ({"role": "user", "content": [{"type": "text", "text": "a"}, "b"]},
     r"content\[1\]: a block must be an object"),
    ({"role": "user", "content": [{"type": "text"}]}, r"content\[0\]: text block: 'text'"),
])
def test_a_malformed_message_is_a_wire_error_naming_the_field(data: dict[str, Any],
                                                              names: str) -> None:
    with pytest.raises(ModelWireError, match=names):
        message_from_json(data)


@pytest.mark.parametrize("data", [
    {"output_tokens": 1},
    {"input_tokens": -1, "output_tokens": 1},
    {"input_tokens": True, "output_tokens": 1},
    {"input_tokens": 1, "output_tokens": 1, "cache_read_input_tokens": "2"},
])
def test_a_malformed_usage_is_a_wire_error(data: dict[str, Any]) -> None:
    with pytest.raises(ModelWireError, match="usage"):
        usage_from_json(data)


def test_a_wire_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="expected an object"):
        block_from_json(["not", "a", "block"])  # type: ignore[arg-type]


def test_usage_adds_up_count_by_count() -> None:
    total = Usage(1, 2, 3, 4) + Usage(10, 20, 30, 40)
    assert total == Usage(11, 22, 33, 44) and total.total() == 110


def test_a_message_lists_its_tool_uses_in_order() -> None:
    first, second = ToolUseBlock("a", "pay", {}), ToolUseBlock("b", "mail", {})
    message = Message("assistant", (TextBlock("two calls"), first, second))
    assert message.tool_uses() == (first, second)


# The scripted model.


def conversation(*turns: ModelResponse) -> tuple[Message, ...]:
    """A user prompt, then each turn answered by a user message with its tool results."""
    messages = [Message("user", (TextBlock("go"),))]
    for turn in turns:
        messages.append(turn.message())
        results = tuple(ToolResultBlock(use.id, "done") for use in turn.message().tool_uses())
        messages.append(Message("user", results or (TextBlock("next"),)))
    return tuple(messages)


def ask(model: ScriptedModel, messages: tuple[Message, ...]) -> ModelResponse:
    return asyncio.run(model.complete(ModelRequest("system", messages, ())))


SCRIPT = (call(tool_use("pay", {"amount": 5})), call(tool_use("mail", {"to": "a@b"})),
          say("paid and mailed"))


def test_the_step_played_is_the_number_of_assistant_messages() -> None:
    model = ScriptedModel(SCRIPT)
    first = ask(model, conversation())
    second = ask(model, conversation(first))
    third = ask(model, conversation(first, second))
    assert [b.name for b in first.content + second.content if isinstance(b, ToolUseBlock)] == [
        "pay", "mail"]
    assert third.content == (TextBlock("paid and mailed"),) and third.stop_reason == "end_turn"


def test_a_fresh_model_after_a_restart_continues_at_the_conversations_step() -> None:
    before = ScriptedModel(SCRIPT)
    first = ask(before, conversation())
    restarted = ScriptedModel(SCRIPT)  # a new process: same script, no memory of the first call
    second = ask(restarted, conversation(first))
    assert second.message().tool_uses()[0].name == "mail"


def test_asking_the_same_step_again_answers_the_same() -> None:
    model = ScriptedModel(SCRIPT)
    assert ask(model, conversation()) == ask(model, conversation())


def test_past_the_script_the_model_ends_the_turn_with_the_exhausted_text() -> None:
    model = ScriptedModel([say("only step")])
    answer = ask(model, conversation(say("only step"), say("more?")))
    assert answer.content == (TextBlock(EXHAUSTED_TEXT),) and answer.stop_reason == "end_turn"


def test_a_callable_step_answers_from_the_request() -> None:
    def echo_result(request: ModelRequest) -> ModelResponse:
        [result] = request.messages[-1].content
        assert isinstance(result, ToolResultBlock)
        return say(f"the tool said {result.content}")

    model = ScriptedModel([call(tool_use("pay")), echo_result])
    answer = ask(model, conversation(ask(model, conversation())))
    assert answer.content == (TextBlock("the tool said done"),)


def test_unstated_usage_is_the_models_default_and_stated_usage_is_kept() -> None:
    own = Usage(input_tokens=1000, output_tokens=1, cache_read_input_tokens=500)
    model = ScriptedModel([say("a"), say("b", usage=own)], usage=Usage(50, 5))
    assert ask(model, conversation()).usage == Usage(50, 5)
    assert ask(model, conversation(say("a"))).usage == own


def test_without_a_usage_the_model_charges_the_default() -> None:
    assert ask(ScriptedModel([say("c")]), conversation()).usage == DEFAULT_USAGE


def test_tool_uses_without_ids_are_numbered_by_step_and_position() -> None:
    model = ScriptedModel([call(tool_use("pay"), tool_use("mail", id="mine"),
                                tool_use("ship"), text="three calls")])
    content = ask(model, conversation()).content
    assert [b.id for b in content if isinstance(b, ToolUseBlock)] == [
        "toolu_s0_1", "mine", "toolu_s0_3"]


def test_the_model_keeps_every_request_it_saw() -> None:
    model = ScriptedModel(SCRIPT)
    ask(model, conversation())
    ask(model, conversation())
    assert len(model.requests) == 2 and model.requests[0].messages == conversation()


def test_deltas_have_the_messages_api_stream_shape() -> None:
    assert delta_to_json(TextDelta(0, "Hel")) == {"type": "text_delta", "index": 0,
                                                   "text": "Hel"}
    assert delta_to_json(ToolUseDelta(1, "toolu_1", "pay", '{"am')) == {
        "type": "tool_use_delta", "index": 1, "id": "toolu_1", "name": "pay",
        "partial_json": '{"am'}


def test_without_a_model_choice_the_agent_keeps_its_model() -> None:
    assert model_from_environment({}) is None
    assert model_from_environment({"RECONCILER_MODEL": " "}) is None
    agent = load_agent("examples.agent:agent", {})
    assert isinstance(agent.model, ScriptedModel)


@pytest.mark.parametrize(("choice", "kind", "api"), [
    ("openai:gpt-4.1-mini", OpenAIModel, "chat"),
    ("openai-responses:gpt-4.1-mini", OpenAIModel, "responses"),
    ("anthropic:claude-sonnet-4-5", AnthropicModel, None),
])
def test_a_model_choice_names_the_provider_api_and_model(choice: str, kind: type,
                                                         api: str | None) -> None:
    model = model_from_environment({"RECONCILER_MODEL": choice, "OPENAI_API_KEY": "k",
                                    "ANTHROPIC_API_KEY": "k"})
    assert isinstance(model, kind) and isinstance(model, OpenAIModel | AnthropicModel)
    assert model.model == choice.partition(":")[2]
    assert getattr(model, "api", None) == api


def test_a_model_choice_replaces_the_agents_model_and_keeps_its_tools() -> None:
    agent = load_agent("examples.agent:agent", {"RECONCILER_MODEL": "openai:llama3.1",
                                                "OPENAI_API_KEY": "ollama"})
    assert isinstance(agent.model, OpenAIModel) and agent.model.model == "llama3.1"
    assert [tool.spec.name for tool in agent.tools] == ["count_words"]
    assert agent.config == {"max_turns": 3}


@pytest.mark.parametrize(("environ", "message"), [
    ({"RECONCILER_MODEL": "gpt-4.1"}, "write it as provider:model"),
    ({"RECONCILER_MODEL": "mistral:large"}, "openai, openai-responses, anthropic"),
    ({"RECONCILER_MODEL": "openai:"}, "write it as provider:model"),
    ({"RECONCILER_MODEL": "openai:gpt-4.1"}, "OPENAI_API_KEY"),
    ({"RECONCILER_MODEL": "anthropic:claude"}, "ANTHROPIC_API_KEY"),
])
def test_a_bad_model_choice_fails_the_agents_load_saying_what_to_set(
        environ: dict[str, str], message: str) -> None:
    with pytest.raises(AgentLoadError, match="RECONCILER_MODEL") as refused:
        load_agent("examples.agent:agent", environ)
    assert message in str(refused.value)
