"""Claims: the sweep's claim query on a large store against a small one, SQLite and PostgreSQL.

Each store holds `settled` operations (verified_applied, nothing due: what most stored
operations are), NEVER intents recorded and never dispatched (indeterminate, nothing due: an
intent whose worker died before sending), and `due` operations to probe (bench.operations.Seeder,
bulk SQL). The large store holds 1,000,000 settled, the small one 10,000 (quick: 100,000 and
1,000; the never-dispatched 100,000 in full runs, 10,000 in quick ones, in both stores).

Timed, in alternating rounds between the two stores of one kind:

- the claim: `SqlLeases.close_rounds` with no rounds and `claim=BATCH`, the transaction a sweep's
  turn ends with (it leases the BATCH longest-due operations); the leases are released off the
  clock (by id, as concluded rounds release them), so every claim finds the same due rows;
- the idle poll: the same claim at a time before anything is due (it finds nothing).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta

from sqlalchemy import Table, update

from bench.harness import Context, Outcome, Percentiles, step
from bench.operations import Seeder, ids
from bench.replicas import reachable
from bench.seeds import bulk_postgres, bulk_sqlite
from reconciler.core.domain import ProviderContract
from reconciler.core.ports import Scheduled
from reconciler.core.summary import Summary
from reconciler.store.leases import SqlLeases
from reconciler.store.schema import open_store
from reconciler.store.sql import SqlStore
from reconciler.store.tables import StateRow

_STATE: Table = StateRow.__table__  # type: ignore[attr-defined]

NAME = "claims"
#: "The sweep's claim at 1M stored operations within 1.5x of at 10k" (issue 16).
TARGET = 1.5
BATCH = 64
ROUNDS = 5
HOLDER = "bench-claims"


def _no_rounds(summary: Summary, contract: ProviderContract, number: int) -> Scheduled:
    raise AssertionError("a claim with no rounds decides nothing")


def run(ctx: Context) -> Outcome:
    small, large = ctx.size(1_000, 10_000), ctx.size(100_000, 1_000_000)
    never = ctx.size(10_000, 100_000)
    calls, due = ctx.size(40, 100), ctx.size(2_000, 2_000)
    out = Outcome(NAME, f"the sweep's claim with {large:,} vs {small:,} stored operations "
                        f"(and {never:,} never dispatched), SQLite and PostgreSQL")
    if ctx.quick:
        out.notes.append(f"{ctx.mode} mode: {large:,} vs {small:,} settled, {never:,} never "
                         "dispatched (the full run: 1,000,000 vs 10,000, and 100,000)")
    reachable(ctx.pg_url)
    # One prefix in every run: the stores' bulk is kept between runs (bench.seeds).
    prefix = "cl"
    for kind in ("SQLite", "PostgreSQL"):
        with ExitStack() as stack:
            stores = {}
            for label, settled in (("small", small), ("large", large)):
                with step(f"{kind}: seeding {settled:,} settled, {never:,} never dispatched, "
                          f"{due:,} due"):
                    if kind == "SQLite":
                        url = bulk_sqlite(ctx.seed_cache, ctx.workdir / f"claims-{label}.db",
                                          prefix, settled, never)
                    else:
                        url = stack.enter_context(bulk_postgres(
                            ctx.seed_cache is not None, ctx.pg_url, prefix, settled, never))
                    stores[label] = stack.enter_context(seeded(url, prefix, due))
            measure(out, kind, stores, calls, (small, large))
    out.notes.append(f"a claim leases {BATCH} of {due:,} due operations; {ROUNDS} alternating "
                     f"rounds of {calls} claims per store")
    return out


@contextmanager
def seeded(url: str, prefix: str, due: int) -> Iterator[SqlStore]:
    """The store at `url` (its bulk seeded: bench.seeds), with `due` operations due now."""
    store = open_store(url)
    try:
        seeder = Seeder(store.engine)
        seeder.due(ids(f"{prefix}-d", due))
        seeder.analyze()
        yield store
    finally:
        store.engine.dispose()


def measure(out: Outcome, kind: str, stores: dict[str, SqlStore], calls: int,
            sizes: tuple[int, int]) -> None:
    now = Seeder(stores["small"].engine).at + timedelta(minutes=5)
    idle = now - timedelta(days=1)
    timings: dict[tuple[str, str], list[float]] = {}
    for _ in range(ROUNDS):
        for label, store in stores.items():
            for poll, at in (("claim", now), ("idle poll", idle)):
                timings.setdefault((label, poll), []).extend(
                    claims(store, at, calls, expect=BATCH if poll == "claim" else 0))
    for poll in ("claim", "idle poll"):
        small, large = (Percentiles.of(timings[(label, poll)]) for label in ("small", "large"))
        for size, p in ((sizes[0], small), (sizes[1], large)):
            out.figure(f"{kind} {poll}, {size:,} settled: {p.render()}")
            out.latencies[f"{kind} {poll}, {size:,} stored"] = p
        out.ratio(f"{kind} {poll} p50 at {sizes[1]:,} vs {sizes[0]:,} stored", large.p50 /
                  small.p50, TARGET, higher_is_better=False)


def claims(store: SqlStore, at: datetime, calls: int, *, expect: int) -> list[float]:
    leases = SqlLeases(store)
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        _, claimed = leases.close_rounds(HOLDER, [], _no_rounds, at, claim=BATCH, lease_s=60)
        samples.append(time.perf_counter() - started)
        if len(claimed) != expect:
            raise AssertionError(f"claimed {len(claimed)} operations, expected {expect}")
        if claimed:
            release(store, [i.operation_id for i in claimed])
    return samples


def release(store: SqlStore, operation_ids: list[str]) -> None:
    """Give the leases back by id, as a sweep's concluded rounds do (`release_all` would scan
    the table for the holder: a shutdown's cost, and it would disturb what is timed)."""
    with store.engine.begin() as conn:
        conn.execute(update(_STATE).where(_STATE.c.operation_id.in_(operation_ids))
                     .values(lease_holder=None, lease_expires_at=None))


