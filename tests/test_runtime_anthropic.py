"""The Anthropic adapter against a local fake of the Messages API over real HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from reconciler.core.runs.messages import (
    Delta,
    Message,
    ModelRequest,
    TextBlock,
    TextDelta,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseDelta,
    Usage,
)
from reconciler.runtime.anthropic import AnthropicModel, MissingApiKeyError
from reconciler.runtime.models import ModelCallError, StreamingModel

from anthropic_fake import KEY, FakeAnthropic, running_fake
from model_calls import BOUND_S, HELLO, PAY, cancel_mid_stream, complete, run, stream


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with running_fake() as running:
        yield running


def model_for(fake: FakeAnthropic, **options: Any) -> AnthropicModel:
    settings: dict[str, Any] = {"api_key": KEY, "backoff_s": 0.01, **options}
    return AnthropicModel(model="claude-test", base_url=fake.url, **settings)


def test_the_request_has_the_messages_api_headers_and_body(fake: FakeAnthropic) -> None:
    use = ToolUseBlock("toolu_1", "pay", {"amount": 5})
    request = ModelRequest("You pay bills.", (
        Message("user", (TextBlock("pay 5"),)),
        Message("assistant", (TextBlock("paying"), use)),
        Message("user", (ToolResultBlock("toolu_1", "card declined", is_error=True),)),
    ), (PAY,), max_tokens=300)
    run(complete(model_for(fake), request))
    [received] = fake.requests
    assert received.headers["x-api-key"] == KEY
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert received.headers["content-type"] == "application/json"
    assert received.body == {
        "model": "claude-test", "max_tokens": 300, "system": "You pay bills.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "pay 5"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "paying"},
                {"type": "tool_use", "id": "toolu_1", "name": "pay", "input": {"amount": 5}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                          "content": "card declined", "is_error": True}]}],
        "tools": [{"name": "pay", "description": "Charge a card.",
                   "input_schema": PAY.input_schema}]}


def test_no_tools_and_no_system_prompt_are_left_out_of_the_body(fake: FakeAnthropic) -> None:
    run(complete(model_for(fake)))
    assert set(fake.requests[0].body) == {"model", "max_tokens", "messages"}


def test_tool_use_blocks_and_the_stop_reason_are_parsed(fake: FakeAnthropic) -> None:
    fake.reply([{"type": "text", "text": "I will pay."},
                {"type": "tool_use", "id": "toolu_9", "name": "pay", "input": {"amount": 5}}],
               stop_reason="tool_use")
    response = run(complete(model_for(fake), ModelRequest("", HELLO.messages, (PAY,))))
    assert response.stop_reason == "tool_use"
    assert response.content == (TextBlock("I will pay."),
                                ToolUseBlock("toolu_9", "pay", {"amount": 5}))


def test_usage_maps_all_four_counts(fake: FakeAnthropic) -> None:
    fake.reply([{"type": "text", "text": "ok"}], usage={
        "input_tokens": 20, "output_tokens": 7, "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 4000})
    assert run(complete(model_for(fake))).usage == Usage(20, 7, 300, 4000)


def test_missing_cache_counts_are_zero(fake: FakeAnthropic) -> None:
    fake.reply([{"type": "text", "text": "ok"}], usage={"input_tokens": 20, "output_tokens": 7})
    assert run(complete(model_for(fake))).usage == Usage(20, 7)


def test_a_wrong_key_is_a_call_error_that_holds_no_key(fake: FakeAnthropic) -> None:
    secret = "sk-ant-wrong-secret-4242"
    with pytest.raises(ModelCallError) as err:
        run(complete(model_for(fake, api_key=secret)))
    assert (err.value.status, err.value.error_type) == (401, "authentication_error")
    assert "ANTHROPIC_API_KEY" in str(err.value) and err.value.attempts == 1
    assert secret not in f"{err.value}{err.value!r}{err.value.args}"
    assert len(fake.requests) == 1


def test_the_key_is_in_no_log_line(fake: FakeAnthropic, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake.fail(529)
    run(complete(model_for(fake)))
    assert "retrying" in caplog.text and KEY not in caplog.text


def test_a_refused_request_is_not_retried(fake: FakeAnthropic) -> None:
    orphan = ModelRequest("", (Message("user", (ToolResultBlock("toolu_x", "?"),)),), ())
    with pytest.raises(ModelCallError, match="tool_result") as err:
        run(complete(model_for(fake), orphan))
    assert (err.value.status, err.value.error_type) == (400, "invalid_request_error")
    assert len(fake.requests) == 1


def test_overloaded_then_success_is_retried(fake: FakeAnthropic) -> None:
    fake.fail(529)
    fake.reply([{"type": "text", "text": "second time lucky"}])
    response = run(complete(model_for(fake)))
    assert response.content == (TextBlock("second time lucky"),) and len(fake.requests) == 2


def test_a_persistent_server_error_fails_after_the_bounded_attempts(fake: FakeAnthropic) -> None:
    fake.fail(500, 500, 500, 500, 500)
    with pytest.raises(ModelCallError) as err:
        run(complete(model_for(fake, max_retries=2)))
    assert (err.value.status, err.value.error_type, err.value.attempts) == (500, "api_error", 3)
    assert len(fake.requests) == 3


def test_a_rate_limit_waits_what_retry_after_asks(fake: FakeAnthropic) -> None:
    # The own backoff would wait far past the bound: only honoring retry-after ends in time.
    fake.fail(429, retry_after="0")
    run(complete(model_for(fake, backoff_s=3600.0)))
    assert len(fake.requests) == 2


def test_a_long_retry_after_is_capped(fake: FakeAnthropic) -> None:
    fake.fail(429, retry_after="3600")
    run(complete(model_for(fake, max_wait_s=0.01)))
    assert len(fake.requests) == 2


def test_an_unreachable_api_is_a_call_error_after_the_bounded_attempts() -> None:
    with socket.socket() as sock:  # a port just freed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = AnthropicModel(api_key=KEY, model="m", base_url=f"http://127.0.0.1:{port}",
                           backoff_s=0.01, max_retries=1)
    with pytest.raises(ModelCallError, match="no answer") as err:
        run(complete(model))
    assert err.value.status is None and err.value.attempts == 2


def test_an_unknown_block_type_in_the_answer_is_a_call_error(fake: FakeAnthropic) -> None:
    fake.reply([{"type": "thinking", "thinking": "hmm", "signature": "x"}])
    with pytest.raises(ModelCallError, match="unsupported content block type 'thinking'"):
        run(complete(model_for(fake)))


def test_a_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MissingApiKeyError, match="ANTHROPIC_API_KEY"):
        AnthropicModel(model="claude-test")


def test_the_key_defaults_to_the_environment(fake: FakeAnthropic,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    run(complete(AnthropicModel(model="claude-test", base_url=fake.url)))
    assert fake.requests[0].headers["x-api-key"] == KEY


def test_cancelling_the_call_closes_the_request_in_flight(fake: FakeAnthropic) -> None:
    fake.hold()

    async def cancel_while_held() -> None:
        async with model_for(fake) as model:
            call = asyncio.create_task(model.complete(HELLO))
            assert await asyncio.to_thread(fake.held.wait, BOUND_S), "the fake never got it"
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            # Checked while the loop still runs: its shutdown would close the connection anyway.
            assert await asyncio.to_thread(fake.disconnected.wait, BOUND_S), (
                "the fake still holds the request open")

    asyncio.run(cancel_while_held())
    assert len(fake.requests) == 1  # cancelled, not retried


def test_the_model_streams() -> None:
    assert isinstance(AnthropicModel(model="m", api_key=KEY), StreamingModel)


def test_a_streamed_request_asks_for_the_event_stream(fake: FakeAnthropic) -> None:
    run(stream(model_for(fake)))
    [received] = fake.requests
    assert received.body["stream"] is True
    assert received.headers["accept"] == "text/event-stream"


def test_stream_deltas_arrive_in_order_and_add_up_to_the_answer(fake: FakeAnthropic) -> None:
    fake.reply([{"type": "text", "text": "Paying the bill now."},
                {"type": "tool_use", "id": "toolu_9", "name": "pay", "input": {"amount": 5}}],
               stop_reason="tool_use")
    deltas: list[Delta] = []
    response = run(stream(model_for(fake), ModelRequest("", HELLO.messages, (PAY,)), deltas))
    texts = [d for d in deltas if isinstance(d, TextDelta)]
    uses = [d for d in deltas if isinstance(d, ToolUseDelta)]
    assert len(texts) > 1 and {d.index for d in texts} == {0}
    assert "".join(d.text for d in texts) == "Paying the bill now."
    assert uses[0] == ToolUseDelta(1, "toolu_9", "pay", "") and len(uses) > 2
    assert json.loads("".join(d.partial_json for d in uses)) == {"amount": 5}
    assert deltas.index(uses[0]) > deltas.index(texts[-1])
    assert response.content == (TextBlock("Paying the bill now."),
                                ToolUseBlock("toolu_9", "pay", {"amount": 5}))
    assert response.stop_reason == "tool_use"


def test_a_streamed_answer_equals_the_whole_one(fake: FakeAnthropic) -> None:
    content: list[dict[str, Any]] = [
        {"type": "text", "text": "Let me pay."},
        {"type": "tool_use", "id": "toolu_1", "name": "pay", "input": {"amount": 5}},
        {"type": "tool_use", "id": "toolu_2", "name": "pay", "input": {}}]
    usage = {"input_tokens": 20, "output_tokens": 7, "cache_creation_input_tokens": 300,
             "cache_read_input_tokens": 4000}
    for _ in range(2):
        fake.reply(content, stop_reason="tool_use", usage=usage)
    whole = run(complete(model_for(fake)))
    streamed = run(stream(model_for(fake)))
    assert streamed == whole and streamed.usage == Usage(20, 7, 300, 4000)
    assert streamed.content[2] == ToolUseBlock("toolu_2", "pay", {})


def test_a_stream_overloaded_before_its_first_delta_is_retried(fake: FakeAnthropic) -> None:
    fake.break_stream(after=0, error="overloaded_error")
    fake.reply([{"type": "text", "text": "lost"}])
    fake.reply([{"type": "text", "text": "found"}])
    deltas: list[Delta] = []
    response = run(stream(model_for(fake), HELLO, deltas))
    assert response.content == (TextBlock("found"),) and len(fake.requests) == 2
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "found"


def test_a_stream_that_fails_after_a_delta_is_not_retried(fake: FakeAnthropic) -> None:
    fake.break_stream(after=1, error="overloaded_error")
    fake.reply([{"type": "text", "text": "half an answer"}])
    deltas: list[Delta] = []
    with pytest.raises(ModelCallError, match="overloaded_error") as err:
        run(stream(model_for(fake), HELLO, deltas))
    assert (err.value.status, err.value.attempts) == (200, 1)
    assert deltas == [TextDelta(0, "half")] and len(fake.requests) == 1


def test_a_refused_stream_is_a_call_error_before_any_event(fake: FakeAnthropic) -> None:
    fake.fail(401)
    with pytest.raises(ModelCallError) as err:
        run(stream(model_for(fake)))
    assert (err.value.status, err.value.error_type) == (401, "authentication_error")


def test_an_unknown_block_type_in_a_stream_is_a_call_error(fake: FakeAnthropic) -> None:
    fake.reply([{"type": "thinking", "thinking": "hmm", "signature": "x"}])
    with pytest.raises(ModelCallError, match="unsupported content block type 'thinking'"):
        run(stream(model_for(fake)))


def test_cancelling_a_stream_closes_the_connection_and_raises_cancelled(
        fake: FakeAnthropic) -> None:
    fake.stall()
    fake.reply([{"type": "text", "text": "a long answer that never finishes"}])

    cancel_mid_stream(model_for(fake), fake.disconnected)
    assert len(fake.requests) == 1


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_the_official_sdk_reads_the_fakes_answers_as_the_model_does(
        fake: FakeAnthropic, streamed: bool) -> None:
    # The fake is only evidence if the SDK, whose stream helper checks the events' order and
    # shapes, reads it as the real API: then the model's reading is compared with the SDK's.
    content: list[dict[str, Any]] = [
        {"type": "text", "text": "I will pay."},
        {"type": "tool_use", "id": "toolu_1", "name": "pay", "input": {"amount": 5}}]
    usage = {"input_tokens": 20, "output_tokens": 7, "cache_creation_input_tokens": 300,
             "cache_read_input_tokens": 4000}
    for _ in range(2):
        fake.reply(content, stop_reason="tool_use", usage=usage)

    async def official() -> anthropic.types.Message:
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=fake.url, max_retries=0)
        messages: Any = [{"role": "user", "content": "hello"}]
        if not streamed:
            return await client.messages.create(model="claude-test", max_tokens=100,
                                                messages=messages)
        async with client.messages.stream(model="claude-test", max_tokens=100,
                                          messages=messages) as events:
            return await events.get_final_message()

    message = run(official())
    response = run(stream(model_for(fake)) if streamed else complete(model_for(fake)))
    assert [block.model_dump(include={"type", "text", "id", "name", "input"})
            for block in message.content] == content
    assert (message.stop_reason, message.usage.output_tokens,
            message.usage.cache_read_input_tokens) == ("tool_use", 7, 4000)
    assert response.content == (TextBlock("I will pay."),
                                ToolUseBlock("toolu_1", "pay", {"amount": 5}))
    assert response.usage == Usage(20, 7, 300, 4000)
