"""A duplicate's compensation: a human records that the extra effect was undone (actor from the
credential, note, the compensation's reference). The verdict stays duplicate_effect and the
history keeps it; the next action becomes `compensated` and the operation leaves the human
queue; a further effect puts it back. On the memory store, SQLite and PostgreSQL alike, over
the API and through `reconciler ops`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.core.attention import Reason, reason_of
from reconciler.core.domain import Authority, Compensation, Evidence, Outcome, Verdict
from reconciler.core.ports import Store
from reconciler.core.verdicts import NextAction, evaluate
from reconciler.ledger import Ledger
from reconciler.testing import ManualClock

from builders import CONTRACT, OP, attempt, facts, intent, probe, t
from console_harness import Console, console_sidecar
from sidecar_client import TOKEN

AUTHORITATIVE = Authority.AUTHORITATIVE
SENT = attempt(1, 0, Outcome.RESPONSE, status=200)


def compensation(at: float) -> Compensation:
    return Compensation(OP, t(at), "ops@example.com", "refunded ch_2", "re_2")


def decided(*evidence: Evidence) -> tuple[Verdict, str]:
    decision = evaluate(facts(SENT, *evidence), CONTRACT, t(100))
    assert not decision.retry_allowed
    return decision.verdict, decision.next_action


def test_a_compensated_duplicate_keeps_its_verdict_and_waits_on_nobody() -> None:
    assert decided(probe(50, AUTHORITATIVE, "ch_1", "ch_2")) == (
        Verdict.DUPLICATE_EFFECT, NextAction.COMPENSATE)
    verdict, action = decided(probe(50, AUTHORITATIVE, "ch_1", "ch_2"), compensation(60))
    assert (verdict, action) == (Verdict.DUPLICATE_EFFECT, NextAction.COMPENSATED)
    assert reason_of(verdict.value, action, False) is None
    assert reason_of(Verdict.DUPLICATE_EFFECT.value, NextAction.COMPENSATE,
                     False) is Reason.DUPLICATE_EFFECT


def test_a_further_effect_after_the_compensation_puts_it_back() -> None:
    assert decided(probe(50, AUTHORITATIVE, "ch_1", "ch_2"), compensation(60),
                   probe(70, AUTHORITATIVE, "ch_1", "ch_2", "ch_3")) == (
        Verdict.DUPLICATE_EFFECT, NextAction.COMPENSATE)


def test_a_compensation_before_the_second_effect_covers_nothing() -> None:
    assert decided(probe(50, AUTHORITATIVE, "ch_1"), compensation(60),
                   probe(70, AUTHORITATIVE, "ch_1", "ch_2")) == (
        Verdict.DUPLICATE_EFFECT, NextAction.COMPENSATE)


def test_every_store_keeps_the_compensation_and_takes_it_off_the_queue(store: Store) -> None:
    store.put_contract(CONTRACT)
    ledger = Ledger(store, clock=ManualClock(t(100)))
    store.record_intent(intent())
    store.record_attempt(SENT)
    ledger.record_evidence(probe(50, AUTHORITATIVE, "ch_1", "ch_2"))
    assert [s.operation_id for s in store.list_operations(attention=True)] == [OP]
    ledger.record_evidence(compensation(60))
    [kept] = store.facts(OP).of(Compensation)
    assert kept == compensation(60)
    assert store.list_operations(attention=True) == []
    [summary] = store.list_operations(verdict=Verdict.DUPLICATE_EFFECT.value)
    assert (summary.next_action, summary.reason) == (NextAction.COMPENSATED, None)


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Console]:
    with console_sidecar(tmp_path, duplicates=("dup",)) as running:
        yield running


def ops(console: Console, *args: str, code: int = 0) -> str:
    result = CliRunner().invoke(app, ["ops", *args], env={
        "RECONCILER_URL": console.url, "RECONCILER_TOKEN": TOKEN, "COLUMNS": "200"})
    assert result.exit_code == code, result.output
    return result.output


def test_ops_compensate_records_it_in_the_credentials_name(console: Console) -> None:
    assert "dup" in {i["id"] for i in json.loads(ops(console, "queue", "--json"))}
    out = ops(console, "compensate", "dup", "--reference", "re_dup_2", "--note", "refunded")
    assert "dup: verdict duplicate_effect, next compensated" in out
    [kept] = console.store.facts("dup").of(Compensation)
    assert (kept.actor, kept.note, kept.reference) == ("admin", "refunded", "re_dup_2")
    assert "dup" not in {i["id"] for i in json.loads(ops(console, "queue", "--json"))}
    shown = json.loads(ops(console, "show", "dup", "--json"))
    assert shown["verdict"] == "duplicate_effect"
    assert [e["provider_ref"] for e in shown["evidence"] if e["kind"] == "compensation"] == [
        "re_dup_2"]


def test_only_a_duplicate_is_compensated(console: Console) -> None:
    answer = console.api.post("/v1/operations/late/compensation", json={"reference": "re_1"})
    assert answer.status_code == 409
    assert answer.json()["type"].endswith("not-a-duplicate")
    assert not console.store.facts("late").of(Compensation)
    assert "409" in ops(console, "compensate", "late", "--reference", "re_1", code=1)
