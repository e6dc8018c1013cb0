"""Two replicas' group commits on one PostgreSQL: a batch runs its writes in operation order,
so two batches holding the same operations in crossed arrival orders take their row locks in
one order, and the second waits for the first instead of deadlocking with it (store/commits.py).
"""

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import replace
from functools import partial

import pytest
from sqlalchemy import Connection, text

from reconciler.store.commits import Step
from reconciler.store.schema import make_engine, open_store
from reconciler.store.sql import SqlStore
from reconciler.testing.patience import PATIENCE_S

from builders import intent
from databases import pg_schema, pg_unreachable
from sandbox_harness import wait_until

OPS = ["op-1", "op-2"]
#: How long a batch that holds its first row waits for the other batch to hold one too.
RENDEZVOUS_S = 1.5
#: The most the test waits for a caller to be queued.


@pytest.fixture
def replicas() -> Iterator[tuple[SqlStore, SqlStore]]:
    if reason := pg_unreachable():
        pytest.skip(reason)
    with pg_schema() as url:
        first = open_store(url)
        second = SqlStore(make_engine(url))
        try:
            yield first, second
        finally:
            first.engine.dispose()
            second.engine.dispose()


def _queued(store: SqlStore, n: int) -> bool:
    return len(store._committer._queue) == n


def _held(holding: threading.Event, release: threading.Event) -> Step:
    def step(_conn: Connection) -> None:
        holding.set()
        assert release.wait(10)
    return step


def test_crossed_batches_on_two_replicas_lock_in_one_order(
        replicas: tuple[SqlStore, SqlStore]) -> None:
    first, second = replicas
    for op in OPS:
        first.record_intent(replace(intent(), operation_id=op))
    # Each write locks its operation's state row, then waits (bounded) until the other
    # replica's batch holds a row too: in arrival order each batch would then hold one row and
    # wait for the other's.
    both_hold = threading.Barrier(2, timeout=RENDEZVOUS_S)

    def touch(op: str) -> Step:
        def step(conn: Connection) -> None:
            conn.execute(text("UPDATE operation_state SET probe_count = probe_count + 1 "
                              "WHERE operation_id = :op"), {"op": op})
            # Broken: the other batch is waiting for this one's row; go on.
            with contextlib.suppress(threading.BrokenBarrierError):
                both_hold.wait()
        return step

    release = threading.Event()
    errors: list[BaseException] = []

    def call(store: SqlStore, write: list[Step], key: str) -> None:
        try:
            store.commit(write, key)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads: list[threading.Thread] = []

    def start(*args: object) -> None:
        threads.append(threading.Thread(target=call, args=args))
        threads[-1].start()

    for store, arrivals in ((first, OPS[::-1]), (second, OPS)):
        # A first commit held open, so that the two writes behind it form one batch.
        holding = threading.Event()
        start(store, [_held(holding, release)], "")
        assert holding.wait(10)
        for n, op in enumerate(arrivals, 1):
            start(store, [touch(op)], op)
            wait_until(partial(_queued, store, n), PATIENCE_S)
    release.set()
    for thread in threads:
        thread.join(30)
    assert not errors
    with first.engine.connect() as conn:
        counts: dict[str, int] = dict(conn.execute(text(
            "SELECT operation_id, probe_count FROM operation_state")).all())
    assert counts == dict.fromkeys(OPS, 2)
