"""Scale: verdict lookups on a large store against a small one, and the sidecar's memory on the
large store while it sweeps.

Two stores (SQLite files), bulk-inserted (bench.operations.Seeder): the large one holds
1,000,000 operations, the small one 10,000 (quick mode: 100,000 and 1,000). Nearly all are
settled (verified_applied, with an attempt and a receipt each); the large store also holds due
operations for the sweep.

- Lookups: `GET /v1/operations/{id}` (the verdict decided from the facts, as a worker reads it)
  of random ids, one connection back to back, from the load generator process. Both sidecars
  (`reconciler serve`, sweep off) run at once and the rounds alternate between them.
- Memory: the large store's sidecar is started again with its sweep on (probes against the
  sandbox at 20 ms, default concurrency), and its RSS (VmRSS) is sampled while it sweeps.
  Flat means: the most it uses in the last quarter of the window is within 10% of the most it
  used in the first quarter.
"""

from __future__ import annotations

import time
from pathlib import Path

from bench.harness import Context, Outcome, Percentiles, progress, step
from bench.loadgen import Spec, Tally
from bench.operations import Seeder, ids, toml_config, verdict_counts
from bench.procs import SIDECAR, Command, ServerProcess, loadgen, server, servers
from bench.seeds import bulk_sqlite
from reconciler.store.schema import open_store

NAME = "scale"
LOOKUP_TARGET = 1.2
FLAT_TARGET = 1.1
LATENCY_MS = 20
RSS_EVERY_S = 0.5


def run(ctx: Context) -> Outcome:
    small, large = ctx.size(1_000, 10_000), ctx.size(100_000, 1_000_000)
    due = ctx.size(5_000, 20_000)
    out = Outcome(NAME, f"verdict lookups with {large:,} vs {small:,} stored operations; "
                        f"sidecar RSS at {large:,} while sweeping")
    if ctx.quick:
        out.notes.append(f"{ctx.mode} mode: {large:,} vs {small:,} stored operations (the "
                         "full run: 1,000,000 vs 10,000)")
    # One prefix in every run: the seeded stores are kept between runs (bench.seeds).
    prefix = "sc"
    small_db, large_db = ctx.workdir / "small.db", ctx.workdir / "large.db"
    with step(f"seeding {small:,} operations"):
        seed(ctx, small_db, prefix, small, 0)
    with step(f"seeding {large:,} operations ({due:,} of them due)"):
        seed(ctx, large_db, prefix, large, due)
    settled = large - due
    lookups(ctx, out, prefix, (small_db, small, small), (large_db, large, settled))
    sweeping_memory(ctx, out, prefix, large_db, due)
    return out


def seed(ctx: Context, path: Path, prefix: str, count: int, due: int) -> None:
    """`count` operations at `path`, `due` of them due now (written now: their deadlines run
    from their attempt), the others settled (from the seed cache when kept)."""
    store = open_store(bulk_sqlite(ctx.seed_cache, path, prefix, count - due))
    Seeder(store.engine).due(ids(f"{prefix}-d", due))
    store.engine.dispose()


def lookup_spec(url: str, prefix: str, settled: int, seconds: float) -> Spec:
    return Spec(url=url, path=f"/v1/operations/{prefix}-s-{{r}}", modulo=settled,
                connections=1, duration_s=seconds, warmup_s=min(1.0, seconds / 2),
                ok_statuses=(200,))


def lookups(ctx: Context, out: Outcome, prefix: str, small_store: tuple[Path, int, int],
            large_store: tuple[Path, int, int]) -> None:
    """Each store as (file, operations stored, settled operations to look up)."""
    (small_db, small, small_settled), (large_db, large, settled) = small_store, large_store
    seconds = ctx.seconds(2.0, 6.0)
    rounds = ctx.size(1, 3)
    small_runs: list[Tally] = []
    large_runs: list[Tally] = []
    env = {"RECONCILER_SWEEP_INTERVAL_S": "0"}
    sidecars = (Command(SIDECAR, env={**env, "RECONCILER_DB": f"sqlite:///{db}"})
                for db in (small_db, large_db))
    with servers(*sidecars) as (small_side, large_side), \
            step(f"lookups, {rounds} alternating round(s) of {seconds:g} s"):
        for _ in range(rounds):
            small_runs.append(loadgen(lookup_spec(small_side.url, prefix, small_settled, seconds)))
            large_runs.append(loadgen(lookup_spec(large_side.url, prefix, settled, seconds)))
        small_rss, large_rss = small_side.rss_mb(), large_side.rss_mb()
    small_p = Percentiles.of([s for t in small_runs for s in t.latencies_s])
    large_p = Percentiles.of([s for t in large_runs for s in t.latencies_s])
    out.latencies[f"GET, {small:,} stored"] = small_p
    out.latencies[f"GET, {large:,} stored"] = large_p
    out.figure(f"GET /v1/operations/{{id}} with {small:,} stored: {small_p.render()}")
    out.figure(f"GET /v1/operations/{{id}} with {large:,} stored: {large_p.render()}")
    out.figure(f"sidecar RSS after the lookups: {small_rss:.0f} MiB ({small:,} stored), "
               f"{large_rss:.0f} MiB ({large:,} stored)")
    out.ratio(f"lookup p50 at {large:,} vs {small:,} stored", large_p.p50 / small_p.p50,
              LOOKUP_TARGET, higher_is_better=False)
    out.notes.append(f"lookup p99 at {large:,} vs {small:,} stored: "
                     f"{large_p.p99 / small_p.p99:.2f}x (the target is on the median; a p99 of "
                     "a few thousand loopback requests on a shared 2-core machine is noise)")


def sweeping_memory(ctx: Context, out: Outcome, prefix: str, large_db: Path, due: int) -> None:
    window = ctx.seconds(5.0, 40.0)
    with server("bench.sandbox", ["--latency-ms", str(LATENCY_MS), "--applied",
                                  f"key-{prefix}-d", "--count", str(due)]) as sandbox:
        config = large_db.with_suffix(".toml")
        config.write_text(toml_config(sandbox.url, {"sweep_interval_s": 0.2}))
        env = {"RECONCILER_DB": f"sqlite:///{large_db}", "RECONCILER_CONFIG": str(config)}
        with server(SIDECAR, env=env) as sidecar, \
                step(f"sampling the sweeping sidecar's RSS for {window:g} s"):
            samples = sample_rss(sidecar, window)
    store = open_store(f"sqlite:///{large_db}")
    counts = verdict_counts(store.engine)
    store.engine.dispose()
    swept = due - counts.get("indeterminate", 0)
    quarter = max(1, len(samples) // 4)
    early, late = max(samples[:quarter]), max(samples[-quarter:])
    out.figure(f"sweeping sidecar RSS over {window:g} s: {samples[0]:.0f} MiB at start, "
               f"{early:.0f} MiB (max of first quarter), {late:.0f} MiB (max of last quarter), "
               f"{max(samples):.0f} MiB peak; {swept:,} of {due:,} due operations swept")
    out.ratio("sweeping RSS, last quarter vs first quarter", late / early, FLAT_TARGET,
              higher_is_better=False)


def sample_rss(process: ServerProcess, window_s: float) -> list[float]:
    samples = []
    end = time.monotonic() + window_s
    while time.monotonic() < end:
        if not process.alive():
            progress(f"the sidecar exited while sweeping: {process.output()}")
            break
        samples.append(process.rss_mb())
        time.sleep(RSS_EVERY_S)
    return samples
