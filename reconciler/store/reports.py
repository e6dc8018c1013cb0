"""Another report of an attempt already recorded, told apart from what is kept of it: the one
rule the memory twin and the SQL store share (SPEC section 4: an attempt's outcome may be
reported more than once, a late answer after a timeout or two reports racing, and every report
is kept).

    reports kept of number n ──┬─ one with the same facts ──▶ an identical repeat: not new
                               ├─ an open one it completes ─▶ the completion fills that record
                               └─ otherwise ────────────────▶ kept as another report

Nothing is refused: a 2xx after a timeout, a 4xx after a timeout, a report with another key or
hash are all facts the rules must see (a 2xx in any report is a success claim).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from reconciler.core.domain import Attempt, completes


def as_reported(kept: Sequence[Attempt], report: Attempt) -> Attempt:
    """`report` as it is compared and kept, given the reports `kept` of its number. One that
    names no dispatch time of its own (the ledger stamps it with the time it recorded it,
    `at == recorded_at`: Ledger.record_attempt with `stamped`) takes the dispatch time of the
    attempt's first report: the attempt was dispatched once, and the moment a late answer
    arrives is not when it was sent (as a completion keeps its opening's time)."""
    if kept and report.recorded_at is not None and report.at == report.recorded_at:
        return replace(report, at=kept[0].at)
    return report


def repeats(kept: Sequence[Attempt], report: Attempt) -> bool:
    """True when `report` is an identical repeat of a report kept (times of recording aside)."""
    return any(k.same_facts(report) for k in kept)


def opened(kept: Sequence[Attempt], report: Attempt) -> int | None:
    """The index in `kept` of the open (dispatching) report that `report` completes, if any."""
    return next((i for i, k in enumerate(kept) if completes(k, report)), None)


def completion(open_: Attempt, report: Attempt) -> Attempt:
    """The open report `open_` completed by `report`: its outcome, the opening's dispatch time
    and grant, and the completion's time of recording as `completed_at`."""
    return replace(open_, outcome=report.outcome, status=report.status, receipt=report.receipt,
                   completed_at=report.recorded_at)
