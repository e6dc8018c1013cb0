"""The sidecar's runs API (/v1/runs) over real HTTP: create, read with events, approve or reject
a call whose effect is unknown, cancel (in flight too), resume, continue, and its problems.

Each test serves its own app, on a fresh SQLite file, with a scripted model and fake tools. A
side-effecting call goes to a human when its handler times out: the sidecar has no probes here,
so the reconciler cannot tell what happened.
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.core.domain import Effect, ProviderContract
from reconciler.core.errors import AgentLoadError
from reconciler.core.runs.messages import ToolSpec
from reconciler.ledger import Ledger
from reconciler.runtime.agent import Agent, load_agent
from reconciler.runtime.loop import create_run
from reconciler.runtime.models import Model
from reconciler.runtime.scripted import ScriptedModel, Step, call, say, tool_use
from reconciler.runtime.tools import Tool, ToolCall, ToolOutput
from reconciler.service import Settings, create_app, load_settings
from reconciler.store.kinds import journal_of
from reconciler.store.schema import open_store
from reconciler.testing.patience import PATIENCE_S

from service_harness import serving, serving_process
from sidecar_client import TOKEN, assert_problem

pytestmark = pytest.mark.usefixtures("no_internal_errors")

ROOT = Path(__file__).parent.parent
#: No waiting between reconcile rounds: a call whose effect is unknown goes to a human at once.
QUICK = {"reconcile_rounds": 1, "reconcile_wait_s": 0.0}
SPEC = {"type": "object"}


class Send:
    """A non_idempotent tool whose first `timeouts` dispatches get no answer."""

    def __init__(self, timeouts: int = 1, uses_key: bool | None = None) -> None:
        self.timeouts = timeouts
        self.attempts: list[int] = []
        self.tool = Tool(ToolSpec("send", "send a message", SPEC), Effect.NON_IDEMPOTENT,
                         self, provider="chat", uses_key=uses_key)

    async def __call__(self, tool_call: ToolCall) -> ToolOutput:
        self.attempts.append(tool_call.attempt)
        if len(self.attempts) <= self.timeouts:
            raise httpx.ReadTimeout("no answer")
        return ToolOutput("sent", status=200)


class Hang:
    """A read_only tool that never answers; `entered` is set once it is in flight."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.tool = Tool(ToolSpec("hang", "wait forever", SPEC), Effect.READ_ONLY, self)

    async def __call__(self, tool_call: ToolCall) -> ToolOutput:
        self.entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable: nothing sets the event")


def lookup_tool() -> Tool:
    async def lookup(tool_call: ToolCall) -> ToolOutput:
        return ToolOutput(f"found {tool_call.input.get('q')}")
    return Tool(ToolSpec("lookup", "look something up", SPEC), Effect.READ_ONLY, lookup)


@contextmanager
def sidecar(tmp_path: Path, steps: Sequence[Step] = (), tools: Sequence[Tool] = (), *,
            settings: dict[str, Any] | None = None,
            model: Model | None = None,
            config: dict[str, Any] | None = None) -> Iterator[httpx.Client]:
    """The sidecar serving `steps` scripted, with `tools` (unless `settings` name an agent),
    over a store that knows the "chat" provider (it keeps idempotency keys, so a retry can be
    granted)."""
    settings = settings or {}
    store = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
    store.put_contract(ProviderContract("chat", idempotency_keys=True))
    agent = None if "agent" in settings else Agent(model or ScriptedModel(steps), tools,
                                                     {**QUICK, **(config or {})})
    app = create_app(Settings(sweep_interval_s=0, **settings), ledger=Ledger(store),
                     agent=agent)
    with serving(app) as url, httpx.Client(base_url=url, timeout=PATIENCE_S) as http:
        yield http


def ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


def awaiting_approval(http: httpx.Client, send: Send) -> dict[str, Any]:
    run = ok(http.post("/v1/runs", json={"input": "say hi", "run_id": "r1"}), 201)
    assert run["state"] == "awaiting_approval" and send.attempts == [1]
    return run


SEND_THEN_DONE = (call(tool_use("send", {"text": "hi"})), say("done"))


def test_a_run_is_created_and_completed_within_the_request(tmp_path: Path) -> None:
    steps = [call(tool_use("lookup", {"q": "order 7"})), say("order 7 is shipped")]
    with sidecar(tmp_path, steps, [lookup_tool()]) as http:
        run = ok(http.post("/v1/runs", json={"input": "where is order 7?",
                                             "correlation_id": "ticket-9"}), 201)
    assert (run["state"], run["output"], run["stop_reason"]) == (
        "completed", "order 7 is shipped", "end_turn")
    assert run["correlation_id"] == "ticket-9" and run["tool_steps"] == 1
    assert run["usage"]["input_tokens"] == 200 and run["config"] == QUICK
    assert [(c["name"], c["source"], c["done"]) for c in run["calls"]] == [
        ("lookup", "handler", True)]
    assert run["approval"] is None and run["continue_request"] is None


def test_get_returns_the_run_with_its_events_paged_by_seq(tmp_path: Path) -> None:
    with sidecar(tmp_path, [say("hello")]) as http:
        run = ok(http.post("/v1/runs", json={"input": "hi"}), 201)
        full = ok(http.get(f"/v1/runs/{run['run_id']}"))
        page = ok(http.get(f"/v1/runs/{run['run_id']}", params={"after": 1, "limit": 2}))
    kinds = [e["kind"] for e in full["events"]]
    assert kinds[0] == "run_created" and kinds[-1] == "run_completed"
    assert [e["seq"] for e in full["events"]] == list(range(1, run["seq"] + 1))
    assert full["next_after"] is None and full["output"] == "hello"
    assert [e["seq"] for e in page["events"]] == [2, 3] and page["next_after"] == 3


def test_the_example_agent_is_loaded_by_name_from_the_settings(tmp_path: Path) -> None:
    with sidecar(tmp_path, settings={"agent": "examples.agent:agent"}) as http:
        run = ok(http.post("/v1/runs", json={"input": "count these five words please"}), 201)
    assert run["state"] == "completed"
    assert run["output"] == "Your task has 5 words." and run["config"] == {"max_turns": 3}


def test_a_call_with_unknown_effect_waits_for_a_human(tmp_path: Path) -> None:
    send = Send()
    with sidecar(tmp_path, SEND_THEN_DONE, [send.tool]) as http:
        run = awaiting_approval(http, send)
        operation = ok(http.get(f"/v1/operations/{run['approval']['payload']['operation_id']}"))
    approval = run["approval"]
    assert approval["tool_call_id"] == run["calls"][0]["tool_call_id"] and approval["resume_token"]
    assert approval["payload"]["verdict"] == "indeterminate"
    assert operation["attempts"][0]["outcome"] == "timeout"


def test_approving_as_applied_takes_the_result_from_the_evidence(tmp_path: Path) -> None:
    send = Send()
    with sidecar(tmp_path, SEND_THEN_DONE, [send.tool]) as http:
        token = awaiting_approval(http, send)["approval"]["resume_token"]
        run = ok(http.post("/v1/runs/r1/approve", json={
            "resume_token": token, "decision": "applied", "actor": "ops@example.com"}))
    assert run["state"] == "completed" and send.attempts == [1]
    assert run["calls"][0]["source"] == "reconciled"


def test_approving_as_not_applied_sends_again_once(tmp_path: Path) -> None:
    send = Send(uses_key=True)  # a retry "with the same key" needs one (SPEC rule 6)
    with sidecar(tmp_path, SEND_THEN_DONE, [send.tool]) as http:
        token = awaiting_approval(http, send)["approval"]["resume_token"]
        run = ok(http.post("/v1/runs/r1/approve", json={
            "resume_token": token, "decision": "not_applied", "actor": "ops@example.com",
            "note": "not in the provider's log"}))
    assert run["state"] == "completed" and send.attempts == [1, 2]
    assert run["calls"][0]["source"] == "handler"


def test_rejecting_tells_the_model_and_the_run_goes_on(tmp_path: Path) -> None:
    send = Send()
    with sidecar(tmp_path, SEND_THEN_DONE, [send.tool]) as http:
        token = awaiting_approval(http, send)["approval"]["resume_token"]
        run = ok(http.post("/v1/runs/r1/reject", json={
            "resume_token": token, "actor": "ops@example.com", "note": "too risky"}))
        events = ok(http.get("/v1/runs/r1"))["events"]
    assert run["state"] == "completed" and send.attempts == [1]
    assert run["calls"][0]["source"] == "rejected"
    result = next(e for e in events if e["kind"] == "tool_result")
    assert "too risky" in result["data"]["content"]


def test_a_wrong_token_or_decision_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    send = Send()
    with sidecar(tmp_path, SEND_THEN_DONE, [send.tool]) as http:
        token = awaiting_approval(http, send)["approval"]["resume_token"]
        wrong = http.post("/v1/runs/r1/approve", json={
            "resume_token": "not-" + token, "decision": "applied", "actor": "ops"})
        bad = http.post("/v1/runs/r1/approve", json={
            "resume_token": token, "decision": "maybe", "actor": "ops"})
        run = ok(http.get("/v1/runs/r1"))
    assert assert_problem(wrong, 409, "approval-mismatch")["run_id"] == "r1"
    assert [tuple(e["loc"]) for e in assert_problem(bad, 422, "validation")["errors"]] == [
        ("body", "decision")]
    assert run["state"] == "awaiting_approval" and run["approval"]["resume_token"] == token


def test_cancel_stops_the_call_in_flight_and_resume_finishes_the_run(tmp_path: Path) -> None:
    hang = Hang()
    with sidecar(tmp_path, [call(tool_use("hang")), say("done")], [hang.tool]) as http, \
            ThreadPoolExecutor(1) as pool:
        created = pool.submit(http.post, "/v1/runs", json={"input": "wait", "run_id": "r1"})
        assert hang.entered.wait(10)
        cancelled = ok(http.post("/v1/runs/r1/cancel", json={"reason": "operator"}))
        creation = ok(created.result(10), 201)
        again = ok(http.post("/v1/runs/r1/cancel", json={"reason": "twice"}))
        resumed = ok(http.post("/v1/runs/r1/resume", json={}))
    assert cancelled["state"] == creation["state"] == again["state"] == "cancelled"
    assert cancelled["cancellation"]["reason"] == again["cancellation"]["reason"] == "operator"
    assert cancelled["calls"][0]["source"] == "cancelled"
    assert (resumed["state"], resumed["output"]) == ("completed", "done")


def test_a_paused_run_is_cancelled_at_once(tmp_path: Path) -> None:
    with sidecar(tmp_path, [call(tool_use("lookup", {"q": 1})), say("done")],
                 [lookup_tool()]) as http:
        paused = ok(http.post("/v1/runs", json={
            "input": "x", "run_id": "r1", "deadline_s": 1, "config": {"step_reserve_s": 5}}), 201)
        run = ok(http.post("/v1/runs/r1/cancel", json={}))
    assert paused["continue_request"] is not None
    assert run["state"] == "cancelled" and run["continue_request"] is None


def test_resume_with_a_larger_budget_finishes_a_failed_run(tmp_path: Path) -> None:
    steps = [call(tool_use("lookup", {"q": n})) for n in range(3)] + [say("done")]
    with sidecar(tmp_path, steps, [lookup_tool()]) as http:
        failed = ok(http.post("/v1/runs", json={
            "input": "x", "run_id": "r1", "config": {"max_tokens": 300}}), 201)
        run = ok(http.post("/v1/runs/r1/resume", json={"config": {"max_tokens": 10_000}}))
    assert failed["state"] == "failed" and failed["error"]["error_code"] == "budget_exceeded"
    assert (run["state"], run["output"], run["config"]["max_tokens"]) == (
        "completed", "done", 10_000)


def test_a_run_past_its_deadline_pauses_and_continues_once_per_request(tmp_path: Path) -> None:
    """deadline_s below step_reserve_s: the request makes its one step (the model asks for the
    lookup), then pauses; the continue finishes the run."""
    with sidecar(tmp_path, [call(tool_use("lookup", {"q": 1})), say("done")],
                 [lookup_tool()]) as http:
        paused = ok(http.post("/v1/runs", json={
            "input": "x", "run_id": "r1", "deadline_s": 1, "config": {"step_reserve_s": 5}}), 201)
        request = paused["continue_request"]
        answer = {"type": "task_continue_response", "continue_request_id": request["id"],
                  "deadline_s": 60}
        mismatched = http.post("/v1/runs/r1/continue",
                               json={**answer, "continue_request_id": "cont_other"})
        done = ok(http.post("/v1/runs/r1/continue", json=answer))
        replayed = http.post("/v1/runs/r1/continue", json=answer)
    assert paused["state"] == "awaiting_tool"
    assert request == {"type": "task_continue_request", "id": request["id"], "run_id": "r1",
                       "tool_steps": 0, "step": 0}
    assert request["id"].startswith("continue_r1_")
    assert_problem(mismatched, 409, "continuation-mismatch")
    assert (done["state"], done["output"], done["tool_steps"]) == ("completed", "done", 1)
    assert "answered already" in assert_problem(replayed, 409, "continuation-mismatch")["detail"]


def test_run_problems_name_what_is_wrong(tmp_path: Path) -> None:
    with sidecar(tmp_path, [say("done")]) as http:
        ok(http.post("/v1/runs", json={"input": "x", "run_id": "r1"}), 201)
        taken = http.post("/v1/runs", json={"input": "x", "run_id": "r1"})
        unknown = http.get("/v1/runs/nope")
        cancel_done = http.post("/v1/runs/r1/cancel", json={})
        resume_done = http.post("/v1/runs/r1/resume", json={})
        approve_done = http.post("/v1/runs/r1/approve", json={
            "resume_token": "t", "decision": "applied", "actor": "ops"})
    assert_problem(taken, 409, "run-conflict")
    assert assert_problem(unknown, 404, "unknown-run")["run_id"] == "nope"
    assert "completed" in assert_problem(cancel_done, 409, "illegal-transition")["detail"]
    assert "can be resumed" in assert_problem(resume_done, 409, "illegal-transition")["detail"]
    assert_problem(approve_done, 409, "approval-mismatch")


@pytest.mark.parametrize("deadline", ["true", '"5"', "0", "-1"])
def test_a_deadline_that_is_not_a_positive_number_is_422(tmp_path: Path, deadline: str) -> None:
    with sidecar(tmp_path, [say("done")]) as http:
        response = http.post("/v1/runs", content=f'{{"input": "x", "deadline_s": {deadline}}}',
                             headers={"content-type": "application/json"})
        runs = ok(http.get("/v1/runs"))
    assert assert_problem(response, 422, "validation")["errors"][0]["loc"] == [
        "body", "deadline_s"]
    assert runs["items"] == []


@pytest.mark.parametrize("config", [
    '{"max_turn": 3}', '{"max_turns": "many"}', '{"max_turns": 0}', '{"system": 5}',
    '{"prices": {"input": 1, "gold": 2}}', '{"max_cost_usd": NaN}'])
def test_a_bad_run_configuration_is_422(tmp_path: Path, config: str) -> None:
    with sidecar(tmp_path, [say("done")]) as http:
        response = http.post("/v1/runs", content=f'{{"input": "x", "config": {config}}}',
                             headers={"content-type": "application/json"})
        operations = ok(http.get("/v1/operations"))
    assert assert_problem(response, 422, "validation")["errors"][0]["loc"][:2] == [
        "body", "config"]
    assert operations["items"] == []


def test_without_an_agent_the_runs_api_says_how_to_configure_one(tmp_path: Path) -> None:
    app = create_app(Settings(db=f"sqlite:///{tmp_path / 'r.db'}", sweep_interval_s=0))
    with serving(app) as url:
        response = httpx.post(url + "/v1/runs", json={"input": "x"})
    assert "--agent" in assert_problem(response, 404, "no-agent")["detail"]


def test_runs_need_the_bearer_token_like_every_route(tmp_path: Path) -> None:
    with sidecar(tmp_path, [say("done")], settings={"token": TOKEN}) as http:
        refused = http.post("/v1/runs", json={"input": "x"})
        run = ok(http.post("/v1/runs", json={"input": "x"},
                           headers={"Authorization": f"Bearer {TOKEN}"}), 201)
    assert_problem(refused, 401, "unauthorized")
    assert run["state"] == "completed"


def test_the_sidecar_process_serves_the_agent_named_in_its_environment() -> None:
    with serving_process({"RECONCILER_AGENT": "examples.agent:agent",
                          "RECONCILER_DB": "sqlite://", "RECONCILER_SWEEP_INTERVAL_S": "0"},
                         cwd=ROOT) as service:
        run = ok(httpx.post(service.url + "/v1/runs", json={"input": "one two"},
                         timeout=PATIENCE_S), 201)
    assert run["output"] == "Your task has 2 words."


def test_the_agent_setting_comes_from_flag_environment_or_file(tmp_path: Path) -> None:
    path = tmp_path / "reconciler.toml"
    path.write_text('[service]\nagent = "file.module:agent"\n', encoding="utf-8")
    env = {"RECONCILER_CONFIG": str(path)}
    assert load_settings({}, env=env).agent == "file.module:agent"
    env["RECONCILER_AGENT"] = "env.module:agent"
    assert load_settings({}, env=env).agent == "env.module:agent"
    assert load_settings({"agent": "flag.module:agent"}, env=env).agent == "flag.module:agent"


def test_serve_with_an_agent_that_cannot_load_exits_2_saying_why() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "reconciler", "serve", "--agent", "examples.missing:agent",
         "--db", "sqlite://"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "no module named 'examples.missing'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("spec", "message"), [
    ("examples.agent", "name it as package.module:attribute"),
    ("examples.agent:nothing", "has no attribute 'nothing'"),
    ("examples.agent:COUNT_WORDS", "is a Tool, not an Agent"),
    ("json:loads", "calling loads() failed: TypeError"),
])
def test_an_agent_that_cannot_load_is_refused_saying_why(spec: str, message: str) -> None:
    with pytest.raises(AgentLoadError) as refused:
        load_agent(spec)
    assert message in str(refused.value)


def test_an_agent_may_be_named_by_a_function_that_makes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = f"agents_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(
        "from reconciler.runtime.agent import Agent\n"
        "from reconciler.runtime.scripted import ScriptedModel, say\n"
        "def make():\n    return Agent(ScriptedModel([say('made')]), [], {'max_turns': 2})\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    agent = load_agent(f"{module}:make")
    sys.modules.pop(module)
    assert isinstance(agent, Agent) and agent.config == {"max_turns": 2}


def test_a_tool_that_needs_approval_waits_and_runs_once_approved(tmp_path: Path) -> None:
    send = Send(timeouts=0)
    asking = dataclasses.replace(send.tool, needs_approval=True)
    with sidecar(tmp_path, SEND_THEN_DONE, [asking]) as http:
        paused = ok(http.post("/v1/runs", json={"input": "say hi", "run_id": "r1"}), 201)
        approval = paused["approval"]
        wrong = http.post("/v1/runs/r1/approve", json={
            "resume_token": approval["resume_token"], "decision": "applied", "actor": "ops"})
        run = ok(http.post("/v1/runs/r1/approve", json={
            "resume_token": approval["resume_token"], "decision": "approve", "actor": "ops"}))
    assert paused["state"] == "awaiting_approval" and approval["payload"]["kind"] == (
        "before_dispatch")
    assert "approve, reject" in assert_problem(wrong, 409, "decision-not-allowed")["detail"]
    assert run["state"] == "completed" and send.attempts == [1]


def test_serve_supervises_a_run_nobody_started(tmp_path: Path) -> None:
    # Queued by another process (no request works on it): the supervisor that runs with the
    # app picks it up once it has sat idle for a lease, and finishes it.
    steps = [call(tool_use("lookup", {"q": "x"})), say("found it")]
    with sidecar(tmp_path, steps, [lookup_tool()],
                 settings={"supervise_interval_s": 0.1, "run_lease_s": 1}) as http:
        other = open_store(f"sqlite:///{tmp_path / 'runs.db'}")
        create_run(journal_of(other), "find x", Ledger(other).clock(), run_id="queued-1",
                   config=QUICK)
        state = "queued"
        for _ in range(100):  # bounded: 10 s
            state = ok(http.get("/v1/runs/queued-1"))["state"]
            if state == "completed":
                break
            time.sleep(0.1)
    assert state == "completed"
