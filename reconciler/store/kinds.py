"""What goes with each kind of store: its leases, its journal of agent runs, its readiness
write and whether the service calls it on the event loop. Each kind is registered once
(`register`), under its class; `kind_of` finds a store's registration by class (a subclass
inherits its parent's), and a store of a kind nobody registered is a TypeError naming it,
never a guess.

    register(SqlStore, StoreKind(leases=SqlLeases, journal=SqlJournal, ...))
    leases_of(store), journal_of(store)     # whatever the kind registered
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import text

from reconciler.core.ports import Journal, Leases, Store
from reconciler.store.journal import SqlJournal
from reconciler.store.leases import SqlLeases
from reconciler.store.memory import MemoryStore
from reconciler.store.memory_journal import journal_beside
from reconciler.store.sql import SqlStore

S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class StoreKind(Generic[S]):
    """What goes with one kind of store `S`."""

    #: The leases beside the store (in its database, or the store itself).
    leases: Callable[[S], Leases]
    #: Where the agent runs beside the store are kept.
    journal: Callable[[S], Journal]
    #: Commit a write that changes nothing, as an intent is committed: /readyz's proof that
    #: the store takes writes (a full disk or a read-only database answers reads only).
    trial_write: Callable[[S], None]
    #: The service calls the store on the event loop, not on worker threads
    #: (service.wiring.Wiring.call says when that pays).
    on_event_loop: Callable[[S], bool]


_KINDS: dict[type, StoreKind[Any]] = {}


def register(cls: type[S], kind: StoreKind[S]) -> None:
    """Say what goes with stores of class `cls` (replacing what was registered for it)."""
    _KINDS[cls] = kind


def kind_of(store: Store) -> StoreKind[Any]:
    """The registration of `store`'s class, or of the nearest class it derives from."""
    for cls in type(store).__mro__:
        kind = _KINDS.get(cls)
        if kind is not None:
            return kind
    raise TypeError(f"no store kind is registered for {type(store).__name__}: "
                    "reconciler.store.kinds.register it with its leases and journal")


def leases_of(store: Store) -> Leases:
    """The leases that live beside `store`."""
    return kind_of(store).leases(store)


def journal_of(store: Store) -> Journal:
    """Where agent runs beside `store` are kept."""
    return kind_of(store).journal(store)


#: The SQL store's trial write: the migrations' own table, the one every store has, with one
#: row. A write that changes nothing is committed like any other (a new row version on
#: PostgreSQL, a page in SQLite's write-ahead log), so it needs what an intent needs: space, a
#: writable file, a server that accepts writes.
TRIAL_WRITE = text("UPDATE alembic_version SET version_num = version_num")


def _sql_trial_write(store: SqlStore) -> None:
    """TRIAL_WRITE through the store's group committer, as intents are committed."""
    store.commit([(TRIAL_WRITE, {})])


def _on_sqlite(store: SqlStore) -> bool:
    return store.engine.dialect.name == "sqlite"


def _itself(store: MemoryStore) -> Leases:
    return store


def _nothing_to_commit(store: MemoryStore) -> None:
    """The in-memory twin always takes writes."""


def _never(store: MemoryStore) -> bool:
    return False


register(SqlStore, StoreKind(leases=SqlLeases, journal=SqlJournal,
                             trial_write=_sql_trial_write, on_event_loop=_on_sqlite))
register(MemoryStore, StoreKind(leases=_itself, journal=journal_beside,
                                trial_write=_nothing_to_commit, on_event_loop=_never))
