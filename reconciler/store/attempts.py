"""Recording an attempt: its insert and the due time a dispatch sets, in the caller's write
(the group committer's transaction), and, when the insert is refused, telling a repeat, the
completion of an open attempt and a conflict apart from what is recorded.

    INSERT attempt ─▶ UPDATE state.due_at (a dispatch makes an undecided operation due)
        └─ refused (unique number, or no intent) ─▶ settle: repeat? completion? conflict?

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

from reconciler.domain import Attempt, Outcome, Verdict, completes
from reconciler.errors import AttemptConflictError
from reconciler.store import decisions, rows
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
ATTEMPT_NUMBERED = sqlalchemy.select(_ATTEMPT).where(_ATTEMPT.c.operation_id == bindparam("op"),
                                                     _ATTEMPT.c.number == bindparam("number"))
#: The completion of an attempt recorded as dispatching, only while it still is.
COMPLETE_ATTEMPT = (update(_ATTEMPT)
                    .where(_ATTEMPT.c.id == bindparam("row"),
                           _ATTEMPT.c.outcome == Outcome.DISPATCHING.value)
                    .values(outcome=bindparam("outcome"), status=bindparam("status"),
                            receipt_ref=bindparam("ref"), receipt_hash=bindparam("hash"),
                            completed_at=bindparam("completed")))


def due_of(attempt: Attempt, due_at: datetime | None) -> dict[str, Any]:
    """The parameters of DUE_ON_DISPATCH for `attempt` (due at `due_at`, else at once)."""
    return {"op": attempt.operation_id, "at": due_at or attempt.at}


def inserting(attempt: Attempt) -> Step:
    """The step that records `attempt`."""
    return INSERT_ATTEMPT, rows.attempt_values(attempt)


def recording(attempt: Attempt, due: dict[str, Any]) -> list[Step]:
    """The steps that record `attempt` and make its operation due."""
    return [inserting(attempt), (DUE_ON_DISPATCH, due)]


def make_due(conn: Connection, due: dict[str, Any]) -> None:
    """In the transaction of `conn`: a dispatch makes an undecided operation due."""
    DriverStatements.of(conn.dialect).execute(conn, DUE_ON_DISPATCH, due)


def settle(conn: Connection, attempt: Attempt, due: dict[str, Any],
           refused: IntegrityError) -> bool:
    """After the insert of `attempt` was refused, in the transaction of `conn`: False for an
    identical repeat, True for the completion of an open attempt (recorded here),
    AttemptConflictError otherwise (UnknownOperationError without an intent; `refused` again
    when the attempt is not there either)."""
    decisions.head(conn, attempt.operation_id)
    existing = conn.execute(ATTEMPT_NUMBERED, {"op": attempt.operation_id,
                                               "number": attempt.number}).first()
    if existing is None:
        raise refused
    recorded = rows.attempt_of(existing)
    if recorded.same_facts(attempt):
        return False
    if completes(recorded, attempt):
        # Only while still open: of two different completions racing, one wins and
        # the other finds the attempt closed (a conflict, below).
        done = conn.execute(COMPLETE_ATTEMPT, {
            "row": existing.id, "outcome": attempt.outcome.value, "status": attempt.status,
            "ref": attempt.receipt.provider_ref if attempt.receipt else None,
            "hash": attempt.receipt.request_hash if attempt.receipt else None,
            "completed": attempt.recorded_at})
        if int(done.rowcount) == 1:
            conn.execute(DUE_ON_DISPATCH, due)
            return True
    raise AttemptConflictError(
        f"attempt {attempt.number} of {attempt.operation_id!r} is already recorded with "
        "other facts; record the next attempt with the next number",
        operation_id=attempt.operation_id)
