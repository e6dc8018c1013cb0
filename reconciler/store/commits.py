"""Group commit: the writes of callers who arrive together go into one transaction, so that
they share one durable commit (one flush of the log to disk) instead of queueing for one each.

    caller A ── write ──▶ leads: BEGIN; A's rows; B's rows; C's rows; COMMIT ──▶ wakes B, C
    caller B ── write ──▶ waits (A is committing)                               ──▶ returns
    caller C ── write ──▶ waits                                                 ──▶ returns

Callers on threads need no committer thread: the first caller to find nobody committing
commits, for itself and everyone queued behind it, then hands the next batch to the first
caller still waiting. A lone caller therefore commits straight away, with no hand-off
between threads. Nobody is answered before the transaction holding their rows is committed; a
caller whose rows fail (an existing key, a missing parent row) gets its own error, and the
others still commit.

A caller on the event loop (a route running the ledger in a greenlet, `commit` finds itself in
one SQLAlchemy's `await_` can wait in: service.loop_calls) must not lead: a transaction and its
fsync would stall every request the loop serves. It queues its write and waits on an asyncio
future, through SQLAlchemy's `await_` (sqlalchemy/util/concurrency.py: the greenlet switches
back to the loop, which awaits the future and switches back with its result: what SQLAlchemy's
own asyncio extension does around every driver call). Its batch is led by whoever leads anyway:
a thread already committing (the sweep, a sync route) takes it into its batch; otherwise the
committer's writer thread (started on first need, stopped when the engine is disposed) leads
it, and goes on leading while the first caller still waiting is one on the loop. The future is
resolved from the leading thread with `loop.call_soon_threadsafe`, once the transaction holding
the write is committed or failed; errors reach the caller as a thread's.

The writer is not woken by the first write the loop queues but by a callback that write
schedules on the loop (`_kick`), so it runs once the loop has run what was ready with it: the
other requests the loop is serving queue their writes first, and the batch takes them all.

    loop:   req A queues ─ req B queues ─ req C queues ─ _kick ─▶ writer: BEGIN; A; B; C; COMMIT
    (woken at A's write, the writer took A alone: batches of 12.5 writes instead of 15.3,
     and 10% more CPU an attempt over HTTP, bench/README.md)

A thread that comes to commit while only a kick is due does not wait for it (the loop may be
gone before it runs): it leads at once, the queued writes in its batch, and the kick then finds
nothing to hand over. A loop caller that finds a kick due on another loop schedules its own.

A batch runs its writes in the order of their keys (the operation each write touches; arrival
order among equal keys), not in arrival order. Every write touches one operation's rows, and
callers in one batch are all still waiting, so any order of theirs is one the callers could
have arrived in. What the order buys: on PostgreSQL each write locks its operation's state row
(a decision's SELECT ... FOR UPDATE, an UPDATE) until the commit, so two replicas' batches
holding the same two operations in crossed arrival orders each held one row and waited for the
other's: a deadlock, which PostgreSQL breaks by failing one batch (503 for all its callers).
In one order, the second batch waits for the first, as the sweep's claim and retention already
lock rows in id order (store/rounds.py, SqlStore.remove_settled).

Only the leader of the moment runs a transaction, so the committer keeps one connection checked
out for all of them: checking one out of the pool and back in per transaction (the pool's
events, a new `Connection`, the reset on return) cost more CPU than both inserts of an intent
(`engine.begin()` 31 us against 12 us for `begin()` on a connection held). After any failed
transaction it is given back (rolled back, or dropped if it was invalidated) and the next one
checks out another, so a lost or replaced database is found on checkout as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from sqlalchemy import Connection, Engine, Executable, event
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.util.concurrency import await_, in_greenlet

from reconciler.core.errors import StoreUnavailableError
from reconciler.store.driver import DriverStatements

#: One step of a write: a statement and its parameters, or a function that runs its own
#: statements on the transaction's connection (reads, and writes that depend on what they
#: read: a decision cached with the fact it was drawn from). A function may run more than once
#: (when another caller's rows fail the batch, each caller's write runs again alone), so what
#: it hands back it must hand back from its last run.
Step = tuple[Executable, dict[str, Any]] | Callable[[Connection], object]
#: One caller's write: its steps, run in this order.
Write = Sequence[Step]

#: Errors that say the store itself failed, not one caller's rows: everyone in the batch gets
#: them (retrying each caller alone would only fail again, once per caller).
STORE_WIDE = (OperationalError, InterfaceError, StoreUnavailableError)


@dataclass(eq=False, slots=True)
class _Pending:
    write: Write
    #: Where the write goes in its batch's order (see the module doc).
    key: str = ""
    #: A caller on a thread who waits: set when its batch is done, or when it is handed the
    #: next batch.
    woken: threading.Event | None = None
    #: A caller on the event loop (the other kind): resolved (on its loop) when its batch is
    #: done; it never leads, so it is never handed a batch.
    future: asyncio.Future[None] | None = None
    done: bool = False
    committed: bool = False
    error: BaseException | None = None


def _finish(batch: list[_Pending]) -> None:
    """Wake everyone in `batch`: threads at once, callers on a loop with one callback per loop
    (each wakes the loop's thread: one wake-up for the whole batch, not one per caller)."""
    on_loops: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for pending in batch:
        pending.done = True
        if pending.woken is not None:
            pending.woken.set()
        elif pending.future is not None:
            on_loops.setdefault(pending.future.get_loop(), []).append(pending.future)
    for loop, futures in on_loops.items():
        # A loop that closed meanwhile has nobody left to answer.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_resolve, futures)


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():  # cancelled: the caller went away (its write still committed)
            future.set_result(None)


class GroupCommitter:
    """Commits concurrent callers' writes together, on one engine. Thread-safe."""

    def __init__(self, engine: Engine, max_batch: int = 64) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._queue: list[_Pending] = []
        self._leading = False
        #: The loop whose `_kick` is due to hand the queued writes to the writer: until it runs,
        #: nobody leads them (yet `_leading` is set, so that they wait for it).
        self._kick_on: asyncio.AbstractEventLoop | None = None
        self._driver = DriverStatements.of(engine.dialect)
        #: The leaders' connection (None: none checked out), only ever used by the leader.
        self._conn: Connection | None = None
        #: Give the connection back when the leader of the moment is done (see close).
        self._give_back_after = False
        #: The writer thread leads batches for callers on the event loop (see the module doc).
        self._writer: threading.Thread | None = None
        self._writer_turn = threading.Condition(self._lock)
        self._writer_leads = False
        self._stopping = False
        event.listen(engine, "engine_disposed", lambda _engine: self.close())

    def commit(self, write: Write, key: str = "") -> None:
        """Run `write` in a transaction; return once that transaction is durably committed, or
        raise what made it fail (nothing of `write` is then recorded). `key`: the operation
        whose rows `write` touches (its place in the batch). Called in a greenlet on the event
        loop, it waits without blocking the loop."""
        if in_greenlet():
            loop = asyncio.get_running_loop()
            answered: asyncio.Future[None] = loop.create_future()
            me = _Pending(write, key, future=answered)
            with self._lock:
                self._queue.append(me)
                if not self._leading or (self._kick_on is not None
                                         and self._kick_on is not loop):
                    self._leading = True
                    self._kick_on = loop
                    loop.call_soon(self._kick, loop)
            await_(answered)
        else:
            me = _Pending(write, key)
            with self._lock:
                # Nobody leads, or only a kick is due: lead (the kick will find nothing to do).
                lead = not self._leading or self._kick_on is not None
                self._leading, self._kick_on = True, None
                # Only a caller who waits needs waking (a lone caller leads at once).
                woken = None if lead else threading.Event()
                me.woken = woken
                self._queue.append(me)
            if woken is not None:
                woken.wait()
            if not me.done:  # nobody was committing, or the last leader handed over to me
                self._lead()
        if not me.committed:
            raise me.error or StoreUnavailableError(
                "receipt store unavailable: the commit was interrupted; nothing is known to "
                "be recorded, so send the same request again")

    def _lead(self) -> None:
        with self._lock:
            batch = self._queue[:self.max_batch]
            del self._queue[:self.max_batch]
        try:
            self._run(batch)
        finally:
            _finish(batch)
            with self._lock:
                if not self._queue:
                    self._leading = False
                    if self._give_back_after:
                        self._give_back_after = False
                        self._give_back()
                elif (woken := self._queue[0].woken) is not None:
                    woken.set()
                else:
                    self._hand_to_writer()

    def _kick(self, loop: asyncio.AbstractEventLoop) -> None:
        """On `loop`, once it has run what was ready: the queued writes are the writer's."""
        with self._lock:
            if self._kick_on is loop:
                self._kick_on = None
                self._hand_to_writer()

    def _hand_to_writer(self) -> None:
        """The next batch is the writer thread's to lead (called holding the lock)."""
        self._writer_leads = True
        self._stopping = False
        if self._writer is None:
            self._writer = threading.Thread(target=self._write, daemon=True,
                                            name="group committer")
            self._writer.start()
        self._writer_turn.notify()

    def _write(self) -> None:
        """The writer thread: leads each batch handed to it, until stopped with none handed."""
        while True:
            with self._lock:
                while not self._writer_leads and not self._stopping:
                    self._writer_turn.wait()
                if not self._writer_leads:
                    self._writer = None
                    return
                self._writer_leads = False
            self._lead()

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the writer thread once it has led what it was handed, and give the held
        connection back to the pool (now, or when the leader of the moment is done): the engine
        is being disposed of, or the store moves to another. Both start again on the next
        commit."""
        with self._lock:
            self._stopping = True
            self._writer_turn.notify()
            writer = self._writer
            if self._leading:
                self._give_back_after = True
            else:
                self._give_back()
        if writer is not None and writer is not threading.current_thread():
            writer.join(timeout_s)

    def _give_back(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()

    def _run(self, batch: list[_Pending]) -> None:
        batch = sorted(batch, key=attrgetter("key"))  # stable: arrival order among equal keys
        try:
            self._transaction([p.write for p in batch])
        except STORE_WIDE as exc:
            for pending in batch:
                pending.error = exc
            return
        except Exception as exc:
            if len(batch) == 1:
                batch[0].error = exc
                return
        else:
            for pending in batch:
                pending.committed = True
            return
        # Some caller's rows failed, and took the whole transaction with them: each alone
        # tells whose they were, and lets everyone else's commit.
        for pending in batch:
            try:
                self._transaction([pending.write])
            except Exception as exc:
                pending.error = exc
            else:
                pending.committed = True

    def _transaction(self, writes: list[Write]) -> None:
        if self._conn is None:
            self._conn = self.engine.connect()
        conn = self._conn
        # What a step keeps in memory about the rows it wrote is kept only once they are
        # committed (store/folds.py): `after_commit` collects it, and is gone either way.
        after_commit: list[Callable[[], None]] = []
        conn.info["after_commit"] = after_commit
        try:
            with conn.begin():
                for write in writes:
                    for step in write:
                        if callable(step):
                            step(conn)
                        else:
                            self._driver.execute(conn, *step)
        except BaseException:
            # Whatever failed (a caller's rows, the commit, the connection itself), the next
            # transaction starts on a connection fresh from the pool's checks.
            conn.info.pop("after_commit", None)
            self._give_back()
            raise
        conn.info.pop("after_commit", None)
        for kept in after_commit:
            kept()
