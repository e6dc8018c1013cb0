"""The sidecar exactly as `reconciler serve` runs it (same app, middleware, uvicorn settings and
logging), with more routes, the baselines of the `http` benchmark, measured on the same process
type as the real routes:

- `POST /bench/noop` does nothing: the floor of the server stack. The no-op pays what every hot
  route pays before its own work: the same middleware, the same route class (`HotRoute`,
  service.hot_routes, as the operations router declares it, so the same `HotQueue` admission),
  the same authorization dependency (`Worker`, as the POST routes declare it), and a route
  lookup as short as theirs (it is first in the table; appended last, its lookup walked every
  router the service has, about 70 us of CPU a request that the hot routes, matched near the
  front, never pay). It reads no body: parsing one is the route's work.
- The durable floors, `POST /bench/floor...`: each hot write route's request with nothing of
  the product's between it and the disk. The route's own body model (parsed and validated in
  one pass) and path parameter and the same dependency, then the rows the product's route
  writes, through the `sqlite3` module, committed by a writer thread that takes everything
  queued at once (group commit, WAL + synchronous=FULL, foreign keys on, on the product's own
  store file), the route awaiting an asyncio future; a constant answer. What a route costs
  above its floor is the product's: the ledger and the verdict, the store's layers and reads,
  the greenlet the ledger runs in, the answer it builds.
  - `POST /bench/floor` (`POST /v1/operations`): the intent's row and its state row, as
    `SqlStore.record_intent` inserts them (bench.intents' statements).
  - `POST /bench/floor/{id}/attempts` (`POST /v1/operations/{id}/attempts`, attempt 1 with its
    outcome): the attempt's row, and the operation's state row updated once: its count of
    attempt rows, and the verdict, next action, due time and update time a decision caches (as
    constants: deciding is the product's work). The product updates that row twice (the
    count, then the decision's cache) and reads the intent, its facts and the contract.
  - `POST /bench/floor/{id}/retry` (`POST /v1/operations/{id}/retry`, granted): the lease
    taken on the state row, as `SqlLeases` takes it (holder, expiry, attempt number and the
    digest of a new grant token, only where the lease is free, expired or the holder's own);
    the product reads the intent and its state first to decide whether a retry is allowed.
  Every statement must change exactly one row, else the batch fails and its requests get 500:
  the benchmark's ids are fresh and its leases its own, so a failure is a bug, not a result.

    python -m bench.server    # settings from RECONCILER_*, as python -m reconciler.service.server
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta

from fastapi import FastAPI

from bench.intents import INSERT, INSERT_STATE
from reconciler.core.domain import Verdict
from reconciler.core.grants import digest, new_token
from reconciler.core.ports import FIRST_DECISION
from reconciler.core.schemas import AttemptIn, IntentIn, RetryIn
from reconciler.core.verdicts import NextAction
from reconciler.ledger import Ledger
from reconciler.ledger.sweep import ProbeLookup
from reconciler.service import server
from reconciler.service.app import create_app
from reconciler.service.auth import Worker
from reconciler.service.hot_routes import HotRoute
from reconciler.service.operations import OperationId
from reconciler.service.settings import Settings

NOOP_PATH = "/bench/noop"
#: `POST /v1/operations...` with this in place of `/v1/operations`: the route's durable floor.
FLOOR_PATH = "/bench/floor"

INSERT_ATTEMPT = ("INSERT INTO attempts (operation_id, number, report, idempotency_key,"
                  " request_hash, at, outcome, status, receipt_ref, receipt_hash, recorded_at,"
                  " completed_at, ungranted) VALUES (?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 0)")
ATTEMPT_STATE = ("UPDATE operation_state SET attempt_rows = attempt_rows + 1, verdict = ?,"
                 " next_action = ?, due_at = ?, updated_at = ? WHERE operation_id = ?")
TAKE_LEASE = ("UPDATE operation_state SET retry_holder = ?, retry_lease_expires_at = ?,"
              " retry_attempt = 2, retry_grant = ? WHERE operation_id = ? AND"
              " (retry_lease_expires_at IS NULL OR retry_lease_expires_at < ?"
              " OR retry_holder = ?)")
#: What the attempts route's decision caches for the benchmark's attempt 1 (a 200 with the
#: provider's receipt, bench.over_http): the floor writes the same values without deciding.
ATTEMPT_DECISION = (Verdict.VERIFIED_APPLIED.value, NextAction.USE_RECORDED_OUTCOME)
LEASE_S = 60.0

#: One request's statements and parameters, and the future to resolve once they committed.
Statements = Sequence[tuple[str, tuple[object, ...]]]
_Queued = tuple[Statements, asyncio.Future[None]]


def _stamp(at: datetime) -> str:
    """The text SQLAlchemy stores for a UTC datetime on SQLite (as bench.intents writes)."""
    return at.strftime("%Y-%m-%d %H:%M:%S.%f")


class FloorCommitter:
    """Group commit in its barest form: callers on the event loop queue their statements and
    await a future; one writer thread commits everything queued in one transaction, then
    resolves the futures on their loop (one wake-up a batch)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._queue: list[_Queued] = []
        self._ready = threading.Condition()
        self._writer: threading.Thread | None = None

    async def record(self, statements: Statements) -> None:
        answered = asyncio.get_running_loop().create_future()
        with self._ready:
            self._queue.append((statements, answered))
            if self._writer is None:
                self._writer = threading.Thread(target=self._write, daemon=True,
                                                name="floor committer")
                self._writer.start()
            self._ready.notify()
        await answered

    async def intent(self, body: IntentIn, caller: Worker) -> dict[str, bool]:
        """`POST /bench/floor`: the intent's two rows."""
        at = _stamp(datetime.now(UTC))
        op = body.operation_id
        await self.record((
            (INSERT, (op, body.request_hash, body.idempotency_key, body.provider, body.action,
                      body.effect.value, at, body.run_id, body.tool_call_id, "{}")),
            (INSERT_STATE, (op, FIRST_DECISION[0].value, FIRST_DECISION[1], False, 0, at))))
        return {"ok": True}

    async def attempt(self, operation_id: OperationId, body: AttemptIn,
                      caller: Worker) -> dict[str, bool]:
        """`POST /bench/floor/{id}/attempts`: the attempt's row and one update of the state
        row."""
        at = _stamp(body.at or datetime.now(UTC))
        receipt = body.receipt
        await self.record((
            (INSERT_ATTEMPT, (operation_id, body.attempt, body.idempotency_key,
                              body.request_hash, at, body.outcome.value, body.status,
                              receipt.provider_ref if receipt else None,
                              receipt.request_hash if receipt else None, at)),
            (ATTEMPT_STATE, (*ATTEMPT_DECISION, at, at, operation_id))))
        return {"ok": True}

    async def retry(self, operation_id: OperationId, body: RetryIn,
                    caller: Worker) -> dict[str, bool]:
        """`POST /bench/floor/{id}/retry`: the lease taken (the benchmark always names a
        holder: the product makes one up when none is named)."""
        now = datetime.now(UTC)
        await self.record(((TAKE_LEASE, (
            body.holder, _stamp(now + timedelta(seconds=LEASE_S)), digest(new_token()),
            operation_id, _stamp(now), body.holder)),))
        return {"ok": True}

    def _write(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=30,
                               check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        while True:
            with self._ready:
                while not self._queue:
                    self._ready.wait()
                batch, self._queue = self._queue, []
            error: BaseException | None = None
            try:
                conn.execute("BEGIN IMMEDIATE")
                for statements, _ in batch:
                    for sql, parameters in statements:
                        if conn.execute(sql, parameters).rowcount != 1:
                            raise sqlite3.IntegrityError(f"no row changed by {sql} with "
                                                         f"{parameters}")
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                error = exc
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            futures = [answered for _, answered in batch]
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
    routes: list[tuple[str, Callable[..., Awaitable[dict[str, bool]]], int]] = [
        (NOOP_PATH, noop, 200)]
    if settings.db.startswith("sqlite:///"):
        floor = FloorCommitter(settings.db.removeprefix("sqlite:///"))
        routes += [(FLOOR_PATH, floor.intent, 201),
                   (f"{FLOOR_PATH}/{{operation_id:path}}/attempts", floor.attempt, 201),
                   (f"{FLOOR_PATH}/{{operation_id:path}}/retry", floor.retry, 200)]
    # Starlette's router tries `app.router.routes` in order on every request (starlette
    # routing.Router.app, FastAPI's APIRouter.app alike): each moved to the front, the no-op
    # first. A product route's lookup passes these four (a failed match each, about a us).
    for path, endpoint, status in reversed(routes):
        app.router.add_api_route(path, endpoint, methods=["POST"], status_code=status,
                                 route_class_override=HotRoute)
        app.router.routes.insert(0, app.router.routes.pop())
    return app


if __name__ == "__main__":
    # `serve` builds its app through this module global: swapping it reuses everything else
    # `reconciler serve` does, instead of a copy that could drift from it.
    vars(server)["create_app"] = create_app_with_noop
    server.main()
