""""Needs a human": one queue of the operations and runs a person must look at, oldest first,
each with why it is there and for how long.

    operations  escalated, escalate_to_human, duplicate_effect, false_success, await_approval
                (attention.reason_of), waiting since their verdict was decided
    runs        awaiting_approval: a call waiting for approval before its first send, or a
                call whose effect is unknown; and unhealthy runs (a call reported a success
                the provider does not show), waiting since they last moved
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from reconciler.core.attention import EXPLAINED, Reason
from reconciler.core.ports import Journal, Store
from reconciler.core.runs.states import RunState
from reconciler.runtime.approvals import BEFORE_DISPATCH

#: At most this many of each kind are read for one page of the queue.
QUEUE_READ = 500


@dataclass(frozen=True, slots=True)
class Item:
    kind: str  # "operation" or "run"
    id: str
    reason: str
    why: str
    since: datetime


RUN_WHY = {
    "first_send": "waiting for approval before its first send: approve it or reject it",
    "awaiting_approval": "a call's effect is unknown: decide whether it happened, approve a "
                         "re-send, or reject it",
    "unhealthy": "a call reported success but the provider shows no effect",
}


def needs_a_human(store: Store, journal: Journal) -> list[Item]:
    """Everything waiting on a human, the longest-waiting first."""
    items = [Item("operation", s.operation_id, s.reason, EXPLAINED[Reason(s.reason)],
                  s.updated_at)
             for s in store.list_operations(attention=True, limit=QUEUE_READ)
             if s.reason is not None]
    for run in journal.list_runs(state=RunState.AWAITING_APPROVAL.value, limit=QUEUE_READ):
        items.append(Item("run", run.run_id, "awaiting_approval",
                          RUN_WHY[_waiting_for(journal, run.run_id)], run.updated_at))
    for run in journal.list_runs(unhealthy=True, limit=QUEUE_READ):
        items.append(Item("run", run.run_id, "unhealthy", RUN_WHY["unhealthy"],
                          run.updated_at))
    return sorted(items, key=lambda item: item.since)


def _waiting_for(journal: Journal, run_id: str) -> str:
    """Which approval a run awaiting one waits for: before its call's first send, or after a
    send whose effect is unknown (the list row does not say; the run's events do)."""
    approval = journal.load(run_id).approval
    first = approval is not None and approval.payload.get("kind") == BEFORE_DISPATCH
    return "first_send" if first else "awaiting_approval"


def age(since: datetime, now: datetime) -> str:
    """How long, for a person: 45s, 12m, 3h 5m, 2d 4h."""
    seconds = max(0, int((now - since).total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if minutes < 60:
        return f"{minutes}m"
    if hours < 24:
        return f"{hours}h {minutes % 60}m"
    return f"{days}d {hours % 24}h"
