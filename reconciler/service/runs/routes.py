"""The /v1/runs routes: agent runs driven by the sidecar, their side effects through its ledger.

    POST /v1/runs                      create and work on the run until done or the deadline
    GET  /v1/runs/{id}?after=seq       the run and a page of its events
    POST /v1/runs/{id}/approve|reject  a human's decision on the call the run waits for
    POST /v1/runs/{id}/cancel          stop it (the call in flight too, if this process runs it)
    POST /v1/runs/{id}/resume          re-queue a stopped run, or pick up an orphaned live one
    POST /v1/runs/{id}/continue        answer a task_continue_request
    GET  /v1/runs/{id}/events          the run's events as server-sent events (Last-Event-ID)

Every route that works on a run does so within the request, for at most `deadline_s`; a run
with more to do pauses and answers with a `continue_request`. Those routes are `async`: the
agent runtime awaits its model and tools on the event loop, and a cancel request must reach the
signal of an advance running in this process. A cancel sent to another replica than the one
advancing the run is stored in the run's journal; that replica's heartbeat sees it and stops
its call in flight. `stream` (or Accept: text/event-stream) answers with server-sent events
(`runs.stream`); GET /v1/runs/{id}/events is where a lost stream reconnects.
"""

from __future__ import annotations

import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from reconciler.core.errors import RunConflictError, UnknownRunError
from reconciler.core.runs.events import RunView
from reconciler.core.runs.states import RunState
from reconciler.runtime.agent import Agent
from reconciler.runtime.continuation import (
    check_response,
    continue_event,
    follow_up,
    run_of_request,
)
from reconciler.runtime.guards import caller_limits
from reconciler.runtime.loop import AgentRuntime
from reconciler.runtime.supervisor import Supervisor
from reconciler.runtime.wire import (
    RUN_ID_MAX,
    RUN_ID_PATTERN,
    ApproveIn,
    CancelIn,
    ContinueIn,
    RejectIn,
    ResumeIn,
    RunEventsOut,
    RunIn,
    RunOut,
    run_events_out,
    run_out,
)
from reconciler.service.auth import Operator, Permission, Principal, Reader, Worker
from reconciler.service.metering import counted_events
from reconciler.service.problems import VALIDATION, ProblemError, problem_responses
from reconciler.service.runs.problems import (
    CANCEL_PENDING,
    CONTINUATION_INCOMPLETE,
    CONTINUATION_MISMATCH,
    NO_AGENT,
)
from reconciler.service.runs.stream import (
    MEDIA_TYPE,
    last_event_id,
    seed_event,
    stream_response,
    wants_stream,
)
from reconciler.service.settings import Settings
from reconciler.service.wiring import Wiring
from reconciler.store.kinds import journal_of

#: Live states a run may be left in by a worker that died mid-advance: resume picks it up.
_ORPHANABLE = frozenset({RunState.QUEUED, RunState.RUNNING, RunState.AWAITING_TOOL})


@dataclass(frozen=True, slots=True)
class Runs:
    """The agent runtime on the service's store, and the configuration runs start from."""

    runtime: AgentRuntime
    defaults: dict[str, Any]
    #: Keys the agent lets a caller set beyond the bounds (Agent.caller_may_set).
    caller_may_set: frozenset[str] = frozenset()

    def check(self, config: dict[str, Any] | None) -> dict[str, Any]:
        """The caller's configuration, if it stays within the agent's bounds; else 422."""
        refused = caller_limits(config or {}, self.defaults, self.caller_may_set)
        if refused:
            raise ProblemError(VALIDATION, "; ".join(refused), extensions={"errors": [
                {"loc": ["body", "config"], "msg": msg, "type": "over_limit"}
                for msg in refused]})
        return config or {}


def stream_responses(status: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI: a route that answers with server-sent events when asked to stream."""
    return {status: {"content": {"application/json": {}, MEDIA_TYPE: {}},
                     "description": "the run; or, streamed, its events as they happen"}}


def build_runs(wiring: Wiring, agent: Agent) -> Runs:
    """Runs on the service's own store, retry gate and sweeper: a tool call whose effect is
    unknown is reconciled with the operations' probes and evidence. A run's lease is
    `run_lease_s`, renewed every third of it while a request (or the supervisor) advances the
    run: a worker that died is taken over after that long, not after the longest request."""
    runtime = AgentRuntime(counted_events(journal_of(wiring.store)), wiring.ledger,
                           wiring.gate, agent.model, agent.tools, wiring.sweeper.reconcile,
                           lease_s=wiring.settings.run_lease_s)
    return Runs(runtime, dict(agent.config), agent.caller_may_set)


def supervisor_of(settings: Settings, runs: Runs | None) -> Supervisor | None:
    """The supervisor `serve` runs beside the runs API (`supervise_*` settings): none without
    an agent, or with supervise_interval_s 0."""
    if runs is None or settings.supervise_interval_s <= 0:
        return None
    return Supervisor(runs.runtime, interval_s=settings.supervise_interval_s,
                      batch=settings.supervise_batch,
                      concurrency=settings.supervise_concurrency)


def get_runs(request: Request) -> Runs:
    runs: Runs | None = request.app.state.runs
    if runs is None:
        raise ProblemError(NO_AGENT, "no agent configured: start the sidecar with --agent "
                           "package.module:attribute (or RECONCILER_AGENT)")
    return runs


RunsDep = Annotated[Runs, Depends(get_runs)]
RunIdPath = Annotated[str, Path(min_length=1, max_length=RUN_ID_MAX, pattern=RUN_ID_PATTERN)]

router = APIRouter(prefix="/v1/runs", tags=["runs"])


def _deadline(runtime: AgentRuntime, deadline_s: float) -> float:
    """`deadline_s` from now, on the clock the runtime reads its deadlines by."""
    return runtime.monotonic() + deadline_s


async def _advanced(runs: Runs, run_id: str, deadline_s: float) -> RunOut:
    advance = await runs.runtime.advance(run_id, deadline=_deadline(runs.runtime, deadline_s))
    return _out(runs, advance.view)


def _streamed(request: Request, runs: Runs, run_id: str, after: int,
              work: Coroutine[Any, Any, Any], status_code: int = 200, *,
              long_task: bool = False) -> StreamingResponse:
    """The request's work on the run, answered as its events after `after` (or after the
    client's Last-Event-ID) while the work goes on. A long task's response has an id, and
    ends with seed 003's task_continue_request event if the run paused."""
    seen = last_event_id(request.headers)
    response_id = f"resp_{uuid.uuid4().hex}"

    def pause(view: RunView) -> str | None:
        if view.continue_request is None:
            return None
        return seed_event(continue_event(response_id, view.continue_request, view.tool_steps))

    return stream_response(runs.runtime.journal, run_id, after if seen is None else seen,
                           work, status_code=status_code, finale=pause if long_task else None)


def _streaming(request: Request, stream: bool) -> bool:
    return wants_stream(request.headers.get("accept"), stream)


@router.post("", status_code=201, response_model=RunOut,
             responses={**stream_responses(201), **problem_responses(404, 409)})
async def create_run(body: RunIn, caller: Worker, runs: RunsDep,
                     request: Request) -> RunOut | Response:
    """Create a run (the agent's configuration, overridden by `config`) and work on it until it
    completes, stops, waits for a human or reaches `deadline_s`. 409 if `run_id` is taken.
    Streamed (`stream`, or Accept: text/event-stream): every event of the run as it happens.

    Seed 003's long tasks (`long_task`, or `databricks_options.long_task`): a streamed run that
    pauses for the deadline ends its stream with the `response.output_item.done` event of a
    `task_continue_request`; the follow-up is a request with `messages` instead of `input`,
    holding that item and a `task_continue_response` with its id (200, the run goes on)."""
    if body.messages is not None:
        return await _follow_up(request, runs, body, caller)
    view = runs.runtime.create(body.task, run_id=body.run_id,
                               config={**runs.defaults, **runs.check(body.config)},
                               correlation_id=body.correlation_id,
                               created_by=None if caller.anonymous else caller.name)
    if _streaming(request, body.stream):
        return _streamed(request, runs, view.run_id, 0,
                         _advanced(runs, view.run_id, body.deadline_s), 201,
                         long_task=body.is_long_task)
    return await _advanced(runs, view.run_id, body.deadline_s)


async def _follow_up(request: Request, runs: Runs, body: RunIn, caller: Principal) -> Response:
    """A long task's follow-up: check the task_continue_response against the run's pending
    request (422 if the request lacks it or the original item, 409 if it does not match or
    was used), then continue the run."""
    if body.run_id is not None or body.config is not None or body.correlation_id is not None:
        raise ProblemError(CONTINUATION_INCOMPLETE, "a follow-up continues its run: it takes "
                           "no run_id, config or correlation_id")
    answer = follow_up(body.messages or [])
    if answer is None:
        raise ProblemError(CONTINUATION_INCOMPLETE, "the messages hold no task_continue_response "
                           "{type, continue_request_id}: nothing says which pause to continue")
    run_id = run_of_request(answer.continue_request_id)
    if run_id is None:
        raise ProblemError(CONTINUATION_MISMATCH, f"{answer.continue_request_id!r} is not a "
                           "continue request this sidecar issued")
    view = readable(runs.runtime.journal.load(run_id), caller)
    check_response(view, answer.continue_request_id)
    item = answer.request_item
    if item is None:
        raise ProblemError(CONTINUATION_INCOMPLETE, "the messages must carry the original "
                           f"task_continue_request {answer.continue_request_id!r} before its "
                           "response", extensions={"run_id": run_id})
    if item.get("step") != view.tool_steps:
        raise ProblemError(CONTINUATION_MISMATCH, f"the task_continue_request says step "
                           f"{item.get('step')!r}; the run paused at step {view.tool_steps}",
                           extensions={"run_id": run_id})
    work = runs.runtime.continue_(run_id, answer.continue_request_id,
                                  deadline=_deadline(runs.runtime, body.deadline_s))
    if _streaming(request, body.stream):
        return _streamed(request, runs, run_id, view.seq, work, long_task=body.is_long_task)
    out = _out(runs, (await work).view)
    return JSONResponse(out.model_dump(mode="json"))


@router.get("/{run_id}", response_model=RunEventsOut, responses=problem_responses(404, 409))
def get_run(run_id: RunIdPath, caller: Reader, runs: RunsDep,
            after: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
            limit: Annotated[int, Query(ge=1, le=1000)] = 500) -> RunEventsOut:
    """The run and its events after sequence number `after` (a pending approval past its
    timeout is timed out first)."""
    view = readable(runs.runtime.get(run_id), caller)
    return run_events_out(view, runs.runtime.journal.events(run_id, after)[:limit + 1], limit,
                          runs.runtime.unhealthy(run_id))


@router.post("/{run_id}/approve", response_model=RunOut,
             responses={**stream_responses(200), **problem_responses(404, 409)})
async def approve(run_id: RunIdPath, body: ApproveIn, caller: Operator, runs: RunsDep,
                  request: Request) -> RunOut | Response:
    """Decide the call the run waits for, then go on. applied: the provider did it (its result
    comes from the evidence). not_applied: it did not; re-sending is approved (the retry gate
    still decides). approve_retry: approve a re-send without saying what happened."""
    return await _decide(request, runs, run_id, body.resume_token, body.decision,
                         caller.actor(body.actor),
                         body.note, body.deadline_s, body.stream)


@router.post("/{run_id}/reject", response_model=RunOut,
             responses={**stream_responses(200), **problem_responses(404, 409)})
async def reject(run_id: RunIdPath, body: RejectIn, caller: Operator, runs: RunsDep,
                 request: Request) -> RunOut | Response:
    """Refuse the call the run waits for: it is not run, the model is told so and goes on."""
    return await _decide(request, runs, run_id, body.resume_token, "reject",
                         caller.actor(body.actor),
                         body.note, body.deadline_s, body.stream)


async def _decide(request: Request, runs: Runs, run_id: str, resume_token: str,
                  decision: str, actor: str, note: str, deadline_s: float,
                  stream: bool) -> RunOut | Response:
    before = runs.runtime.journal.load(run_id).seq
    runs.runtime.decide(run_id, resume_token, decision, actor=actor, note=note)
    if _streaming(request, stream):
        # A RunConflictError in the work: the stream follows whoever holds the run.
        return _streamed(request, runs, run_id, before, _advanced(runs, run_id, deadline_s))
    try:
        return await _advanced(runs, run_id, deadline_s)
    except RunConflictError:
        # The decision is recorded (a repeat of it would be refused): whoever holds the run
        # carries it out. Answer with the run as it is rather than a failure.
        return _out(runs, runs.runtime.get(run_id))


@router.post("/{run_id}/cancel", response_model=RunOut, responses=problem_responses(404, 409))
async def cancel(run_id: RunIdPath, body: CancelIn, caller: Operator, runs: RunsDep) -> RunOut:
    """Cancel the run: a model or tool call in flight in this process is stopped, pending calls
    get a result saying so. Cancelling a cancelled run changes nothing; a completed one is 409."""
    view = runs.runtime.get(run_id)
    if view.state is RunState.CANCELLED:
        return _out(runs, view)
    try:
        view = await runs.runtime.cancel(run_id, body.reason)
    except TimeoutError:
        raise ProblemError(CANCEL_PENDING, "the run was told to stop but is still finishing "
                           "its current step; read it again shortly",
                           extensions={"run_id": run_id}) from None
    return _out(runs, view)


@router.post("/{run_id}/resume", response_model=RunOut,
             responses={**stream_responses(200), **problem_responses(404, 409)})
async def resume(run_id: RunIdPath, body: ResumeIn, caller: Operator, runs: RunsDep,
                 request: Request) -> RunOut | Response:
    """Re-queue a failed, cancelled or timed-out run (with configuration changes, e.g. a larger
    budget) and work on it. A live run nobody works on (its worker died) is picked up where its
    events say it is; 409 while another worker's lease on it runs."""
    runs.check(body.config)
    view = runs.runtime.get(run_id)
    deadline = _deadline(runs.runtime, body.deadline_s)
    if view.state in _ORPHANABLE and body.config is None:
        work = runs.runtime.advance(run_id, deadline=deadline)
    else:
        work = runs.runtime.resume(run_id, config=body.config, deadline=deadline)
    if _streaming(request, body.stream):
        return _streamed(request, runs, run_id, view.seq, work)
    return _out(runs, (await work).view)


@router.post("/{run_id}/continue", response_model=RunOut,
             responses={**stream_responses(200), **problem_responses(404, 409)})
async def continue_run(run_id: RunIdPath, body: ContinueIn, caller: Worker, runs: RunsDep,
                       request: Request) -> RunOut | Response:
    """Answer the run's task_continue_request with its id: the run goes on. An id that is not
    the pending one, or was answered already, is 409."""
    view = readable(runs.runtime.journal.load(run_id), caller)
    check_response(view, body.continue_request_id)  # a wrong id is a 409, streamed or not
    work = runs.runtime.continue_(run_id, body.continue_request_id,
                                  deadline=_deadline(runs.runtime, body.deadline_s))
    if _streaming(request, body.stream):
        return _streamed(request, runs, run_id, view.seq, work)
    return _out(runs, (await work).view)


@router.get("/{run_id}/events", responses={200: {"content": {MEDIA_TYPE: {}}},
                                           **problem_responses(404)})
def follow_run(run_id: RunIdPath, caller: Reader, runs: RunsDep, request: Request,
               after: Annotated[int, Query(ge=0)] = 0) -> StreamingResponse:
    """The run's events as server-sent events, after `Last-Event-ID` (or `after`): first from
    the journal, then as they are appended, until the run comes to rest (completed, stopped,
    waiting for a human, paused for a continue request). Where a lost stream reconnects."""
    readable(runs.runtime.journal.load(run_id), caller)  # 404 before the stream starts
    seen = last_event_id(request.headers)
    return stream_response(runs.runtime.journal, run_id, after if seen is None else seen)


def readable(view: RunView, caller: Principal) -> RunView:
    """`view` when `caller` may read the run's input and conversation: the credential that
    created it, an operator, or anyone when no credential is configured (loopback). Anyone else
    gets 404, as for a run that does not exist: another caller's run ids are not theirs to
    learn of. A run created with no credential (before credentials, or embedded) is operators'."""
    if caller.anonymous or caller.may(Permission.DECIDE) or view.created_by == caller.name:
        return view
    raise UnknownRunError(view.run_id)


def _out(runs: Runs, view: RunView) -> RunOut:
    """The run as a client gets it, with its health read off its operations."""
    return run_out(view, runs.runtime.unhealthy(view.run_id))
