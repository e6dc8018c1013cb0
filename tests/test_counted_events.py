"""The run steps a journal records are counted once, however many apps wrapped it: a memory
store's journal is one object for every app that serves the store (store.kinds)."""

from prometheus_client import REGISTRY

from reconciler.core.runs.events import EventKind
from reconciler.service.metering import counted_events
from reconciler.store.memory_journal import MemoryJournal

from builders import t


def turns() -> float:
    return REGISTRY.get_sample_value("reconciler_run_turns_total") or 0.0


def test_a_journal_counted_by_two_apps_counts_each_turn_once() -> None:
    journal = counted_events(counted_events(MemoryJournal()))
    view = journal.create("run-1", {"input": "task"}, t(0))
    view = journal.append(view, EventKind.STARTED, {}, t(1))
    before = turns()
    journal.append(view, EventKind.TURN, {"turn": 1}, t(2))
    assert turns() - before == 1
