"""Concluding probe rounds: everything a round writes, in one transaction for many rounds.

    probes answered ─▶ append their evidence ─▶ decide on all the facts ─▶ cache the decision
                   ─▶ count the round, schedule the next one (or escalate), release the lease

One transaction, so that the cached verdict, the schedule and the lease always agree with the
evidence they were drawn from; for many rounds at once, so that a sweep pays one commit (one WAL
fsync on SQLite) and a handful of statements per batch of rounds instead of per round.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy
from sqlalchemy import Row, Table, bindparam, update
from sqlmodel import Session

from reconciler.core.domain import Facts, Snapshot
from reconciler.core.ports import Conclusion, Round, RoundRule, Scheduled
from reconciler.core.summary import summarize
from reconciler.store import rows
from reconciler.store.decisions import recorded
from reconciler.store.driver import DriverStatements
from reconciler.store.sql import INSERT_EVIDENCE, SqlStore
from reconciler.store.tables import StateRow

_STATE: Table = StateRow.__table__  # type: ignore[attr-defined]
# Statements built once (their compiled forms are cached), for the operations "ids".
_LOCK_STATES = (sqlalchemy.select(_STATE)
                .where(_STATE.c.operation_id.in_(bindparam("ids", expanding=True)))
                .order_by(_STATE.c.operation_id).with_for_update())
#: A concluded round's state row, for many rows at once (one executemany).
_UPDATE_STATE = update(_STATE).where(_STATE.c.operation_id == bindparam("b_id")).values(
    {column: bindparam(f"b_{column}") for column in (
        "verdict", "next_action", "updated_at", "probe_count", "due_at", "escalated",
        "lease_holder", "lease_expires_at", "evidence_rows")})


def close_rounds(s: Session, store: SqlStore, holder: str, rounds: Sequence[Round],
                 rule: RoundRule, now: datetime) -> list[Conclusion]:
    """In the transaction `s`, for each round: append its evidence, apply `rule` to the
    operation's facts, cache the decision, and, while `holder` still holds the probe lease,
    count the round, schedule the next one and release the lease. A holder whose lease lapsed
    and was taken over still records what its probes saw; the schedule is the new holder's."""
    if not rounds:
        return []
    ids = [r.intent.operation_id for r in rounds]
    # Every statement is a prebuilt Core one on the driver's cursor of the session's
    # connection (store/driver.py): through the ORM session's execute each cost more than its
    # SQL, and through `Connection.execute` still about twice the SQL's cost.
    conn = s.connection()
    driver = DriverStatements.of(conn.dialect)
    # Locked first, in one order: a concurrent decision on these operations waits for this one,
    # and two sweepers whose leases overlapped cannot deadlock. What is read here is what every
    # row holds until the commit, so writing a column back unchanged is safe.
    states = {row.operation_id: row for row in driver.select(conn, _LOCK_STATES, {"ids": ids})}
    driver.execute_many(conn, INSERT_EVIDENCE,
                        [rows.evidence_values(e) for r in rounds for e in r.evidence])
    attempts, evidence = recorded(conn, ids)
    concluded, updates = [], []
    for r in rounds:
        op = r.intent.operation_id
        # Intents never change once recorded: the claimed one is the stored one.
        facts = Facts(r.intent, tuple(attempts[op]), tuple(evidence[op]))
        state = states[op]  # born with the intent (record_intent); the lease was on it
        scheduled = rule(summarize(facts), store.contract_in(conn, r.intent.provider),
                         state.probe_count + 1)
        updates.append(_concluded_state(state, scheduled, now, len(r.evidence),
                                        leased=state.lease_holder == holder))
        concluded.append(Conclusion(Snapshot.of(facts), scheduled.decision, state.escalated,
                                    scheduled.escalate,
                                    changed=state.verdict != scheduled.decision.verdict.value))
    driver.execute_many(conn, _UPDATE_STATE, updates)
    return concluded


def _concluded_state(state: Row[Any], scheduled: Scheduled, now: datetime, appended: int, *,
                     leased: bool) -> dict[str, Any]:
    """The parameters of `_UPDATE_STATE` for one operation after its round. The verdict's
    `updated_at` says when it last changed; the schedule and the lease are the holder's only."""
    verdict, action = scheduled.decision.verdict.value, scheduled.decision.next_action
    changed = (state.verdict, state.next_action) != (verdict, action)
    values = {"b_id": state.operation_id, "b_verdict": verdict, "b_next_action": action,
              "b_updated_at": now if changed else state.updated_at,
              # Counted on the row locked before the evidence was appended (store/folds.py).
              "b_evidence_rows": state.evidence_rows + appended}
    escalated = state.escalated or scheduled.escalate
    if leased:
        return {**values, "b_probe_count": state.probe_count + scheduled.spent,
                "b_due_at": None if escalated else scheduled.due_at,
                "b_escalated": escalated, "b_lease_holder": None,
                "b_lease_expires_at": None}
    return {**values, "b_probe_count": state.probe_count,
            "b_due_at": state.due_at, "b_escalated": state.escalated,
            "b_lease_holder": state.lease_holder, "b_lease_expires_at": state.lease_expires_at}

