"""Counting the database work behind a measured figure: transactions, durable commits (the
commits that wrote, each of which waits for the log to reach the disk) and statements, over
every SQLAlchemy engine in this process (`SqlCounter`); or durable commits alone, at one
listener call per transaction (`DurableCommits`), where the count must not weigh on what is
timed beside it."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import Connection, Engine, event

WRITES = ("INSERT", "UPDATE", "DELETE")
_WROTE = "bench_wrote"
#: DurableCommits' own: the connection's total_changes at its last commit or rollback.
_TOTAL = "bench_total_changes"


class SqlCounter:
    """Listens on every engine from construction on; create it before the engines whose work
    should count. Thread-safe: concurrent writers are what some benchmarks measure."""

    def __init__(self) -> None:
        self.transactions = 0
        self.durable_commits = 0
        self.statements = 0
        self._lock = threading.Lock()
        event.listen(Engine, "begin", self._begin)
        event.listen(Engine, "before_cursor_execute", self._statement)
        event.listen(Engine, "commit", self._commit)
        event.listen(Engine, "rollback", self._rollback)

    def close(self) -> None:
        event.remove(Engine, "begin", self._begin)
        event.remove(Engine, "before_cursor_execute", self._statement)
        event.remove(Engine, "commit", self._commit)
        event.remove(Engine, "rollback", self._rollback)

    def snapshot(self) -> tuple[int, int, int]:
        with self._lock:
            return self.transactions, self.durable_commits, self.statements

    def _begin(self, conn: Connection) -> None:
        with self._lock:
            self.transactions += 1

    def _statement(self, conn: Connection, _cursor: Any, statement: str, *_args: Any) -> None:
        verb = statement.lstrip()[:6].upper()
        # SQLite's BEGIN IMMEDIATE goes through the cursor, PostgreSQL's BEGIN does not: leave
        # it out so that both count the same statements.
        if verb.startswith("BEGIN"):
            return
        with self._lock:
            self.statements += 1
        if verb in WRITES:
            conn.info[_WROTE] = True

    def _commit(self, conn: Connection) -> None:
        # Only a commit with writes makes the database flush (fsync) its log.
        if conn.info.pop(_WROTE, False):
            with self._lock:
                self.durable_commits += 1

    def _rollback(self, conn: Connection) -> None:
        conn.info.pop(_WROTE, None)


class DurableCommits:
    """Durable commits alone, on SQLite, over every engine from construction on: a commit is
    durable when its connection's `total_changes` (sqlite3: the rows its INSERTs, UPDATEs and
    DELETEs changed since it opened) moved since the connection's last commit or rollback.

    One listener call per transaction, none per statement: `SqlCounter`'s three per intent
    (the BEGIN, the two INSERTs) and its commit cost 34 us of CPU per intent recorded in
    process, about a tenth of it, which a raw `sqlite3` baseline beside it never pays
    (bench.intents)."""

    def __init__(self) -> None:
        self.durable_commits = 0
        self._lock = threading.Lock()
        event.listen(Engine, "commit", self._commit)
        event.listen(Engine, "rollback", self._rollback)

    def close(self) -> None:
        event.remove(Engine, "commit", self._commit)
        event.remove(Engine, "rollback", self._rollback)

    def _moved(self, conn: Connection) -> bool:
        total: int = conn.connection.driver_connection.total_changes  # type: ignore[union-attr]
        moved: bool = total != conn.info.get(_TOTAL, 0)
        conn.info[_TOTAL] = total
        return moved

    def _commit(self, conn: Connection) -> None:
        if self._moved(conn):
            with self._lock:
                self.durable_commits += 1

    def _rollback(self, conn: Connection) -> None:
        self._moved(conn)
