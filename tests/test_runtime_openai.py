"""The OpenAI-compatible model (Chat Completions and Responses) against a local fake of the API
over real HTTP, answered whole and streamed."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import openai
import pytest

from reconciler.core.runs.messages import (
    Delta,
    Message,
    ModelRequest,
    ModelResponse,
    TextBlock,
    TextDelta,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseDelta,
    Usage,
)
from reconciler.runtime.cancel import Cancelled, CancelSignal, cancellable
from reconciler.runtime.models import ModelCallError, StreamingModel
from reconciler.runtime.openai import MissingOpenAIKeyError, OpenAIModel
from reconciler.runtime.openai_chat import chat_response
from reconciler.runtime.openai_wire import usage_of

from model_calls import BOUND_S, HELLO, PAY, cancel_mid_stream, complete, run, stream
from openai_fake import KEY, FakeOpenAI, running_fake
from service_harness import serving_process

ROOT = Path(__file__).parent.parent
APIS = ("chat", "responses")

CONVERSATION = ModelRequest("You pay bills.", (
    Message("user", (TextBlock("pay 5"),)),
    Message("assistant", (TextBlock("paying"), ToolUseBlock("call_1", "pay", {"amount": 5}))),
    Message("user", (ToolResultBlock("call_1", "card declined", is_error=True),)),
), (PAY,), max_tokens=300)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with running_fake() as running:
        yield running


def model_for(fake: FakeOpenAI, api: str = "chat", **options: Any) -> OpenAIModel:
    settings: dict[str, Any] = {"api_key": KEY, "backoff_s": 0.01, **options}
    return OpenAIModel(model="gpt-test", api="chat" if api == "chat" else "responses",
                       base_url=f"{fake.url}/v1", **settings)


def answer(model: OpenAIModel, streamed: bool, request: ModelRequest = HELLO) -> ModelResponse:
    return run(stream(model, request) if streamed else complete(model, request))


def test_the_model_streams() -> None:
    assert isinstance(OpenAIModel(model="m", api_key=KEY), StreamingModel)


def test_a_chat_request_has_bearer_auth_and_the_chat_completions_body(fake: FakeOpenAI) -> None:
    run(complete(model_for(fake), CONVERSATION))
    [received] = fake.requests
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.body == {
        "model": "gpt-test", "max_completion_tokens": 300,
        "messages": [
            {"role": "system", "content": "You pay bills."},
            {"role": "user", "content": "pay 5"},
            {"role": "assistant", "content": "paying", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "pay", "arguments": '{"amount": 5}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "Error: card declined"}],
        "tools": [{"type": "function", "function": {
            "name": "pay", "description": "Charge a card.", "parameters": PAY.input_schema}}]}


def test_a_responses_request_is_stateless_with_function_call_items(fake: FakeOpenAI) -> None:
    run(complete(model_for(fake, "responses"), CONVERSATION))
    [received] = fake.requests
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.body == {
        "model": "gpt-test", "max_output_tokens": 300, "store": False,
        "instructions": "You pay bills.",
        "input": [
            {"role": "user", "content": "pay 5"},
            {"role": "assistant", "content": "paying"},
            {"type": "function_call", "call_id": "call_1", "name": "pay",
             "arguments": '{"amount": 5}'},
            {"type": "function_call_output", "call_id": "call_1",
             "output": "Error: card declined"}],
        "tools": [{"type": "function", "name": "pay", "description": "Charge a card.",
                   "parameters": PAY.input_schema, "strict": False}]}


def test_a_streamed_chat_request_asks_for_the_usage_chunk(fake: FakeOpenAI) -> None:
    run(stream(model_for(fake)))
    body = fake.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert fake.requests[0].headers["accept"] == "text/event-stream"


def test_the_older_max_tokens_field_can_be_chosen(fake: FakeOpenAI) -> None:
    run(complete(model_for(fake, max_tokens_field="max_tokens")))
    assert fake.requests[0].body["max_tokens"] == 1024
    assert "max_completion_tokens" not in fake.requests[0].body


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", APIS)
def test_text_and_tool_calls_are_blocks_with_arguments_as_input(
        fake: FakeOpenAI, api: str, streamed: bool) -> None:
    fake.reply("I will pay both.", ("call_a", "pay", {"amount": 5}),
               ("call_b", "pay", {"amount": 70, "note": "rent, late"}))
    response = answer(model_for(fake, api), streamed, ModelRequest("", HELLO.messages, (PAY,)))
    assert response.content == (TextBlock("I will pay both."),
                                ToolUseBlock("call_a", "pay", {"amount": 5}),
                                ToolUseBlock("call_b", "pay", {"amount": 70,
                                                               "note": "rent, late"}))
    assert response.stop_reason == "tool_use"


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", APIS)
def test_usage_moves_cached_input_tokens_to_the_cache_read_count(
        fake: FakeOpenAI, api: str, streamed: bool) -> None:
    fake.reply("ok", prompt=1000, completion=7, cached=600)
    assert answer(model_for(fake, api), streamed).usage == Usage(400, 7, 0, 600)


def test_tokens_written_to_the_cache_are_the_cache_creation_count() -> None:
    details = {"cached_tokens": 600, "cache_write_tokens": 100}
    assert usage_of(1000, 7, details) == Usage(300, 7, 100, 600)


def test_cache_counts_a_server_reports_outside_the_prompt_leave_the_prompt_whole() -> None:
    assert usage_of(50, 7, {"cached_tokens": 600}) == Usage(50, 7, 0, 600)


def test_an_answer_without_usage_counts_nothing_and_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    completion = {"choices": [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": "hi"}}]}
    assert chat_response(completion).usage == Usage()
    assert "reported no token usage" in caplog.text


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", APIS)
def test_an_answer_cut_by_the_output_limit_stops_for_max_tokens(
        fake: FakeOpenAI, api: str, streamed: bool) -> None:
    fake.reply("and then", truncated=True)
    response = answer(model_for(fake, api), streamed)
    assert (response.stop_reason, response.content) == ("max_tokens", (TextBlock("and then"),))


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_plain_answer_ends_the_turn(fake: FakeOpenAI, streamed: bool) -> None:
    fake.reply("done")
    assert answer(model_for(fake), streamed).stop_reason == "end_turn"


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_reasoning_items_are_skipped(fake: FakeOpenAI, streamed: bool) -> None:
    fake.reply("42", reasoning=True)
    assert answer(model_for(fake, "responses"), streamed).content == (TextBlock("42"),)


@pytest.mark.parametrize("api", APIS)
def test_stream_deltas_arrive_in_order_and_add_up_to_the_answer(
        fake: FakeOpenAI, api: str) -> None:
    fake.reply("Paying the bill now.", ("call_a", "pay", {"amount": 5}))
    deltas: list[Delta] = []
    response = run(stream(model_for(fake, api), HELLO, deltas))
    texts = [d for d in deltas if isinstance(d, TextDelta)]
    calls = [d for d in deltas if isinstance(d, ToolUseDelta)]
    assert len(texts) > 1 and {d.index for d in texts} == {0}
    assert "".join(d.text for d in texts) == "Paying the bill now."
    assert len(calls) > 1 and {(d.index, d.id, d.name) for d in calls} == {(1, "call_a", "pay")}
    assert json.loads("".join(d.partial_json for d in calls)) == {"amount": 5}
    assert deltas.index(calls[0]) > deltas.index(texts[-1])
    assert response.content == (TextBlock("Paying the bill now."),
                                ToolUseBlock("call_a", "pay", {"amount": 5}))


@pytest.mark.parametrize("numbering", ["missing", "reused"])
def test_streamed_tool_calls_are_told_apart_by_id_where_a_server_misnumbers_them(
        fake: FakeOpenAI, numbering: Literal["missing", "reused"]) -> None:
    fake.tool_call_index = numbering
    fake.reply("", ("call_a", "pay", {"amount": 5}), ("call_b", "pay", {"amount": 70}))
    response = run(stream(model_for(fake), ModelRequest("", HELLO.messages, (PAY,))))
    assert response.content == (ToolUseBlock("call_a", "pay", {"amount": 5}),
                                ToolUseBlock("call_b", "pay", {"amount": 70}))


@pytest.mark.parametrize("api", APIS)
def test_a_wrong_key_is_a_call_error_that_holds_no_key(fake: FakeOpenAI, api: str) -> None:
    secret = "sk-proj-wrong-secret-4242"
    with pytest.raises(ModelCallError) as err:
        run(complete(model_for(fake, api, api_key=secret)))
    assert (err.value.status, err.value.error_type, err.value.attempts) == (
        401, "invalid_request_error", 1)
    assert "OPENAI_API_KEY" in str(err.value)
    assert secret not in f"{err.value}{err.value!r}{err.value.args}"
    assert len(fake.requests) == 1


def test_the_key_is_in_no_log_line(fake: FakeOpenAI, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake.fail(503)
    run(complete(model_for(fake)))
    assert "retrying" in caplog.text and KEY not in caplog.text


@pytest.mark.parametrize("api", APIS)
def test_a_refused_request_is_not_retried(fake: FakeOpenAI, api: str) -> None:
    orphan = ModelRequest("", (Message("user", (ToolResultBlock("call_x", "?"),)),), ())
    with pytest.raises(ModelCallError, match="tool") as err:
        run(complete(model_for(fake, api), orphan))
    assert (err.value.status, err.value.error_type) == (400, "invalid_request_error")
    assert len(fake.requests) == 1


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_rate_limit_waits_what_retry_after_asks(fake: FakeOpenAI, streamed: bool) -> None:
    # The own backoff would wait far past the bound: only honoring retry-after ends in time.
    fake.fail(429, retry_after="0")
    fake.reply("second time lucky")
    response = answer(model_for(fake, backoff_s=3600.0), streamed)
    assert response.content == (TextBlock("second time lucky"),) and len(fake.requests) == 2


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_persistent_server_error_fails_after_the_bounded_attempts(
        fake: FakeOpenAI, streamed: bool) -> None:
    fake.fail(500, 500, 500, 500)
    with pytest.raises(ModelCallError) as err:
        answer(model_for(fake, max_retries=2), streamed)
    assert (err.value.status, err.value.error_type, err.value.attempts) == (
        500, "server_error", 3)
    assert len(fake.requests) == 3


@pytest.mark.parametrize("api", APIS)
def test_a_stream_that_fails_before_its_first_delta_is_retried(
        fake: FakeOpenAI, api: str) -> None:
    fake.break_stream(after=0, error="server_error")
    fake.reply("lost")
    fake.reply("found")
    deltas: list[Delta] = []
    response = run(stream(model_for(fake, api), HELLO, deltas))
    assert response.content == (TextBlock("found"),) and len(fake.requests) == 2
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "found"


@pytest.mark.parametrize("api", APIS)
def test_a_stream_that_fails_after_a_delta_is_not_retried(fake: FakeOpenAI, api: str) -> None:
    fake.break_stream(after=1, error="server_error")
    fake.reply("half an answer")
    deltas: list[Delta] = []
    with pytest.raises(ModelCallError, match="server_error") as err:
        run(stream(model_for(fake, api), HELLO, deltas))
    assert (err.value.status, err.value.error_type, err.value.attempts) == (
        200, "server_error", 1)
    assert len(deltas) == 1 and len(fake.requests) == 1


@pytest.mark.parametrize("api", APIS)
def test_the_sinks_own_error_ends_the_stream_unchanged_and_unretried(
        fake: FakeOpenAI, api: str) -> None:
    fake.reply("an answer no one can show")

    def broken(delta: Delta) -> None:
        raise ValueError("the screen is gone")

    async def streamed() -> None:
        async with model_for(fake, api) as model:
            await model.stream(HELLO, broken)

    with pytest.raises(ValueError, match="the screen is gone"):
        run(streamed())
    assert len(fake.requests) == 1


@pytest.mark.parametrize("api", APIS)
def test_a_refusing_error_event_is_not_retried(fake: FakeOpenAI, api: str) -> None:
    fake.break_stream(after=0, error="invalid_prompt")
    with pytest.raises(ModelCallError, match="invalid_prompt"):
        run(stream(model_for(fake, api)))
    assert len(fake.requests) == 1


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", APIS)
def test_tool_arguments_that_are_not_a_json_object_are_a_call_error(
        fake: FakeOpenAI, api: str, streamed: bool) -> None:
    fake.reply("", ("call_a", "pay", '{"amount": 5'))
    with pytest.raises(ModelCallError, match="not JSON"):
        answer(model_for(fake, api), streamed)


@pytest.mark.parametrize("api", APIS)
def test_cancelling_a_stream_closes_the_connection_and_raises_cancelled(
        fake: FakeOpenAI, api: str) -> None:
    fake.stall()
    fake.reply("a long answer that never finishes")

    cancel_mid_stream(model_for(fake, api), fake.disconnected)
    assert len(fake.requests) == 1


def test_cancelling_a_whole_answer_closes_the_request(fake: FakeOpenAI) -> None:
    fake.hold()

    async def cancel_while_held() -> None:
        signal = CancelSignal()
        async with model_for(fake) as model:
            call = asyncio.create_task(cancellable(model.complete(HELLO), signal))
            assert await asyncio.to_thread(fake.held.wait, BOUND_S), "the fake never got it"
            signal.cancel("stop")
            with pytest.raises(Cancelled):
                await call
            assert await asyncio.to_thread(fake.disconnected.wait, BOUND_S)

    asyncio.run(cancel_while_held())
    assert len(fake.requests) == 1


def test_a_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingOpenAIKeyError, match="OPENAI_API_KEY"):
        OpenAIModel(model="gpt-test")


def test_key_and_base_url_default_to_the_environment(fake: FakeOpenAI,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{fake.url}/v1")
    model = OpenAIModel(model="gpt-test")
    assert KEY not in repr(model)
    run(complete(model))
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_an_unknown_api_is_refused() -> None:
    with pytest.raises(ValueError, match="'chat' or 'responses'"):
        OpenAIModel(model="m", api_key=KEY, api="completions")  # type: ignore[arg-type]


@pytest.mark.parametrize("choice", ["openai", "openai-responses"])
def test_serve_runs_the_agent_with_the_model_its_environment_names(
        fake: FakeOpenAI, choice: str) -> None:
    fake.reply("Let me count.", ("call_1", "count_words", {"text": "one two"}))
    fake.reply("Your task has 2 words.")
    with serving_process({"RECONCILER_AGENT": "examples.agent:agent",
                          "RECONCILER_MODEL": f"{choice}:gpt-test",
                          "RECONCILER_MODEL_BASE_URL": f"{fake.url}/v1",
                          "OPENAI_API_KEY": KEY, "RECONCILER_DB": "sqlite://",
                          "RECONCILER_SWEEP_INTERVAL_S": "0"}, cwd=ROOT) as service:
        response = httpx.post(service.url + "/v1/runs", json={"input": "one two"}, timeout=20)
    assert response.status_code == 201, response.text
    run = response.json()
    assert (run["state"], run["output"]) == ("completed", "Your task has 2 words.")
    first, second = (received.body for received in fake.requests)
    assert first["model"] == "gpt-test" and second["model"] == "gpt-test"
    # The tool's result went back to the model in the API's own shape.
    if choice == "openai":
        assert {"role": "tool", "tool_call_id": "call_1", "content": "2"} in second["messages"]
    else:
        assert {"type": "function_call_output", "call_id": "call_1",
                "output": "2"} in second["input"]
    assert KEY not in "".join(service.output)


async def official_sdk(fake: FakeOpenAI, api: str, streamed: bool) -> tuple[Any, ...]:
    """What OpenAI's own SDK reads from the fake: text, calls and the raw usage counts."""
    client = openai.AsyncOpenAI(api_key=KEY, base_url=f"{fake.url}/v1", max_retries=0)
    schema = dict(PAY.input_schema)
    tools: Any
    if api == "chat":
        tools = [{"type": "function", "function": {"name": "pay", "parameters": schema}}]
        messages: Any = [{"role": "user", "content": "hello"}]
        completion: openai.types.chat.ChatCompletion
        if streamed:
            async with client.chat.completions.stream(
                    model="gpt-test", messages=messages, tools=tools,
                    stream_options={"include_usage": True}) as chunks:
                completion = await chunks.get_final_completion()
        else:
            completion = await client.chat.completions.create(model="gpt-test",
                                                              messages=messages, tools=tools)
        message, usage = completion.choices[0].message, completion.usage
        assert usage is not None and usage.prompt_tokens_details is not None
        return (message.content, [(c.id, c.function.name, json.loads(c.function.arguments))
                                  for c in message.tool_calls or [] if c.type == "function"],
                (usage.prompt_tokens, usage.completion_tokens,
                 usage.prompt_tokens_details.cached_tokens))
    tools = [{"type": "function", "name": "pay", "parameters": schema, "strict": False}]
    response: openai.types.responses.Response
    if streamed:
        async with client.responses.stream(model="gpt-test", input="hello",
                                           tools=tools) as events:
            response = await events.get_final_response()
    else:
        response = await client.responses.create(model="gpt-test", input="hello", tools=tools)
    assert response.usage is not None
    return (response.output_text, [(i.call_id, i.name, json.loads(i.arguments))
                                   for i in response.output if i.type == "function_call"],
            (response.usage.input_tokens, response.usage.output_tokens,
             response.usage.input_tokens_details.cached_tokens))


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", APIS)
def test_the_official_sdk_reads_the_fakes_answers_as_the_model_does(
        fake: FakeOpenAI, api: str, streamed: bool) -> None:
    # The fake is only evidence if the SDK, whose stream helpers check the events' order and
    # shapes, reads it as the real API: then the model's reading is compared with the SDK's.
    for _ in range(2):
        fake.reply("I will pay.", ("call_a", "pay", {"amount": 5}), prompt=90, completion=8,
                   cached=40, reasoning=True)
    text, calls, (prompt, completion, cached) = run(official_sdk(fake, api, streamed))
    response = answer(model_for(fake, api), streamed, ModelRequest("", HELLO.messages, (PAY,)))
    assert (text, calls, prompt, completion, cached) == (
        "I will pay.", [("call_a", "pay", {"amount": 5})], 90, 8, 40)
    assert response.content == (TextBlock(text), ToolUseBlock(*calls[0]))
    assert response.usage == Usage(prompt - cached, completion, 0, cached)
