"""The run's append-only event log, and the run as a projection of it.

Every turn, assistant message, tool call request, dispatch, result, approval request and decision,
checkpoint, continuation, cancellation and terminal event is one `RunEvent` with a per-run
sequence number. `project` folds a run's events into a `RunView`; nothing else decides a run's
state, so a run rebuilt from its events is the run. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from reconciler.core.errors import IllegalTransitionError, RunError
from reconciler.core.runs.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    Usage,
    message_from_json,
    usage_from_json,
)
from reconciler.core.runs.states import RunState, check_move

S = RunState


class EventKind(StrEnum):
    CREATED = "run_created"
    STARTED = "run_started"
    TURN = "turn_started"
    ASSISTANT = "assistant_message"
    #: A piece of the answer as the model streams it; informational, the assistant message
    #: that follows is the answer. Changes nothing in the run's projection.
    ASSISTANT_DELTA = "assistant_delta"
    TOOL_REQUESTED = "tool_call_requested"
    TOOL_DISPATCHED = "tool_dispatched"
    TOOL_RESULT = "tool_result"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_DECIDED = "approval_decided"
    CHECKPOINT = "checkpoint"
    CONTINUE_REQUESTED = "continue_requested"
    CONTINUED = "continued"
    COMPLETED = "run_completed"
    FAILED = "run_failed"
    #: Another worker asked the one advancing the run to stop; that one records CANCELLED.
    CANCEL_REQUESTED = "cancel_requested"
    CANCELLED = "run_cancelled"
    TIMED_OUT = "run_timed_out"
    RESUMED = "run_resumed"


#: The state an event moves the run to; kinds not named here leave the state as it is.
MOVES: Mapping[EventKind, RunState] = {
    EventKind.CREATED: S.QUEUED,
    EventKind.STARTED: S.RUNNING,
    EventKind.TOOL_REQUESTED: S.AWAITING_TOOL,
    EventKind.APPROVAL_REQUESTED: S.AWAITING_APPROVAL,
    EventKind.APPROVAL_DECIDED: S.AWAITING_TOOL,
    EventKind.CHECKPOINT: S.RUNNING,
    EventKind.COMPLETED: S.COMPLETED,
    EventKind.FAILED: S.FAILED,
    EventKind.CANCELLED: S.CANCELLED,
    EventKind.TIMED_OUT: S.TIMED_OUT,
    EventKind.RESUMED: S.QUEUED,
}

#: Events that may leave a live run where it is: a checkpoint of a running run, the next tool
#: call of a turn that awaits tools already.
_STAYS = frozenset({EventKind.CHECKPOINT, EventKind.TOOL_REQUESTED})
#: Events that only make sense while the run is live (not stopped, not queued).
_LIVE = frozenset({S.RUNNING, S.AWAITING_TOOL, S.AWAITING_APPROVAL})
_NEEDS_LIVE = frozenset({EventKind.TURN, EventKind.ASSISTANT, EventKind.ASSISTANT_DELTA,
                         EventKind.TOOL_DISPATCHED,
                         EventKind.TOOL_RESULT, EventKind.CONTINUE_REQUESTED,
                         EventKind.CANCEL_REQUESTED,
                         EventKind.CONTINUED})


@dataclass(frozen=True, slots=True)
class RunEvent:
    run_id: str
    seq: int
    kind: EventKind
    at: datetime
    data: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class CallView:
    """One tool call the model asked for, and what became of it."""

    turn: int
    tool_call_id: str
    name: str
    input: Mapping[str, Any]
    arguments_hash: str
    effect: str
    idempotency_key: str | None
    operation_id: str | None
    dispatches: int = 0
    result: ToolResultBlock | None = None
    result_source: str | None = None


@dataclass(frozen=True, slots=True)
class PendingApproval:
    tool_call_id: str
    resume_token: str
    payload: Mapping[str, Any]
    requested_at: datetime


@dataclass(frozen=True, slots=True)
class RunView:
    """A run as its events say it is."""

    run_id: str
    state: RunState
    seq: int
    created_at: datetime
    updated_at: datetime
    input: str
    config: Mapping[str, Any]
    correlation_id: str | None
    turn: int = 0
    #: The credential that created the run (service.runs.routes): only its caller reads its input.
    created_by: str | None = None
    turn_usage: tuple[Usage, ...] = ()
    assistant: tuple[tuple[int, Message], ...] = ()
    calls: Mapping[str, CallView] = field(default_factory=dict)
    approval: PendingApproval | None = None
    continue_request: str | None = None
    #: Calls a human approved before their first dispatch (the tool needs approval).
    approved_calls: frozenset[str] = frozenset()
    answered_continues: frozenset[str] = frozenset()
    checkpoint_turn: int = 0
    #: Why the model stopped its latest answer ("end_turn", "tool_use", "max_tokens", ...).
    model_stop: str | None = None
    output: str | None = None
    stop_reason: str | None = None
    error: Mapping[str, Any] | None = None
    cancellation: Mapping[str, Any] | None = None
    #: The reason of a cancel asked for by another worker and not carried out yet.
    cancel_requested: str | None = None

    @property
    def usage(self) -> Usage:
        return sum(self.turn_usage, Usage())

    @property
    def tool_steps(self) -> int:
        """Tool calls with a recorded result: the steps done."""
        return sum(1 for call in self.calls.values() if call.result is not None)

    def turn_calls(self, turn: int) -> list[CallView]:
        return [call for call in self.calls.values() if call.turn == turn]

    def pending_calls(self) -> list[CallView]:
        """Requested calls without a result, in the order they were asked for."""
        return [call for call in self.calls.values() if call.result is None]

    def messages(self) -> tuple[Message, ...]:
        """The conversation to send the model: the input, then each turn's assistant message
        followed by its tool results (once all of them are in)."""
        out = [Message("user", (TextBlock(self.input),))]
        for _, message in self.assistant:
            out.append(message)
            uses = message.tool_uses()
            results = [self.calls[u.id].result for u in uses if u.id in self.calls]
            if uses and len(results) == len(uses) and all(r is not None for r in results):
                out.append(Message("user", tuple(r for r in results if r is not None)))
            elif uses:
                break
        return tuple(out)


def project(events: Iterable[RunEvent]) -> RunView:
    """Fold a run's events, in sequence order, into the run. Raises on an event the run could
    not have had (an illegal move, a second result for one call, a gap in the sequence)."""
    view: RunView | None = None
    for event in events:
        view = apply(view, event)
    if view is None:
        raise RunError("?", "a run needs at least its creation event")
    return view


def apply(view: RunView | None, event: RunEvent) -> RunView:
    """The run after one more event; raises (and changes nothing) if it is not legal."""
    if view is None:
        if event.kind is not EventKind.CREATED or event.seq != 1:
            raise RunError(event.run_id, "a run's first event is run_created, seq 1")
        d = event.data
        return RunView(event.run_id, S.QUEUED, 1, event.at, event.at, str(d["input"]),
                       dict(d.get("config") or {}), d.get("correlation_id"),
                       created_by=d.get("created_by"))
    if event.seq != view.seq + 1:
        raise RunError(view.run_id, f"event seq {event.seq} does not follow {view.seq}")
    if event.kind is EventKind.CREATED:
        raise RunError(view.run_id, "the run exists already")
    state = _move(view, event.kind)
    changes = _fold(view, event, state)
    return replace(view, state=state, seq=event.seq, updated_at=event.at, **changes)


def _move(view: RunView, kind: EventKind) -> RunState:
    if kind in _NEEDS_LIVE and view.state not in _LIVE:
        raise IllegalTransitionError(view.run_id, view.state, kind.value,
                                     f"{kind.value} needs a live run")
    target = MOVES.get(kind)
    if target is None or (target is view.state and kind in _STAYS):
        return view.state
    if target is view.state:
        # A second start, completion or cancellation, an approval asked for twice, a resume of
        # a queued run: none is a move the table allows, and each would rewrite the record.
        raise IllegalTransitionError(view.run_id, view.state, target,
                                     f"the run is {view.state.value} already; {kind.value} "
                                     "cannot enter it again")
    check_move(view.run_id, view.state, target, resume=kind is EventKind.RESUMED)
    return target


def _fold(view: RunView, event: RunEvent, state: RunState) -> dict[str, Any]:
    d, kind = event.data, event.kind
    if kind is EventKind.TURN:
        return {"turn": int(d["turn"])}
    if kind is EventKind.ASSISTANT:
        return {"assistant": (*view.assistant, (int(d["turn"]), message_from_json(d["message"]))),
                "turn_usage": (*view.turn_usage, usage_from_json(d.get("usage") or {})),
                "model_stop": d.get("stop_reason")}
    if kind is EventKind.TOOL_REQUESTED:
        call = CallView(int(d["turn"]), str(d["tool_call_id"]), str(d["name"]),
                        dict(d["input"]), str(d["arguments_hash"]), str(d["effect"]),
                        d.get("idempotency_key"), d.get("operation_id"))
        if call.tool_call_id in view.calls:
            raise RunError(view.run_id, f"tool call {call.tool_call_id!r} was requested already")
        return {"calls": {**view.calls, call.tool_call_id: call}}
    if kind in (EventKind.TOOL_DISPATCHED, EventKind.TOOL_RESULT):
        return {"calls": {**view.calls, **_call_update(view, kind, d)}}
    if kind is EventKind.APPROVAL_REQUESTED:
        return {"approval": PendingApproval(str(d["tool_call_id"]), str(d["resume_token"]),
                                            dict(d.get("payload") or {}), event.at)}
    if kind is EventKind.APPROVAL_DECIDED:
        if d.get("decision") == "approve":
            return {"approval": None,
                    "approved_calls": view.approved_calls | {str(d["tool_call_id"])}}
        return {"approval": None}
    if kind is EventKind.CHECKPOINT:
        return {"checkpoint_turn": int(d["turn"])}
    if kind is EventKind.CONTINUE_REQUESTED:
        return {"continue_request": str(d["request_id"])}
    if kind is EventKind.CONTINUED:
        return {"continue_request": None,
                "answered_continues": view.answered_continues | {str(d["request_id"])}}
    if kind is EventKind.COMPLETED:
        return {"output": d.get("output"), "stop_reason": d.get("stop_reason"),
                "continue_request": None}
    if kind is EventKind.FAILED:
        return {"error": dict(d), "continue_request": None}
    if kind is EventKind.CANCEL_REQUESTED:
        return {"cancel_requested": str(d["reason"])}
    if kind is EventKind.CANCELLED:
        return {"cancellation": dict(d), "approval": None, "continue_request": None,
                "cancel_requested": None}
    if kind is EventKind.TIMED_OUT:
        return {"error": {"error_code": "approval_timed_out", **d}, "approval": None}
    if kind is EventKind.RESUMED:
        return {"error": None, "cancellation": None,
                "config": {**view.config, **(d.get("config") or {})}}
    return {}


def _call_update(view: RunView, kind: EventKind, d: Mapping[str, Any]) -> dict[str, CallView]:
    call_id = str(d["tool_call_id"])
    call = view.calls.get(call_id)
    if call is None:
        raise RunError(view.run_id, f"{kind.value} for unknown tool call {call_id!r}")
    if call.result is not None:
        raise RunError(view.run_id, f"tool call {call_id!r} has its result already")
    if kind is EventKind.TOOL_DISPATCHED:
        return {call_id: replace(call, dispatches=call.dispatches + 1)}
    result = ToolResultBlock(call_id, str(d["content"]), bool(d.get("is_error", False)))
    return {call_id: replace(call, result=result, result_source=str(d.get("source", "handler")))}


