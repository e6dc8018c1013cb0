"""Intent recording, attempt recording and the retry check over HTTP, against a no-op
endpoint on the same server.

The server is `python -m bench.server`: the sidecar as `reconciler serve` runs it (SQLite store,
sweep off) plus `POST /bench/noop`. The load generator is another process
(`bench.loadgen`, keep-alive HTTP/1.1 on loopback). Three measurements per endpoint:

- throughput: closed loop on 16 connections, the most the server answers per second; the
  endpoint and the no-op alternate in rounds so that background load falls on both alike;
- CPU per request: the server process's CPU time (user + system, /proc/<pid>/stat) over each
  of those closed-loop rounds, divided by the answers it gave in the round (the warm-up's
  included), for the endpoint and for the no-op of the same rounds;
- latency at half load: open loop at half the endpoint's own throughput, the same rate for the
  endpoint and for the no-op, latency counted from each request's scheduled send time.

`POST /v1/operations` records a new intent on every request. `POST .../attempts` records
attempt 1 of an intent recorded beforehand (bulk-inserted, never dispatched), with the
outcome the worker saw (a 200 with the provider's receipt: one phase), a new intent for every
request; the two-phase protocol's second call (the completion of an attempt recorded as
dispatching) is not measured here. `POST .../retry` asks the gate about operations that are
verified_not_applied, each always with the same holder, so every answer is a grant (a renewal
of that holder's lease, a durable write); the run checks through /metrics that the gate
granted every one.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import httpx

from bench.harness import BenchError, Context, Outcome, Percentiles, step
from bench.loadgen import Spec, Tally
from bench.operations import (
    CONTRACT,
    PROVIDER,
    REQUEST_HASH,
    Seeder,
    ids,
    key_of,
    retryable,
)
from bench.procs import ServerProcess, loadgen, server
from bench.server import FLOOR_PATH, NOOP_PATH
from reconciler.ledger import Ledger
from reconciler.store.schema import open_store

NAME = "http"
P99_TARGET = 1.5
CONNECTIONS = 16
#: Operations the retry checks cycle through; the same holder asks for each every time.
RETRY_POOL = 64
#: Requests per second no run of the attempts endpoint reaches on this machine (it answers
#: about 1,650, the no-op about 5,000): each run gets that many fresh intents per second it
#: lasts.
#: A faster machine would run out and get 404s, which the run reports as unexpected answers.
MAX_RATE = 3000


@dataclass(frozen=True, slots=True)
class Endpoint:
    label: str
    spec: Spec
    #: Issue 16's targets: CPU per request vs the no-op's, and for intents throughput >= 0.5x
    #: the no-op's; the other endpoints' throughput target is the earlier 0.9x.
    cpu_target: float
    throughput_target: float
    #: The spec of one run: new intents (or new intents to record attempts on) for each.
    fresh: Callable[[Spec], Spec]
    #: The same work with nothing of the product's (bench.server, FLOOR_PATH), measured in
    #: the same rounds: how much of the endpoint's cost the stack and the disk leave.
    floor: Spec | None = None


@dataclass(slots=True)
class Side:
    """One side's closed-loop rounds, and the server's CPU time over them."""

    runs: list[Tally] = field(default_factory=list)
    cpu_s: float = 0.0

    def run(self, sidecar: ServerProcess, spec: Spec) -> None:
        before = sidecar.cpu_s()
        self.runs.append(loadgen(spec))
        self.cpu_s += sidecar.cpu_s() - before

    @property
    def per_s(self) -> float:
        return per_s(self.runs)

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / sum(t.answered for t in self.runs) * 1e6


def run(ctx: Context) -> Outcome:
    out = Outcome(NAME, "intent recording, attempt recording and the retry check over HTTP vs "
                        "a no-op endpoint on the same server stack")
    url = f"sqlite:///{ctx.workdir / 'http.db'}"
    store = open_store(url)
    store.put_contract(CONTRACT)
    prefix = f"h{uuid.uuid4().hex[:6]}"
    pool = ctx.size(RETRY_POOL, RETRY_POOL)
    seconds = ctx.seconds(1.2, 5.0)
    warmup_s = ctx.seconds(0.5, 1.0)
    rounds = ctx.size(1, 3)
    # Long enough at half load for a p99 of a couple of thousand requests in the full run.
    latency_seconds = ctx.seconds(1.2, 5.0)
    # Each throughput and each latency run of the attempts endpoint gets its own intents.
    per_run = math.ceil((warmup_s + max(seconds, latency_seconds)) * MAX_RATE)
    with step(f"preparing {pool} verified_not_applied operations and "
              f"{2 * rounds} x {per_run:,} undispatched intents"):
        ledger = Ledger(store)
        for i in range(pool):
            retryable(ledger, f"{prefix}-retry-{i}")
        Seeder(store.engine).undispatched(
            [op for r in range(2 * rounds) for op in ids(f"{prefix}-a{r}", per_run)])
    store.engine.dispose()
    base = Spec(url="", path=NOOP_PATH, method="POST", connections=CONNECTIONS,
                duration_s=seconds, warmup_s=warmup_s)
    env = {"RECONCILER_DB": url, "RECONCILER_SWEEP_INTERVAL_S": "0"}
    slots = itertools.count()
    with server("bench.server", env=env) as sidecar:
        base = replace(base, url=sidecar.url)
        noop = replace(base, body=json.dumps({"operation_id": "noop-{n}"}))
        intents = replace(base, path="/v1/operations", body=json.dumps({
            "operation_id": f"{prefix}-{{n}}-RUN", "request_hash": REQUEST_HASH,
            "idempotency_key": "k-{n}-RUN", "provider": PROVIDER, "action": "charge",
            "effect": "idempotent_write"}), ok_statuses=(201,))
        attempt_id = f"{prefix}-aRUN-{{n}}"
        attempts = replace(base, path=f"/v1/operations/{attempt_id}/attempts",
                           ok_statuses=(201,), body=json.dumps({
                               "attempt": 1, "idempotency_key": key_of(attempt_id),
                               "request_hash": REQUEST_HASH, "outcome": "response",
                               "status": 200, "receipt": {"provider_ref": "ch-{n}-RUN",
                                                          "request_hash": REQUEST_HASH}}))
        retries = replace(base, path=f"/v1/operations/{prefix}-retry-{{m}}/retry",
                          modulo=pool, ok_statuses=(200,), body=json.dumps({
                              "idempotency_key": key_of(f"{prefix}-retry-{{m}}"),
                              "request_hash": REQUEST_HASH, "holder": "bench-{m}"}))
        refused_before = gate_refusals(sidecar.url)
        for endpoint in (
                Endpoint("POST /v1/operations (new intent)", intents, 2.0, 0.5, unique,
                         replace(intents, path=FLOOR_PATH)),
                Endpoint("POST /v1/operations/{id}/attempts (attempt 1, with its outcome)",
                         attempts, 2.5, 0.9, lambda spec: slot(spec, next(slots))),
                Endpoint("POST /v1/operations/{id}/retry (granted)", retries, 2.5, 0.9,
                         lambda spec: spec)):
            compare(out, sidecar, noop, endpoint, rounds, latency_seconds)
        if gate_refusals(sidecar.url) != refused_before:
            raise BenchError("the gate refused some retry checks: the scenario needs grants")
    out.notes.append(f"throughput and CPU per request: closed loop, {CONNECTIONS} connections, "
                     f"{rounds} round(s) of {seconds:g} s per side (CPU time of the server "
                     f"process over each round, warm-up of {warmup_s:g} s included, over the "
                     f"answers in it); latency: open loop at half the endpoint's throughput, "
                     f"for the endpoint and the no-op alike, {rounds} round(s) of "
                     f"{latency_seconds:g} s per side")
    out.notes.append("the load generator, the server and its SQLite store share the machine's "
                     "cores")
    return out


def unique(spec: Spec) -> Spec:
    """Every load generator run numbers its requests from 0: a new run id keeps intent ids
    unique across runs."""
    return slot(spec, uuid.uuid4().hex[:6])


def slot(spec: Spec, run_id: object) -> Spec:
    """`spec` with RUN in its path and body replaced by `run_id`."""
    return replace(spec, path=spec.path.replace("RUN", str(run_id)),
                   body=spec.body.replace("RUN", str(run_id)) if spec.body else None)


def compare(out: Outcome, sidecar: ServerProcess, noop: Spec, endpoint: Endpoint, rounds: int,
            latency_seconds: float) -> None:
    label = endpoint.label
    with step(f"{label}: throughput and CPU per request"):
        noop_side, endpoint_side, floor_side = Side(), Side(), Side()
        for _ in range(rounds):
            # In turn: background load that comes and goes falls on all alike.
            noop_side.run(sidecar, noop)
            if endpoint.floor is not None:
                floor_side.run(sidecar, endpoint.fresh(endpoint.floor))
            endpoint_side.run(sidecar, endpoint.fresh(endpoint.spec))
    noop_rps, endpoint_rps = noop_side.per_s, endpoint_side.per_s
    half = endpoint_rps / 2
    with step(f"{label}: latency at {half:,.0f} requests/s"):
        noop_half: list[Tally] = []
        endpoint_half: list[Tally] = []
        for _ in range(rounds):
            noop_half.append(loadgen(at_rate(noop, half, latency_seconds), refusals=True))
            endpoint_half.append(loadgen(at_rate(endpoint.fresh(endpoint.spec), half,
                                                 latency_seconds), refusals=True))
    noop_p, endpoint_p = (Percentiles.of([s for t in noop_half for s in t.latencies_s]),
                          Percentiles.of([s for t in endpoint_half for s in t.latencies_s]))
    short = label.split(" (")[0]
    out.figure(f"{label}: {endpoint_rps:,.0f} requests/s; no-op {noop_rps:,.0f} requests/s")
    out.figure(f"{label}: {endpoint_side.cpu_us:,.0f} us of server CPU per request; no-op "
               f"{noop_side.cpu_us:,.0f} us")
    if floor_side.runs:
        out.figure(f"durable floor of {short} ({FLOOR_PATH}: the same body model and rows, raw "
                   f"sqlite3 with group commit, a constant answer): {floor_side.per_s:,.0f} "
                   f"requests/s, {floor_side.cpu_us:,.0f} us of server CPU per request "
                   f"({floor_side.cpu_us / noop_side.cpu_us:.2f}x the no-op's; the endpoint "
                   f"{endpoint_side.cpu_us / floor_side.cpu_us:.2f}x the floor's)")
    out.figure(f"{label} at {half:,.0f} requests/s: {endpoint_p.render()}")
    out.figure(f"no-op at {half:,.0f} requests/s: {noop_p.render()}")
    for side, tallies in (("endpoint", endpoint_half), ("no-op", noop_half)):
        refused = sum(t.bad_statuses.get("503", 0) for t in tallies)
        out.figure(f"{side} at {half:,.0f} requests/s: {refused:,} of "
                   f"{sum(t.requests for t in tallies):,} refused 503 overloaded (latencies "
                   "above: the admitted requests)")
    out.latencies[f"{short} @ {half:,.0f}/s"] = endpoint_p
    out.latencies[f"no-op @ {half:,.0f}/s"] = noop_p
    out.ratio(f"{short} throughput vs no-op", endpoint_rps / noop_rps,
              endpoint.throughput_target, higher_is_better=True)
    out.ratio(f"{short} CPU per request vs no-op", endpoint_side.cpu_us / noop_side.cpu_us,
              endpoint.cpu_target, higher_is_better=False)
    out.ratio(f"{short} p99 vs no-op p99 at half load", endpoint_p.p99 / noop_p.p99, P99_TARGET,
              higher_is_better=False)


def at_rate(spec: Spec, rate: float, seconds: float) -> Spec:
    """Open loop at `rate`, with connections to spare so that none is a queue of its own."""
    return replace(spec, rate=rate, connections=2 * CONNECTIONS, duration_s=seconds)


def per_s(runs: list[Tally]) -> float:
    return sum(t.requests for t in runs) / sum(t.elapsed_s for t in runs)


def gate_refusals(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    found = re.search(r'^reconciler_retry_decisions_total\{result="refused"\} (\S+)$', text,
                      re.MULTILINE)
    return float(found.group(1)) if found else 0.0
