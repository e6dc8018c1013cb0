"""The run loop: drives a run from its events, one durable step at a time.

Every step is written before it is acted on and read back from the journal, so the loop is the
same whether a run is new, resumed after a crash in another process, or continued after a
pause: `advance` looks at where the events say the run is, and does the next thing.

    ┌─▶ settle pending tool calls ─▶ checkpoint ─▶ done? complete ─▶ budget? fail
    │    (guards, tool gate,                                 │
    │     recovery, approvals)                               ▼
    └──────────── tool calls requested ◀── assistant ◀── model call ◀── turn
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from reconciler.core.domain import Verdict
from reconciler.core.errors import RunConflictError
from reconciler.core.ports import Journal, OperationSummary
from reconciler.core.runs.events import CallView, EventKind, RunView
from reconciler.core.runs.messages import (
    Delta,
    ModelRequest,
    TextBlock,
    delta_to_json,
    message_to_json,
    usage_to_json,
)
from reconciler.core.runs.states import RunState
from reconciler.ledger import Ledger
from reconciler.ledger.gate import RetryGate
from reconciler.runtime.approvals import Approvals
from reconciler.runtime.cancel import Cancelled, CancelSignal, cancellable, settle
from reconciler.runtime.continuation import (
    ContinueRequest,
    check_response,
    new_request_id,
    out_of_time,
)
from reconciler.runtime.guards import (
    FINAL_NOTICE,
    Attempted,
    RunConfig,
    budget_stop,
    is_repeat,
    over_limit_message,
    repeat_message,
)
from reconciler.runtime.lease import CANCEL_POLL_S, Heartbeat
from reconciler.runtime.models import Model, ModelCallError, StreamingModel
from reconciler.runtime.toolgate import Hook, Reconcile, ToolGate, no_hook
from reconciler.runtime.tools import Tool, by_name

S = RunState
_LIVE = frozenset({S.RUNNING, S.AWAITING_TOOL})
#: How often `advance` reloads and tries again when another writer got in first.
_CONFLICT_RETRIES = 3
#: Verdicts that make the run that made the call unhealthy (SPEC section 4, rule 3 and the
#: confirmation after success).
UNHEALTHY = frozenset({Verdict.FALSE_SUCCESS.value, Verdict.DUPLICATE_EFFECT.value})


@dataclass(frozen=True, slots=True)
class Advance:
    """Where `advance` left the run, and the continue request if it paused for the deadline."""

    view: RunView
    continue_request: ContinueRequest | None = None


def create_run(journal: Journal, input: str, at: datetime, *, run_id: str | None = None,
               config: dict[str, Any] | None = None,
               correlation_id: str | None = None, created_by: str | None = None) -> RunView:
    """Record a new queued run; a worker (any worker) advances it later. The configuration is
    checked first: a run that could never start is refused, not queued. `created_by`: the
    credential whose run it is (RunView.created_by)."""
    RunConfig.of(config or {})
    return journal.create(run_id or f"run_{uuid.uuid4().hex}", {
        "input": input, "config": config or {}, "correlation_id": correlation_id,
        **({"created_by": created_by} if created_by else {})}, at)


class AgentRuntime:
    """Agent runs whose tool calls go through the reconciler. One per worker process."""

    def __init__(self, journal: Journal, ledger: Ledger, gate: RetryGate, model: Model,
                 tools: Sequence[Tool], reconcile: Reconcile, *, holder: str | None = None,
                 hook: Hook = no_hook, lease_s: float = 300.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.journal = journal
        self.ledger = ledger
        self.model = model
        self.tools = by_name(tools)
        self.holder = holder or f"worker-{uuid.uuid4().hex[:12]}"
        self.hook = hook
        self.lease_s = lease_s
        #: The clock request deadlines are set on and read against (`advance`'s `deadline`);
        #: tests pass a ManualMonotonic, as they pass the ledger a ManualClock.
        self.monotonic = monotonic
        self.toolgate = ToolGate(journal, ledger, gate, reconcile, self.tools,
                                 holder=self.holder, hook=hook)
        self.approvals = Approvals(journal, ledger, self.toolgate, self.tools)
        self.heartbeat = Heartbeat(journal, self.holder, lease_s, self._now,
                                   self.toolgate.off_loop)
        self._active: dict[str, tuple[CancelSignal, asyncio.Event]] = {}

    def _now(self) -> datetime:
        return self.ledger.clock()

    def create(self, input: str, *, run_id: str | None = None,
               config: dict[str, Any] | None = None,
               correlation_id: str | None = None, created_by: str | None = None) -> RunView:
        """Record a new queued run (its input, configuration, correlation id and creator)."""
        return create_run(self.journal, input, self._now(), run_id=run_id, config=config,
                          correlation_id=correlation_id, created_by=created_by)

    def get(self, run_id: str) -> RunView:
        """The run; a pending approval the evidence has settled, or past its timeout, is
        decided first."""
        view = self.journal.load(run_id)
        return self.approvals.review(view, RunConfig.of(view.config))

    def unhealthy(self, run_id: str) -> list[OperationSummary]:
        """The run's operations whose effect turned out wrong after the fact (a double effect,
        or a success the provider never did): the run is unhealthy, even if it completed."""
        return [o for o in self.ledger.store.list_operations(run_id=run_id, limit=10_000)
                if o.verdict in UNHEALTHY]

    async def advance(self, run_id: str, *, deadline: float | None = None,
                      take_over: bool = False) -> Advance:
        """Drive the run until it completes, stops, waits for a human or pauses before
        `deadline` (a reading of `self.monotonic`). `take_over` claims a run whose worker is
        known dead."""
        if run_id in self._active:
            raise RunConflictError(run_id, "this worker is advancing the run already")
        if not self.journal.claim(run_id, self.holder, self._now(), self.lease_s,
                                  force=take_over):
            raise RunConflictError(run_id, "another worker holds the run's lease; wait for it "
                                           "to finish or for the lease to expire")
        signal, done = CancelSignal(), asyncio.Event()
        self._active[run_id] = (signal, done)
        heartbeat = asyncio.ensure_future(
            self.heartbeat.run(run_id, signal, self.journal.load(run_id).seq))
        try:
            for _ in range(_CONFLICT_RETRIES):
                try:
                    return await self._drive(run_id, deadline, signal)
                except RunConflictError:
                    continue
            raise RunConflictError(run_id, "other writers kept changing the run; try later")
        finally:
            heartbeat.cancel()
            await settle(heartbeat)
            del self._active[run_id]
            done.set()
            self.journal.release(run_id, self.holder)

    async def resume(self, run_id: str, *, config: dict[str, Any] | None = None,
                     deadline: float | None = None) -> Advance:
        """Explicitly re-queue a failed, cancelled or timed-out run (with configuration
        changes, e.g. a larger budget) and advance it."""
        view = self.journal.load(run_id)
        RunConfig.of({**view.config, **(config or {})})
        self.journal.append(view, EventKind.RESUMED, {"config": config or {}}, self._now())
        return await self.advance(run_id, deadline=deadline)

    async def continue_(self, run_id: str, continue_request_id: str, *,
                        deadline: float | None = None) -> Advance:
        """Answer a task_continue_request: go on where the run paused."""
        view = self.journal.load(run_id)
        check_response(view, continue_request_id)
        self.journal.append(view, EventKind.CONTINUED, {"request_id": continue_request_id},
                            self._now())
        return await self.advance(run_id, deadline=deadline)

    def decide(self, run_id: str, resume_token: str, decision: str, *, actor: str,
               note: str = "") -> RunView:
        """A human's decision on the call a run waits for (`Approvals.decide`); `advance` the
        run afterwards."""
        # Through `get`: a decision that comes after the approval timed out must not count.
        return self.approvals.decide(self.get(run_id), resume_token, decision, actor=actor,
                                     note=note)

    async def cancel(self, run_id: str, reason: str, *, wait_s: float = 30.0) -> RunView:
        """Cancel the run. If this worker is advancing it, the signal stops the model or tool
        call in flight and the loop records the cancellation; otherwise it is recorded here."""
        active = self._active.get(run_id)
        if active is not None:
            signal, done = active
            signal.cancel(reason)
            await asyncio.wait_for(done.wait(), wait_s)
        elif not self.journal.claim(run_id, self.holder, self._now(), self.lease_s):
            # Another worker (another replica) advances it: ask it, through the journal, to
            # stop its call in flight and record the cancellation; wait for that.
            return await self._cancel_elsewhere(run_id, reason, wait_s)
        else:
            self.journal.release(run_id, self.holder)
        view = self.journal.load(run_id)
        if active is not None and view.state not in _LIVE | {S.AWAITING_APPROVAL}:
            return view
        # Not advanced here, or the advance stopped (paused, or waits for a human) before it
        # looked at the signal: the cancellation is recorded here.
        return self._cancel(view, reason)

    async def _cancel_elsewhere(self, run_id: str, reason: str, wait_s: float) -> RunView:
        """Append a cancel request for the worker holding the run, and wait (at most `wait_s`,
        then TimeoutError) until the run has stopped."""
        stop = time.monotonic() + wait_s
        while True:
            view = self.journal.load(run_id)
            if view.state in (S.QUEUED, S.AWAITING_APPROVAL):
                return self._cancel(view, reason)  # its worker is not in a call: stop it here
            if view.state not in _LIVE:
                return view
            if view.cancel_requested is None:
                try:
                    view = self._append(view, EventKind.CANCEL_REQUESTED, {"reason": reason})
                except RunConflictError:
                    continue
            if time.monotonic() >= stop:
                raise TimeoutError(f"run {run_id} was asked to stop but has not yet")
            await asyncio.sleep(CANCEL_POLL_S)

    async def _drive(self, run_id: str, deadline: float | None,
                     signal: CancelSignal) -> Advance:
        view = self.journal.load(run_id)
        if view.cancel_requested is not None:
            return Advance(self._cancel(view, view.cancel_requested))
        config = RunConfig.of(view.config)
        if view.state is S.QUEUED:
            view = self._append(view, EventKind.STARTED, {})
        view = self.approvals.review(view, config)
        if view.state not in _LIVE:
            return Advance(view)
        if view.continue_request is not None:
            return Advance(view, ContinueRequest(view.continue_request, run_id, view.tool_steps))
        steps = 0  # this request's model and tool calls: the first is made whatever the time
        while True:
            view = self._request_calls(view)
            for call in view.pending_calls():
                if out_of_time(deadline, self.monotonic(), config.step_reserve_s, steps):
                    return self._pause(view)
                steps += 1
                try:
                    view = await self._settle(view, call, config, signal)
                except Cancelled as cancelled:
                    return Advance(self._cancel(self.journal.load(run_id), cancelled.reason))
                if view.state is S.AWAITING_APPROVAL:
                    return Advance(view)
            answered = bool(view.assistant) and view.assistant[-1][0] == view.turn
            if answered and view.checkpoint_turn < view.turn:
                view = self._append(view, EventKind.CHECKPOINT,
                                    {"turn": view.turn, "tool_steps": view.tool_steps})
                self.hook("checkpointed", run_id, None)
            if answered:
                last = view.assistant[-1][1]
                if not last.tool_uses() or view.turn >= config.max_turns:
                    return Advance(self._complete(view, config))
            stop = budget_stop(config, view.turn_usage)
            if stop is not None:
                return Advance(self._fail(view, "budget_exceeded", "before_turn", stop))
            if out_of_time(deadline, self.monotonic(), config.step_reserve_s, steps):
                return self._pause(view)
            if answered or view.turn == 0:
                view = self._append(view, EventKind.TURN, {"turn": view.turn + 1})
            steps += 1
            try:
                view = await self._ask_model(view, config, signal)
            except Cancelled as cancelled:
                return Advance(self._cancel(self.journal.load(run_id), cancelled.reason))
            except ModelCallError as exc:
                return Advance(self._fail(view, "model_error", "model_call", str(exc)))

    async def _ask_model(self, view: RunView, config: RunConfig,
                         signal: CancelSignal) -> RunView:
        final = view.turn >= config.max_turns
        request = ModelRequest(
            system=config.system + ("\n\n" + FINAL_NOTICE if final else ""),
            messages=view.messages(),
            tools=() if final else tuple(tool.spec for tool in self.tools.values()),
            max_tokens=config.max_output_tokens)
        streamed = view

        def on_delta(delta: Delta) -> None:
            # Appended as it arrives, so a reader of the run's events (its SSE stream) sees the
            # answer grow; a crash mid-stream leaves deltas and no answer, and the turn is asked
            # again.
            nonlocal streamed
            streamed = self._append(streamed, EventKind.ASSISTANT_DELTA,
                                    {"turn": view.turn, **delta_to_json(delta)})

        call = (self.model.stream(request, on_delta) if isinstance(self.model, StreamingModel)
                else self.model.complete(request))
        try:
            response = await cancellable(call, signal)
        except (Cancelled, ModelCallError, RunConflictError):
            raise
        except Exception as exc:
            # A broken model adapter fails the run, not the worker. Only the call itself: a
            # failure of the journal or the store after it is not the model's.
            raise ModelCallError(f"{type(exc).__name__}: {exc}") from exc
        self.hook("model_answered", view.run_id, None)
        message = response.message()
        view = self._append(streamed, EventKind.ASSISTANT, {
            "turn": view.turn, "message": message_to_json(message),
            "usage": usage_to_json(response.usage), "stop_reason": response.stop_reason})
        self.hook("assistant_recorded", view.run_id, None)
        return self._request_calls(view)

    def _request_calls(self, view: RunView) -> RunView:
        """Persist every tool call of the latest answer not persisted yet (all of them, or the
        rest after a crash between the answer and its calls)."""
        if not view.assistant or view.assistant[-1][0] != view.turn:
            return view
        for use in view.assistant[-1][1].tool_uses():
            if use.id not in view.calls:
                view = self.toolgate.request(view, view.turn, use)
        return view

    async def _settle(self, view: RunView, call: CallView, config: RunConfig,
                      signal: CancelSignal) -> RunView:
        why = self._guard(view, call.tool_call_id, config) if call.dispatches == 0 else None
        if why is not None:
            return self.toolgate.error_result(view, call, why, "guard")
        ask = self.approvals.needed(view, call)
        if ask is not None:
            return self.approvals.request(view, call, ask)
        return await self.toolgate.settle(view, call, config, signal)

    def _guard(self, view: RunView, tool_call_id: str, config: RunConfig) -> str | None:
        """Why a call must not run (final turn, too many calls, a loop), from the events alone,
        so a worker that crashed between asking and answering decides the same again."""
        calls = list(view.calls.values())
        index = next(i for i, c in enumerate(calls) if c.tool_call_id == tool_call_id)
        call = calls[index]
        if call.turn >= config.max_turns:
            return "Not run: tools are not available in the final turn."
        if sum(1 for c in calls[:index] if c.turn == call.turn) >= config.max_tool_calls_per_turn:
            return over_limit_message(config.max_tool_calls_per_turn)
        history = [Attempted((c.name, c.arguments_hash),
                             c.result.content if c.result is not None and not c.result.is_error
                             else None) for c in calls[:index]]
        if is_repeat(history, (call.name, call.arguments_hash), config):
            return repeat_message(call.name, config.repeat_limit, config.repeat_window)
        return None

    def _complete(self, view: RunView, config: RunConfig) -> RunView:
        last = view.assistant[-1][1]
        output = "\n".join(b.text for b in last.content if isinstance(b, TextBlock))
        stop = "max_turns" if last.tool_uses() and view.turn >= config.max_turns else (
            view.model_stop or "end_turn")
        return self._append(view, EventKind.COMPLETED, {
            "output": output, "stop_reason": stop, "usage": usage_to_json(view.usage)})

    def _fail(self, view: RunView, code: str, phase: str, message: str) -> RunView:
        return self._append(view, EventKind.FAILED, {
            "error_code": code, "phase": phase, "message": message,
            "last_checkpoint": view.checkpoint_turn})

    def _pause(self, view: RunView) -> Advance:
        request_id = new_request_id(view.run_id)
        view = self._append(view, EventKind.CONTINUE_REQUESTED,
                            {"request_id": request_id, "tool_steps": view.tool_steps})
        return Advance(view, ContinueRequest(request_id, view.run_id, view.tool_steps))

    def _cancel(self, view: RunView, reason: str) -> RunView:
        """Stop the run; every pending call gets a synthetic result so the conversation stays
        valid for a later resume. A call cut off mid-flight is left to the reconciler."""
        for call in view.pending_calls():
            if call.dispatches and call.operation_id is not None:
                self.toolgate.close_attempt(call)
                text = (f"Cancelled ({reason}) while in flight: the effect is unknown. Operation "
                        f"{call.operation_id} is being reconciled; check it before doing this "
                        "again.")
            else:
                text = f"Cancelled ({reason}); the call was not run."
            view = self.toolgate.error_result(view, call, text, "cancelled")
        partial = [{"tool_call_id": c.tool_call_id, "source": c.result_source,
                    "is_error": c.result.is_error if c.result else None}
                   for c in view.turn_calls(view.turn)]
        return self._append(view, EventKind.CANCELLED,
                            {"reason": reason, "partial_results": partial})

    def _append(self, view: RunView, kind: EventKind, data: dict[str, Any]) -> RunView:
        return self.journal.append(view, kind, data, self._now())
