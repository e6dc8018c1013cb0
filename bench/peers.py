"""Peers, side by side with the ledger, same disk, alternating rounds: CPU time per durable
operation and wall throughput.

- DBOS Transact on a SQLite system database in WAL mode with `synchronous=FULL`, the ledger's
  own durability: a one-step workflow, and a step inside a workflow (the marginal cost of a
  step: a STEPS-step workflow less a one-step one, divided by STEPS - 1), against the ledger's
  `record_attempt` and `record_intent` + `record_attempt`.
- Powertools idempotency (`idempotent_function` on `RedisCachePersistenceLayer`) against a
  redis-server this benchmark starts on a free loopback port with `appendonly yes` and
  `appendfsync always` (each write fsynced before it is answered), the decorated function doing
  nothing, against the ledger's `record_intent` + `record_attempt`.

CPU is `time.process_time()` of this process (every thread: DBOS's pollers, the store's group
committer) over a round; redis-server's own CPU comes from its `INFO cpu`. Every side runs in
this one process, turn about, `calls` at a time, so load from elsewhere falls on all alike.
"""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from shutil import which
from typing import Any, cast

from bench.harness import BenchError, Context, Outcome, rate
from reconciler.core.domain import Attempt, Effect, Intent
from reconciler.core.domain import Outcome as Transport
from reconciler.ledger import Ledger, utcnow
from reconciler.store.schema import open_store

NAME = "peers"
#: "per durable step at most 0.5x DBOS's CPU" (issue 16).
STEP_TARGET = 0.5
#: "intent + attempt at most 1.5x Powertools-on-Redis' (fsync) CPU" (issue 16).
IDEMPOTENCY_TARGET = 1.5
STEPS = 8
REQUEST_HASH = "sha256:" + "cd" * 32
PROVIDER = "bench-pay"
MISSING = ("is not installed: `pip install -e '.[bench]'` installs DBOS Transact, "
           "aws-lambda-powertools and redis")


@dataclass(slots=True)
class CpuRun:
    """Calls made, their wall time, this process's CPU time, and the CPU time of a server
    the calls went to (redis-server), over one or more rounds."""

    calls: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    server_cpu_s: float = 0.0

    def add(self, other: CpuRun) -> None:
        self.calls += other.calls
        self.wall_s += other.wall_s
        self.cpu_s += other.cpu_s
        self.server_cpu_s += other.server_cpu_s

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / self.calls * 1e6

    @property
    def server_cpu_us(self) -> float:
        return self.server_cpu_s / self.calls * 1e6

    @property
    def per_s(self) -> float:
        return rate(self.calls, self.wall_s)


@dataclass(frozen=True, slots=True)
class Side:
    """One thing measured: `prepare(n)` builds call n's argument off the clock, `call` is
    timed; `server_cpu_s` reads a server's CPU counter, when the calls go to one."""

    label: str
    calls: int
    call: Callable[[Any], object]
    prepare: Callable[[int], object] = lambda n: n
    server_cpu_s: Callable[[], float] | None = None


def measure(side: Side) -> CpuRun:
    args = [side.prepare(n) for n in range(side.calls)]
    server_before = side.server_cpu_s() if side.server_cpu_s else 0.0
    wall, cpu = time.perf_counter(), time.process_time()
    for arg in args:
        side.call(arg)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    server = side.server_cpu_s() - server_before if side.server_cpu_s else 0.0
    return CpuRun(side.calls, wall, cpu, server)


def idle_cpu_per_s(seconds: float) -> float:
    """This process's CPU time per second while it waits: the background threads' share."""
    wall, cpu = time.perf_counter(), time.process_time()
    time.sleep(seconds)
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


def rounds(sides: list[Side], count: int) -> dict[str, CpuRun]:
    """Every side in turn, `count` times."""
    totals = {side.label: CpuRun() for side in sides}
    for _ in range(count):
        for side in sides:
            totals[side.label].add(measure(side))
    return totals


class LedgerSide:
    """The product: a ledger on a SQLite file in the same directory as the peers' data."""

    def __init__(self, directory: Path) -> None:
        self.store = open_store(f"sqlite:///{directory / 'product.db'}")
        self.ledger = Ledger(self.store)
        self.prefix = uuid.uuid4().hex[:8]
        self.numbers = iter(range(10**12))

    def intent(self, _: int = 0) -> Intent:
        op = f"{self.prefix}-{next(self.numbers)}"
        return Intent(op, REQUEST_HASH, f"key-{op}", PROVIDER, "charge", Effect.NON_IDEMPOTENT,
                      utcnow())

    def recorded(self, _: int) -> Attempt:
        intent = self.intent()
        self.new(self.ledger.record_intent(intent).created, intent)
        return first_attempt(intent)

    def attempt(self, attempt: Attempt) -> None:
        self.new(self.ledger.record_attempt(attempt).created, attempt)

    def intent_and_attempt(self, intent: Intent) -> None:
        self.new(self.ledger.record_intent(intent).created, intent)
        self.attempt(first_attempt(intent))

    @staticmethod
    def new(created: bool, fact: Intent | Attempt) -> None:
        if not created:
            raise BenchError(f"{fact.operation_id} was not new: the benchmark reused an id")


def first_attempt(intent: Intent) -> Attempt:
    return Attempt(intent.operation_id, 1, intent.idempotency_key, intent.request_hash,
                   utcnow(), Transport.TIMEOUT)


def sqlite_durable(path: Path, seen: list[tuple[str, int]]) -> Callable[[], sqlite3.Connection]:
    """A connection factory for DBOS's own engine: the ledger's durability on every
    connection (WAL, synchronous=FULL), and what SQLite says it applied, for the check."""

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(path, check_same_thread=False, timeout=30)
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        conn.execute("PRAGMA synchronous=FULL")
        seen.append((mode, conn.execute("PRAGMA synchronous").fetchone()[0]))
        return conn

    return connect


@contextmanager
def dbos_app(directory: Path) -> Iterator[tuple[Callable[[int], object],
                                                Callable[[int], object]]]:
    """DBOS launched on `directory/dbos.sqlite`: a one-step workflow and a STEPS-step one.

    The engine is DBOS's own (`db_engine_kwargs` reach its `create_engine`, and its connect
    hook still sets `BEGIN IMMEDIATE`, the busy timeout and foreign keys); only the `creator`
    is ours, so that every connection is in WAL mode with `synchronous=FULL` (DBOS sets
    neither: its default SQLite journal is the rollback journal)."""
    try:
        from dbos import DBOS, DBOSConfig
    except ImportError as exc:
        raise BenchError(f"DBOS Transact (`dbos`) {MISSING}: {exc}") from exc
    path = directory / "dbos.sqlite"
    seen: list[tuple[str, int]] = []
    config: DBOSConfig = {"name": "bench-peers", "system_database_url": f"sqlite:///{path}",
                          "db_engine_kwargs": {"creator": sqlite_durable(path, seen)},
                          "log_level": "WARNING"}
    DBOS(config=config)
    try:
        @DBOS.step()
        def step(n: int) -> int:
            return n

        @DBOS.workflow()
        def one_step(n: int) -> int:
            return step(n)

        @DBOS.workflow()
        def steps(n: int) -> int:
            for i in range(STEPS):
                step(i)
            return n

        DBOS.launch()
        if one_step(7) != 7:
            raise BenchError("a DBOS workflow did not return its step's result")
        if not seen or any(s != ("wal", 2) for s in seen):
            raise BenchError(f"DBOS's SQLite connections are not WAL + synchronous=FULL: {seen}")
        yield one_step, steps
    finally:
        DBOS.destroy(destroy_registry=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def redis_server(directory: Path) -> Iterator[Any]:
    """redis-server on a free loopback port, its append-only file fsynced on every write,
    its data in `directory`; a client to it. Stopped on the way out."""
    try:
        import redis
    except ImportError as exc:
        raise BenchError(f"the Redis client (`redis`) {MISSING}: {exc}") from exc
    binary = which("redis-server") or "/usr/bin/redis-server"
    if not Path(binary).exists():
        raise BenchError("redis-server not found: install Debian's package "
                         "(`apt-get install redis-server`)")
    port = free_port()
    process = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(directory),
         "--appendonly", "yes", "--appendfsync", "always", "--save", "",
         "--logfile", str(directory / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise BenchError(f"redis-server did not serve on port {port}: "
                                     f"see {directory / 'redis.log'}") from None
                time.sleep(0.05)
        config = client.config_get("append*")
        if (config.get("appendonly"), config.get("appendfsync")) != ("yes", "always"):
            raise BenchError(f"redis-server is not fsyncing every write: {config}")
        yield client
    finally:
        client.close()
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def redis_cpu_s(client: Any) -> float:
    """redis-server's CPU time (user + system, all its threads), from `INFO cpu`.

    `used_cpu_user` and `used_cpu_sys` are the whole process's, "main thread and background
    threads" (redis-doc commands/info.md; `*_main_thread` is the main thread alone). With
    `appendfsync always` the main thread writes and fsyncs the log before it answers, so the
    fsync's system time is in them either way. `*_children` would be forked saves and log
    rewrites: this server is started with no saves and never grows its log to a rewrite."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def redis_sets(client: Any) -> int:
    return int(client.info("commandstats").get("cmdstat_set", {}).get("calls", 0))


class Invocation:
    """What Powertools reads from a Lambda context: the time the invocation has left."""

    def get_remaining_time_in_millis(self) -> int:
        return 900_000


def idempotent_noop(client: Any) -> Callable[[dict[str, str]], object]:
    """A Powertools idempotent function that does nothing, its records in Redis."""
    try:
        from aws_lambda_powertools.utilities.idempotency import (
            IdempotencyConfig,
            idempotent_function,
        )
        from aws_lambda_powertools.utilities.idempotency.persistence.redis import (
            RedisCachePersistenceLayer,
        )
    except ImportError as exc:
        raise BenchError(f"Powertools (`aws-lambda-powertools`) {MISSING}: {exc}") from exc
    with warnings.catch_warnings():
        # Powertools 3 renamed it CachePersistenceLayer (the same class) and warns.
        warnings.simplefilter("ignore", DeprecationWarning)
        layer = RedisCachePersistenceLayer(client=client)

    config = IdempotencyConfig(expires_after_seconds=3600)
    # As in Lambda, where Powertools' handler decorator registers the invocation's context:
    # the in-progress record then expires with the invocation (and no warning is raised).
    config.register_lambda_context(cast(Any, Invocation()))

    def handle(order: dict[str, str]) -> None:
        return None

    idempotent: Callable[..., object] = idempotent_function(
        handle, data_keyword_argument="order", persistence_store=layer, config=config)

    def call(order: dict[str, str]) -> object:
        return idempotent(order=order)

    return call


def run(ctx: Context) -> Outcome:
    out = Outcome(NAME, "peers, same disk, alternating rounds: DBOS Transact (SQLite, WAL + "
                        "synchronous=FULL), Powertools idempotency (Redis, appendfsync always)")
    directory = ctx.workdir / NAME
    directory.mkdir()
    count = ctx.size(60, 200)
    laps = ctx.size(3, 5)
    product = LedgerSide(directory)
    prefix = uuid.uuid4().hex[:8]
    try:
        with dbos_app(directory) as (one_step, steps), redis_server(directory) as client:
            idempotent = idempotent_noop(client)
            sets_before = redis_sets(client)
            sides = [
                Side("DBOS one-step workflow", count, one_step),
                Side(f"DBOS {STEPS}-step workflow", max(1, count // STEPS), steps),
                Side("ledger record_attempt", count, product.attempt, product.recorded),
                Side("ledger record_intent + record_attempt", count, product.intent_and_attempt,
                     product.intent),
                Side("Powertools idempotent call (Redis)", count, idempotent,
                     lambda n: {"order": f"{prefix}-{n}-{uuid.uuid4().hex}"},
                     lambda: redis_cpu_s(client)),
            ]
            totals = rounds(sides, laps)
            sets = redis_sets(client) - sets_before
            idle = idle_cpu_per_s(ctx.seconds(1.0, 2.0))
    finally:
        product.store.engine.dispose()
    report(out, totals, sets)
    # DBOS's pollers run through every side's rounds: say how much they take on their own.
    out.figure(f"this process idle, DBOS launched: {idle * 1e3:,.1f} ms CPU per second")
    out.notes.append(f"{laps} alternating rounds; CPU is this process's (all threads), plus "
                     "redis-server's own from INFO cpu; DBOS and the ledger share the directory")
    return out


def report(out: Outcome, totals: dict[str, CpuRun], sets: int) -> None:
    for label, run in totals.items():
        server = (f" + redis-server {run.server_cpu_us:,.0f} us"
                  if label.startswith("Powertools") else "")
        out.figure(f"{label}: {run.cpu_us:,.0f} us CPU per call{server}; "
                   f"{run.per_s:,.1f} calls/s (n={run.calls:,})")
    one = totals["DBOS one-step workflow"]
    many = totals[f"DBOS {STEPS}-step workflow"]
    step_us = (many.cpu_us - one.cpu_us) / (STEPS - 1)
    if step_us <= 0:
        raise BenchError(f"a {STEPS}-step DBOS workflow cost no more CPU than a one-step one "
                         f"({many.cpu_us:,.0f} against {one.cpu_us:,.0f} us): too noisy to "
                         "tell a step's cost; run at a larger size")
    out.figure(f"DBOS step inside a workflow (marginal): {step_us:,.0f} us CPU per step "
               f"({many.cpu_us / STEPS:,.0f} us per step with the workflow's own cost shared)")
    attempt = totals["ledger record_attempt"]
    both = totals["ledger record_intent + record_attempt"]
    powertools = totals["Powertools idempotent call (Redis)"]
    stack_us = powertools.cpu_us + powertools.server_cpu_us
    out.figure(f"Powertools on Redis: {sets / powertools.calls:.2f} fsynced SETs per call; "
               f"{stack_us:,.0f} us CPU per call, client and redis-server")
    out.ratio("record_attempt CPU vs a DBOS step in a workflow", attempt.cpu_us / step_us,
              STEP_TARGET, higher_is_better=False)
    out.ratio("intent + attempt CPU vs a DBOS one-step workflow", both.cpu_us / one.cpu_us,
              STEP_TARGET, higher_is_better=False)
    # The whole stack on both sides: the ledger's SQLite runs in this process (its writes and
    # fsyncs are in this process's CPU), Powertools' store is redis-server, another process.
    out.ratio("intent + attempt CPU vs a Powertools idempotent call on Redis (fsync), "
              "client + redis-server", both.cpu_us / stack_us, IDEMPOTENCY_TARGET,
              higher_is_better=False)
    out.notes.append(f"intent + attempt CPU vs the Powertools client alone (redis-server's CPU "
                     f"left out): {both.cpu_us / powertools.cpu_us:.2f}x; not like for like, "
                     "since the ledger's store works inside the measured process")
