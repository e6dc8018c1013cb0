"""An operation's summary kept between decisions on the SQL store, so that a decision reads
only the facts recorded since the last one (issue 31, item 9): deciding after the 1,000th
attempt costs what it cost after the 10th.

The state row counts the facts recorded about its operation (migration 0013): every write of
an attempt report, a completion or a piece of evidence bumps its count, first, in its own
transaction. A decision reads the counts with the intent (decisions.HEAD) and compares them
with those of the summary it kept:

    kept: counts (a, c, e), last attempt id A, last evidence id E, the open reports' ids
    now:  counts (a', c', e')
      ├─ equal ─────────────────────────────▶ the kept summary, nothing read
      ├─ grown ─▶ attempts with id > A (a' - a of them?), evidence with id > E (e' - e?),
      │           the kept open reports again (c' - c of them completed?) ─▶ folded in
      └─ anything else (fewer, not as many as counted, another intent, a retry out of order)
                ─────────────────────────────▶ the whole history read and folded again

Nothing is trusted that the counts do not vouch for: a row that commits with a lower id after
a higher one was read (PostgreSQL hands out ids before commit) is one the read from A misses,
so the count is short and everything is read. Counting first takes the state row's lock, so
on one operation such a race cannot happen and the fallback stays rare.

What a write transaction folds is kept only once it has committed (`GroupCommitter` runs
`after_commit`): a summary of a transaction rolled back would vouch for facts that are not
there, and on SQLite a rolled-back row's id is handed out again. A summary is taken out of the
cache while a decision folds into it (two threads never share one) and put back when done.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table, bindparam, select, update

from reconciler.core.domain import Attempt, Facts, Intent, Outcome, Snapshot
from reconciler.core.summary import Summary, summarize
from reconciler.store import rows
from reconciler.store.driver import DriverStatements
from reconciler.store.tables import AttemptRow, EvidenceRow, StateRow

_STATE: Table = StateRow.__table__  # type: ignore[attr-defined]
_ATTEMPT: Table = AttemptRow.__table__  # type: ignore[attr-defined]
_EVIDENCE: Table = EvidenceRow.__table__  # type: ignore[attr-defined]


def _count(column: str) -> Any:
    return (update(_STATE).where(_STATE.c.operation_id == bindparam("op"))
            .values({column: _STATE.c[column] + bindparam("n")}))


#: Every write of a fact runs one of these first, `{"op": operation_id, "n": how many}`.
COUNT_ATTEMPTS = _count("attempt_rows")
COUNT_COMPLETIONS = _count("completions")
COUNT_EVIDENCE = _count("evidence_rows")

ATTEMPTS = (select(_ATTEMPT).where(_ATTEMPT.c.operation_id == bindparam("op"))
            .order_by(_ATTEMPT.c.id))
EVIDENCE = (select(_EVIDENCE).where(_EVIDENCE.c.operation_id == bindparam("op"))
            .order_by(_EVIDENCE.c.id))
ATTEMPTS_AFTER = ATTEMPTS.where(_ATTEMPT.c.id > bindparam("after"))
EVIDENCE_AFTER = EVIDENCE.where(_EVIDENCE.c.id > bindparam("after"))
ATTEMPTS_BY_ID = select(_ATTEMPT).where(_ATTEMPT.c.id.in_(bindparam("ids", expanding=True)))

#: Operations whose summary is kept, at the most (least recently decided go first).
KEPT = 4096


def counted(count: Any, operation_id: str, n: int = 1) -> tuple[Any, dict[str, Any]]:
    """The step that counts `n` more facts for `operation_id` (`count`: COUNT_ATTEMPTS,
    COUNT_COMPLETIONS or COUNT_EVIDENCE)."""
    return count, {"op": operation_id, "n": n}


@dataclass(slots=True)
class Fold:
    """The summary of an operation's facts as far as counted, and where its reads stopped."""

    intent: Intent
    counts: tuple[int, int, int]
    last_attempt: int
    last_evidence: int
    #: The reports folded while still open (`dispatching`), by row id: a completion fills one
    #: in place, and only these can be filled.
    open_reports: dict[int, Attempt]
    summary: Summary
    #: The attempt reports and evidence folded, in recorded order (the snapshot's facts).
    attempts: list[Attempt]
    evidence: list[Any]
    #: Where each open report stands in `attempts`.
    open_at: dict[int, int]

    def facts(self) -> Facts:
        return Facts(self.intent, tuple(self.attempts), tuple(self.evidence))


def counts_of(row: Any) -> tuple[int, int, int]:
    """The fact counts of a state row read with decisions.HEAD."""
    return int(row.attempt_rows), int(row.completions), int(row.evidence_rows)


class Folds:
    """The summaries kept for one store (see the module doc)."""

    def __init__(self, kept: int = KEPT) -> None:
        self._kept = kept
        self._folds: OrderedDict[str, Fold] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, operation_id: str) -> Fold | None:
        with self._lock:
            return self._folds.pop(operation_id, None)

    def keep(self, fold: Fold) -> None:
        with self._lock:
            self._folds[fold.intent.operation_id] = fold
            while len(self._folds) > self._kept:
                self._folds.popitem(last=False)

    def forget(self, operation_ids: Iterator[str] | list[str]) -> None:
        with self._lock:
            for operation_id in operation_ids:
                self._folds.pop(operation_id, None)

    def keep_when_committed(self, conn: Connection, fold: Fold) -> None:
        """Keep `fold` once the transaction of `conn` has committed; at once when `conn` is a
        read transaction (what it read was committed)."""
        pending: list[Callable[[], None]] | None = conn.info.get("after_commit")
        if pending is None:
            self.keep(fold)
        else:
            pending.append(lambda: self.keep(fold))


def summary_of(conn: Connection, folds: Folds, row: Any) -> tuple[Summary, Snapshot]:
    """The summary of the facts of the operation of the intent row `row` (read with
    decisions.HEAD) and their snapshot: caught up from the one kept when the counts allow it,
    else folded from the whole history; kept for the next decision when it adds up."""
    intent, counts = rows.intent_of(row), counts_of(row)
    kept = folds.take(intent.operation_id)
    if kept is not None and kept.intent == intent and _catch_up(conn, kept, counts):
        current = kept
    else:
        current = _read_all(conn, intent, counts)
    if current.counts == counts:
        folds.keep_when_committed(conn, current)
    return current.summary, snapshot(current)


def facts_of(conn: Connection, intent: Intent) -> Facts:
    """Everything recorded about the operation of `intent`, in recorded order."""
    driver, params = DriverStatements.of(conn.dialect), {"op": intent.operation_id}
    return Facts(intent, tuple(rows.attempt_of(a) for a in driver.select(conn, ATTEMPTS, params)),
                 tuple(rows.evidence_of(e) for e in driver.select(conn, EVIDENCE, params)))


def _read_all(conn: Connection, intent: Intent, counts: tuple[int, int, int]) -> Fold:
    """Every fact of the operation folded. Its counts are the rows read, which differ from
    `counts` when a read transaction saw a commit land between its statements: then the fold
    vouches for nothing and is not kept."""
    driver, params = DriverStatements.of(conn.dialect), {"op": intent.operation_id}
    attempt_rows = driver.select(conn, ATTEMPTS, params)
    evidence_rows = driver.select(conn, EVIDENCE, params)
    attempts = [rows.attempt_of(a) for a in attempt_rows]
    evidence = [rows.evidence_of(e) for e in evidence_rows]
    open_at = {r.id: i for i, r in enumerate(attempt_rows)
               if r.outcome == Outcome.DISPATCHING.value}
    read = (len(attempt_rows), counts[1], len(evidence_rows))
    return Fold(intent, read, attempt_rows[-1].id if attempt_rows else 0,
                evidence_rows[-1].id if evidence_rows else 0,
                {r: attempts[i] for r, i in open_at.items()},
                summarize(Facts(intent, tuple(attempts), tuple(evidence))),
                attempts, evidence, open_at)


def _catch_up(conn: Connection, kept: Fold, counts: tuple[int, int, int]) -> bool:
    """Fold into `kept` what the counts say was recorded since; False (kept is then spoiled:
    drop it) when what is read does not add up to the counts, or a retry out of order needs
    the whole history folded again."""
    new_attempts, new_completions, new_evidence = (now - then for now, then
                                                   in zip(counts, kept.counts, strict=True))
    if min(new_attempts, new_completions, new_evidence) < 0:
        return False
    if (new_attempts, new_completions, new_evidence) == (0, 0, 0):
        return True
    driver = DriverStatements.of(conn.dialect)
    op = kept.intent.operation_id
    completed = []
    if new_completions:
        again = driver.select(conn, ATTEMPTS_BY_ID, {"ids": list(kept.open_reports)})
        completed = [r for r in again if r.outcome != Outcome.DISPATCHING.value]
        if len(completed) != new_completions:
            return False
    attempt_rows = (driver.select(conn, ATTEMPTS_AFTER, {"op": op, "after": kept.last_attempt})
                    if new_attempts else [])
    evidence_rows = (driver.select(conn, EVIDENCE_AFTER, {"op": op, "after": kept.last_evidence})
                     if new_evidence else [])
    if (len(attempt_rows), len(evidence_rows)) != (new_attempts, new_evidence):
        return False
    summary = kept.summary
    for r in sorted(completed, key=lambda r: int(r.id)):
        done = rows.attempt_of(r)
        summary.complete(kept.open_reports.pop(r.id), done)
        kept.attempts[kept.open_at.pop(r.id)] = done
    for r in attempt_rows:
        attempt = rows.attempt_of(r)
        if not summary.add_attempt(attempt):
            return False
        if r.outcome == Outcome.DISPATCHING.value:
            kept.open_reports[r.id] = attempt
            kept.open_at[r.id] = len(kept.attempts)
        kept.attempts.append(attempt)
        kept.last_attempt = r.id
    for r in evidence_rows:
        evidence = rows.evidence_of(r)
        summary.add_evidence(evidence)
        kept.evidence.append(evidence)
        kept.last_evidence = r.id
    kept.counts = counts
    return True


def snapshot(fold: Fold) -> Snapshot:
    """The facts a decision drawn from `fold` saw, copied only when read."""
    attempts, evidence, intent = fold.attempts, fold.evidence, fold.intent
    n_attempts, n_evidence = len(attempts), len(evidence)
    open_now = dict(fold.open_at)
    opened = {i: fold.open_reports[r] for r, i in open_now.items()}

    def read() -> Facts:
        # A completion after this decision fills a report in place: undo it.
        kept = [opened.get(i, a) for i, a in enumerate(attempts[:n_attempts])]
        return Facts(intent, tuple(kept), tuple(evidence[:n_evidence]))

    return Snapshot(read)
