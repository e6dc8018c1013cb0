"""PostgreSQL: 1, 2 and 3 `reconciler serve` replicas on one PostgreSQL under a closed-loop
load of intents and of retry grants, spread evenly over the replicas.

Each replica count gets a fresh schema and its replicas (default settings, the sweep off: the
load is the hot routes alone), each started with the store's pool warm (`db_pool_size`
sessions), and the same client load: 24 keep-alive connections in all, split evenly among the
replicas, one load generator process (bench.loadgen) per replica, all running at once. Rounds
alternate the two loads:

- intents: `POST /v1/operations`, a new intent on every request;
- grants: `POST /v1/operations/{id}/retry` on operations that are verified_not_applied (attempt
  1 timed out, then an authoritative read found nothing: bench.operations.retryable), each
  asked always by the same holder, so every answer is a grant (the renewal of that holder's
  lease, a durable write: over_http's retry check). Each replica's clients ask about their own
  64 operations, as workers would about theirs; every replica's /metrics must show no refusal;
- grants on 8 shared operations: the same, but every replica's clients ask about the same 8
  operations (with their holders): a grant locks its operation's state row until its batch
  commits, so each replica's batches wait for the others' (row locks; one replica's writes go
  through its one group committer, one transaction at a time, and never wait for each other).

For every round: the requests granted or recorded per second (503 overloaded answers counted
apart), PostgreSQL's CPU per request (bench.pgserver: all the server's processes, over the
round's whole load generator run, warm-up included, over every answer in it), the replicas' CPU
per request, WAL bytes per request, and what the replicas' active sessions were doing, sampled
every 20 ms (running, in or waiting for a WAL flush, waiting for a row lock: bench.pgserver).
Per replica count: the sessions the replicas held, and, after they stopped, the transactions
committed and the WAL flushes over all its rounds.
"""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field, replace

from sqlalchemy.engine import make_url

from bench.harness import BenchError, Context, Outcome, Percentiles, step
from bench.loadgen import Spec, Tally
from bench.operations import CONTRACT, PROVIDER, REQUEST_HASH, key_of, pg_schema, retryable
from bench.over_http import gate_refusals
from bench.pgserver import GROUPS, PgServer, Waits
from bench.procs import SIDECAR, Command, ServerProcess, loadgen, servers
from reconciler.ledger import Ledger
from reconciler.store.schema import DEFAULT_POOL_SIZE, open_store

REPLICA_COUNTS = (1, 2, 3)
#: Client connections over all the replicas: the same load, spread wider. 24 divides by each
#: replica count; 16 already keep one sidecar's writer busy (bench/over_http.py).
CONNECTIONS = 24
#: Operations each replica's clients ask retry grants for.
RETRY_POOL = 64
#: Operations every replica's clients ask grants for in the shared load: each replica's batch
#: holds some of their state rows locked until it commits, and the others' wait for them.
SHARED_POOL = 8
INTENTS, GRANTS = "intents", "grants"
SHARED = f"grants on {SHARED_POOL} shared operations"
LOADS = (INTENTS, GRANTS, SHARED)


@dataclass(slots=True)
class Load:
    """One kind of request on one replica count, summed over its rounds."""

    requests: int = 0
    refused: int = 0
    elapsed_s: float = 0.0
    answered: int = 0
    pg_cpu_s: float = 0.0
    replica_cpu_s: float = 0.0
    wal_bytes: int = 0
    latencies_s: list[float] = field(default_factory=list)
    waits: Waits = field(default_factory=Waits)

    @property
    def per_s(self) -> float:
        """Requests granted or recorded per second, over all the replicas."""
        return (self.requests - self.refused) / self.elapsed_s

    def per_answer(self, amount: float) -> float:
        return amount / self.answered


@dataclass(frozen=True, slots=True)
class Phase:
    replicas: int
    loads: dict[str, Load]
    #: PostgreSQL sessions the replicas held once serving.
    sessions: int
    other_sessions: int
    #: Over all the rounds (and the replicas' start and stop): transactions committed in the
    #: database, WAL flushes (None where PostgreSQL does not count them).
    commits: int
    wal_syncs: int | None

    @property
    def answered(self) -> int:
        return sum(load.answered for load in self.loads.values())


def measure(ctx: Context, out: Outcome) -> None:
    rounds = ctx.size(1, 2)
    # Never under a second, the smoke test's size included: on a busy machine a replica's first
    # answers can take longer than a shorter window, which then counts none.
    seconds, warmup_s = max(1.0, ctx.seconds(1.5, 2.5)), 0.5
    pg = PgServer(ctx.pg_url)
    try:
        phases = [phase(ctx, pg, n, rounds, seconds, warmup_s) for n in REPLICA_COUNTS]
    finally:
        pg.close()
    report(out, phases, pg.postmaster is not None)
    out.notes.append(
        f"load: closed loop, {CONNECTIONS} connections split evenly over the replicas, "
        f"{rounds} round(s) of {seconds:g} s (+{warmup_s:g} s warm-up) per load and replica "
        "count; PostgreSQL's CPU: the postmaster and all its children, living and exited "
        "(/proc), over each round's load generator runs, warm-up included, per answer; "
        "commits and WAL flushes: pg_stat_database and pg_stat_wal after the replicas' sessions "
        "closed, cluster-wide: other clients of the server are counted too")


def phase(ctx: Context, pg: PgServer, replicas: int, rounds: int, seconds: float,
          warmup_s: float) -> Phase:
    prefix = f"rl{replicas}{uuid.uuid4().hex[:6]}"
    with ExitStack() as stack:
        # Sessions named after the phase: counted while serving, awaited closed at the end.
        url = make_url(stack.enter_context(pg_schema(ctx.pg_url))).update_query_dict(
            {"application_name": prefix}).render_as_string(hide_password=False)
        with step(f"{replicas} replica(s): preparing {replicas * RETRY_POOL} "
                  "verified_not_applied operations"):
            prepare(url, prefix, replicas)
        pg.wait_closed(prefix)
        before = pg.counters()
        env = {"RECONCILER_DB": url, "RECONCILER_SWEEP_INTERVAL_S": "0"}
        loads = {name: Load() for name in LOADS}
        with step(f"{replicas} replica(s): starting"):
            sidecars = stack.enter_context(servers(*[Command(SIDECAR, env=env)] * replicas))
        sessions, others = pg.sessions(prefix), pg.other_sessions(prefix)
        for r in range(rounds):
            for name in LOADS:
                with step(f"{replicas} replica(s), round {r + 1} of {rounds}: {name}"):
                    specs = [spec(name, s, i, prefix, f"{r}", replicas, seconds, warmup_s)
                             for i, s in enumerate(sidecars)]
                    run_round(pg, sidecars, specs, loads[name], prefix)
        refused = sum(gate_refusals(s.url) for s in sidecars)
        if refused:
            raise BenchError(f"the gate refused {refused:g} retry checks: the scenario needs "
                             "grants")
        stack.close()  # the replicas stop, their sessions end and report their statistics
        pg.wait_closed(prefix)
        after = pg.counters()
    return Phase(replicas, loads, sessions, others, after.commits - before.commits,
                 None if after.wal_syncs is None or before.wal_syncs is None
                 else after.wal_syncs - before.wal_syncs)


def prepare(url: str, prefix: str, replicas: int) -> None:
    store = open_store(url)
    try:
        store.put_contract(CONTRACT)
        ledger = Ledger(store)
        for r in range(replicas):
            for i in range(RETRY_POOL):
                retryable(ledger, f"{prefix}-r{r}-{i}")
    finally:
        store.close()


def spec(name: str, sidecar: ServerProcess, index: int, prefix: str, run: str, replicas: int,
         seconds: float, warmup_s: float) -> Spec:
    """Replica `index`'s share of load `name`: its intents are new in every run; its grants
    are for its own operations, each always with the same holder; shared grants are for the
    first replica's first operations, with their holders, from every replica."""
    base = Spec(url=sidecar.url, path="/v1/operations", method="POST",
                connections=CONNECTIONS // replicas, duration_s=seconds, warmup_s=warmup_s)
    if name == INTENTS:
        return replace(base, ok_statuses=(201,), body=json.dumps({
            "operation_id": f"{prefix}-{run}-{index}-{{n}}", "request_hash": REQUEST_HASH,
            "idempotency_key": f"k-{prefix}-{run}-{index}-{{n}}", "provider": PROVIDER,
            "action": "charge", "effect": "idempotent_write"}))
    owner, pool = (index, RETRY_POOL) if name == GRANTS else (0, SHARED_POOL)
    operation = f"{prefix}-r{owner}-{{m}}"
    return replace(base, path=f"/v1/operations/{operation}/retry", modulo=pool,
                   ok_statuses=(200,), body=json.dumps({
                       "idempotency_key": key_of(operation), "request_hash": REQUEST_HASH,
                       "holder": f"bench-{owner}-{{m}}"}))


def run_round(pg: PgServer, sidecars: list[ServerProcess], specs: list[Spec], load: Load,
              application_name: str) -> None:
    """Every replica's load generator at once; what they and PostgreSQL did meanwhile."""
    cpu, wal = pg.cpu_s(), pg.wal_bytes()
    replica_cpu = sum(s.cpu_s() for s in sidecars)
    with ThreadPoolExecutor(len(specs)) as pool, pg.sampling(application_name) as waits:
        # 503 overloaded answers are a result (counted apart), not a failed run.
        tallies: list[Tally] = list(pool.map(lambda s: loadgen(s, refusals=True), specs))
    after = pg.cpu_s()
    load.waits.add(waits)
    if cpu is not None and after is not None:
        load.pg_cpu_s += after - cpu
    load.wal_bytes += pg.wal_bytes() - wal
    load.replica_cpu_s += sum(s.cpu_s() for s in sidecars) - replica_cpu
    if not all(s.alive() for s in sidecars):
        raise BenchError(f"a replica died: {[s.output() for s in sidecars]}")
    # The generators ran side by side for the same time: the slowest one's is the round's.
    load.elapsed_s += max(t.elapsed_s for t in tallies)
    for tally in tallies:
        load.requests += tally.requests
        load.refused += tally.bad_statuses.get("503", 0)
        load.answered += tally.answered
        load.latencies_s += tally.latencies_s


def latencies(load: Load) -> str:
    if not load.latencies_s:  # every answer a 503 (the replicas' admission refused them all)
        return "no request admitted"
    return Percentiles.of(load.latencies_s).render()


def report(out: Outcome, phases: list[Phase], local: bool) -> None:
    for p in phases:
        label = f"{p.replicas} replica(s)"
        for name, load in p.loads.items():
            pg_cpu = ("not measured (PostgreSQL is not a process on this machine)"
                      if not local
                      else f"{load.per_answer(load.pg_cpu_s) * 1e6:,.0f} us")
            refused = f", {load.refused:,} refused 503" if load.refused else ""
            out.figure(f"{label}, {name}: {load.per_s:,.0f}/s{refused}; PostgreSQL CPU per "
                       f"request {pg_cpu}, replicas' CPU per request "
                       f"{load.per_answer(load.replica_cpu_s) * 1e6:,.0f} us, WAL "
                       f"{load.per_answer(load.wal_bytes):,.0f} bytes per request; "
                       f"{latencies(load)}; the replicas' "
                       "active PostgreSQL sessions at a moment, on average: " + ", ".join(
                           f"{group} {load.waits.mean(group):.2f}" for group in GROUPS))
        syncs = ("not counted by this PostgreSQL" if p.wal_syncs is None else
                 f"{p.wal_syncs:,} WAL flushes ({p.commits / max(p.wal_syncs, 1):.1f} commits "
                 "per flush)")
        out.figure(f"{label}: {p.sessions} PostgreSQL sessions held ({DEFAULT_POOL_SIZE} per "
                   f"replica's warm pool; {p.other_sessions} other client sessions on the "
                   f"server); {p.commits:,} transactions committed for {p.answered:,} requests "
                   f"({p.answered / max(p.commits, 1):.2f} requests per commit), {syncs}")
    one = {name: phases[0].loads[name].per_s for name in LOADS}
    for p in phases[1:]:
        out.figure(f"{p.replicas} replicas vs 1: " + ", ".join(
            f"{name} {p.loads[name].per_s / one[name]:.2f}x" for name in LOADS))
