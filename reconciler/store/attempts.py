"""Recording an attempt's report: its insert and the due time a dispatch sets, in the caller's
write (the group committer's transaction), and, when the insert is refused, telling a repeat,
the completion of an open attempt and another report of a recorded attempt apart from what is
kept (store/reports.py).

    INSERT report 0 ─▶ UPDATE state.due_at (a dispatch makes an undecided operation due)
        └─ refused (number taken, or no intent) ─▶ settle: repeat? completion? another report?

A first report is one INSERT, as it was before reports were kept: only a report of a number
already taken pays for the read that numbers it on from the highest (`report`), with the
operation's state row locked (PostgreSQL; SQLite's write transaction excludes other writers),
so that two reports racing take turns and both are kept.

Decided in the same transaction (`SqlStore.record_attempt_and_decide`), the due time is set
after the decision, and only when the decision left the state row as it was: a decision that
caches a new verdict sets the due time itself (decisions.CACHE), which would overwrite this
one, and the rules read the facts, never the due time. One update of the state row instead
of two (and of its due-time index).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy
from sqlalchemy import Connection, Table, bindparam, insert, or_, update
from sqlalchemy.exc import IntegrityError

from reconciler.core.domain import Attempt, Outcome, Verdict
from reconciler.core.errors import UnknownOperationError
from reconciler.store import decisions, folds, reports, rows
from reconciler.store.commits import Step
from reconciler.store.driver import DriverStatements
from reconciler.store.tables import AttemptRow, StateRow

_STATE: Table = StateRow.__table__  # type: ignore[attr-defined]
_ATTEMPT: Table = AttemptRow.__table__  # type: ignore[attr-defined]
# Statements built once, not per call (their compiled forms are cached, store/driver.py).
INSERT_ATTEMPT = insert(_ATTEMPT)
#: A dispatch makes an undecided operation due (`Store.record_attempt`), unless due earlier.
DUE_ON_DISPATCH = (update(_STATE)
                   .where(_STATE.c.operation_id == bindparam("op"),
                          or_(_STATE.c.due_at.is_(None), _STATE.c.due_at > bindparam("at")),
                          _STATE.c.verdict == Verdict.INDETERMINATE.value,
                          _STATE.c.escalated.is_(False))
                   .values(due_at=bindparam("at")))
#: The reports of one attempt, in recorded order.
ATTEMPT_NUMBERED = (sqlalchemy.select(_ATTEMPT)
                    .where(_ATTEMPT.c.operation_id == bindparam("op"),
                           _ATTEMPT.c.number == bindparam("number"))
                    .order_by(_ATTEMPT.c.id))
#: The completion of an attempt recorded as dispatching (its report, by row id).
COMPLETE_ATTEMPT = (update(_ATTEMPT)
                    .where(_ATTEMPT.c.id == bindparam("row"),
                           _ATTEMPT.c.outcome == Outcome.DISPATCHING.value)
                    .values(outcome=bindparam("outcome"), status=bindparam("status"),
                            receipt_ref=bindparam("ref"), receipt_hash=bindparam("hash"),
                            completed_at=bindparam("completed")))


def due_of(attempt: Attempt, due_at: datetime | None) -> dict[str, Any]:
    """The parameters of DUE_ON_DISPATCH for `attempt` (due at `due_at`, else at once)."""
    return {"op": attempt.operation_id, "at": due_at or attempt.at}


def inserting(attempt: Attempt) -> list[Step]:
    """The steps that record `attempt`: counted first (store/folds.py)."""
    return [folds.counted(folds.COUNT_ATTEMPTS, attempt.operation_id),
            (INSERT_ATTEMPT, rows.attempt_values(attempt))]


def recording(attempt: Attempt, due: dict[str, Any]) -> list[Step]:
    """The steps that record `attempt` and make its operation due."""
    return [*inserting(attempt), (DUE_ON_DISPATCH, due)]


def make_due(conn: Connection, due: dict[str, Any]) -> None:
    """In the transaction of `conn`: a dispatch makes an undecided operation due."""
    DriverStatements.of(conn.dialect).execute(conn, DUE_ON_DISPATCH, due)


def settle(conn: Connection, attempt: Attempt, due: dict[str, Any],
           refused: IntegrityError) -> bool:
    """After the insert of `attempt` as a first report was refused, in the transaction of
    `conn`: False for an identical repeat of a report kept; True for the completion of an open
    report (recorded here) or another report of the attempt (kept here, numbered after the
    highest). UnknownOperationError without an intent, also when its intent committed only after
    the insert was refused (the only other refusal when the number is free: a foreign key)."""
    decisions.head(conn, attempt.operation_id, locked=True)
    found = conn.execute(ATTEMPT_NUMBERED, {"op": attempt.operation_id,
                                            "number": attempt.number}).all()
    if not found:
        # The number is free and the intent is there now: it was not when the insert ran.
        raise ahead_of_intent(attempt.operation_id, "attempt") from refused
    kept = [rows.attempt_of(row) for row in found]
    attempt = reports.as_reported(kept, attempt)
    if reports.repeats(kept, attempt):
        return False
    index = reports.opened(kept, attempt)
    if index is not None and _complete(conn, found[index].id,
                                       reports.completion(kept[index], attempt)):
        conn.execute(*folds.counted(folds.COUNT_COMPLETIONS, attempt.operation_id))
    else:
        conn.execute(*folds.counted(folds.COUNT_ATTEMPTS, attempt.operation_id))
        conn.execute(INSERT_ATTEMPT, rows.attempt_values(
            attempt, max(row.report for row in found) + 1))
    conn.execute(DUE_ON_DISPATCH, due)
    return True


def ahead_of_intent(operation_id: str, fact: str) -> UnknownOperationError:
    """A fact (an attempt, evidence) the foreign key refused while its intent was being
    recorded: the intent's transaction committed in between (the fact was posted before the
    intent's answer came). Refused as if it had come a moment earlier, with nothing written;
    the caller posts it again once the intent is answered."""
    return UnknownOperationError(
        f"no intent was recorded for operation {operation_id!r} when this {fact} arrived (it "
        f"was being recorded at the same moment); wait for the intent's answer, then post the "
        f"{fact} again", operation_id=operation_id)


def _complete(conn: Connection, row: int, done: Attempt) -> bool:
    """Fill the open report `row` with the outcome of `done`; False if it is no longer open
    (then the report is kept as another: nothing is dropped)."""
    return int(conn.execute(COMPLETE_ATTEMPT, {
        "row": row, "outcome": done.outcome.value, "status": done.status,
        "ref": done.receipt.provider_ref if done.receipt else None,
        "hash": done.receipt.request_hash if done.receipt else None,
        "completed": done.completed_at}).rowcount) == 1
