"""Reconciliation: N due operations swept against the sandbox, whose reads take 20 ms, with 64
probes in flight, against the bound N x latency / concurrency, the least time N reads can take
at that concurrency.

The sweeper is the product's (`Sweeper` with the default `SweepPolicy` but for concurrency),
on a SQLite store, in this process, swept back to back until nothing is due; the sandbox runs in
its own process. Half the operations went through (a key record with a bound receipt), half did
not (an authoritative zero), so each is decided by its first probe.

A second baseline, measured in the same run, is the probes alone: the same N reads through the
same probe objects, called the way the sweep calls them (`ProbeThreads`, so on the probe loop),
with the same concurrency, with no store. What the sweep takes beyond it is
the store and the bookkeeping.

The sandbox is a Python server (FastAPI on uvicorn) sharing the machine's cores with this
process, so its CPU time is read from /proc/<pid>/stat before and after each phase and printed
next to this process's: the share of the wall time that is the fake provider's, not the
product's.
"""

from __future__ import annotations

import queue
import time
import uuid

import httpx

from bench.harness import BenchError, Context, Outcome, Percentiles, step
from bench.machine import BusyMeter
from bench.operations import (
    CONTRACT,
    PROVIDER,
    Seeder,
    decided_after,
    ids,
    intent_of,
    probe_config,
    verdict_counts,
)
from bench.procs import server
from bench.sandbox import READS_PATH
from probes.base import Probe, ProbeTarget
from probes.config import parse_config
from probes.runner import ProbeThreads
from reconciler.core.domain import Verdict
from reconciler.core.schedule import SweepPolicy
from reconciler.ledger import Ledger, utcnow
from reconciler.ledger.sweep import Sweeper
from reconciler.store.leases import SqlLeases
from reconciler.store.schema import open_store

NAME = "reconcile"
#: Issue 16's "done when": the sweep within 2.5x the bound on an idle machine. (An older
#: issue aimed at 1.25x; printed as a note.)
TARGET = 2.5
EARLIER_TARGET = 1.25
LATENCY_S = 0.020
CONCURRENCY = 64


def alone(probe: Probe, targets: list[ProbeTarget], concurrency: int) -> None:
    """Every target probed once, `concurrency` calls in flight, through the seam the sweep
    calls probes by (`ProbeThreads`: an asynchronous probe's calls on the probe loop)."""
    calls, answered = ProbeThreads(), queue.SimpleQueue[object]()
    waiting = iter(targets)

    def start() -> int:
        target = next(waiting, None)
        if target is None:
            return 0
        calls.submit(probe, target).add_done_callback(answered.put)
        return 1

    in_flight = sum(start() for _ in range(concurrency))
    while in_flight:
        answered.get(timeout=60)
        in_flight += start() - 1
    calls.close()


def run(ctx: Context) -> Outcome:
    count = ctx.size(1_000, 10_000)
    out = Outcome(NAME, f"sweeping {count:,} due operations, probe latency "
                        f"{LATENCY_S * 1000:g} ms, concurrency {CONCURRENCY}")
    if ctx.quick:
        out.notes.append(f"{ctx.mode} mode: {count:,} operations (the full run sweeps 10,000)")
    prefix = f"rc{uuid.uuid4().hex[:6]}"
    store = open_store(f"sqlite:///{ctx.workdir / 'reconcile.db'}")
    operations = ids(prefix, count)
    with step(f"seeding {count:,} due operations"):
        Seeder(store.engine).due(operations)
    store.put_contract(CONTRACT)
    with server("bench.sandbox", ["--latency-ms", str(LATENCY_S * 1000), "--applied",
                                  f"key-{prefix}", "--count", str(count)]) as sandbox:
        probes = parse_config(probe_config(sandbox.url))[PROVIDER].probes
        sweeper = Sweeper(Ledger(store), SqlLeases(store), lambda _: probes,
                          SweepPolicy(concurrency=CONCURRENCY))
        bound = count * LATENCY_S / CONCURRENCY

        with step("probes alone (no store)"):
            targets = [ProbeTarget.of(intent_of(op, utcnow())) for op in operations]
            alone_cpu, alone_sandbox = time.process_time(), sandbox.cpu_s()
            started = time.perf_counter()
            alone(probes[0], targets, CONCURRENCY)
            probes_only = time.perf_counter() - started
            alone_cpu = time.process_time() - alone_cpu
            alone_sandbox = sandbox.cpu_s() - alone_sandbox
        with step("sweeping"):
            since = utcnow()
            meter, cpu, sandbox_cpu = BusyMeter(), time.process_time(), sandbox.cpu_s()
            started = time.perf_counter()
            rounds = 0
            while sweeper.sweep():
                rounds += 1
            swept = time.perf_counter() - started
            cpu, busy = time.process_time() - cpu, meter.busy()
            sandbox_cpu = sandbox.cpu_s() - sandbox_cpu
        sweeper.close()
        reads = httpx.get(sandbox.url + READS_PATH, timeout=10).json()
    decided = verdict_counts(store.engine)
    to_verdict = Percentiles.of(decided_after(store.engine, since))
    out.latencies["sweep: due to verdict"] = to_verdict
    store.engine.dispose()
    expected = {Verdict.VERIFIED_APPLIED.value: (count + 1) // 2,
                Verdict.VERIFIED_NOT_APPLIED.value: count // 2}
    if decided != expected:
        raise BenchError(f"after the sweep the verdicts are {decided}, expected {expected}")
    if reads["reads"] != 2 * count:
        raise BenchError(f"{reads['reads']} provider reads, expected {2 * count} "
                         "(one per operation by the probes alone, one by the sweep)")
    out.figure(f"bound N x latency / concurrency: {bound:.2f} s")
    out.figure(f"probes alone, no store: {probes_only:.2f} s ({count / probes_only:,.0f} "
               f"reads/s); CPU {alone_cpu / count * 1000:.2f} ms per read in this process, "
               f"{alone_sandbox / count * 1000:.2f} ms in the sandbox")
    out.figure(f"sweep: {swept:.2f} s ({count / swept:,.0f} operations/s, {rounds} sweeps of "
               f"up to {sweeper.policy.batch}); every operation decided by its first probe "
               f"({decided})")
    out.figure(f"from the sweep's start to each verdict: {to_verdict.render()}")
    out.figure(f"sweep CPU in this process: {cpu:.1f} s ({cpu / count * 1000:.2f} ms per "
               f"operation); all cores {busy:.0%} busy while sweeping")
    out.figure(f"sandbox server CPU while sweeping: {sandbox_cpu:.1f} s "
               f"({sandbox_cpu / count * 1000:.2f} ms per read), one core busy "
               f"{sandbox_cpu / swept:.0%} of the sweep's wall time")
    out.ratio("sweep wall time vs the bound", swept / bound, TARGET, higher_is_better=False)
    out.notes.append(f"probes alone take {probes_only / bound:.2f}x the bound: that much is "
                     "the HTTP client, the sandbox and the machine, not the store")
    out.notes.append(f"the target is issue 16's, on an idle machine; an earlier one was "
                     f"{EARLIER_TARGET:g}x (this run: {swept / bound:.2f}x)")
    return out
