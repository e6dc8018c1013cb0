"""Seed 003's long tasks on the wire, over real HTTP: a run near its request's deadline ends its
stream with the seed's `response.output_item.done` event carrying a `task_continue_request`; a
follow-up carrying the previous messages, that item and a matching `task_continue_response`
continues it; a wrong, replayed or missing one is a problem; the runs client's auto-continue
finishes a 40-step task across many deadlines, streamed and not.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_service_runs import lookup_tool, ok, sidecar

from reconciler.client.runs import RunsClient
from reconciler.core.domain import Effect
from reconciler.core.runs.messages import ToolSpec
from reconciler.runtime.scripted import call, say, tool_use
from reconciler.runtime.tools import Tool, ToolCall, ToolOutput

from sidecar_client import assert_problem

pytestmark = pytest.mark.usefixtures("no_internal_errors")

#: A reserve longer than any deadline: every request makes one step, then pauses.
ONE_STEP = {"step_reserve_s": 60.0}
THREE_LOOKUPS = (call(tool_use("lookup", {"q": "a"})), call(tool_use("lookup", {"q": "b"})),
                 call(tool_use("lookup", {"q": "c"})), say("found a, b and c"))
TASK = "Find a, b and c."


def raw_events(response: httpx.Response) -> Iterator[tuple[str, str]]:
    """(event name, raw data line) of an SSE body, exactly as sent."""
    event, data = "message", ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            event = line.removeprefix("event: ")
        elif line.startswith("data: "):
            data = line.removeprefix("data: ")
        elif not line and data:
            yield event, data
            event, data = "message", ""


def seed_stream(http: httpx.Client, body: dict[str, Any]) -> tuple[list[str], str]:
    """POST a seed-shaped request; the run event kinds streamed, and the raw data of the
    last event (the seed's checkpoint event, or the run's end)."""
    with http.stream("POST", "/v1/runs", json=body) as response:
        assert response.status_code in (200, 201), response.read()
        events = list(raw_events(response))
    return [name for name, _ in events[:-1]], events[-1][1]


def expected_checkpoint(raw: str) -> dict[str, Any]:
    """The seed's event with this response's ids: the raw data must be exactly it."""
    sent = json.loads(raw)
    seed = {"type": "response.output_item.done",
            "item": {"type": "task_continue_request", "id": sent["item"]["id"],
                     "step": sent["item"]["step"]},
            "id": sent["id"]}
    assert raw == json.dumps(seed, separators=(",", ":"))
    assert seed["item"]["id"].startswith("continue_") and seed["id"].startswith("resp_")
    return seed


def test_the_seed_003_exchange_pauses_and_continues_to_completion(tmp_path: Path) -> None:
    with sidecar(tmp_path, THREE_LOOKUPS, [lookup_tool()], config=ONE_STEP) as http:
        first = {"input": [{"role": "user", "content": TASK}],
                 "databricks_options": {"long_task": True}, "stream": True}
        kinds, raw = seed_stream(http, first)
        assert kinds[0] == "run_created" and kinds[-1] == "continue_requested"
        messages: list[Any] = [{"role": "user", "content": TASK}]
        steps, responses = [], set()
        while raw.startswith('{"type":"response.output_item.done"'):
            checkpoint = expected_checkpoint(raw)
            steps.append(checkpoint["item"]["step"])
            responses.add(checkpoint["id"])
            messages += [checkpoint["item"], {"type": "task_continue_response",
                                              "continue_request_id": checkpoint["item"]["id"]}]
            kinds, raw = seed_stream(http, {"messages": messages,
                                            "databricks_options": {"long_task": True},
                                            "stream": True})
            assert kinds[0] == "continued"
        end = json.loads(raw)
        run = ok(http.get(f"/v1/runs/{end['run_id']}"))
    assert end["kind"] == "run_completed" and run["output"] == "found a, b and c"
    # One step a request: a model call, then its tool call, and so on; `step` counts tools.
    assert steps == [0, 1, 1, 2, 2, 3] and len(responses) == len(steps)


def paused_run(http: httpx.Client) -> dict[str, Any]:
    run = ok(http.post("/v1/runs", json={"input": TASK, "long_task": True}), 201)
    request = run["continue_request"]
    assert request["id"].startswith("continue_") and request["step"] == 0
    return run


def follow_up(http: httpx.Client, messages: list[dict[str, Any]]) -> httpx.Response:
    return http.post("/v1/runs", json={"messages": [{"role": "user", "content": TASK},
                                                    *messages], "long_task": True})


def item_and_answer(request: dict[str, Any], answer_id: str | None = None,
                    ) -> list[dict[str, Any]]:
    return [{"type": "task_continue_request", "id": request["id"], "step": request["step"]},
            {"type": "task_continue_response",
             "continue_request_id": answer_id or request["id"]}]


def test_a_follow_up_without_a_response_or_its_request_item_is_422(tmp_path: Path) -> None:
    with sidecar(tmp_path, THREE_LOOKUPS, [lookup_tool()], config=ONE_STEP) as http:
        request = paused_run(http)["continue_request"]
        no_answer = follow_up(http, item_and_answer(request)[:1])
        no_item = follow_up(http, item_and_answer(request)[1:])
        both = http.post("/v1/runs", json={"input": TASK, "messages": item_and_answer(request)})
    assert_problem(no_answer, 422, "continuation-incomplete")
    assert assert_problem(no_item, 422, "continuation-incomplete")["run_id"] == request["run_id"]
    assert_problem(both, 422, "validation")


def test_a_wrong_replayed_or_misstepped_follow_up_is_409(tmp_path: Path) -> None:
    with sidecar(tmp_path, THREE_LOOKUPS, [lookup_tool()], config=ONE_STEP) as http:
        request = paused_run(http)["continue_request"]
        other = request["id"][:-4] + "0000"
        wrong = follow_up(http, [*item_and_answer(request), *item_and_answer(
            {**request, "id": other})])
        foreign = follow_up(http, item_and_answer({**request, "id": "continue_nobody"}))
        misstepped = follow_up(http, item_and_answer({**request, "step": 7}))
        good = ok(follow_up(http, item_and_answer(request)))
        replayed = follow_up(http, item_and_answer(request))
    assert_problem(wrong, 409, "continuation-mismatch")
    assert_problem(foreign, 409, "continuation-mismatch")
    assert_problem(misstepped, 409, "continuation-mismatch")
    assert good["continue_request"]["id"] != request["id"]
    assert_problem(replayed, 409, "continuation-mismatch")


class Steps:
    """A read_only tool that takes a little time; counts its calls per step."""

    def __init__(self) -> None:
        self.calls: dict[int, int] = {}
        self.tool = Tool(ToolSpec("step", "do step n", {"type": "object"}), Effect.READ_ONLY,
                         self)

    async def __call__(self, tool_call: ToolCall) -> ToolOutput:
        n = int(tool_call.input["n"])
        self.calls[n] = self.calls.get(n, 0) + 1
        await asyncio.sleep(0.05)
        return ToolOutput(f"step {n} done")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_the_client_auto_continues_a_40_step_task_across_the_deadlines(
        tmp_path: Path, stream: bool) -> None:
    steps = Steps()
    script = [*(call(tool_use("step", {"n": n})) for n in range(40)), say("all 40 done")]
    config = {"max_turns": 45, "step_reserve_s": 0.1}
    seen: list[str] = []
    with sidecar(tmp_path, script, [steps.tool], config=config) as http:
        client = RunsClient(str(http.base_url))
        with client:
            run = client.run_task("do the 40 steps", deadline_s=0.5, stream=stream,
                                  on_event=lambda event: seen.append(event["event"]))
    kinds = [e["kind"] for e in run["events"]]
    # At most ~9 tool steps fit one 0.5 s request (each takes 0.05 s): 5 pauses at least.
    assert kinds.count("continued") >= 5
    assert (run["state"], run["output"], run["tool_steps"]) == ("completed", "all 40 done", 40)
    assert steps.calls == {n: 1 for n in range(40)}
    if stream:
        assert seen.count("response.output_item.done") == kinds.count("continued")
        assert seen.count("tool_result") == 40
