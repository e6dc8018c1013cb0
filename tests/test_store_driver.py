"""The driver's statements (reconciler/store/driver.py) answer what `Connection.execute` answers
for the same statement, on SQLite and PostgreSQL: `IN` lists of every length the sweep uses
(and an empty one, which SQLAlchemy renders itself), a list written into the statement, and a
batch through `execute_many`."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import sqlalchemy
from sqlalchemy import Connection

from reconciler.store.decisions import EVIDENCE_OF
from reconciler.store.driver import DriverStatements
from reconciler.store.leases import _INTENTS, _LEASE
from reconciler.store.rows import evidence_values
from reconciler.store.schema import open_store
from reconciler.store.sql import INSERT_EVIDENCE
from reconciler.store.tables import StateRow

from builders import T0, intent, receipt

OPS = [f"op-{i}" for i in range(5)]
_STATE = StateRow.__table__  # type: ignore[attr-defined]


def _seeded(url: str) -> sqlalchemy.Engine:
    store = open_store(url)
    for op in OPS:
        store.record_intent(replace(intent(), operation_id=op, idempotency_key=f"key-{op}"))
    return store.engine


def _rows(rows: object) -> list[tuple[object, ...]]:
    return [tuple(row) for row in rows]  # type: ignore[attr-defined]


def test_in_lists_of_each_length_select_what_connection_execute_selects(store_url: str) -> None:
    engine = _seeded(store_url)
    with engine.begin() as conn:
        driver = DriverStatements.of(conn.dialect)
        for ids in (OPS[:1], OPS[1:4], OPS, OPS[1:4], [], ["op-none"]):
            params = {"ids": ids}
            assert _rows(driver.select(conn, _INTENTS, params)) == _rows(
                conn.execute(_INTENTS, params)), ids
    engine.dispose()


def test_an_in_list_update_changes_the_rows_it_names(store_url: str) -> None:
    engine = _seeded(store_url)
    with engine.begin() as conn:
        changed = DriverStatements.of(conn.dialect).execute(conn, _LEASE, {
            "ids": OPS[:2], "holder": "sweeper-1", "expires": T0 + timedelta(seconds=60)})
        assert changed == 2
        assert _holders(conn) == {"op-0": "sweeper-1", "op-1": "sweeper-1", "op-2": None,
                                  "op-3": None, "op-4": None}
    engine.dispose()


def test_a_list_written_into_the_statement_goes_through_connection_execute(
        store_url: str) -> None:
    engine = _seeded(store_url)
    literal = sqlalchemy.select(_STATE.c.operation_id).where(
        _STATE.c.operation_id.in_(["op-1", "op-3"])).order_by(_STATE.c.operation_id)
    with engine.begin() as conn:
        found = DriverStatements.of(conn.dialect).select(conn, literal, {})
        assert [row.operation_id for row in found] == ["op-1", "op-3"]
    engine.dispose()


def test_execute_many_writes_every_row_of_the_batch(store_url: str) -> None:
    engine = _seeded(store_url)
    batch = [evidence_values(replace(receipt(i, ref=f"ch_{i}"), operation_id=op))
             for i, op in enumerate(OPS[:3])]
    with engine.begin() as conn:
        DriverStatements.of(conn.dialect).execute_many(conn, INSERT_EVIDENCE, batch)
        read = DriverStatements.of(conn.dialect).select(conn, EVIDENCE_OF, {"ids": OPS})
        assert [(row.operation_id, row.provider_ref) for row in read] == [
            ("op-0", "ch_0"), ("op-1", "ch_1"), ("op-2", "ch_2")]
        assert _rows(read) == _rows(conn.execute(EVIDENCE_OF, {"ids": OPS}))
    engine.dispose()


def _holders(conn: Connection) -> dict[str, object]:
    return {row.operation_id: row.lease_holder for row in conn.execute(
        sqlalchemy.select(_STATE.c.operation_id, _STATE.c.lease_holder))}
