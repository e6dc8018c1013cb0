"""What the reconciler costs a worker on the hot path, call by call, next to the floors it
cannot go below, with the database work behind each call (a diagnostic beside the suite):

    python -m bench.hot_path [--n N] [--warmup W] [--db URL] [--json]

Three sections, measured in one run so that every figure and its baseline share the machine,
the database and its durability settings:

1. in process, through `Ledger` and `RetryGate` on the store, against a one-row INSERT + COMMIT
   on the same engine (the irreducible durable write);
2. over HTTP on loopback against the real service, against GET /healthz on the same server and
   client (the round-trip floor) and against section 1 (what HTTP adds);
3. a tracked call (`client.track` + `dispatch`) against calling `send` directly.

Compare rows within one run, never across machines. bench/README.md explains the rows.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import math
import os
import platform
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import TypeVar

import httpx
import uvicorn
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from bench.harness import BenchError
from bench.operations import (
    CONTRACT,
    PROVIDER,
    REQUEST_HASH,
    intent_of,
    key_of,
    pg_schema,
    retryable,
)
from bench.sqlcount import SqlCounter
from reconciler.client import ReconcilerClient
from reconciler.core.domain import (
    Attempt,
    Effect,
    Intent,
    Outcome,
)
from reconciler.core.schemas import AttemptIn, IntentIn, RetryIn
from reconciler.infra.serving import bind, in_thread
from reconciler.ledger import Ledger, utcnow
from reconciler.ledger.gate import RetryGate, RetryRequest
from reconciler.service.app import create_app
from reconciler.service.settings import Settings
from reconciler.store.leases import SqlLeases
from reconciler.store.schema import open_store
from reconciler.store.sql import SqlStore

A = TypeVar("A")

HOLDER = "hot-path-worker"
FLOOR_TABLE = "hot_path_floor"
SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}

IN_PROCESS, HTTP, TRACKED = "in process", "HTTP on loopback", "tracked call"


@dataclass(frozen=True, slots=True)
class Series:
    """One measured call: per-iteration wall times, and database work per iteration."""

    section: str
    name: str
    samples_ns: Sequence[int]
    transactions: float
    durable_commits: float
    statements: float

    def percentile(self, p: float) -> int:
        """Nearest rank: a value that was actually observed."""
        ordered = sorted(self.samples_ns)
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]

    @property
    def median(self) -> int:
        return self.percentile(50)

    @property
    def mean(self) -> float:
        return sum(self.samples_ns) / len(self.samples_ns)


@dataclass
class Bench:
    n: int
    warmup: int
    counter: SqlCounter
    results: list[Series] = field(default_factory=list)

    def measure(self, section: str, name: str, prepare: Callable[[], A],
                run: Callable[[A], object]) -> None:
        """Time `run` alone, `warmup + n` times, each on a fresh argument from `prepare`."""
        print(f"measuring {section}: {name}", file=sys.stderr, flush=True)
        samples: list[int] = []
        transactions = durable = statements = 0
        # A series should not pay for the garbage of the one before.
        gc.collect()
        for i in range(self.warmup + self.n):
            arg = prepare()
            before = self.counter.snapshot()
            started = time.perf_counter_ns()
            run(arg)
            elapsed = time.perf_counter_ns() - started
            after = self.counter.snapshot()
            if i >= self.warmup:
                samples.append(elapsed)
                transactions += after[0] - before[0]
                durable += after[1] - before[1]
                statements += after[2] - before[2]
        self.results.append(Series(section, name, samples, transactions / self.n,
                                   durable / self.n, statements / self.n))


class Operations:
    """Fresh operations, each in the state a measured call expects, made outside the timing."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._ids = (f"hp-{uuid.uuid4().hex[:8]}-{i}" for i in itertools.count())

    def new_id(self) -> str:
        return next(self._ids)

    def intent(self, at: datetime | None = None) -> Intent:
        return intent_of(self.new_id(), at or utcnow())

    def intent_in(self) -> IntentIn:
        op = self.new_id()
        return IntentIn(operation_id=op, request_hash=REQUEST_HASH, idempotency_key=key_of(op),
                        provider=PROVIDER, action="charge", effect=Effect.IDEMPOTENT_WRITE)

    def recorded(self) -> Intent:
        intent = self.intent()
        self.ledger.record_intent(intent)
        return intent

    # The multi-step states below write their facts straight to the store and judge once at
    # the end: the rows and the cached verdict end up as the ledger leaves them, without a
    # judgement per step (about 2 ms each on SQLite), which keeps a default run within a minute.

    def dispatched(self) -> Intent:
        intent = self.intent()
        self.ledger.store.record_intent(intent)
        self.ledger.record_attempt(first_attempt(intent, intent.at))
        return intent

    def retryable(self) -> Intent:
        return retryable(self.ledger, self.new_id())


def first_attempt(intent: Intent, at: datetime) -> Attempt:
    return Attempt(intent.operation_id, 1, intent.idempotency_key, intent.request_hash, at,
                   Outcome.TIMEOUT)


def retry_request(intent: Intent) -> RetryRequest:
    return RetryRequest(intent.operation_id, intent.idempotency_key, intent.request_hash, HOLDER)


def in_process(bench: Bench, store: SqlStore, ops: Operations) -> None:
    ledger = ops.ledger
    gate = RetryGate(ledger, SqlLeases(store))
    insert = text(f"INSERT INTO {FLOOR_TABLE} (id) VALUES (:id)")

    def floor(op: str) -> None:
        with store.engine.begin() as conn:
            conn.execute(insert, {"id": op})

    def ask(request: RetryRequest) -> None:
        answer = gate.ask(request)
        if not answer.allowed:
            raise BenchError(f"in-process gate refused {request.operation_id}: "
                                 f"{answer.reason}")

    bench.measure(IN_PROCESS, "floor: INSERT + COMMIT", ops.new_id, floor)
    bench.measure(IN_PROCESS, "record_intent", ops.intent, ledger.record_intent)
    bench.measure(IN_PROCESS, "record_attempt",
                  lambda: first_attempt(ops.recorded(), utcnow()), ledger.record_attempt)
    bench.measure(IN_PROCESS, "gate ask (granted)", lambda: retry_request(ops.retryable()), ask)
    bench.measure(IN_PROCESS, "judge (GET equivalent)",
                  lambda: ops.dispatched().operation_id, ledger.judge)


def over_http(bench: Bench, client: ReconcilerClient, ops: Operations) -> None:
    def healthz(_: None) -> None:
        client.http.get("/healthz").raise_for_status()

    def post_intent(intent: IntentIn) -> None:
        if not client.record_intent(intent).created:
            raise BenchError(f"{intent.operation_id} was not new")

    def post_attempt(intent: Intent) -> None:
        # With `at`, as TrackedEffect sends it.
        client.record_attempt(intent.operation_id, AttemptIn(
            attempt=1, idempotency_key=intent.idempotency_key,
            request_hash=intent.request_hash, at=datetime.now(UTC), outcome=Outcome.TIMEOUT))

    def post_retry(intent: Intent) -> None:
        answer = client.ask_retry(intent.operation_id, RetryIn(
            idempotency_key=intent.idempotency_key, request_hash=intent.request_hash,
            holder=HOLDER))
        if not answer.allowed:
            raise BenchError(f"HTTP gate refused {intent.operation_id}: {answer.reason}")

    def get_operation(intent: Intent) -> None:
        client.get(intent.operation_id)

    # Operations are prepared in process: the service reads the same database.
    bench.measure(HTTP, "GET /healthz", lambda: None, healthz)
    bench.measure(HTTP, "POST /v1/operations", ops.intent_in, post_intent)
    bench.measure(HTTP, "POST .../attempts", ops.recorded, post_attempt)
    bench.measure(HTTP, "POST .../retry (granted)", ops.retryable, post_retry)
    bench.measure(HTTP, "GET /v1/operations/{id}", ops.dispatched, get_operation)


def tracked(bench: Bench, client: ReconcilerClient, ops: Operations) -> None:
    canned = httpx.Response(200, json={"id": "ch_1"})

    def send() -> httpx.Response:
        return canned

    def track(intent: IntentIn) -> None:
        with client.track(intent) as effect:
            effect.dispatch(send)

    bench.measure(TRACKED, "send() directly", lambda: None, lambda _: send())
    bench.measure(TRACKED, "track() + dispatch(send)", ops.intent_in, track)


#: Each row's baseline, and for HTTP rows the in-process row doing the same work.
BASELINES = {
    IN_PROCESS: "floor: INSERT + COMMIT",
    HTTP: "GET /healthz",
    TRACKED: "send() directly",
}
IN_PROCESS_TWIN = {
    "POST /v1/operations": "record_intent",
    "POST .../attempts": "record_attempt",
    "POST .../retry (granted)": "gate ask (granted)",
    "GET /v1/operations/{id}": "judge (GET equivalent)",
}


@contextmanager
def database(db: str | None) -> Iterator[str]:
    """The URL to measure on: a SQLite file in a temporary directory by default; on
    PostgreSQL a fresh schema, selected through search_path and dropped afterwards."""
    if db is None:
        with tempfile.TemporaryDirectory(prefix="hot_path_") as tmp:
            yield f"sqlite:///{Path(tmp) / 'reconciler.db'}"
    elif make_url(db).get_backend_name() == "sqlite":
        yield db
    else:
        with pg_schema(db) as url:
            yield url


@contextmanager
def floor_table(engine: Engine) -> Iterator[None]:
    """The baseline's one-column table, in the measured database, for the run only."""
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (id VARCHAR(64) PRIMARY KEY)")
    try:
        yield
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP TABLE {FLOOR_TABLE}")


def environment(engine: Engine, n: int, warmup: int) -> dict[str, object]:
    env: dict[str, object] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        # Other work on the machine shows up here, and in every row's p90 and p99.
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "db": engine.url.render_as_string(hide_password=True),
        "db_kind": engine.dialect.name,
        "n": n,
        "warmup": warmup,
        "versions": {name: version(name) for name in
                     ("sqlalchemy", "fastapi", "uvicorn", "httpx", "pydantic")},
    }
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            env["sqlite_version"] = sqlite3.sqlite_version
            env["journal_mode"] = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
            sync = conn.exec_driver_sql("PRAGMA synchronous").scalar()
            env["synchronous"] = SYNCHRONOUS.get(int(sync or 0), str(sync))
        else:
            env["server_version"] = conn.exec_driver_sql("SHOW server_version").scalar()
            env["synchronous_commit"] = conn.exec_driver_sql("SHOW synchronous_commit").scalar()
            env["fsync"] = conn.exec_driver_sql("SHOW fsync").scalar()
    return env


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the report, with its comparisons; the JSON output is these, as dicts."""

    section: str
    name: str
    count: int
    median_ns: int
    p90_ns: int
    p99_ns: int
    mean_ns: int
    ops_per_s: float
    baseline: str
    x_baseline: float
    over_baseline_ns: int
    transactions_per_op: float
    durable_commits_per_op: float
    statements_per_op: float
    in_process: str | None
    http_adds_ns: int | None


def rows(results: list[Series]) -> list[Row]:
    by_name = {(s.section, s.name): s for s in results}
    out = []
    for s in results:
        baseline = by_name[(s.section, BASELINES[s.section])]
        twin = IN_PROCESS_TWIN.get(s.name)
        out.append(Row(
            s.section, s.name, len(s.samples_ns), s.median, s.percentile(90),
            s.percentile(99), round(s.mean), round(1e9 / s.mean, 1), baseline.name,
            round(s.median / baseline.median, 2), s.median - baseline.median, s.transactions,
            s.durable_commits, s.statements, twin,
            None if twin is None else s.median - by_name[(IN_PROCESS, twin)].median))
    return out


def render(env: dict[str, object], table: list[Row]) -> str:
    def us(ns: float | None) -> str:
        return "" if ns is None else f"{ns / 1000:,.1f}"

    lines = [f"{key:<18} {value}" for key, value in env.items()]
    header = (f"{'':<26} {'n':>5} {'median':>9} {'p90':>9} {'p99':>9} {'mean':>9} {'ops/s':>9}"
              f" {'x base':>9} {'+ base':>9} {'HTTP adds':>9} {'tx':>5} {'wr-tx':>5} {'stmts':>5}")
    for section, baseline in BASELINES.items():
        lines += ["", f"{section} (times in us; baseline: {baseline})", header]
        lines += [f"{r.name:<26} {r.count:>5} {us(r.median_ns):>9} {us(r.p90_ns):>9}"
                  f" {us(r.p99_ns):>9} {us(r.mean_ns):>9} {r.ops_per_s:>9,.0f}"
                  f" {r.x_baseline:>9,.1f} {us(r.over_baseline_ns):>9} {us(r.http_adds_ns):>9}"
                  f" {r.transactions_per_op:>5.1f} {r.durable_commits_per_op:>5.1f}"
                  f" {r.statements_per_op:>5.1f}" for r in table if r.section == section]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=500, help="measured iterations per row")
    parser.add_argument("--warmup", type=int, default=50, help="unmeasured iterations first")
    parser.add_argument("--db", help="SQLAlchemy URL (default: SQLite in a temporary dir); "
                        "PostgreSQL runs in a fresh schema, dropped afterwards")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = parser.parse_args(argv)
    if args.n < 1 or args.warmup < 0:
        parser.error("--n must be at least 1 and --warmup at least 0")
    if args.db is not None:
        url = make_url(args.db)
        if url.get_backend_name() not in ("sqlite", "postgresql"):
            parser.error("--db must be a SQLite or a PostgreSQL URL")
        if url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:"):
            # The service opens its own engine: an in-memory database would be another one.
            parser.error("--db: an in-memory SQLite database cannot be shared with the "
                         "service; give a file")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # Before any engine exists, so that every engine's work is counted.
    counter = SqlCounter()
    bench = Bench(args.n, args.warmup, counter)
    with ExitStack() as stack:
        url = stack.enter_context(database(args.db))
        store = open_store(url)
        stack.callback(store.engine.dispose)
        store.put_contract(CONTRACT)
        stack.enter_context(floor_table(store.engine))
        env = environment(store.engine, args.n, args.warmup)
        ops = Operations(Ledger(store))

        in_process(bench, store, ops)
        # Access logging is off, as in the test harness: uvicorn's `info` level would write a
        # line per request, which measures the terminal, not the service.
        app = create_app(Settings(db=url, sweep_interval_s=0))
        stack.callback(app.state.wiring.store.engine.dispose)
        server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning"))
        base = stack.enter_context(in_thread(server, bind("127.0.0.1", 0)))
        client = stack.enter_context(ReconcilerClient(base))
        over_http(bench, client, ops)
        tracked(bench, client, ops)

    table = rows(bench.results)
    if args.json:
        print(json.dumps({"environment": env, "results": [asdict(r) for r in table]}, indent=2))
    else:
        print(render(env, table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
