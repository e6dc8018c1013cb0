"""The receipt store goes away under a load of intent writes, and comes back: the SQLite file
moved away (with its -wal and -shm) and put back, PostgreSQL cut off behind a TCP relay and
reconnected (the shared server itself is never stopped).

While the store is gone, readiness answers 503 and every write a 503 store-unavailable problem,
never a 500; once it is back, writes succeed again, every acknowledged intent is there, and no
row is half-written. `--fault-scale N` takes the store away N times.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import make_url

from reconciler.service import Settings, create_app

from databases import PG_URL, pg_schema, pg_unreachable
from fault_harness import (
    PROBLEM_JSON,
    WHOLE,
    IntentLoad,
    TcpRelay,
    eventually,
    half_written,
    intent_body,
    scaled,
    sqlite_checks,
)
from service_harness import serving
from sidecar_client import PROBLEMS, assert_problem

# Input must never reach the catch-all 500 (the fixture is in conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_internal_errors")]

SQLITE_FILES = ("", "-wal", "-shm")
#: Writes to see refused before the store comes back: the load did hit the outage.
REFUSALS = 5


@contextmanager
def sidecar_on(url: str) -> Iterator[httpx.Client]:
    with serving(create_app(Settings(db=url, sweep_interval_s=0))) as base, httpx.Client(
            base_url=base, timeout=10) as http:
        yield http


def assert_store_gone(http: httpx.Client, known: str) -> None:
    assert_problem(http.get("/readyz"), 503, "store-unavailable")
    assert_problem(http.post("/v1/operations", json=intent_body("during-outage")), 503,
                   "store-unavailable")
    assert_problem(http.get(f"/v1/operations/{known}"), 503, "store-unavailable")


def outage_under_load(http: httpx.Client, outages: int, take_away: Callable[[], None],
                      bring_back: Callable[[], None]) -> list[str]:
    """Run a write load through `outages` outages; the acknowledged operations."""
    with IntentLoad(str(http.base_url), prefix="w") as load:
        for _ in range(outages):
            assert load.await_acks(10)
            take_away()
            assert load.await_answers(503, REFUSALS)
            assert_store_gone(http, load.acknowledged[0])
            bring_back()
            assert eventually(lambda: http.get("/readyz").status_code == 200)
            assert load.await_acks(1)
        load.stop()
    refusals = {(a.status, a.content_type, a.problem_type) for a in load.answers
                if a.status != 201}
    assert refusals == {(503, PROBLEM_JSON, PROBLEMS + "store-unavailable")}
    return load.acknowledged


def assert_all_there(http: httpx.Client, acknowledged: list[str]) -> None:
    assert http.post("/v1/operations", json=intent_body("after-outage")).status_code == 201
    lost = [op for op in acknowledged if http.get(f"/v1/operations/{op}").status_code != 200]
    assert lost == []


def test_a_sqlite_file_moved_away_refuses_writes_until_it_is_back(
        tmp_path: Path, pytestconfig: pytest.Config) -> None:
    db, aside = tmp_path / "reconciler.db", tmp_path / "aside"
    aside.mkdir()
    url = f"sqlite:///{db}"

    def move(source: Path, target: Path, suffixes: Sequence[str]) -> None:
        for suffix in suffixes:
            if Path(f"{source}{suffix}").exists():
                os.replace(f"{source}{suffix}", f"{target}{suffix}")

    def take_away() -> None:
        move(db, aside / db.name, SQLITE_FILES)

    def bring_back() -> None:
        # Nothing was created in its place meanwhile: no empty store, no foreign WAL.
        assert sorted(p.name for p in tmp_path.iterdir()) == ["aside"]
        # The database file last, as a restore does it: a connection that opened it before
        # its WAL was back would see an empty store, and closing would delete the WAL.
        move(aside / db.name, db, SQLITE_FILES[::-1])

    with sidecar_on(url) as http:
        acknowledged = outage_under_load(http, scaled(pytestconfig, 1), take_away, bring_back)
        assert_all_there(http, acknowledged)
    assert half_written(url) == WHOLE
    assert sqlite_checks(url) == (["ok"], [])


@pytest.mark.parametrize("content", [b"", b"not a database " * 512],
                         ids=["empty", "not_a_database"])
def test_another_file_in_place_of_the_store_is_a_store_gone(tmp_path: Path,
                                                             content: bytes) -> None:
    db = tmp_path / "reconciler.db"
    with sidecar_on(f"sqlite:///{db}") as http:
        assert http.post("/v1/operations", json=intent_body("op-1")).status_code == 201
        for suffix in SQLITE_FILES:
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        db.write_bytes(content)
        assert_store_gone(http, "op-1")
        assert db.read_bytes() == content  # left as found: nothing written into it


@pytest.mark.skipif(pg_unreachable() is not None, reason=pg_unreachable() or "reachable")
def test_a_postgresql_cut_off_refuses_writes_until_it_is_back(
        pytestconfig: pytest.Config) -> None:
    server = make_url(PG_URL)
    with pg_schema() as url, TcpRelay((server.host or "127.0.0.1", server.port or 5432)
                                      ) as relay:
        relayed = make_url(url).set(host="127.0.0.1", port=relay.port).render_as_string(False)
        with sidecar_on(relayed) as http:
            acknowledged = outage_under_load(http, scaled(pytestconfig, 1), relay.cut,
                                             relay.restore)
            assert_all_there(http, acknowledged)
        assert half_written(url) == WHOLE
