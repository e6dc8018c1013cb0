"""The tool gate: what happens around every tool handler, so that no effect is done twice.

    model asks ─▶ call_requested ─▶ intent ─▶ dispatched ─▶ handler ─▶ attempt ─▶ result
                  (write-ahead:    (all but   (before a    (the      (what the   (once per
                  args hash, key)  read_only)  byte is sent) send)   wire said)  call)

A call with a result is never run again: resuming replays the result. A call requested but not
dispatched was never sent, so it runs. A call dispatched without a result may or may not have
taken effect; `settle` decides by effect class:

    read_only         run again
    idempotent_write  reconcile; applied: result from the evidence; not applied: re-send with
    non_idempotent    the persisted key and hash, only on the retry gate's grant; anything
                      else: the run waits for a human (awaiting_approval)

Even an idempotent write is not re-sent blind: the provider's key dedupes only within its
retention window and only if the provider keeps keys at all, which the gate checks.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from reconciler.core.domain import Attempt, Effect, Intent, Outcome, Verdict
from reconciler.core.errors import RetryNotGrantedError, RunConflictError
from reconciler.core.hashing import request_hash
from reconciler.core.outcomes import outcome_of
from reconciler.core.ports import Journal
from reconciler.core.runs.events import CallView, EventKind, RunView
from reconciler.core.runs.messages import ToolUseBlock
from reconciler.core.verdicts import applied_refs
from reconciler.ledger import Judgement, Ledger
from reconciler.ledger.gate import RetryGate, RetryRequest
from reconciler.runtime.cancel import Cancelled, CancelSignal, cancellable
from reconciler.runtime.guards import RunConfig
from reconciler.runtime.tools import Tool, ToolCall, ToolOutput, call_key, operation_id

#: Probe an operation once, now (`Sweeper.reconcile`); None when another sweeper holds it.
Reconcile = Callable[[str], Judgement | None]


class Hook(Protocol):
    """Called at each durable step of a tool call (the chaos runner kills workers here)."""

    def __call__(self, point: str, run_id: str, tool_call_id: str | None) -> None: ...


def no_hook(point: str, run_id: str, tool_call_id: str | None) -> None:
    """The default hook: nothing happens between steps."""


class ToolGate:
    """Persists, dispatches, records and recovers tool calls for the run loop."""

    def __init__(self, journal: Journal, ledger: Ledger, gate: RetryGate, reconcile: Reconcile,
                 tools: Mapping[str, Tool], *, holder: str, hook: Hook = no_hook) -> None:
        self.journal = journal
        self.ledger = ledger
        self.gate = gate
        self.reconcile = reconcile
        self.tools = tools
        self.holder = holder
        self.hook = hook
        #: Held while a probe runs on a thread: the store's other users on the event loop (the
        #: run's heartbeat) wait, since a store may have one connection (in-memory SQLite).
        self.off_loop = asyncio.Lock()

    @property
    def now(self) -> Callable[[], datetime]:
        return self.ledger.clock

    def request(self, view: RunView, turn: int, use: ToolUseBlock) -> RunView:
        """Persist the call the model asked for (write-ahead); its intent is recorded when it
        is about to be dispatched (`settle`), and only if a guard lets it run."""
        tool = self.tools.get(use.name)
        effect = tool.effect if tool else Effect.READ_ONLY
        side_effect = effect is not Effect.READ_ONLY
        view = self.journal.append(view, EventKind.TOOL_REQUESTED, {
            "turn": turn, "tool_call_id": use.id, "name": use.name, "input": dict(use.input),
            "arguments_hash": request_hash(dict(use.input)), "effect": effect.value,
            "idempotency_key": call_key(view.run_id, use.id),
            "operation_id": operation_id(view.run_id, use.id) if side_effect else None,
        }, self.now())
        self.hook("requested", view.run_id, use.id)
        return view

    def error_result(self, view: RunView, call: CallView, content: str, source: str) -> RunView:
        """Record a result the runtime wrote itself (a guard, a refusal, a cancellation)."""
        return self.journal.append(view, EventKind.TOOL_RESULT, {
            "turn": call.turn, "tool_call_id": call.tool_call_id, "content": content,
            "is_error": True, "source": source}, self.now())

    async def settle(self, view: RunView, call: CallView, config: RunConfig,
                     cancel: CancelSignal) -> RunView:
        """Bring one pending call to a result, or to a pending approval."""
        tool = self.tools.get(call.name)
        if tool is None:
            names = ", ".join(sorted(self.tools)) or "none"
            return self.error_result(view, call, f"Unknown tool {call.name!r}; available: {names}.",
                               "guard")
        if call.dispatches == 0 or tool.effect is Effect.READ_ONLY:
            if call.dispatches == 0 and tool.effect is not Effect.READ_ONLY:
                # Never sent. Recorded again if a worker died after recording it: a repeat of
                # the identical intent is a no-op.
                self._record_intent(view, tool, call)
            return await self._dispatch(view, tool, call, config, cancel)
        return await self._recover(view, tool, call, config, cancel)

    async def _dispatch(self, view: RunView, tool: Tool, call: CallView, config: RunConfig,
                        cancel: CancelSignal) -> RunView:
        number = call.dispatches + 1
        view = self.journal.append(view, EventKind.TOOL_DISPATCHED, {
            "turn": call.turn, "tool_call_id": call.tool_call_id, "attempt": number}, self.now())
        call = view.calls[call.tool_call_id]
        self.hook("dispatched", view.run_id, call.tool_call_id)
        at = self.now()
        if tool.effect is not Effect.READ_ONLY:
            # Before the first byte leaves: a worker that dies mid-call leaves the dispatch
            # and its time on record, not only in its own journal.
            self._record_attempt(tool, view, call, number, at, None)
        try:
            output = await cancellable(
                tool.handler(replace(self._tool_call(view, tool, call), cancel=cancel)), cancel)
        except Cancelled:
            raise
        except Exception as exc:  # a handler's failure is the model's to see
            output = _failed(tool, exc)
        self.hook("delivered", view.run_id, call.tool_call_id)
        if tool.effect is not Effect.READ_ONLY:
            self._record_attempt(tool, view, call, number, at, output)
            self.hook("attempt_recorded", view.run_id, call.tool_call_id)
            if output.outcome is not Outcome.RESPONSE:
                # Sent, or maybe sent, with no answer: only the provider can say what happened.
                return await self._recover(view, tool, call, config, cancel)
        view = self.journal.append(view, EventKind.TOOL_RESULT, {
            "turn": call.turn, "tool_call_id": call.tool_call_id, "content": output.content,
            "is_error": output.is_error, "source": "handler"}, self.now())
        self.hook("result_recorded", view.run_id, call.tool_call_id)
        return view

    async def _recover(self, view: RunView, tool: Tool, call: CallView, config: RunConfig,
                       cancel: CancelSignal) -> RunView:
        assert call.operation_id is not None
        self.close_attempt(call)
        judgement = await self._reconciled(call.operation_id, config, cancel)
        verdict = judgement.decision.verdict
        if verdict is Verdict.VERIFIED_APPLIED:
            return self.journal.append(view, EventKind.TOOL_RESULT, {
                "turn": call.turn, "tool_call_id": call.tool_call_id,
                "content": evidence_result(judgement), "is_error": False,
                "source": "reconciled"}, self.now())
        reason = (f"verdict {verdict.value}, next action {judgement.decision.next_action}")
        if verdict is Verdict.VERIFIED_NOT_APPLIED:
            answer = self.gate.ask(RetryRequest(
                call.operation_id, self._intent_key(tool, view, call),
                judgement.facts.intent.request_hash, self.holder))
            if answer.allowed:
                return await self._dispatch(view, tool, call, config, cancel)
            reason = answer.reason
        return self.journal.append(view, EventKind.APPROVAL_REQUESTED, {
            "turn": call.turn, "tool_call_id": call.tool_call_id,
            "resume_token": uuid.uuid4().hex,
            "payload": {"operation_id": call.operation_id, "tool": call.name,
                        "effect": call.effect, "arguments_hash": call.arguments_hash,
                        "verdict": verdict.value, "next_action": judgement.decision.next_action,
                        "findings": list(judgement.decision.findings), "reason": reason},
        }, self.now())

    def close_attempt(self, call: CallView) -> None:
        """A dispatch the reconciler never heard the end of (the worker died, or the run was
        cancelled, mid-call) is recorded as what the caller saw: no answer, a timeout. An
        attempt opened as dispatching is completed so (its dispatch time stays the opening's);
        one the journal shows but the ledger never heard of is recorded now."""
        assert call.operation_id is not None
        facts = self.ledger.store.facts(call.operation_id)
        recorded = {a.number: a for a in facts.attempts}
        opened = recorded.get(call.dispatches)
        if opened is not None and opened.outcome is not Outcome.DISPATCHING:
            return
        if opened is None and call.dispatches <= max(recorded, default=0):
            return
        intent = facts.intent
        self.ledger.record_attempt(Attempt(
            call.operation_id, call.dispatches, intent.idempotency_key, intent.request_hash,
            opened.at if opened else self.now(), Outcome.TIMEOUT))

    async def _reconciled(self, operation_id: str, config: RunConfig,
                          cancel: CancelSignal) -> Judgement:
        """Probe until the verdict is decided, for at most `reconcile_rounds` rounds."""
        judgement = self.ledger.judge(operation_id)
        for _ in range(config.reconcile_rounds):
            if judgement.decision.verdict is not Verdict.INDETERMINATE:
                break
            # Probes block (and may hang up to their timeout): off the event loop.
            async with self.off_loop:
                probed: Judgement | None = await asyncio.to_thread(self.reconcile,
                                                                   operation_id)
            judgement = probed or self.ledger.judge(operation_id)
            if judgement.decision.verdict is Verdict.INDETERMINATE:
                await cancellable(asyncio.sleep(config.reconcile_wait_s), cancel)
        return judgement

    def _tool_call(self, view: RunView, tool: Tool, call: CallView) -> ToolCall:
        return ToolCall(view.run_id, call.turn, call.tool_call_id, call.name, call.input,
                        call.operation_id, call_key(view.run_id, call.tool_call_id),
                        call.dispatches)

    def _intent_key(self, tool: Tool, view: RunView, call: CallView) -> str | None:
        return call_key(view.run_id, call.tool_call_id) if tool.sends_key else None

    def _record_intent(self, view: RunView, tool: Tool, call: CallView) -> None:
        tool_call = self._tool_call(view, tool, call)
        assert call.operation_id is not None and tool.provider is not None
        self.ledger.record_intent(Intent(
            call.operation_id, tool.request_hash(tool_call), self._intent_key(tool, view, call),
            tool.provider, tool.action or tool.name, tool.effect, self.now(),
            run_id=view.run_id, tool_call_id=call.tool_call_id,
            correlation=dict(tool.correlation(tool_call)) if tool.correlation else {},
            carries=tool.carries))

    def _record_attempt(self, tool: Tool, view: RunView, call: CallView, number: int,
                        at: datetime, output: ToolOutput | None) -> None:
        """Open the attempt (`output` None: about to send, through the retry gate, which
        checks this worker's grant for attempt n>=2) or complete it with `output`."""
        assert call.operation_id is not None
        attempt = Attempt(call.operation_id, number, self._intent_key(tool, view, call),
                          tool.request_hash(self._tool_call(view, tool, call)), at,
                          Outcome.DISPATCHING)
        if output is not None:
            attempt = replace(attempt, outcome=output.outcome, status=output.status,
                              receipt=output.receipt)
        try:
            self.gate.record_attempt(attempt, self.holder)
        except RetryNotGrantedError:
            raise RunConflictError(view.run_id, f"attempt {number} of tool call "
                                   f"{call.tool_call_id!r} lost its retry grant before it was "
                                   "sent (nothing was sent); reload the run") from None


def _failed(tool: Tool, exc: Exception) -> ToolOutput:
    """A handler that raised: for a side effect, what the exception says about the wire (a
    failure to connect sent nothing; anything else may have been sent)."""
    message = f"{tool.name} failed: {type(exc).__name__}: {exc}"
    if tool.effect is Effect.READ_ONLY:
        return ToolOutput(message, is_error=True)
    return ToolOutput(message, is_error=True, outcome=outcome_of(exc) or Outcome.TIMEOUT)


def evidence_result(judgement: Judgement) -> str:
    """The tool result for a call the provider shows applied: what the evidence says."""
    facts = judgement.facts
    refs = sorted(applied_refs(facts))
    result: dict[str, Any] = {
        "status": "applied", "verdict": judgement.decision.verdict.value,
        "operation_id": facts.intent.operation_id, "provider_refs": refs,
        "note": "the worker lost this call's answer; the provider shows it took effect"}
    return json.dumps(result, sort_keys=True)
