"""What one PostgreSQL server spent while a benchmark ran: the CPU time of its processes, the
WAL it wrote, the WAL flushes it made and the transactions it committed.

CPU time is read from /proc, so it is measured only for a server on this machine (the
benchmark's 127.0.0.1): the postmaster is the parent of the session that asks for
`pg_backend_pid()`, and the server's CPU is the postmaster's own time, the time of its reaped
children (`cutime`/`cstime`: every backend that exited, its session over), and the time of its
living children (backends, the WAL writer, the checkpointer, the background writer,
autovacuum). All of them, whoever they work for: other clients of the same server are counted
too.

What the sessions of one client wait for is sampled from pg_stat_activity (`Waits`): a
session waiting for a row lock shows the wait event type `Lock`; one flushing WAL at its
commit `IO:WALSync` (or `IO:WALWrite`), and one waiting for another session's flush to cover
its commit `LWLock:WALWrite`; an active session with no wait event is running.

The counters come from PostgreSQL's statistics views, which a backend updates at most once a
second while busy and up to ten seconds after it goes idle, but always when its session ends:
read them after the sessions of interest have closed (`wait_closed`).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from bench.harness import BenchError


@dataclass(frozen=True, slots=True)
class Counters:
    """Running totals of the server's statistics: transactions committed in the database,
    and WAL flushes (fsync/fdatasync of WAL files, `pg_stat_wal.wal_sync`; None where the view
    has no such column, PostgreSQL 18 on)."""

    commits: int
    wal_syncs: int | None


#: Wait events, as pg_stat_activity names them ('' for none), in the groups a figure reports;
#: any other is "other". A row lock is waited for as the holder's transaction id (or the
#: tuple, when a third session queues behind).
WAIT_GROUPS = {"": "running", "IO:WALSync": "WAL flush", "IO:WALWrite": "WAL flush",
               "LWLock:WALWrite": "WAL flush", "Lock:transactionid": "row lock",
               "Lock:tuple": "row lock"}
GROUPS = ("running", "WAL flush", "row lock", "other")
SAMPLE_EVERY_S = 0.02
#: The active sessions of one application, by what they wait for (or '' for none).
_ACTIVE = ("SELECT coalesce(wait_event_type || ':' || wait_event, ''), count(*) "
           "FROM pg_stat_activity WHERE application_name = %(name)s AND state = 'active' "
           "GROUP BY 1")


@dataclass(slots=True)
class Waits:
    """Samples of what one client's active sessions were doing: per group (`GROUPS`), the
    sessions seen in it summed over the samples."""

    samples: int = 0
    sessions: collections.Counter[str] = field(default_factory=collections.Counter)

    def add(self, other: Waits) -> None:
        self.samples += other.samples
        self.sessions.update(other.sessions)

    def mean(self, group: str) -> float:
        """Sessions in `group` at a moment, on average."""
        return self.sessions[group] / self.samples if self.samples else 0.0


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields from the state on (field 3; the command name before it may
    hold spaces), or None if the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


def _ticks(fields: list[str], *indexes: int) -> int:
    return sum(int(fields[i]) for i in indexes)


# Indexes into `_stat`'s fields: ppid is field 4, utime 14, stime 15, cutime 16, cstime 17.
PPID, UTIME, STIME, CUTIME, CSTIME = 1, 11, 12, 13, 14


class PgServer:
    """The PostgreSQL at `url`: one short session per reading, none kept open."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url, poolclass=NullPool)
        self.postmaster = self._postmaster()

    def _postmaster(self) -> int | None:
        """The server's postmaster pid if the server runs on this machine, else None."""
        with self.engine.connect() as conn:
            # Read while the session lasts: its backend exits when it closes.
            fields = _stat(int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()))
        if fields is None:
            return None
        postmaster = int(fields[PPID])
        # A backend is the postmaster's child; a pid that merely exists here is not enough.
        if Path(f"/proc/{postmaster}/comm").read_text().strip() != "postgres":
            return None
        return postmaster

    def _one(self, sql: str) -> object:
        with self.engine.connect() as conn:
            return conn.exec_driver_sql(sql).scalar_one()

    def cpu_s(self) -> float | None:
        """CPU seconds (user + system) the server's processes have used, living and exited;
        None if the server is not a process on this machine."""
        if self.postmaster is None:
            return None
        ticks = 0
        # Children first: one that exits after it is read and is reaped before the postmaster
        # is read would be counted twice, a window of microseconds between two reads.
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                fields = _stat(int(entry.name))
                if fields is not None and int(fields[PPID]) == self.postmaster:
                    ticks += _ticks(fields, UTIME, STIME)
        own = _stat(self.postmaster)
        if own is None:
            raise BenchError(f"PostgreSQL's postmaster (pid {self.postmaster}) is gone")
        ticks += _ticks(own, UTIME, STIME, CUTIME, CSTIME)
        return ticks / os.sysconf("SC_CLK_TCK")

    def wal_bytes(self) -> int:
        """The WAL position in bytes: what was written between two readings, exactly."""
        return int(str(self._one("SELECT pg_current_wal_lsn() - '0/0'")))

    def counters(self) -> Counters:
        with self.engine.connect() as conn:
            commits = conn.exec_driver_sql(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            ).scalar_one()
            wal = conn.exec_driver_sql("SELECT * FROM pg_stat_wal").mappings().one()
        syncs = wal.get("wal_sync")
        return Counters(int(commits), None if syncs is None else int(syncs))

    def sessions(self, application_name: str) -> int:
        with self.engine.connect() as conn:
            return int(conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %(name)s",
                {"name": application_name}).scalar_one())

    def other_sessions(self, application_name: str) -> int:
        """Client sessions of anyone else (this reading's own excluded): who else the server
        worked for."""
        with self.engine.connect() as conn:
            return int(conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                "AND application_name <> %(name)s AND pid <> pg_backend_pid()",
                {"name": application_name}).scalar_one())

    @contextmanager
    def sampling(self, application_name: str) -> Iterator[Waits]:
        """Sample the waits of `application_name`'s sessions every 20 ms while the block runs,
        on one session of its own (a new session per sample would cost the server a process
        each time)."""
        waits, stop = Waits(), threading.Event()

        def sample() -> None:
            with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                while not stop.wait(SAMPLE_EVERY_S):
                    # Autocommit: each reading is its own transaction, so a fresh snapshot of
                    # pg_stat_activity (a transaction keeps the one it read first).
                    rows = conn.exec_driver_sql(_ACTIVE, {"name": application_name}).all()
                    waits.samples += 1
                    for event, count in rows:
                        waits.sessions[WAIT_GROUPS.get(event, "other")] += int(count)

        sampler = threading.Thread(target=sample, daemon=True, name="pg waits")
        sampler.start()
        try:
            yield waits
        finally:
            stop.set()
            sampler.join(10)

    def wait_closed(self, application_name: str, timeout_s: float = 30.0) -> None:
        """Until no session named `application_name` is left: each one that ended has reported
        its statistics (a backend does so before it leaves pg_stat_activity)."""
        deadline = time.monotonic() + timeout_s
        while (left := self.sessions(application_name)):
            if time.monotonic() > deadline:
                raise BenchError(f"{left} PostgreSQL session(s) of {application_name} still "
                                 f"open {timeout_s:g} s after their clients stopped")
            time.sleep(0.05)

    def close(self) -> None:
        self.engine.dispose()
