"""History: what deciding after a new fact costs as one operation's history grows (issue 11).

Replay, the sweep and every recording call decide an operation's verdict after each new fact.
This measures the CPU time of recording and deciding, per fact, for one operation of 10, 1,000
and 10,000 facts on the in-memory store (replay's path: `Ledger` on `MemoryStore`, a manual
clock set to each fact's time): the store keeps the summary of the operation's facts folded as
it records (reconciler.core.summary), so the cost per fact should not grow with the history.

The history is a non_idempotent charge: the intent, a first attempt that timed out, an
authoritative zero, a second attempt, then probe observations (unavailable, weak, lagging and
authoritative zeros in turn), one second apart.

The baseline, measured in the same run, is the whole history decided again after each new fact
(`verdicts.evaluate` on `store.facts(...)`, what the store did before the summary): over up
to 2,000 facts at 10 and 1,000 facts; at 10,000 facts only over the last 100 (the history
before them recorded untimed), as 10,000 whole-history decisions would take minutes. Small
histories are repeated
on fresh operations so that every size times at least 10,000 facts; each size is timed in
several rounds, product and baseline in turn, and the best round counts (as `timeit` does).

The attempts case (issue 31) does the same for attempts, where the store used to refold the
whole history on every report: an idempotent_write reported 10, 1,000 and 5,000 times (a
timeout, a 5xx, a lost connection in turn, every other attempt opened as dispatching and
completed after), and a non_idempotent charge retried 10, 100 and 400 times in the gate's
order (each retry opened, timed out, then an authoritative zero after it, so that every retry
is judged against what was known just before it). Their baselines are timed over the last
100 and 20 facts of the largest history.

The attempts case is also timed through `Ledger` on the SQL store (a SQLite file), at 10 and
1,000 attempts: there each decision still reads every row of the operation and folds it (the
part of issue 31, item 9 not done yet: bench/README.md says what is left).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from bench.harness import BenchError, Context, Outcome, step
from reconciler.core.domain import (
    Attempt,
    Authority,
    Effect,
    Evidence,
    Intent,
    Match,
    Observation,
    ProviderContract,
)
from reconciler.core.domain import (
    Outcome as Sent,
)
from reconciler.core.ports import Store
from reconciler.core.verdicts import evaluate
from reconciler.ledger import Ledger
from reconciler.store.memory import MemoryStore
from reconciler.store.schema import open_store
from reconciler.testing import ManualClock

NAME = "history"
TARGET = 2.0
START = datetime(2026, 1, 1, tzinfo=UTC)
CONTRACT = ProviderContract("pay", idempotency_keys=True, visibility_lag_s=30.0,
                            max_attempts=3)
#: A provider that allows as many retries as the retries case makes: each is judged against
#: what was known before it, never refused for the budget.
RETRYING = ProviderContract("retrying", idempotency_keys=True, visibility_lag_s=30.0,
                            max_attempts=1_000)
#: Facts timed per size at least (small histories are repeated on fresh operations).
TIMED_FACTS = 10_000
#: Facts the whole-history baseline times per size at most (each costs the whole history).
BASELINE_FACTS = 2_000
#: Facts the SQL store's attempts case times per size at least.
SQL_FACTS = 1_000
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


def attempts(op: str, size: int) -> list[Fact]:
    """An idempotent_write and `size` reports of its attempts, one second apart; every other
    attempt opened as dispatching first and completed a second later."""
    outcomes = [(Sent.TIMEOUT, None), (Sent.RESPONSE, 503), (Sent.CONNECTION_ERROR, None)]
    facts: list[Fact] = [Intent(op, "h0", "k0", CONTRACT.name, "write",
                                Effect.IDEMPOTENT_WRITE, START)]
    for n in range(1, size + 1):
        outcome, status = outcomes[n % len(outcomes)]
        at = START + timedelta(seconds=2 * n)
        done = Attempt(op, n, "k0", "h0", at, outcome, status, recorded_at=at)
        if n % 2:
            facts.append(replace(done, outcome=Sent.DISPATCHING, status=None))
            done = replace(done, recorded_at=at + timedelta(seconds=1))
        facts.append(done)
    return facts


def retries(op: str, size: int) -> list[Fact]:
    """A non_idempotent charge retried `size` times in order: each attempt opened, timed out,
    then an authoritative zero once it settled (what the gate grants the next one on)."""
    facts: list[Fact] = [Intent(op, "h0", "k0", RETRYING.name, "charge",
                                Effect.NON_IDEMPOTENT, START)]
    for n in range(1, size + 1):
        at = START + timedelta(minutes=3 * n)
        settled = at + timedelta(seconds=RETRYING.inflight_s + 30)
        opened = Attempt(op, n, "k0", "h0", at, Sent.DISPATCHING, recorded_at=at)
        facts += [opened, replace(opened, outcome=Sent.TIMEOUT,
                                  recorded_at=at + timedelta(seconds=1)),
                  Observation(op, settled, "charges", Authority.AUTHORITATIVE,
                              recorded_at=settled)]
    return facts


def _record(ledger: Ledger, fact: Fact) -> None:
    """Record one fact through the one door; each recording call decides the verdict."""
    match fact:
        case Intent():
            ledger.record_intent(fact)
        case Attempt():
            ledger.record_attempt(fact)
        case _:
            ledger.record_evidence(fact)


def _product(histories: list[list[Fact]], timed_from: int = 0,
             shared: Store | None = None) -> float:
    """CPU seconds per fact of recording and deciding each fact through the ledger, timed from
    each history's fact number `timed_from` on (those before it recorded untimed); on the
    `shared` store, or a fresh memory store per history."""
    prepared = []
    for facts in histories:
        store, clock = shared or _store_of_contracts(), ManualClock(START)
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
    facts_now = ledger.store.facts(op)
    whole = evaluate(facts_now, ledger.store.contract(facts_now.intent.provider), ledger.clock())
    if folded != whole:
        raise BenchError(f"the summary decided {folded}, the whole history {whole}")


def _baseline(histories: list[list[Fact]], timed_from: int = 0) -> float:
    """CPU seconds per fact of recording each fact in the store and deciding on the whole
    history again, timed from each history's fact number `timed_from` on."""
    prepared = []
    for facts in histories:
        store = _store_of_contracts()
        for fact in facts[:timed_from]:
            _store(store, fact)
        prepared.append((store, facts[timed_from:]))
    started = time.process_time()
    for store, facts in prepared:
        for fact in facts:
            _store(store, fact)
            recorded = store.facts(fact.operation_id)
            evaluate(recorded, store.contract(recorded.intent.provider), fact.at)
    spent = time.process_time() - started
    return spent / sum(len(f) for _, f in prepared)


def _store_of_contracts(store: Store | None = None) -> Store:
    store = store or MemoryStore()
    store.put_contract(CONTRACT)
    store.put_contract(RETRYING)
    return store


def _sql(ctx: Context, out: Outcome, rounds: int) -> float:
    """The attempts case through `Ledger` on the SQL store (a SQLite file in the scratch
    directory, as the sidecar runs it by default), at 10 and 5,000 attempts (1,000 quick), best
    of `rounds`: each decision reads what was recorded since the last one, the summary kept
    between them (store/folds.py); the per-fact cost at the largest over that at 10."""
    sizes = sorted({10, max(11, ctx.size(1_000, 5_000))})
    spent: dict[int, float] = {}
    for round_ in range(rounds):
        for size in sizes:
            histories = [attempts(f"op-sql-{round_}-{size}-{n}", size)
                         for n in range(-(-SQL_FACTS // len(attempts("op", size))))]
            sql = open_store(f"sqlite:///{ctx.workdir}/history-{round_}-{size}.db")
            _store_of_contracts(sql)
            try:
                spent[size] = min(spent.get(size, float("inf")),
                                  _product(histories, shared=sql))
            finally:
                sql.engine.dispose()
    for size in sizes:
        out.figure(f"{size:>6,} attempts, SQL store (SQLite): {_us(spent[size])} per fact")
    return spent[sizes[-1]] / spent[sizes[0]]


def _store(store: Store, fact: Fact) -> None:
    match fact:
        case Intent():
            store.record_intent(fact)
        case Attempt():
            store.record_attempt(fact)
        case _:
            store.record_evidence(fact)


@dataclass(frozen=True, slots=True)
class Case:
    """One shape of history, at growing sizes (the last one's baseline timed over its tail)."""

    #: What its sizes count: facts, attempts, retries.
    unit: str
    build: Callable[[str, int], list[Fact]]
    sizes: tuple[int, ...]
    tail: int
    #: The largest size in a quick run, when smaller than the full run's.
    quick_largest: int | None = None


EVIDENCE = Case("facts", history, (10, 1_000, 10_000), TAIL)
ATTEMPTS = Case("attempts", attempts, (10, 1_000, 5_000), TAIL)
#: Quick: 200 retries, not 400. The baseline decides the whole history again per fact, and
#: its cost grows with the square of the retries: at 400 this case alone took 97 s of a 417 s
#: quick run (a loaded 2-core machine).
RETRIES = Case("retries", retries, (10, 100, 400), 20, quick_largest=200)


def _histories(case: Case, size: int) -> list[list[Fact]]:
    """Enough operations of `size` (facts, attempts, retries) to time TIMED_FACTS facts at
    least."""
    facts = len(case.build("op-size", size))
    return [case.build(f"op-{case.unit}-{size}-{n}", size)
            for n in range(-(-TIMED_FACTS // facts))]


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} us"


def _measure(out: Outcome, case: Case, sizes: list[int], rounds: int) -> float:
    """Time `case` at `sizes` (product and baseline in turn, best of `rounds`), write its
    figures, and return the per-fact cost at the largest size over that at the smallest."""
    largest = sizes[-1]
    tail = min(case.tail, len(case.build("op-tail", largest)) - 1)
    product: dict[int, float] = {}
    whole: dict[int, float] = {}
    whole_tail = product_tail = float("inf")
    for _ in range(rounds):
        for size in sizes:
            histories = _histories(case, size)
            product[size] = min(product.get(size, float("inf")), _product(histories))
            if size < largest:
                some = histories[:max(1, BASELINE_FACTS // len(histories[0]))]
                whole[size] = min(whole.get(size, float("inf")), _baseline(some))
        big = [case.build("op-tail", largest)]
        product_tail = min(product_tail, _product(big, len(big[0]) - tail))
        whole_tail = min(whole_tail, _baseline(big, len(big[0]) - tail))
    for size in sizes:
        line = f"{size:>6,} {case.unit}: summary {_us(product[size])} per fact"
        if size in whole:
            line += (f"; whole history decided again {_us(whole[size])} per fact "
                     f"({whole[size] / product[size]:,.1f}x)")
        out.figure(line)
    out.figure(f"the last {tail} facts of {largest:,} {case.unit}: summary {_us(product_tail)} "
               f"per fact; whole history decided again {_us(whole_tail)} per fact "
               f"({whole_tail / product_tail:,.1f}x)")
    return product[largest] / product[sizes[0]]


def _sizes(case: Case, ctx: Context) -> list[int]:
    """The sizes `case` runs at: a tiny run (the tests') shrinks every size but the smallest,
    never below it; a quick one takes `quick_largest` for the largest."""
    def sized(n: int) -> int:
        if ctx.mode == "quick" and case.quick_largest and n == case.sizes[-1]:
            return case.quick_largest
        return max(case.sizes[0] + 1, ctx.size(n, n))

    return sorted({case.sizes[0], *(sized(n) for n in case.sizes[1:])})


def run(ctx: Context) -> Outcome:
    rounds = 1 if ctx.mode == "tiny" else ctx.size(2, 3)
    cases = [(case, _sizes(case, ctx)) for case in (EVIDENCE, ATTEMPTS, RETRIES)]
    out = Outcome(NAME, "recording and deciding one operation's facts, per fact, as its "
                        "history grows: " + "; ".join(
                            f"{', '.join(f'{n:,}' for n in sizes)} {case.unit}"
                            for case, sizes in cases) + " (memory store, replay's path); attempts "
                        "on the SQL store")
    if ctx.mode != "full":
        out.notes.append(f"{ctx.mode} mode: best of {rounds} round(s) (the full run: best of "
                         "3), at most 200 retries (the full run: 400)")
    for case, sizes in cases:
        with step(f"{case.unit} at {', '.join(f'{n:,}' for n in sizes)}, best of {rounds}"):
            ratio = _measure(out, case, sizes, rounds)
        out.ratio(f"per-fact cost, {sizes[-1]:,} {case.unit} vs {sizes[0]}", ratio, TARGET,
                  higher_is_better=False)
    with step(f"attempts on the SQL store, best of {rounds}"):
        sql = _sql(ctx, out, rounds)
    out.ratio(f"per-fact cost, {max(11, ctx.size(1_000, 5_000)):,} attempts vs 10, SQL store",
              sql, TARGET, higher_is_better=False)
    out.notes.append("the summary's figures include the ledger's whole recording call (stamp, "
                     "record, decide, cache, the judgement); the baseline's only the store's "
                     "record and the engine on the whole history")
    return out
