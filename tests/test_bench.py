"""The benchmark suite runs end to end: each benchmark, at a tiny size, measures its figures and
hands back its ratios. No timing is asserted here; speed is what the benchmarks report."""

import importlib.util
import json
import math
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

# bench/ is run from the repository root and is not installed with the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import (
    claims,
    console,
    history,
    intents,
    over_http,
    peers,
    reconcile,
    replica_load,
    replicas,
    scale,
    seeds,
)
from bench.__main__ import BENCHMARKS, summary
from bench.harness import Benchmark, Context, Outcome
from bench.operations import CONTRACT, REQUEST_HASH, Seeder, key_of, retryable
from bench.pgserver import PgServer
from bench.server import FLOOR_PATH, create_app_with_noop
from bench.sqlcount import DurableCommits
from reconciler.core.domain import Effect, Intent
from reconciler.ledger import Ledger, utcnow
from reconciler.service.settings import Settings
from reconciler.store.schema import open_store

from databases import PG_URL, pg_unreachable

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run_tiny(benchmark: Benchmark, tmp_path: Path) -> Outcome:
    return benchmark(Context("tiny", tmp_path, PG_URL))


def assert_measured(outcome: Outcome, ratios: int) -> None:
    assert len(outcome.ratios) == ratios, [r.name for r in outcome.ratios]
    # Ratios of two measurements are positive; counts (unit "") may be zero.
    assert all(math.isfinite(r.value) and (r.value > 0 if r.unit else r.value >= 0)
               for r in outcome.ratios), outcome.ratios
    assert outcome.figures
    assert all(p.count > 0 and p.p50 <= p.p99 for p in outcome.latencies.values())
    assert outcome.render().count("ratio ") == ratios


def test_intent_recording_is_measured_against_raw_sqlite_for_one_and_eight_writers(
        tmp_path: Path) -> None:
    outcome = run_tiny(intents.run, tmp_path)
    assert_measured(outcome, 2)
    assert {"raw sqlite3, 8 writers", "record_intent, 8 writers"} <= set(outcome.latencies)
    # Issue 35: each ratio from alternating rounds, the rounds' range printed with it.
    assert all(re.search(r"\(median of \d+ rounds?", r.name) for r in outcome.ratios)


def test_http_endpoints_are_measured_against_their_durable_floors_on_the_same_server(
        tmp_path: Path) -> None:
    outcome = run_tiny(over_http.run, tmp_path)
    # Per endpoint: CPU vs its floor, p99 vs its floor's at 25, 50 and 75% of capacity, and
    # the longest request at 50%.
    assert_measured(outcome, 15)
    for endpoint in ("POST /v1/operations", "POST /v1/operations/{id}/attempts",
                     "POST /v1/operations/{id}/retry"):
        names = [r.name for r in outcome.ratios if r.name.startswith(endpoint + " ")]
        assert [name.split(" (")[0] for name in names] == [
            f"{endpoint} CPU per request vs its durable floor",
            f"{endpoint} p99 vs its durable floor's at 25% of capacity",
            f"{endpoint} p99 vs its durable floor's at 50% of capacity",
            f"{endpoint} longest request at 50% of capacity",
            f"{endpoint} p99 vs its durable floor's at 75% of capacity"]
        # At each rate, the server's CPU beside the closed loop's: whether it was saturated.
        assert sum(f.startswith(f"{endpoint} at ") and "the server's CPU: " in f
                   and "of a core's time at this rate" in f for f in outcome.figures) == 3
        # The floor alone at the top rate's share of its own capacity.
        assert any(f.startswith(f"{endpoint}'s floor at 75% of its own capacity (")
                   for f in outcome.figures)
        # The overload step: what was refused, and the admitted requests' latency.
        assert any(f.startswith(f"{endpoint} overload: ") and "refused 503 overloaded" in f
                   for f in outcome.figures)
    assert [r.unit for r in outcome.ratios if "longest request" in r.name] == [" ms"] * 3


def test_durable_commits_count_the_commits_that_wrote_and_no_other(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'count.db'}")
    counter = DurableCommits()  # after the migrations' commits
    try:
        ledger = Ledger(store)
        for i in range(3):
            ledger.record_intent(Intent(f"op-{i}", "sha256:" + "ab" * 32, f"k-{i}", "pay",
                                        "charge", Effect.NON_IDEMPOTENT, utcnow()))
        wrote = counter.durable_commits
        ledger.judge("op-1")  # a decision that leaves the cache as it was: nothing written
        store.facts("op-2")  # a read transaction
        with store.engine.connect() as conn:
            conn.exec_driver_sql("DELETE FROM operation_state WHERE operation_id = 'op-0'")
            conn.rollback()
        with store.engine.begin() as conn:  # a commit after the rollback, with no changes
            conn.exec_driver_sql("SELECT 1")
    finally:
        store.engine.dispose()
        counter.close()
    assert wrote == 3
    assert counter.durable_commits == 3


def test_the_durable_floors_write_the_rows_their_routes_write(tmp_path: Path) -> None:
    """bench.server's floors of the attempts route and the retry check change the same rows and
    columns as the routes do (the values a decision caches are the floor's constants), and a
    write that changes no row fails its request instead of passing for one."""
    url = f"sqlite:///{tmp_path / 'floors.db'}"
    store = open_store(url)
    store.put_contract(CONTRACT)
    for op in ("retry-route", "retry-floor"):
        retryable(Ledger(store), op)
    Seeder(store.engine).undispatched(["attempt-route", "attempt-floor"])
    store.engine.dispose()
    app = create_app_with_noop(Settings(db=url, sweep_interval_s=0))
    host = {"host": "127.0.0.1"}

    def attempt(op: str) -> dict[str, object]:
        return {"attempt": 1, "idempotency_key": key_of(op), "request_hash": REQUEST_HASH,
                "outcome": "response", "status": 200,
                "receipt": {"provider_ref": f"ch-{op}", "request_hash": REQUEST_HASH}}

    def ask(op: str, holder: str = "bench-1") -> dict[str, object]:
        return {"idempotency_key": key_of(op), "request_hash": REQUEST_HASH, "holder": holder}

    with TestClient(app) as client:
        for prefix, suffix in (("/v1/operations", "route"), (FLOOR_PATH, "floor")):
            assert client.post(f"{prefix}/attempt-{suffix}/attempts",
                               json=attempt(f"attempt-{suffix}"), headers=host).status_code == 201
            assert client.post(f"{prefix}/retry-{suffix}/retry", json=ask(f"retry-{suffix}"),
                               headers=host).status_code == 200
        # Another holder's lease is not taken; an attempt recorded twice is no new row.
        assert client.post(f"{FLOOR_PATH}/retry-floor/retry", json=ask("retry-floor", "other"),
                           headers=host).status_code == 500
        assert client.post(f"{FLOOR_PATH}/attempt-floor/attempts", json=attempt("attempt-floor"),
                           headers=host).status_code == 500
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        def row(sql: str, op: str) -> dict[str, object]:
            found = conn.exec_driver_sql(sql, (op,)).mappings().all()
            assert len(found) == 1, (op, found)
            return dict(found[0])

        attempts = [row("SELECT number, report, outcome, status, receipt_hash, completed_at, "
                        "ungranted FROM attempts WHERE operation_id = ?", f"attempt-{side}")
                    for side in ("route", "floor")]
        states = [row("SELECT verdict, next_action, attempt_rows, due_at IS NOT NULL AS due "
                      "FROM operation_state WHERE operation_id = ?", f"attempt-{side}")
                  for side in ("route", "floor")]
        leases = [row("SELECT retry_holder, retry_attempt, length(retry_grant) AS grant_chars, "
                      "retry_lease_expires_at > updated_at AS ahead FROM operation_state "
                      "WHERE operation_id = ?", f"retry-{side}") for side in ("route", "floor")]
    engine.dispose()
    assert attempts[0] == attempts[1]
    assert states[0] == states[1]
    assert leases[0] == leases[1]


def test_console_list_pages_are_measured_beside_the_no_op_on_the_same_server(
        tmp_path: Path) -> None:
    outcome = run_tiny(console.run, tmp_path)
    assert_measured(outcome, 1)
    pages = {"/healthz", "/ui/operations?escalated=true", "/v1/operations, deep cursor"}
    kinds = ["sqlite"] + ([] if pg_unreachable() else ["postgresql"])
    assert {f"{kind} {page}" for kind in kinds for page in pages} <= set(outcome.latencies)


def test_reconcile_decides_every_due_operation_over_both_probe_wires_against_the_bound(
        tmp_path: Path) -> None:
    outcome = run_tiny(reconcile.run, tmp_path)
    assert_measured(outcome, 1)
    assert "sweep: due to verdict" in outcome.latencies
    # Issue 35: aiohttp measured as the probe wire, in rounds alternating with the product's,
    # each figure a median with its range, and the rule's outcome said.
    for wire in reconcile.WIRES:
        assert any(f.startswith(f"{wire} wire, sweep: ") for f in outcome.figures)
    assert any(f.startswith("aiohttp vs the product's wire") for f in outcome.figures)
    assert any("issue 35's rule" in note for note in outcome.notes)


def test_scale_compares_lookups_on_two_store_sizes_and_samples_memory_while_sweeping(
        tmp_path: Path) -> None:
    outcome = run_tiny(scale.run, tmp_path)
    assert_measured(outcome, 2)
    assert any("RSS" in figure for figure in outcome.figures)


def kept_rows(url: str, schema: str | None = None) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the seeded tables, in `schema` or the URL's own."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            where = f'"{schema}".' if schema else ""
            return {table: [tuple(row) for row in conn.exec_driver_sql(
                f"SELECT * FROM {where}{table} ORDER BY 1")]
                for table in ("providers", "intents", "operation_state", "attempts", "evidence")}
    finally:
        engine.dispose()


def kept_seeds() -> dict[str, tuple[int, str]]:
    """PostgreSQL's kept seed schemas: name -> (oid, comment)."""
    engine = create_engine(PG_URL, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return {name: (oid, comment or "") for name, oid, comment in conn.exec_driver_sql(
                "SELECT nspname, oid::int, obj_description(oid, 'pg_namespace') "
                "FROM pg_namespace WHERE starts_with(nspname, %s)", (seeds.KEPT,))}
    finally:
        engine.dispose()


def pg_admin(statement: str) -> None:
    engine = create_engine(PG_URL, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(statement)
    finally:
        engine.dispose()


@pytest.mark.skipif(pg_unreachable() is not None, reason=pg_unreachable() or "reachable")
def test_seed_kept_in_postgresql_is_copied_whole_reused_and_reseeded_when_incomplete() -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"  # its own key: no other run's seed is touched
    _, key = seeds.seed_key(prefix, 30, 5)
    name = seeds.KEPT + key
    pg_admin(f'CREATE SCHEMA "{seeds.KEPT}other"')  # another schema's seed: dropped as stale
    pg_admin(f"COMMENT ON SCHEMA \"{seeds.KEPT}other\" IS 'another-head|{{}}'")
    try:
        oids = []
        for _ in range(2):
            with seeds.bulk_postgres(True, PG_URL, prefix, 30, 5) as url:
                copied = kept_rows(url)
                assert copied == kept_rows(PG_URL, name)
                assert [len(copied[t]) for t in ("intents", "attempts", "evidence")] == [35, 30, 30]
                # The copy's id sequences run past the copied ids: the due rows go in beside.
                store = open_store(url)
                Seeder(store.engine).due([f"{prefix}-d-{i}" for i in range(3)])
                store.engine.dispose()
            oids.append(kept_seeds()[name][0])
        assert oids[0] == oids[1]  # the second run copied what the first kept
        assert f"{seeds.KEPT}other" not in kept_seeds()
        assert kept_rows(PG_URL, name) == copied  # the runs' own rows stayed in their schemas
        # A seed cut short (its comment still says so) is dropped and seeded again.
        pg_admin(f"COMMENT ON SCHEMA \"{name}\" IS 'seeding|{seeds.schema_key()}|{{}}'")
        with seeds.bulk_postgres(True, PG_URL, prefix, 30, 5) as url:
            assert len(kept_rows(url)["intents"]) == 35
        assert kept_seeds()[name][0] != oids[0]
    finally:
        pg_admin(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        pg_admin(f'DROP SCHEMA IF EXISTS "{seeds.KEPT}other" CASCADE')


@pytest.mark.skipif(pg_unreachable() is not None, reason=pg_unreachable() or "reachable")
def test_claims_compare_the_sweep_claim_on_two_store_sizes_on_sqlite_and_postgresql(
        tmp_path: Path) -> None:
    outcome = run_tiny(claims.run, tmp_path)
    assert_measured(outcome, 4)
    assert {f.split(" ")[0] for f in outcome.figures} == {"SQLite", "PostgreSQL"}


@pytest.mark.skipif(pg_unreachable() is not None, reason=pg_unreachable() or "reachable")
def test_replicas_sweep_without_double_probes_and_serve_load_at_one_two_and_three_replicas(
        tmp_path: Path) -> None:
    outcome = run_tiny(replicas.run, tmp_path)
    assert_measured(outcome, 2)
    [doubles] = [r for r in outcome.ratios if r.name.startswith("double probes")]
    assert doubles.value == 0
    for count in replica_load.REPLICA_COUNTS:
        for load in replica_load.LOADS:
            [figure] = [f for f in outcome.figures if f.startswith(f"{count} replica(s), {load}: ")]
            # Requests served and PostgreSQL's CPU for them (a local server: measured).
            assert re.search(r": [1-9][\d,]*/s", figure), figure
            assert re.search(r"PostgreSQL CPU per request [1-9][\d,]* us", figure), figure


@pytest.mark.skipif(pg_unreachable() is not None, reason=pg_unreachable() or "reachable")
def test_replicas_count_the_postgresql_cpu_of_sessions_that_ended_meanwhile() -> None:
    server = PgServer(PG_URL)
    try:
        before = server.cpu_s()
        assert before is not None, "the test's PostgreSQL runs on this machine"
        engine = create_engine(PG_URL, poolclass=NullPool)
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT count(*) FROM generate_series(1, 3000000)").scalar_one()
        engine.dispose()  # the session ends: its backend's time moves to the postmaster's
        time.sleep(0.2)
        after = server.cpu_s()
        assert after is not None
        # Counting 3,000,000 rows takes a backend well over 0.1 s of CPU on any machine.
        assert after - before >= 0.1
    finally:
        server.close()


def peers_missing() -> str | None:
    for module in ("dbos", "aws_lambda_powertools", "boto3", "redis"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[bench]')"
    if shutil.which("redis-server") is None and not Path("/usr/bin/redis-server").exists():
        return "redis-server is not installed (apt-get install redis-server)"
    return None


@pytest.mark.skipif(peers_missing() is not None, reason=peers_missing() or "installed")
def test_peers_are_measured_beside_the_ledger_dbos_on_sqlite_and_powertools_on_fsynced_redis(
        tmp_path: Path) -> None:
    outcome = run_tiny(peers.run, tmp_path)
    assert_measured(outcome, 3)
    # Two writes per idempotent call (in progress, then done), each fsynced by redis-server.
    assert any("2.00 fsynced SETs per call" in figure for figure in outcome.figures)
    assert list(tmp_path.glob("peers/appendonlydir/*.aof"))


def test_the_load_generator_prints_its_whole_result_when_the_loop_left_stdout_non_blocking(
        ) -> None:
    script = ("import os, sys; os.set_blocking(sys.stdout.fileno(), False); "
              "from bench.loadgen import Tally, emit; "
              "emit(Tally(requests=1, latencies_s=[0.00123456789] * 20_000))")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout) > 4 * 65_536
    assert len(json.loads(done.stdout)["latencies_s"]) == 20_000


def test_history_compares_the_per_fact_cost_of_a_long_history_with_a_short_one(
        tmp_path: Path) -> None:
    """Of evidence, of attempts of an idempotent_write and of retries of a non_idempotent
    action, each against the whole history decided again; and of attempts on the SQL store."""
    outcome = run_tiny(history.run, tmp_path)
    assert_measured(outcome, 4)
    assert [next(u for u in ("facts", "attempts", "retries") if f" {u} vs " in r.name)
            for r in outcome.ratios] == ["facts", "attempts", "retries", "attempts"]
    assert outcome.ratios[-1].name.endswith("SQL store")
    assert sum("whole history decided again" in figure for figure in outcome.figures) >= 6


def test_the_summary_lists_every_ratio_and_every_failure() -> None:
    outcome = Outcome("x", "a benchmark")
    outcome.ratio("fast", 2.0, 1.5, higher_is_better=True)
    outcome.ratio("slow", 2.0, 1.5, higher_is_better=False)
    text = summary([outcome], ["broken"], 1.0)
    assert "fast: 2.00x (target >= 1.5x) met" in text
    assert "slow: 2.00x (target <= 1.5x) MISSED" in text
    assert "broken" in text and "1 of 2 targets met" in text
    assert set(BENCHMARKS) == {"intents", "http", "reconcile", "scale", "claims", "replicas",
                               "console", "peers", "history", "cli"}
