"""Console: the operator console's list pages and the API's list pages on a large store.

A SQLite store and a PostgreSQL one (a fresh schema at --pg, dropped afterwards), each
bulk-inserted (bench.operations.Seeder): 1,000,000 operations (quick mode:
100,000), nearly all settled (verified_applied), a few thousand undecided (indeterminate, due)
of which a thousand are escalated by a sweeper (a human must act). `reconciler serve` (sweep
off, loopback: the console signs the loopback user in) serves it; one client asks each page
back to back, and each page's p50/p95 is reported beside `/healthz` on the same server (the
same-run baseline: what any request costs there).

Pages: /ui/operations unfiltered, by verdict, by provider, "a human must act", and at a deep
cursor (the middle of the store); /ui/queue; /ui/runs (no runs are stored: the page's fixed
cost); /v1/operations the same ways, its first page and a deep cursor. The target is the
issue's: every list page under 200 ms with 1,000,000 stored operations.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial

import httpx
from sqlalchemy import update
from sqlalchemy.exc import OperationalError

from bench.harness import BenchError, Context, Outcome, Percentiles, step
from bench.operations import PROVIDER, Seeder, ids, table_of
from bench.procs import SIDECAR, Command, servers
from bench.seeds import bulk_postgres, bulk_sqlite
from reconciler.store.schema import open_store
from reconciler.store.tables import StateRow

NAME = "console"
TARGET_MS = 200.0


def run(ctx: Context) -> Outcome:
    stored = ctx.size(100_000, 1_000_000)
    undecided = ctx.size(2_000, 5_000)
    escalated = ctx.size(400, 1_000)
    tries = ctx.size(20, 30)
    out = Outcome(NAME, f"console and API list pages with {stored:,} stored operations")
    if ctx.quick:
        out.notes.append(f"{ctx.mode} mode: {stored:,} stored operations (the full run: "
                         "1,000,000)")
    # One prefix in every run: the stores' bulk is kept between runs (bench.seeds).
    prefix = "co"
    settled = stored - undecided
    deep = f"{prefix}-s-{settled // 2}"
    worst: list[tuple[float, str]] = []
    worst.append(measure(out, "sqlite", partial(bulk_sqlite, ctx.seed_cache,
                                                ctx.workdir / "console.db", prefix, settled),
                         prefix, deep, tries, (stored, undecided, escalated)))
    try:
        with ExitStack() as stack:
            def pg_bulk() -> str:
                return stack.enter_context(bulk_postgres(ctx.seed_cache is not None,
                                                         ctx.pg_url, prefix, settled))

            worst.append(measure(out, "postgresql", pg_bulk, prefix, deep, tries,
                                 (stored, undecided, escalated)))
    except OperationalError as exc:
        out.notes.append(f"PostgreSQL not measured: {type(exc).__name__} at --pg")
    slowest, page = max(worst)
    out.ratio(f"slowest list page p95 ({page}) vs {TARGET_MS:g} ms", slowest / TARGET_MS,
              1.0, higher_is_better=False)
    out.notes.append("no agent runs are stored: /ui/runs and /v1/runs measure the pages' "
                     "fixed cost, not a large journal")
    return out


def measure(out: Outcome, kind: str, bulk_seeded: Callable[[], str], prefix: str, deep: str,
            tries: int, sizes: tuple[int, int, int]) -> tuple[float, str]:
    """Seed a store (its settled bulk by `bulk_seeded`, which gives its URL; the undecided
    now), serve it, time every page; the slowest p95 and its page."""
    stored, undecided, escalated = sizes
    with step(f"{kind}: seeding {stored:,} operations ({undecided:,} undecided, "
              f"{escalated:,} escalated)"):
        url = bulk_seeded()
        seed(url, prefix, undecided, escalated)
    pages = {
        "/ui/operations": "/ui/operations",
        "/ui/operations?verdict=indeterminate": "/ui/operations?verdict=indeterminate",
        f"/ui/operations?provider={PROVIDER}": f"/ui/operations?provider={PROVIDER}",
        "/ui/operations?escalated=true": "/ui/operations?escalated=true",
        "/ui/operations, deep cursor": f"/ui/operations?after={deep}",
        "/ui/queue": "/ui/queue",
        "/ui/runs": "/ui/runs",
        "/v1/operations": "/v1/operations?limit=50",
        "/v1/operations?verdict=indeterminate": "/v1/operations?verdict=indeterminate&limit=50",
        "/v1/operations?escalated=true": "/v1/operations?escalated=true&limit=50",
        "/v1/operations, deep cursor": f"/v1/operations?after={deep}&limit=50",
        "/v1/runs": "/v1/runs?limit=50",
    }
    env = {"RECONCILER_DB": url, "RECONCILER_SWEEP_INTERVAL_S": "0"}
    with servers(Command(SIDECAR, env=env)) as (sidecar,), \
            httpx.Client(base_url=sidecar.url, timeout=60) as http, \
            step(f"{kind}: {len(pages) + 1} pages, {tries} requests each"):
        sign_in(http)
        baseline = timed(http, "/healthz", tries)
        results = {label: timed(http, path, tries) for label, path in pages.items()}
    out.latencies[f"{kind} /healthz"] = Percentiles.of(baseline)
    out.figure(f"{kind} /healthz (baseline): {render(baseline)}")
    for label, samples in results.items():
        out.latencies[f"{kind} {label}"] = Percentiles.of(samples)
        out.figure(f"{kind} {label}: {render(samples)}")
    slowest, page = max((p95(s), label) for label, s in results.items())
    return slowest, f"{kind} {page}"


def seed(url: str, prefix: str, undecided: int, escalated: int) -> None:
    """Beside the settled bulk: `undecided` operations due now, `escalated` of them
    escalated."""
    store = open_store(url)
    seeder = Seeder(store.engine)
    due = ids(f"{prefix}-d", undecided)
    seeder.due(due)
    state = table_of(StateRow)
    with store.engine.begin() as conn:  # as a sweeper leaves them: escalated, still undecided
        conn.execute(update(state).where(state.c.operation_id.in_(due[:escalated]))
                     .values(escalated=True))
    seeder.analyze()
    store.engine.dispose()


def sign_in(http: httpx.Client) -> None:
    """The console's login on a loopback sidecar without credentials: the form's CSRF token,
    no credential; the session cookie stays on the client."""
    page = http.get("/ui/login")
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    if not found:
        raise BenchError(f"no CSRF token on the login page: {page.status_code}")
    answer = http.post("/ui/login", data={"csrf": found.group(1), "credential": ""})
    if answer.status_code != 303:
        raise BenchError(f"the console did not sign the loopback user in: "
                         f"{answer.status_code} {answer.text[:200]}")


def timed(http: httpx.Client, path: str, tries: int) -> list[float]:
    samples = []
    for _ in range(tries + 1):  # the first warms the connection and the page cache
        started = time.perf_counter()
        response = http.get(path)
        samples.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise BenchError(f"GET {path}: {response.status_code} {response.text[:200]}")
    return samples[1:]


def p95(samples_s: list[float]) -> float:
    ordered = sorted(samples_s)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))] * 1000


def render(samples_s: list[float]) -> str:
    ordered = sorted(samples_s)
    return (f"p50 {ordered[len(ordered) // 2] * 1000:.1f} ms, p95 {p95(samples_s):.1f} ms "
            f"({len(samples_s)} requests)")
