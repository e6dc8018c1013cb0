"""`[service] retain_settled_days`: the service removes settled operations past the window on
its own, a bounded batch per pass, going on where the last pass stopped; by the ledger's clock."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from reconciler.core.domain import Effect, Intent, ProviderContract, Receipt
from reconciler.ledger import Ledger
from reconciler.ledger.prune import Retention
from reconciler.service.app import create_app
from reconciler.service.settings import Settings
from reconciler.store.schema import open_store
from reconciler.store.sql import SqlStore
from reconciler.testing import ManualClock

from builders import H0

SETTLED_AT = datetime(2026, 1, 1, tzinfo=UTC)
KEEP = timedelta(days=30)


def settle(ledger: Ledger, op: str, provider: str = "pay") -> None:
    ledger.record_intent(Intent(op, H0, f"k-{op}", provider, "charge", Effect.NON_IDEMPOTENT,
                                ledger.clock()))
    ledger.record_evidence(Receipt(op, ledger.clock(), f"ch-{op}", H0, "lookup"))


def stored(store: SqlStore) -> list[str]:
    return [s.operation_id for s in store.list_operations(limit=1000)]


def test_each_pass_removes_at_most_its_batches_and_only_past_the_window(
        tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    clock = ManualClock(SETTLED_AT)
    ledger = Ledger(store, clock=clock)
    for n in range(10):
        settle(ledger, f"op-{n}")
    retention = Retention(ledger, KEEP, batch=2, batches=2)
    clock.advance((KEEP - timedelta(days=1)).total_seconds())
    assert retention.run() == 0  # inside the window
    clock.advance(timedelta(days=2).total_seconds())
    assert [retention.run() for _ in range(4)] == [4, 4, 2, 0]
    assert stored(store) == []


def test_operations_it_keeps_do_not_hold_back_those_behind_them(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    store.put_contract(ProviderContract("slow", key_retention_s=365 * 86400.0))
    clock = ManualClock(SETTLED_AT)
    ledger = Ledger(store, clock=clock)
    for n in range(4):  # first in the removal order, inside their key retention for a year
        settle(ledger, f"a-{n}", provider="slow")
    for n in range(4):
        settle(ledger, f"b-{n}")
    clock.advance((KEEP + timedelta(days=1)).total_seconds())
    retention = Retention(ledger, KEEP, batch=2, batches=1)
    assert sum(retention.run() for _ in range(6)) == 4
    assert stored(store) == [f"a-{n}" for n in range(4)]


def test_the_service_applies_retain_settled_days(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    store = open_store(url)
    clock = ManualClock(SETTLED_AT)
    ledger = Ledger(store, clock=clock)
    for n in range(3):
        settle(ledger, f"old-{n}")
    clock.advance((KEEP + timedelta(days=1)).total_seconds())
    settle(ledger, "new-0")
    settings = Settings(db=url, sweep_interval_s=0, retain_settled_days=30)
    with TestClient(create_app(settings, ledger=ledger)):
        deadline = time.monotonic() + 10  # its first pass runs as the service starts
        while stored(store) != ["new-0"] and time.monotonic() < deadline:
            time.sleep(0.05)
    assert stored(store) == ["new-0"]


def test_without_retain_settled_days_nothing_is_removed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    store = open_store(url)
    clock = ManualClock(SETTLED_AT)
    ledger = Ledger(store, clock=clock)
    settle(ledger, "old-0")
    clock.advance(timedelta(days=400).total_seconds())
    app = create_app(Settings(db=url, sweep_interval_s=0), ledger=ledger)
    assert app.state.wiring.retention is None
    with TestClient(app):
        pass
    assert stored(store) == ["old-0"]
