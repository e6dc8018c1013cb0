"""PostgreSQL: one `reconciler serve` replica against two, sweeping N due operations; then 1, 2
and 3 replicas under a client load of intents and retry grants (bench.replica_load).

Each side gets a fresh schema, its own sandbox process (reads at 20 ms) and its replicas
(default settings but `sweep_interval_s = 0.2`), started before any operation exists. Then the
N due operations are inserted in one transaction and the clock runs until none is
indeterminate. Half went through (a receipt), half did not (an authoritative zero), so every
operation is decided by its first probe: a second read of any operation is a double probe. The
sandbox counts reads per operation, and the store's evidence is counted per operation too.
"""

from __future__ import annotations

import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
from sqlalchemy import create_engine, func, select

from bench import replica_load
from bench.harness import BenchError, Context, Outcome, Percentiles, step
from bench.machine import BusyMeter
from bench.operations import (
    CONTRACT,
    Seeder,
    decided_after,
    ids,
    pg_schema,
    table_of,
    toml_config,
    verdict_counts,
)
from bench.procs import SIDECAR, Command, server, servers
from bench.sandbox import READS_PATH
from reconciler.ledger import utcnow
from reconciler.store.schema import open_store
from reconciler.store.tables import EvidenceRow

NAME = "replicas"
TARGET = 1.7
LATENCY_MS = 20
POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class Sweep:
    seconds: float
    reads: int
    double_reads: int
    overlapping_reads: int
    double_evidence: int
    #: From the insert of the due operations to each one's verdict.
    to_verdict: Percentiles
    #: CPU seconds the replicas used while sweeping, and how busy the machine's cores were.
    replica_cpu_s: float
    busy: float


def run(ctx: Context) -> Outcome:
    count = ctx.size(500, 10_000)
    out = Outcome(NAME, f"PostgreSQL: two replicas vs one sweeping {count:,} due operations; "
                        "1, 2 and 3 replicas under intents and retry grants")
    if ctx.quick:
        out.notes.append(f"{ctx.mode} mode: {count:,} operations (the full run sweeps 10,000)")
    reachable(ctx.pg_url)
    one = sweep(ctx, count, 1)
    two = sweep(ctx, count, 2)
    for name, result in (("1 replica", one), ("2 replicas", two)):
        out.latencies[f"{name}: due to verdict"] = result.to_verdict
        out.figure(f"{name}: {result.seconds:.2f} s "
                   f"({count / result.seconds:,.0f} operations/s); {result.reads:,} provider "
                   f"reads, {result.double_reads} operations read twice "
                   f"({result.overlapping_reads} at the same time), {result.double_evidence} "
                   f"with two probe results; replicas used {result.replica_cpu_s:.1f} CPU-s "
                   f"({result.replica_cpu_s / count * 1000:.1f} ms per operation), all cores "
                   f"{result.busy:.0%} busy")
        out.figure(f"{name}, from the insert to each verdict: {result.to_verdict.render()}")
    out.ratio("two replicas vs one, sweep throughput", one.seconds / two.seconds, TARGET,
              higher_is_better=True)
    out.ratio("double probes (operations read twice or with two probe results)",
              sum(r.double_reads + r.double_evidence for r in (one, two)), 0,
              higher_is_better=False, unit="")
    replica_load.measure(ctx, out)
    out.notes.append("replicas, PostgreSQL, the sandbox, the load generators and this process "
                     "share the machine's cores: CPU-bound work cannot scale past them")
    return out


def reachable(url: str) -> None:
    engine = create_engine(url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as exc:  # whatever the cause, the benchmark cannot run: say where
        raise BenchError(f"PostgreSQL not reachable at {url} ({type(exc).__name__}); start it "
                         "or pass --pg URL") from exc
    finally:
        engine.dispose()


def sweep(ctx: Context, count: int, replicas: int) -> Sweep:
    prefix = f"rp{replicas}{uuid.uuid4().hex[:6]}"
    with ExitStack() as stack:
        url = stack.enter_context(pg_schema(ctx.pg_url))
        store = open_store(url)
        stack.callback(store.close)
        store.put_contract(CONTRACT)
        sandbox = stack.enter_context(server(
            "bench.sandbox", ["--latency-ms", str(LATENCY_MS), "--applied", f"key-{prefix}",
                              "--count", str(count)]))
        config = Path(ctx.workdir / f"replicas-{replicas}.toml")
        config.write_text(toml_config(sandbox.url, {"sweep_interval_s": 0.2}))
        env = {"RECONCILER_DB": url, "RECONCILER_CONFIG": str(config)}
        sidecars = stack.enter_context(servers(*[Command(SIDECAR, env=env)] * replicas))
        with step(f"{replicas} replica(s) sweeping {count:,} operations"):
            since = utcnow()
            meter, cpu = BusyMeter(), sum(s.cpu_s() for s in sidecars)
            Seeder(store.engine).due(ids(prefix, count))
            started = time.perf_counter()
            deadline = started + max(600.0, count * 0.1)
            while verdict_counts(store.engine).get("indeterminate", 0):
                if time.perf_counter() > deadline:
                    raise BenchError(f"{replicas} replica(s) did not decide {count:,} "
                                     f"operations within {deadline - started:.0f} s")
                if not all(s.alive() for s in sidecars):
                    raise BenchError(f"a replica died: {[s.output() for s in sidecars]}")
                time.sleep(POLL_S)
            seconds = time.perf_counter() - started
            cpu, busy = sum(s.cpu_s() for s in sidecars) - cpu, meter.busy()
        reads = httpx.get(sandbox.url + READS_PATH, timeout=10).json()
        evidence = table_of(EvidenceRow)
        per_op = (select(evidence.c.operation_id).group_by(evidence.c.operation_id)
                  .having(func.count() > 1).subquery())
        with store.engine.connect() as conn:
            double_evidence = int(conn.execute(select(func.count()).select_from(per_op))
                                  .scalar_one())
        latencies = Percentiles.of(decided_after(store.engine, since))
    if reads["paths"] != count:
        raise BenchError(f"{reads['paths']} operations read, expected {count}")
    return Sweep(seconds, reads["reads"], reads["repeated"], reads["overlapping"],
                 double_evidence, latencies, cpu, busy)
