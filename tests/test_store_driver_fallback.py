"""The hot statements run on the driver's cursor (reconciler/store/driver.py), never through
`Connection.execute`, on SQLite and PostgreSQL. The driver reads SQLAlchemy's compiled
statements; a SQLAlchemy release that changes them makes a statement fall back (its
`_prepared_for` answers None), which costs the hot path about twice the CPU per statement and
is otherwise silent: this test is what says so (pyproject.toml pins SQLAlchemy's minor)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from reconciler.core.domain import Effect, Outcome
from reconciler.ledger import Ledger
from reconciler.ledger.gate import RetryGate, RetryRequest
from reconciler.store.driver import DriverStatements
from reconciler.store.kinds import leases_of
from reconciler.store.schema import open_store
from reconciler.testing import ManualClock

from builders import CONTRACT, H0, K0, OP, T0, attempt, intent, probe


class Statements:
    """Every statement the driver was asked to run: those it ran itself, and those it
    handed to `Connection.execute`."""

    def __init__(self) -> None:
        self.on_driver: list[str] = []
        self.fell_back: list[str] = []


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[Statements]:
    seen = Statements()
    real = DriverStatements._prepared_for

    def spied(self: DriverStatements, statement: Any, params: dict[str, Any]) -> Any:
        prepared = real(self, statement, params)
        # The statement's first line: its verb and table, no parameter values.
        line = str(statement).splitlines()[0]
        (seen.on_driver if prepared is not None else seen.fell_back).append(line)
        return prepared

    monkeypatch.setattr(DriverStatements, "_prepared_for", spied)
    yield seen


def test_the_hot_path_runs_every_statement_on_the_driver(store_url: str,
                                                         statements: Statements) -> None:
    store = open_store(store_url)
    try:
        store.put_contract(CONTRACT)
        ledger = Ledger(store, clock=ManualClock(T0))
        ledger.record_intent(intent(Effect.IDEMPOTENT_WRITE))
        ledger.record_attempt(attempt(1, 1, Outcome.TIMEOUT))
        ledger.record_evidence(probe(60))  # an authoritative zero: a retry may be granted
        ledger.judge(OP)
        gate = RetryGate(ledger, leases_of(store), 60.0)
        gate.ask(RetryRequest(OP, K0, H0, "worker-1"))
    finally:
        store.engine.dispose()
    assert statements.on_driver, "the hot path ran no statement through the driver"
    assert {line.split()[0] for line in statements.on_driver} >= {"INSERT", "SELECT"}
    assert statements.fell_back == [], "\n".join(statements.fell_back)
