"""Group commit for callers on the event loop (a route running the ledger in a greenlet,
service.wiring.Wiring.call): their writes are committed by a thread, never on the loop, they
share batches with threads' writes, and each gets the answer a thread would."""

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import Any

import httpx
import pytest
from sqlalchemy import Connection, event
from sqlalchemy.util.concurrency import greenlet_spawn

from reconciler.core.domain import IntentConflict
from reconciler.core.errors import IntentConflictError, StoreUnavailableError
from reconciler.ledger import Ledger
from reconciler.service.app import create_app
from reconciler.service.settings import Settings
from reconciler.store.schema import open_store
from reconciler.store.sql import READING_OPTION, SqlStore

from builders import CONTRACT, H0, OTHER_HASH, intent
from service_harness import serving

WRITER = "group committer"


#: What is checked here is the SQL store's own: the `store` fixture gives SQLite and PostgreSQL.
pytestmark = pytest.mark.store_kinds("sqlite", "postgresql")


class HeldCommit:
    """Holds the store's first commit until released; logs each commit's thread."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.threads: list[str] = []
        self.release = threading.Event()
        event.listen(store.engine, "commit", self._commit)

    def _commit(self, _conn: Connection) -> None:
        self.threads.append(threading.current_thread().name)
        if len(self.threads) == 1:
            assert self.release.wait(10), "never released"

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait on the loop (which must stay free for this to return) until `condition`."""
        for _ in range(1000):
            if condition():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("never got there")


def recording(store: SqlStore, op: str, request_hash: str = H0) -> Callable[[], bool]:
    return partial(store.record_intent, replace(intent(), operation_id=op,
                                                request_hash=request_hash))


async def settled(awaitable: Awaitable[object]) -> object:
    try:
        return await awaitable
    except Exception as exc:
        return exc


def batch(store: SqlStore, held: HeldCommit, on_loop: dict[str, Callable[[], object]],
          on_threads: dict[str, Callable[[], object]]) -> dict[str, object]:
    """A thread's write commits first, held; then `on_loop` (greenlets on a loop) and
    `on_threads` queue behind it and are released together. What each returned or raised."""
    results: dict[str, object] = {}

    def call(who: str, fn: Callable[[], object]) -> None:
        try:
            results[who] = fn()
        except Exception as exc:
            results[who] = exc

    first = threading.Thread(target=call, args=("first", recording(store, "first")))
    first.start()

    async def main() -> None:
        await held.until(lambda: len(held.threads) == 1)
        tasks = {who: asyncio.ensure_future(settled(greenlet_spawn(fn)))
                 for who, fn in on_loop.items()}
        threads = [threading.Thread(target=call, args=item) for item in on_threads.items()]
        for thread in threads:
            thread.start()
        await held.until(lambda: len(store._committer._queue) == len(on_loop) + len(on_threads))
        held.release.set()
        for who, task in tasks.items():
            results[who] = await task
        for thread in threads:
            await asyncio.to_thread(thread.join, 10)

    asyncio.run(main())
    first.join(10)
    return results


def test_a_write_from_the_loop_is_committed_by_the_writer_thread_while_the_loop_runs(
        store: SqlStore) -> None:
    held = HeldCommit(store)

    async def main() -> object:
        task = asyncio.ensure_future(greenlet_spawn(recording(store, "op-1")))
        # The loop goes on running while the write is being committed.
        await held.until(lambda: len(held.threads) == 1)
        assert not task.done()
        held.release.set()
        return await task

    assert asyncio.run(main()) is True
    assert held.threads == [WRITER]
    assert store.facts("op-1").intent.operation_id == "op-1"


def test_loop_and_thread_callers_share_one_commit(store: SqlStore) -> None:
    held = HeldCommit(store)
    results = batch(store, held, {f"loop-{n}": recording(store, f"loop-{n}") for n in range(3)},
                    {f"thread-{n}": recording(store, f"thread-{n}") for n in range(2)})
    assert results == dict.fromkeys(["first", "loop-0", "loop-1", "loop-2", "thread-0",
                                     "thread-1"], True)
    assert len(held.threads) == 2  # the held one, then everyone queued behind it
    assert {s.operation_id for s in store.list_operations()} == set(results)


def test_a_loop_callers_refused_rows_fail_only_it(store: SqlStore) -> None:
    store.record_intent(replace(intent(), operation_id="taken"))
    held = HeldCommit(store)
    results = batch(store, held,
                    {"conflict": recording(store, "taken", OTHER_HASH),
                     "loop-0": recording(store, "loop-0")},
                    {"thread-0": recording(store, "thread-0")})
    assert isinstance(results.pop("conflict"), IntentConflictError)
    assert results == {"first": True, "loop-0": True, "thread-0": True}
    assert [type(e) for e in store.facts("taken").evidence] == [IntentConflict]


def test_a_store_wide_failure_reaches_the_callers_on_the_loop(store: SqlStore) -> None:
    held = HeldCommit(store)

    def refuse(_conn: Connection) -> None:
        if len(held.threads) == 2:
            raise StoreUnavailableError("receipt store unavailable: refused by the test")

    event.listen(store.engine, "commit", refuse)
    results = batch(store, held, {f"loop-{n}": recording(store, f"loop-{n}") for n in range(2)},
                    {"thread-0": recording(store, "thread-0")})
    assert results.pop("first") is True
    assert all(isinstance(r, StoreUnavailableError) for r in results.values()), results
    assert [s.operation_id for s in store.list_operations()] == ["first"]


def commits_counted(store: SqlStore) -> list[str]:
    """The thread of each commit on `store` from now on."""
    threads: list[str] = []
    event.listen(store.engine, "commit",
                 lambda _conn: threads.append(threading.current_thread().name))
    return threads


def test_writes_the_loop_queues_while_running_what_was_ready_share_one_commit(
        store: SqlStore) -> None:
    commits = commits_counted(store)

    async def main() -> list[object]:
        # Ready together: each queues its write before the loop gets to the writer's kick.
        return list(await asyncio.gather(*(greenlet_spawn(recording(store, f"op-{n}"))
                                           for n in range(5))))

    assert asyncio.run(main()) == [True] * 5
    assert commits == [WRITER]
    assert len(store.list_operations()) == 5


def test_a_thread_that_commits_while_a_kick_is_due_leads_without_waiting_for_the_loop(
        store: SqlStore) -> None:
    commits = commits_counted(store)
    done: list[bool] = []

    async def main() -> object:
        task = asyncio.ensure_future(greenlet_spawn(recording(store, "on-loop")))
        await asyncio.sleep(0)  # the loop's write is queued, its kick due next round
        assert store._committer._kick_on is asyncio.get_running_loop()
        # The loop is held here until the thread is done: it must not wait for the kick.
        thread = threading.Thread(target=lambda: done.append(recording(store, "on-thread")()),
                                  name="on-thread")
        thread.start()
        thread.join(10)
        assert done == [True]
        return await task

    assert asyncio.run(main()) is True
    assert commits == ["on-thread"]  # one commit, the thread's, with the loop's write in it
    assert {s.operation_id for s in store.list_operations()} == {"on-loop", "on-thread"}


def test_a_kick_left_due_on_a_loop_that_closed_strands_no_write(store: SqlStore) -> None:
    gone = asyncio.new_event_loop()
    task = gone.create_task(greenlet_spawn(recording(store, "queued-then-gone")))
    gone.call_soon(gone.stop)  # stops after the write is queued, before its kick runs
    gone.run_forever()
    assert store._committer._kick_on is gone and not task.done()
    task.cancel()
    gone.close()
    later = asyncio.wait_for(greenlet_spawn(recording(store, "later")), 10)
    assert asyncio.run(later) is True
    assert {s.operation_id for s in store.list_operations()} == {"queued-then-gone", "later"}


def test_the_writer_thread_stops_when_the_engine_is_disposed(store: SqlStore) -> None:
    assert asyncio.run(greenlet_spawn(recording(store, "op-1"))) is True
    writer = store._committer._writer
    assert writer is not None and writer.is_alive()
    store.engine.dispose()
    assert not writer.is_alive()
    assert store._committer._writer is None
    # Needed again, it starts again.
    assert asyncio.run(greenlet_spawn(recording(store, "op-2"))) is True
    assert [s.operation_id for s in store.list_operations()] == ["op-1", "op-2"]


def test_the_hot_routes_commit_on_the_writer_thread_on_sqlite_on_worker_threads_on_pg(
        store_url: str) -> None:
    """No request's write waits on a worker thread: on SQLite the routes run their ledger
    calls on the loop and the writer thread commits them (on PostgreSQL, worker threads)."""
    store = open_store(store_url)
    store.put_contract(CONTRACT)
    committed: list[str] = []

    def writing(conn: Connection) -> None:
        if not conn.get_execution_options().get(READING_OPTION):  # reads commit too
            committed.append(threading.current_thread().name)

    event.listen(store.engine, "commit", writing)
    app = create_app(Settings(db=store_url, sweep_interval_s=0), ledger=Ledger(store))
    body: dict[str, Any] = {"request_hash": H0, "idempotency_key": "k", "provider": "pay",
                            "action": "charge", "effect": "non_idempotent"}
    try:
        with serving(app) as url, httpx.Client(base_url=url, timeout=30) as http:
            assert http.post("/v1/operations", json={"operation_id": "op-1",
                                                     **body}).status_code == 201
            answer = http.post("/v1/operations/op-1/attempts", json={
                "attempt": 1, "idempotency_key": "k", "request_hash": H0,
                "outcome": "timeout", "at": "2020-01-01T00:00:00Z"})
            assert answer.status_code == 201, answer.text
            assert http.post("/v1/operations/op-1/retry", json={
                "idempotency_key": "k", "request_hash": H0}).status_code == 200
            by_requests = set(committed)  # not the shutdown's release of leases
    finally:
        store.engine.dispose()
    assert by_requests == ({WRITER} if store_url.startswith("sqlite")
                           else {"AnyIO worker thread"})
