"""Streamed runs over real HTTP: `"stream": true` (or Accept: text/event-stream) answers with
one server-sent event per appended run event, `id:` its seq; a client that lost the stream
reconnects with Last-Event-ID and loses none and repeats none; the stream is the stored log.

The model streams its text (a StreamingModel), so the deltas are run events too.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_service_runs import SEND_THEN_DONE, Send, lookup_tool, ok, sidecar

from reconciler.core.domain import Effect
from reconciler.core.runs.messages import (
    ModelRequest,
    ModelResponse,
    TextBlock,
    TextDelta,
    ToolSpec,
)
from reconciler.runtime.models import DeltaSink
from reconciler.runtime.scripted import ScriptedModel, Step, call, say, tool_use
from reconciler.runtime.tools import Tool, ToolCall, ToolOutput

from sidecar_client import assert_problem

pytestmark = pytest.mark.usefixtures("no_internal_errors")


class StreamingScript(ScriptedModel):
    """The script, its text handed out word by word as deltas before the answer."""

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        response = await self.complete(request)
        for index, block in enumerate(response.content):
            if isinstance(block, TextBlock):
                for word in block.text.split(" "):
                    on_delta(TextDelta(index, word + " "))
                    await asyncio.sleep(0)
        return response


class Gate:
    """A read_only tool that answers once the test opens the gate."""

    def __init__(self) -> None:
        self.entered, self.open = threading.Event(), threading.Event()
        self.tool = Tool(ToolSpec("gate", "wait for the gate", {"type": "object"}),
                         Effect.READ_ONLY, self)

    async def __call__(self, tool_call: ToolCall) -> ToolOutput:
        self.entered.set()
        for _ in range(2000):
            if self.open.is_set():
                return ToolOutput("through")
            await asyncio.sleep(0.005)
        raise TimeoutError("the test never opened the gate")


def streaming_sidecar(tmp_path: Path, steps: Sequence[Step], tools: Sequence[Tool]
                      ) -> AbstractContextManager[httpx.Client]:
    return sidecar(tmp_path, steps, tools, model=StreamingScript(steps))


def sse_events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The events of an SSE body, as {id, event, data} (comments skipped)."""
    fields: dict[str, str] = {}
    for line in lines:
        if not line:
            if fields:
                yield {"id": fields.get("id"), "event": fields.get("event"),
                       "data": json.loads(fields.get("data", "null"))}
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def read_all(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.headers["content-type"].startswith("text/event-stream"), response.text
    return list(sse_events(response.iter_lines()))


def stored(http: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    return [{"run_id": run_id, **e}
            for e in ok(http.get(f"/v1/runs/{run_id}", params={"limit": 1000}))["events"]]


LOOKUP_THEN_ANSWER = (call(tool_use("lookup", {"q": "order 7"}), text="let me look"),
                      say("order 7 is shipped"))


def test_a_streamed_run_sends_every_event_in_order_and_they_are_its_stored_events(
        tmp_path: Path) -> None:
    with streaming_sidecar(tmp_path, LOOKUP_THEN_ANSWER, [lookup_tool()]) as http:
        with http.stream("POST", "/v1/runs", json={"input": "where is order 7?",
                                                   "run_id": "r1", "stream": True}) as response:
            assert response.status_code == 201
            events = read_all(response)
        log = stored(http, "r1")
    assert [e["data"] for e in events] == log
    assert [int(e["id"]) for e in events] == list(range(1, len(log) + 1))
    assert [e["event"] for e in events] == [e["kind"] for e in log]
    kinds = [e["event"] for e in events]
    assert kinds[:3] == ["run_created", "run_started", "turn_started"]
    assert {"tool_call_requested", "tool_dispatched", "tool_result"} <= set(kinds)
    assert kinds[-1] == "run_completed"
    deltas = "".join(e["data"]["data"]["text"] for e in events if e["event"] == "assistant_delta")
    assert deltas == "let me look order 7 is shipped "


def test_accept_event_stream_streams_without_the_body_flag(tmp_path: Path) -> None:
    with streaming_sidecar(tmp_path, [say("hello")], []) as http:
        with http.stream("POST", "/v1/runs", json={"input": "hi", "run_id": "r1"},
                         headers={"Accept": "text/event-stream"}) as response:
            events = read_all(response)
        assert [e["data"] for e in events] == stored(http, "r1")
    assert events[-1]["event"] == "run_completed"


def test_a_reconnect_with_last_event_id_loses_none_and_repeats_none(tmp_path: Path) -> None:
    gate = Gate()
    steps = (call(tool_use("gate")), call(tool_use("lookup", {"q": "x"})), say("all done"))
    with streaming_sidecar(tmp_path, steps, [gate.tool, lookup_tool()]) as http:
        first: list[dict[str, Any]] = []
        with http.stream("POST", "/v1/runs", json={"input": "go", "run_id": "r1",
                                                   "stream": True}) as response:
            for event in sse_events(response.iter_lines()):
                first.append(event)
                if event["event"] == "tool_dispatched":
                    break  # the connection drops while the tool is in flight
        assert gate.entered.wait(10)
        with http.stream("GET", "/v1/runs/r1/events",
                         headers={"Last-Event-ID": first[-1]["id"]}) as response:
            gate.open.set()  # the rest happens while the reconnected client listens
            rest = read_all(response)
        log = stored(http, "r1")
    assert [e["data"] for e in first + rest] == log
    assert int(rest[0]["id"]) == int(first[-1]["id"]) + 1
    assert rest[-1]["event"] == "run_completed"


def test_a_streamed_follow_up_starts_with_its_own_event_and_ends_at_rest(
        tmp_path: Path) -> None:
    send = Send()
    with streaming_sidecar(tmp_path, SEND_THEN_DONE, [send.tool]) as http:
        with http.stream("POST", "/v1/runs", json={"input": "say hi", "run_id": "r1",
                                                   "stream": True}) as response:
            paused = read_all(response)
        token = paused[-1]["data"]["data"]["resume_token"]
        with http.stream("POST", "/v1/runs/r1/reject", json={
                "resume_token": token, "actor": "ops@example.com", "stream": True}) as response:
            assert response.status_code == 200
            rest = read_all(response)
        log = stored(http, "r1")
    assert paused[-1]["event"] == "approval_requested"
    assert rest[0]["event"] == "approval_decided" and rest[-1]["event"] == "run_completed"
    assert [e["data"] for e in paused + rest] == log


def test_a_wrong_follow_up_is_a_problem_before_any_stream(tmp_path: Path) -> None:
    with streaming_sidecar(tmp_path, [say("hello")], []) as http:
        ok(http.post("/v1/runs", json={"input": "hi", "run_id": "r1"}), 201)
        wrong = http.post("/v1/runs/r1/continue", json={
            "type": "task_continue_response", "continue_request_id": "cont_x", "stream": True})
        unknown = http.get("/v1/runs/nope/events")
    assert_problem(wrong, 409, "continuation-mismatch")
    assert_problem(unknown, 404, "unknown-run")
