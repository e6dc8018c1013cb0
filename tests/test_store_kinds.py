"""What goes with a store is what its kind registered (reconciler.store.kinds), found by its
class: never guessed, and a kind nobody registered is said to be so."""

from pathlib import Path

import pytest

from reconciler.core.ports import Journal, Leases
from reconciler.store import kinds
from reconciler.store.kinds import StoreKind, journal_of, kind_of, leases_of, register
from reconciler.store.memory import MemoryStore
from reconciler.store.memory_journal import MemoryJournal
from reconciler.store.schema import open_store


class Unregistered:
    """A store of a kind nobody registered."""


class Subclassed(MemoryStore):
    """A kind derived from a registered one."""


@pytest.fixture(autouse=True)
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made here stay here."""
    monkeypatch.setattr(kinds, "_KINDS", dict(kinds._KINDS))


def test_a_store_of_a_kind_nobody_registered_is_named_in_the_error() -> None:
    for what_goes_with in (leases_of, journal_of, kind_of):
        with pytest.raises(TypeError, match="no store kind is registered for Unregistered"):
            what_goes_with(Unregistered())  # type: ignore[arg-type]


def test_a_registered_kind_gets_what_it_registered() -> None:
    journal, leases = MemoryJournal(), MemoryStore()

    def its_journal(store: Unregistered) -> Journal:
        return journal

    def its_leases(store: Unregistered) -> Leases:
        return leases

    register(Unregistered, StoreKind(leases=its_leases, journal=its_journal,
                                     trial_write=lambda store: None,
                                     on_event_loop=lambda store: True))
    store = Unregistered()
    assert journal_of(store) is journal  # type: ignore[arg-type]
    assert leases_of(store) is leases  # type: ignore[arg-type]
    assert kind_of(store).on_event_loop(store)  # type: ignore[arg-type]


def test_a_derived_kind_goes_with_what_its_parent_registered() -> None:
    store = Subclassed()
    assert leases_of(store) is store
    assert isinstance(journal_of(store), MemoryJournal)


def test_a_memory_store_keeps_one_journal_beside_it() -> None:
    """Each caller (each request of a sidecar on the store) sees the same runs."""
    store, other = MemoryStore(), MemoryStore()
    journal = journal_of(store)
    assert journal_of(store) is journal and journal_of(other) is not journal
    assert leases_of(store) is store


def test_only_sqlite_is_called_on_the_event_loop(tmp_path: Path) -> None:
    sqlite = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    try:
        assert kind_of(sqlite).on_event_loop(sqlite)
        kind_of(sqlite).trial_write(sqlite)
    finally:
        sqlite.engine.dispose()
    memory = MemoryStore()
    assert not kind_of(memory).on_event_loop(memory)
