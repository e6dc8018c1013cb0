"""`python -m bench [--quick] [--only NAME] [--peers] [--json] [--write]`: the benchmark suite.

Every benchmark measures its baseline in the same run, on the same machine, and prints its
figures and its ratios against the targets. bench/README.md says what each one measures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from bench import (
    claims,
    cli,
    console,
    history,
    intents,
    over_http,
    peers,
    reconcile,
    replicas,
    scale,
)
from bench.harness import Benchmark, Context, Outcome, progress
from bench.machine import describe
from bench.report import plot, write_results
from bench.seeds import DEFAULT_CACHE

BENCHMARKS: dict[str, Benchmark] = {
    intents.NAME: intents.run,
    over_http.NAME: over_http.run,
    reconcile.NAME: reconcile.run,
    scale.NAME: scale.run,
    claims.NAME: claims.run,
    console.NAME: console.run,
    replicas.NAME: replicas.run,
    peers.NAME: peers.run,
    history.NAME: history.run,
    cli.NAME: cli.run,
}
HERE = Path(__file__).resolve().parent
DEFAULT_PG = os.environ.get("RECONCILER_TEST_PG",
                            "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0]
                                     if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="smaller sizes and shorter runs: about 3 minutes in all once "
                             "the seed cache is warm")
    parser.add_argument("--only", action="append", choices=list(BENCHMARKS), metavar="NAME",
                        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}")
    parser.add_argument("--peers", action="store_true",
                        help="run the peers benchmark (DBOS Transact, Powertools idempotency "
                             "on Redis): the same as --only peers, and adds to other --only")
    parser.add_argument("--json", action="store_true",
                        help="print the environment and the outcomes as JSON at the end")
    parser.add_argument("--write", action="store_true",
                        help="write bench/RESULTS.md and bench/latency.png from this run")
    parser.add_argument("--pg", default=DEFAULT_PG,
                        help="PostgreSQL URL (a fresh schema per run, dropped afterwards)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where scratch databases go (default: the system temp dir); "
                             "baselines and the product share it, so they share the disk")
    parser.add_argument("--seed-cache", type=Path, default=DEFAULT_CACHE,
                        help="where the large SQLite stores' seeded bulk is kept between runs "
                             "and reused while the schema and the seeder are unchanged "
                             "(PostgreSQL's is kept in bench_seed_* schemas at --pg; default: "
                             "$RECONCILER_BENCH_CACHE or ~/.cache/reconciler-bench)")
    parser.add_argument("--no-seed-cache", action="store_true",
                        help="seed every store afresh and keep nothing")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    names = args.only or ([] if args.peers else list(BENCHMARKS))
    if args.peers and peers.NAME not in names:
        names.append(peers.NAME)
    started = time.perf_counter()
    outcomes: list[Outcome] = []
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="reconciler-bench-", dir=args.workdir) as tmp:
        env = describe(HERE.parent, Path(tmp))
        print("\n".join(f"{key:<32} {value}" for key, value in env.items()), flush=True)
        mode = "quick (smaller sizes, see each benchmark)" if args.quick else "full"
        print(f"{'mode':<32} {mode}", flush=True)
        for name in names:
            workdir = Path(tmp) / name
            workdir.mkdir()
            progress(f"--- {name}")
            try:
                outcome = BENCHMARKS[name](Context(
                    "quick" if args.quick else "full", workdir, args.pg,
                    None if args.no_seed_cache else args.seed_cache))
            except Exception:
                # One broken benchmark must not hide the others' figures.
                failed.append(name)
                print(f"\n== {name}: FAILED\n{traceback.format_exc()}", flush=True)
                continue
            outcomes.append(outcome)
            print("\n" + outcome.render(), flush=True)
    elapsed = time.perf_counter() - started
    # Other work on the machine shows in every figure: say how much there was.
    env["load average (1 min, at end)"] = f"{os.getloadavg()[0]:.2f}"
    print(summary(outcomes, failed, elapsed))
    if args.write:
        image = plot(outcomes, HERE / "latency.png")
        write_results(HERE / "RESULTS.md", env, outcomes, failed, elapsed, args.quick, image)
        progress(f"wrote {HERE / 'RESULTS.md'}" + (f" and {image}" if image else ""))
    if args.json:
        print(json.dumps({"environment": env, "elapsed_s": round(elapsed, 1),
                          "failed": failed, "outcomes": [asdict(o) for o in outcomes]},
                         indent=2))
    return 1 if failed else 0


def summary(outcomes: list[Outcome], failed: list[str], elapsed: float) -> str:
    lines = ["", "== every ratio"]
    for outcome in outcomes:
        lines += [f"   {outcome.name:<10} {r.render()}" for r in outcome.ratios]
    lines += [f"   {name:<10} FAILED (see above)" for name in failed]
    met = sum(r.met for o in outcomes for r in o.ratios)
    total = sum(len(o.ratios) for o in outcomes)
    lines.append(f"   {met} of {total} targets met; run took {elapsed:.0f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
