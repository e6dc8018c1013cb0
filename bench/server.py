"""The sidecar exactly as `reconciler serve` runs it (same app, middleware, uvicorn settings and
logging), with two more routes, the baselines of the `http` benchmark, measured on the same
process type as the real routes:

- `POST /bench/noop` does nothing: the floor of the server stack, so that a ratio against it
  compares the product's work and nothing else. The no-op pays what every hot route pays
  before its own work: the same middleware, the same route class (`HotRoute`,
  service.hot_routes, as the operations router declares it), the same authorization
  dependency (`Worker`, as the POST routes declare it), and a route lookup as short as theirs
  (it is first in the table; appended last, its lookup walked every router the service has,
  about 70 us of CPU a request that the hot routes, matched near the front, never pay). It
  reads no body: parsing one is the route's work.
- `POST /bench/floor` records an intent with nothing of the product's between the request
  and the disk: the intent route's body model (`IntentIn`, parsed and validated in one pass)
  and dependency, then the same two rows `SqlStore.record_intent` writes (the intent and its
  state row, bench.intents' statements) through the `sqlite3` module, committed by a writer
  thread that takes everything queued at once (group commit, WAL + synchronous=FULL, on the
  product's own store file), the route awaiting an asyncio future; it answers a constant.
  What the intent route costs above it is the product's: the ledger and the verdict, the
  store's layers, the greenlet the ledger runs in, the operation it answers with.

    python -m bench.server    # settings from RECONCILER_*, as python -m reconciler.service.server
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from datetime import UTC, datetime

from fastapi import FastAPI

from bench.intents import INSERT, INSERT_STATE
from reconciler.core.ports import FIRST_DECISION
from reconciler.core.schemas import IntentIn
from reconciler.ledger import Ledger
from reconciler.ledger.sweep import ProbeLookup
from reconciler.service import server
from reconciler.service.app import create_app
from reconciler.service.auth import Worker
from reconciler.service.hot_routes import HotRoute
from reconciler.service.settings import Settings

NOOP_PATH = "/bench/noop"
FLOOR_PATH = "/bench/floor"

#: A writer's rows: the intent's and its state row's parameters, and the future to resolve.
_Queued = tuple[tuple[object, ...], tuple[object, ...], asyncio.Future[None]]


class FloorCommitter:
    """Group commit in its barest form: callers on the event loop queue their rows and await a
    future; one writer thread commits everything queued in one transaction, then resolves the
    futures on their loop (one wake-up a batch)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._queue: list[_Queued] = []
        self._ready = threading.Condition()
        self._writer: threading.Thread | None = None

    async def record(self, intent: tuple[object, ...], state: tuple[object, ...]) -> None:
        answered = asyncio.get_running_loop().create_future()
        with self._ready:
            self._queue.append((intent, state, answered))
            if self._writer is None:
                self._writer = threading.Thread(target=self._write, daemon=True,
                                                name="floor committer")
                self._writer.start()
            self._ready.notify()
        await answered

    async def route(self, body: IntentIn, caller: Worker) -> dict[str, bool]:
        """`POST /bench/floor`: the intent's two rows, committed, and a constant answer."""
        # The text SQLAlchemy stores for a UTC datetime on SQLite (as bench.intents writes).
        at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        op = body.operation_id
        await self.record(
            (op, body.request_hash, body.idempotency_key, body.provider, body.action,
             body.effect.value, at, body.run_id, body.tool_call_id, "{}"),
            (op, FIRST_DECISION[0].value, FIRST_DECISION[1], False, 0, at))
        return {"ok": True}

    def _write(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=30,
                               check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        while True:
            with self._ready:
                while not self._queue:
                    self._ready.wait()
                batch, self._queue = self._queue, []
            error: BaseException | None = None
            try:
                conn.execute("BEGIN IMMEDIATE")
                for intent, state, _ in batch:
                    conn.execute(INSERT, intent)
                    conn.execute(INSERT_STATE, state)
                conn.execute("COMMIT")
            except sqlite3.Error as exc:  # the benchmark's ids are unique: a failure is a bug
                error = exc
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            futures = [answered for _, _, answered in batch]
            futures[0].get_loop().call_soon_threadsafe(_resolve, futures, error)


def _resolve(futures: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for future in futures:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


async def noop(caller: Worker) -> dict[str, bool]:
    return {"ok": True}


def create_app_with_noop(settings: Settings, *, ledger: Ledger | None = None,
                         probes_for: ProbeLookup | None = None) -> FastAPI:
    app = create_app(settings, ledger=ledger, probes_for=probes_for)
    if settings.db.startswith("sqlite:///"):
        floor = FloorCommitter(settings.db.removeprefix("sqlite:///"))
        app.router.add_api_route(FLOOR_PATH, floor.route, methods=["POST"], status_code=201,
                                 route_class_override=HotRoute)
        app.router.routes.insert(0, app.router.routes.pop())
    app.router.add_api_route(NOOP_PATH, noop, methods=["POST"], route_class_override=HotRoute)
    # Starlette's router tries `app.router.routes` in order on every request (starlette
    # routing.Router.app, FastAPI's APIRouter.app alike): moved to the front.
    app.router.routes.insert(0, app.router.routes.pop())
    return app


if __name__ == "__main__":
    # `serve` builds its app through this module global: swapping it reuses everything else
    # `reconciler serve` does, instead of a copy that could drift from it.
    vars(server)["create_app"] = create_app_with_noop
    server.main()
