"""Intent recording and the retry check over HTTP, against a no-op endpoint on the same server.

The server is `python -m bench.server`: the sidecar as `reconciler serve` runs it (SQLite store,
sweep off) plus `POST /bench/noop`. The load generator is another process
(`bench.loadgen`, keep-alive HTTP/1.1 on loopback). Two measurements per endpoint:

- throughput: closed loop on 16 connections, the most the server answers per second; the
  endpoint and the no-op alternate in rounds so that background load falls on both alike;
- latency at half load: open loop at half the endpoint's own throughput, the same rate for the
  endpoint and for the no-op, latency counted from each request's scheduled send time.

`POST /v1/operations` records a new intent on every request. `POST .../retry` asks the gate
about operations that are verified_not_applied, each always with the same holder, so every
answer is a grant (a renewal of that holder's lease, a durable write); the run checks through
/metrics that the gate granted every one.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import replace

import httpx

from bench.harness import BenchError, Context, Outcome, Percentiles, step
from bench.loadgen import Spec, Tally
from bench.operations import CONTRACT, PROVIDER, REQUEST_HASH, key_of, retryable
from bench.procs import loadgen, server
from bench.server import NOOP_PATH
from reconciler.ledger import Ledger
from reconciler.store.schema import open_store

NAME = "http"
THROUGHPUT_TARGET = 0.9
P99_TARGET = 1.5
CONNECTIONS = 16
#: Operations the retry checks cycle through; the same holder asks for each every time.
RETRY_POOL = 64


def run(ctx: Context) -> Outcome:
    out = Outcome(NAME, "intent recording and the retry check over HTTP vs a no-op endpoint "
                        "on the same server stack")
    url = f"sqlite:///{ctx.workdir / 'http.db'}"
    store = open_store(url)
    store.put_contract(CONTRACT)
    prefix = f"h{uuid.uuid4().hex[:6]}"
    pool = ctx.size(RETRY_POOL, RETRY_POOL)
    with step(f"preparing {pool} verified_not_applied operations"):
        ledger = Ledger(store)
        for i in range(pool):
            retryable(ledger, f"{prefix}-retry-{i}")
    store.engine.dispose()
    seconds = ctx.seconds(1.2, 5.0)
    rounds = ctx.size(1, 3)
    # Long enough at half load for a p99 of a couple of thousand requests in the full run.
    latency_seconds = ctx.seconds(1.2, 5.0)
    base = Spec(url="", path=NOOP_PATH, method="POST", connections=CONNECTIONS,
                duration_s=seconds, warmup_s=ctx.seconds(0.5, 1.0))
    env = {"RECONCILER_DB": url, "RECONCILER_SWEEP_INTERVAL_S": "0"}
    with server("bench.server", env=env) as sidecar:
        base = replace(base, url=sidecar.url)
        noop = replace(base, body=json.dumps({"operation_id": "noop-{n}"}))
        intents = replace(base, path="/v1/operations", body=json.dumps({
            "operation_id": f"{prefix}-{{n}}-RUN", "request_hash": REQUEST_HASH,
            "idempotency_key": "k-{n}-RUN", "provider": PROVIDER, "action": "charge",
            "effect": "idempotent_write"}), ok_statuses=(201,))
        retries = replace(base, path=f"/v1/operations/{prefix}-retry-{{m}}/retry",
                          modulo=pool, ok_statuses=(200,), body=json.dumps({
                              "idempotency_key": key_of(f"{prefix}-retry-{{m}}"),
                              "request_hash": REQUEST_HASH, "holder": "bench-{m}"}))
        refused_before = gate_refusals(sidecar.url)
        for label, spec in (("POST /v1/operations (new intent)", intents),
                            ("POST /v1/operations/{id}/retry (granted)", retries)):
            compare(out, label, noop, spec, rounds, latency_seconds)
        if gate_refusals(sidecar.url) != refused_before:
            raise BenchError("the gate refused some retry checks: the scenario needs grants")
    out.notes.append(f"throughput: closed loop, {CONNECTIONS} connections, {rounds} round(s) "
                     f"of {seconds:g} s per side; latency: open loop at half the endpoint's "
                     f"throughput, for the endpoint and the no-op alike, {rounds} round(s) of "
                     f"{latency_seconds:g} s per side")
    out.notes.append("the load generator, the server and its SQLite store share the machine's "
                     "cores")
    return out


def unique(spec: Spec) -> Spec:
    """Every load generator run numbers its requests from 0: a new run id keeps intent ids
    unique across runs."""
    run_id = uuid.uuid4().hex[:6]
    return replace(spec, path=spec.path.replace("RUN", run_id),
                   body=spec.body.replace("RUN", run_id) if spec.body else None)


def compare(out: Outcome, label: str, noop: Spec, endpoint: Spec, rounds: int,
            latency_seconds: float) -> None:
    with step(f"{label}: throughput"):
        noop_runs, endpoint_runs = alternate(noop, endpoint, rounds)
    noop_rps, endpoint_rps = per_s(noop_runs), per_s(endpoint_runs)
    half = endpoint_rps / 2
    with step(f"{label}: latency at {half:,.0f} requests/s"):
        noop_half, endpoint_half = alternate(at_rate(noop, half, latency_seconds),
                                             at_rate(endpoint, half, latency_seconds), rounds)
    noop_p, endpoint_p = (Percentiles.of([s for t in noop_half for s in t.latencies_s]),
                          Percentiles.of([s for t in endpoint_half for s in t.latencies_s]))
    out.figure(f"{label}: {endpoint_rps:,.0f} requests/s; no-op {noop_rps:,.0f} requests/s")
    out.figure(f"{label} at {half:,.0f} requests/s: {endpoint_p.render()}")
    out.figure(f"no-op at {half:,.0f} requests/s: {noop_p.render()}")
    short = label.split(" (")[0]
    out.latencies[f"{short} @ {half:,.0f}/s"] = endpoint_p
    out.latencies[f"no-op @ {half:,.0f}/s"] = noop_p
    out.ratio(f"{short} throughput vs no-op", endpoint_rps / noop_rps, THROUGHPUT_TARGET,
              higher_is_better=True)
    out.ratio(f"{short} p99 vs no-op p99 at half load", endpoint_p.p99 / noop_p.p99, P99_TARGET,
              higher_is_better=False)


def alternate(noop: Spec, endpoint: Spec, rounds: int) -> tuple[list[Tally], list[Tally]]:
    """The no-op and the endpoint in turn, `rounds` times each: background load that comes
    and goes falls on both alike."""
    noop_runs: list[Tally] = []
    endpoint_runs: list[Tally] = []
    for _ in range(rounds):
        noop_runs.append(loadgen(noop))
        endpoint_runs.append(loadgen(unique(endpoint)))
    return noop_runs, endpoint_runs


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
