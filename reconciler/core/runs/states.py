"""The run state machine: eight states and the only moves between them.

    queued ──▶ running ──▶ awaiting_tool ──▶ running ──▶ completed (terminal)
      │          │  ▲            │                 │
      │          │  └────────────┤                 └──▶ failed ────┐
      │          ▼               ▼                                  │ explicit resume
      │      awaiting_approval ──▶ timed_out ───────────────────────┤ only: back to
      └──────────────┴──────────▶ cancelled ────────────────────────┘ queued

Pure: no I/O. The journal checks every event's move here before it writes anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from reconciler.core.errors import IllegalTransitionError


class RunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_TOOL = "awaiting_tool"
    AWAITING_APPROVAL = "awaiting_approval"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


S = RunState

#: States a worker advances (a run awaiting approval waits for a human; the rest have stopped):
#: what every journal's `needing_work` and `claim_unattended` look for.
WORKABLE = frozenset({S.QUEUED, S.RUNNING, S.AWAITING_TOOL})

#: Every legal move, apart from the explicit resume below.
TRANSITIONS: Mapping[RunState, frozenset[RunState]] = {
    S.QUEUED: frozenset({S.RUNNING, S.CANCELLED}),
    S.RUNNING: frozenset({S.AWAITING_TOOL, S.AWAITING_APPROVAL, S.COMPLETED, S.FAILED,
                          S.CANCELLED}),
    S.AWAITING_TOOL: frozenset({S.RUNNING, S.AWAITING_APPROVAL, S.FAILED, S.CANCELLED}),
    S.AWAITING_APPROVAL: frozenset({S.AWAITING_TOOL, S.RUNNING, S.CANCELLED, S.TIMED_OUT}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
    S.TIMED_OUT: frozenset(),
}

#: Stopped, but not for good: an explicit resume puts these back in the queue.
RESUMABLE = frozenset({S.FAILED, S.CANCELLED, S.TIMED_OUT})


def check_move(run_id: str, src: RunState, dst: RunState, *, resume: bool = False) -> None:
    """Raise IllegalTransitionError unless `src -> dst` is legal (`resume` for the way back)."""
    if resume:
        if src in RESUMABLE and dst is S.QUEUED:
            return
        raise IllegalTransitionError(
            run_id, src, dst, f"only a failed, cancelled or timed-out run can be resumed "
            f"(this one is {src.value})")
    if dst not in TRANSITIONS[src]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[src])) or "nothing (terminal)"
        raise IllegalTransitionError(
            run_id, src, dst, f"{src.value} may move to {allowed}"
            + ("; use resume to re-queue it" if src in RESUMABLE else ""))
