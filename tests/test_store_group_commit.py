"""Group commit: facts recorded at the same time share one durable commit; nobody is answered
before their rows are committed, and one caller's refused rows never fail the others."""

import threading
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import pytest
from sqlalchemy import Connection, event

from reconciler.core.domain import IntentConflict
from reconciler.core.errors import IntentConflictError, StoreUnavailableError
from reconciler.store.sql import SqlStore
from reconciler.testing.patience import PATIENCE_S

from builders import OTHER_HASH, intent
from sandbox_harness import wait_until

#: Callers queued behind a held first commit.
FOLLOWERS = 4
#: The most a test waits for callers to get where it holds them.


#: What is checked here is the SQL store's own: the `store` fixture gives SQLite and PostgreSQL.
pytestmark = pytest.mark.store_kinds("sqlite", "postgresql")


class HeldFirstCommit:
    """Holds the store's first commit until `FOLLOWERS` more callers are queued behind it, so
    that they must arrive together; logs every commit and every caller's answer in order."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.log: list[str] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        event.listen(store.engine, "commit", self._commit)

    def _commit(self, _conn: Connection) -> None:
        with self._lock:
            self.log.append("commit")
            first = self.log.count("commit") == 1
        if first:
            assert self.release.wait(10), "the followers never queued"

    def answered(self, who: str) -> None:
        with self._lock:
            self.log.append(who)

    def run(self, calls: dict[str, Callable[[], object]]) -> dict[str, object]:
        """Run the first call, then the others once it is committing; what each returned or
        raised."""
        results: dict[str, object] = {}

        def call(who: str, fn: Callable[[], object]) -> None:
            try:
                results[who] = fn()
            except Exception as exc:
                results[who] = exc
            self.answered(who)

        (first, first_call), *rest = calls.items()
        threads = [threading.Thread(target=call, args=(first, first_call))]
        threads[0].start()
        wait_until(lambda: "commit" in self.log, PATIENCE_S)
        threads += [threading.Thread(target=call, args=item) for item in rest]
        for thread in threads[1:]:
            thread.start()
        wait_until(lambda: len(self.store._committer._queue) == len(rest), PATIENCE_S)
        self.release.set()
        for thread in threads:
            thread.join(10)
        assert len(results) == len(calls)
        return results


def recorders(store: SqlStore, ops: list[str]) -> dict[str, Callable[[], object]]:
    """One call per id, each recording a new intent under it."""
    return {op: partial(store.record_intent, replace(intent(), operation_id=op)) for op in ops}


def test_intents_recorded_together_share_one_commit(store: SqlStore) -> None:
    held = HeldFirstCommit(store)
    ops = [f"op-{n}" for n in range(FOLLOWERS + 1)]
    results = held.run(recorders(store, ops))
    assert results == dict.fromkeys(ops, True)
    assert held.log.count("commit") == 2
    assert [store.facts(op).intent.operation_id for op in ops] == ops


def test_nobody_is_answered_before_their_commit(store: SqlStore) -> None:
    held = HeldFirstCommit(store)
    ops = [f"op-{n}" for n in range(FOLLOWERS + 1)]
    held.run(recorders(store, ops))
    second_commit = [i for i, entry in enumerate(held.log) if entry == "commit"][1]
    assert held.log.index("op-0") > 0
    assert all(held.log.index(op) > second_commit for op in ops[1:])


def test_a_conflict_in_a_shared_commit_fails_only_its_caller(store: SqlStore) -> None:
    store.record_intent(replace(intent(), operation_id="taken"))
    held = HeldFirstCommit(store)
    calls = recorders(store, [f"op-{n}" for n in range(FOLLOWERS)])
    calls["conflict"] = partial(store.record_intent,
                                replace(intent(), operation_id="taken", request_hash=OTHER_HASH))
    results = held.run(calls)
    assert isinstance(results.pop("conflict"), IntentConflictError)
    assert results == dict.fromkeys(results, True)
    assert [type(e) for e in store.facts("taken").evidence] == [IntentConflict]
    assert all(store.facts(op).intent.operation_id == op for op in results)


def test_a_commit_that_fails_acknowledges_nobody(store: SqlStore) -> None:
    held = HeldFirstCommit(store)

    def refuse(_conn: Connection) -> None:
        if held.log.count("commit") == 2:
            raise StoreUnavailableError("receipt store unavailable: refused by the test")

    event.listen(store.engine, "commit", refuse)
    ops = [f"op-{n}" for n in range(FOLLOWERS + 1)]
    results = held.run(recorders(store, ops))
    assert results.pop("op-0") is True
    assert all(isinstance(r, StoreUnavailableError) for r in results.values())
    assert [s.operation_id for s in store.list_operations()] == ["op-0"]
