"""Retention: `reconciler prune` removes exactly the settled operations past the window, writes
them as SPEC NDJSON that replays to the same verdicts, and leaves everything else alone."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlmodel import col
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.cli.replay import replay
from reconciler.core.domain import Authority, Effect, Intent, Match, Observation, Receipt, Verdict
from reconciler.ledger import Ledger
from reconciler.ledger.prune import DurationError, parse_duration, prune
from reconciler.store import rows
from reconciler.store.schema import open_store
from reconciler.store.sql import INSERT_EVIDENCE, INSERT_INTENT, INSERT_STATE, SqlStore
from reconciler.store.tables import IntentRow
from reconciler.testing import ManualClock

from builders import H0
from sidecar_client import Sidecar, running_sidecar

LONG_AGO = datetime(2025, 1, 1, tzinfo=UTC)
SETTLED, UNDECIDED, RECENT = 100_000, 1_000, 200


def _intent(op: str, at: datetime) -> Intent:
    return Intent(op, H0, f"k-{op}", "pay", "charge", Effect.NON_IDEMPOTENT, at)


def bulk(store: SqlStore, prefix: str, count: int, at: datetime, verdict: Verdict,
         action: str) -> None:
    """`count` operations in three executemany inserts (a receipt each when settled)."""
    intents = [_intent(f"{prefix}-{n:06d}", at) for n in range(count)]
    with store.engine.begin() as conn:
        conn.execute(INSERT_INTENT, [rows.intent_values(i) for i in intents])
        conn.execute(INSERT_STATE, [rows.state_values(i, verdict, action) for i in intents])
        if verdict is Verdict.VERIFIED_APPLIED:
            conn.execute(INSERT_EVIDENCE, [
                rows.evidence_values(Receipt(i.operation_id, at, f"ch-{i.operation_id}", H0,
                                             "lookup")) for i in intents])


def count(store: SqlStore, prefix: str) -> int:
    with store.session() as s:
        found: int = s.execute(select(func.count()).select_from(IntentRow).where(
            col(IntentRow.operation_id).startswith(prefix))).scalar_one()
    return found


@pytest.mark.parametrize("text,seconds", [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400),
                                          ("45s", 45), ("2w", 14 * 86400), ("1.5h", 5400)])
def test_durations_are_a_number_and_a_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["30", "d", "thirty days", "-1d", "5y"])
def test_a_bad_duration_says_how_to_write_one(text: str) -> None:
    with pytest.raises(DurationError, match=r"e\.g\. 30d"):
        parse_duration(text)


def serve_meanwhile(sidecar: Sidecar, stop: threading.Event, answers: list[int],
                    taken: list[str]) -> None:
    """Record an intent, read it back and list a page, again and again until `stop`."""
    n = 0
    while not stop.is_set():
        op = f"live-{n:06d}"
        answers.append(sidecar.http.post("/v1/operations", json={
            "operation_id": op, "request_hash": H0, "idempotency_key": f"k-{op}",
            "provider": "pay", "action": "charge", "effect": "non_idempotent"}).status_code)
        if answers[-1] == 201:
            taken.append(op)
        answers.append(sidecar.http.get(f"/v1/operations/{op}").status_code)
        answers.append(sidecar.http.get("/v1/operations?limit=50").status_code)
        n += 1


@pytest.mark.slow
def test_prune_removes_exactly_the_settled_past_the_window_and_replays_while_serving(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'big.db'}"
    store = open_store(url)
    now = datetime.now(UTC)
    bulk(store, "settled", SETTLED, LONG_AGO, Verdict.VERIFIED_APPLIED, "use_recorded_outcome")
    bulk(store, "undecided", UNDECIDED, LONG_AGO, Verdict.INDETERMINATE, "wait_and_reconcile")
    bulk(store, "recent", RECENT, now - timedelta(days=1), Verdict.VERIFIED_APPLIED,
         "use_recorded_outcome")
    export = tmp_path / "pruned.ndjson"
    answers: list[int] = []
    taken: list[str] = []
    stop = threading.Event()
    with running_sidecar(url) as sidecar:
        client = threading.Thread(target=serve_meanwhile, args=(sidecar, stop, answers, taken))
        client.start()
        try:
            with export.open("w", encoding="utf-8") as out:
                removed = prune(Ledger(store), now - timedelta(days=30), out, batch=2_000)
            served = len(answers)
        finally:
            stop.set()
            client.join(60)
    assert removed == SETTLED
    assert served > 0 and set(answers) <= {200, 201}, sorted(set(answers))
    assert (count(store, "settled"), count(store, "undecided"), count(store, "recent")) == (
        0, UNDECIDED, RECENT)
    assert count(store, "live") == len(taken)  # every intent the sidecar took is kept
    report = replay([export])
    assert not report.errors
    assert len(report.results) == SETTLED
    assert all(r.passed and r.got == "verified_applied" for r in report.results)


def test_prune_keeps_an_operation_inside_its_key_retention(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    clock = ManualClock(LONG_AGO)
    ledger = Ledger(store, clock=clock)
    ledger.record_intent(_intent("fresh", LONG_AGO))
    ledger.record_evidence(Receipt("fresh", LONG_AGO, "ch_1", H0, "lookup"))
    # Settled before the cut-off, but the default key retention (a day) still runs.
    clock.set(LONG_AGO + timedelta(hours=2))
    assert prune(ledger, LONG_AGO + timedelta(hours=1)) == 0
    clock.set(LONG_AGO + timedelta(days=2))
    assert prune(ledger, LONG_AGO + timedelta(hours=1)) == 1


def test_prune_keeps_a_duplicate_effect_for_a_human(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    clock = ManualClock(LONG_AGO)
    ledger = Ledger(store, clock=clock)
    ledger.record_intent(_intent("dup", LONG_AGO))
    ledger.record_evidence(Observation("dup", LONG_AGO, "list", Authority.AUTHORITATIVE,
                                       (Match("ch_1", H0), Match("ch_2", H0))))
    clock.set(LONG_AGO + timedelta(days=60))
    assert ledger.judge("dup").decision.verdict is Verdict.DUPLICATE_EFFECT
    assert prune(ledger, LONG_AGO + timedelta(days=30)) == 0


def test_the_prune_command_writes_its_export(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    store = open_store(url)
    bulk(store, "old", 3, LONG_AGO, Verdict.VERIFIED_APPLIED, "use_recorded_outcome")
    store.engine.dispose()
    export = tmp_path / "out.ndjson"
    result = CliRunner().invoke(app, ["prune", "--settled-before", "30d", "--export",
                                      str(export), "--db", url])
    assert result.exit_code == 0, result.output
    assert "removed 3 settled operation(s)" in result.output
    assert [r.passed for r in replay([export]).results] == [True] * 3
    bad = CliRunner().invoke(app, ["prune", "--settled-before", "a while", "--db", url])
    assert bad.exit_code == 2 and "e.g. 30d" in bad.output
