"""History: what deciding after a new fact costs as one operation's history grows (issue 11).

Replay, the sweep and every recording call decide an operation's verdict after each new fact.
This measures the CPU time of recording and deciding, per fact, for one operation of 10, 1,000
and 10,000 facts on the in-memory store (replay's path: `Ledger` on `MemoryStore`, a manual
clock set to each fact's time): the store keeps the summary of the operation's facts folded as
it records (reconciler.summary), so the cost per fact should not grow with the history.

The history is a non_idempotent charge: the intent, a first attempt that timed out, an
authoritative zero, a second attempt, then probe observations (unavailable, weak, lagging and
authoritative zeros in turn), one second apart.

The baseline, measured in the same run, is the whole history decided again after each new fact
(`verdicts.evaluate` on `store.facts(...)`, what the store did before the summary): in full at
10 and 1,000 facts; at 10,000 facts only over the last 100 (the history before them recorded
untimed), as 10,000 whole-history decisions would take minutes. Small histories are repeated
on fresh operations so that every size times at least 10,000 facts; each size is timed in
several rounds, product and baseline in turn, and the best round counts (as `timeit` does).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from bench.harness import BenchError, Context, Outcome
from reconciler.domain import (
    Attempt,
    Authority,
    Effect,
    Evidence,
    Intent,
    Match,
    Observation,
    ProviderContract,
)
from reconciler.domain import (
    Outcome as Sent,
)
from reconciler.ledger import Ledger
from reconciler.store.memory import MemoryStore
from reconciler.testing import ManualClock
from reconciler.verdicts import evaluate

NAME = "history"
TARGET = 2.0
START = datetime(2026, 1, 1, tzinfo=UTC)
CONTRACT = ProviderContract("pay", idempotency_keys=True, visibility_lag_s=30.0,
                            max_attempts=3)
#: Facts timed per size at least (small histories are repeated on fresh operations).
TIMED_FACTS = 10_000
#: The tail of the largest history over which the whole-history baseline is timed.
TAIL = 100

Fact = Intent | Attempt | Evidence


def history(op: str, size: int) -> list[Fact]:
    """One operation's `size` facts in recorded order, one second apart."""

    def at(i: int) -> datetime:
        return START + timedelta(seconds=i)

    # Stamped as the ledger stamps them (its clock is set to each fact's time), so that the
    # baseline, which records into the store directly, keeps the very same facts.
    facts: list[Fact] = [
        Intent(op, "h0", "k0", CONTRACT.name, "charge", Effect.NON_IDEMPOTENT, at(0)),
        Attempt(op, 1, "k0", "h0", at(0), Sent.TIMEOUT, recorded_at=at(0)),
        Observation(op, at(1), "charges", Authority.AUTHORITATIVE, recorded_at=at(1)),
        Attempt(op, 2, "k0", "h0", at(2), Sent.TIMEOUT, recorded_at=at(2)),
    ]
    kinds = [(Authority.UNAVAILABLE, (), "HTTP 503"),
             (Authority.WEAK, (Match("ch_maybe"),), None),
             (Authority.LAGGING, (), None),
             (Authority.AUTHORITATIVE, (), None)]
    for i in range(len(facts), size):
        authority, matches, error = kinds[i % len(kinds)]
        facts.append(Observation(op, at(i), "charges", authority, matches, error,
                                 recorded_at=at(i)))
    return facts[:size]


def _record(ledger: Ledger, fact: Fact) -> None:
    """Record one fact through the one door; each recording call decides the verdict."""
    match fact:
        case Intent():
            ledger.record_intent(fact)
        case Attempt():
            ledger.record_attempt(fact)
        case _:
            ledger.record_evidence(fact)


def _product(histories: list[list[Fact]], timed_from: int = 0) -> float:
    """CPU seconds per fact of recording and deciding each fact through the ledger, timed from
    each history's fact number `timed_from` on (those before it recorded untimed)."""
    prepared = []
    for facts in histories:
        store, clock = MemoryStore(), ManualClock(START)
        store.put_contract(CONTRACT)
        ledger = Ledger(store, clock)
        for fact in facts[:timed_from]:
            clock.set(fact.at)
            _record(ledger, fact)
        prepared.append((ledger, clock, facts))
    started = time.process_time()
    for ledger, clock, facts in prepared:
        for fact in facts[timed_from:]:
            clock.set(fact.at)
            _record(ledger, fact)
    spent = time.process_time() - started
    _agrees(prepared[-1][0], prepared[-1][2])
    return spent / sum(len(f) - timed_from for f in histories)


def _agrees(ledger: Ledger, facts: list[Fact]) -> None:
    """The measured path decided what the whole history gives, or its figure means nothing."""
    op = facts[0].operation_id
    folded = ledger.judge(op).decision
    whole = evaluate(ledger.store.facts(op), CONTRACT, ledger.clock())
    if folded != whole:
        raise BenchError(f"the summary decided {folded}, the whole history {whole}")


def _baseline(histories: list[list[Fact]], timed_from: int = 0) -> float:
    """CPU seconds per fact of recording each fact in the store and deciding on the whole
    history again, timed from each history's fact number `timed_from` on."""
    prepared = []
    for facts in histories:
        store = MemoryStore()
        store.put_contract(CONTRACT)
        for fact in facts[:timed_from]:
            _store(store, fact)
        prepared.append((store, facts[timed_from:]))
    started = time.process_time()
    for store, facts in prepared:
        for fact in facts:
            _store(store, fact)
            evaluate(store.facts(fact.operation_id), CONTRACT, fact.at)
    spent = time.process_time() - started
    return spent / sum(len(f) for _, f in prepared)


def _store(store: MemoryStore, fact: Fact) -> None:
    match fact:
        case Intent():
            store.record_intent(fact)
        case Attempt():
            store.record_attempt(fact)
        case _:
            store.record_evidence(fact)


def _histories(size: int) -> list[list[Fact]]:
    """Enough operations of `size` facts to time TIMED_FACTS facts at least."""
    return [history(f"op-{size}-{n}", size) for n in range(-(-TIMED_FACTS // size))]


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} us"


def run(ctx: Context) -> Outcome:
    sizes = [10, ctx.size(1_000, 1_000), ctx.size(10_000, 10_000)]
    rounds = 1 if ctx.mode == "tiny" else ctx.size(2, 3)
    out = Outcome(NAME, f"recording and deciding one operation's facts, per fact, at "
                        f"{', '.join(f'{n:,}' for n in sizes)} facts (memory store, replay's "
                        "path)")
    if ctx.mode != "full":
        out.notes.append(f"{ctx.mode} mode: sizes {sizes}, best of {rounds} round(s) (the full "
                         "run: 10, 1,000, 10,000, best of 3)")
    largest = sizes[-1]
    tail = min(TAIL, largest)
    product: dict[int, float] = {}
    whole: dict[int, float] = {}
    whole_tail = product_tail = float("inf")
    for _ in range(rounds):
        for size in sizes:
            histories = _histories(size)
            product[size] = min(product.get(size, float("inf")), _product(histories))
            if size < largest:
                whole[size] = min(whole.get(size, float("inf")), _baseline(histories))
        big = [history("op-tail", largest)]
        product_tail = min(product_tail, _product(big, largest - tail))
        whole_tail = min(whole_tail, _baseline(big, largest - tail))
    for size in sizes:
        line = f"{size:>6,} facts: summary {_us(product[size])} per fact"
        if size in whole:
            line += (f"; whole history decided again {_us(whole[size])} per fact "
                     f"({whole[size] / product[size]:,.1f}x)")
        out.figure(line)
    out.figure(f"the last {tail} facts of {largest:,}: summary {_us(product_tail)} per fact; "
               f"whole history decided again {_us(whole_tail)} per fact "
               f"({whole_tail / product_tail:,.1f}x)")
    out.ratio(f"per-fact cost, {largest:,} facts vs 10", product[largest] / product[10], TARGET,
              higher_is_better=False)
    out.notes.append("the summary's figures include the ledger's whole recording call (stamp, "
                     "record, decide, cache, the judgement); the baseline's only the store's "
                     "record and the engine on the whole history")
    return out

