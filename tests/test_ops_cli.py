"""`reconciler ops` against a live sidecar (served over HTTP with a token): every action the
console has, as tables that fit 100 columns or as JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reconciler.cli import app
from reconciler.core.domain import Approval, Resolution, Verdict
from reconciler.core.runs.events import EventKind
from reconciler.store.journal import SqlJournal

from console_harness import Console, console_sidecar
from sidecar_client import TOKEN


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Console]:
    with console_sidecar(tmp_path) as running:
        yield running


def ops(console: Console, *args: str, token: str = TOKEN, code: int = 0) -> str:
    env = {"RECONCILER_URL": console.url, "RECONCILER_TOKEN": token,
           "COLUMNS": "200"}
    result = CliRunner().invoke(app, ["ops", *args], env=env)
    assert result.exit_code == code, result.output
    return result.output


def test_the_queue_lists_what_waits_on_a_human_in_100_columns(console: Console) -> None:
    out = ops(console, "queue")
    assert "Needs a human: 2" in out
    assert "late" in out and "escalate_to_human" in out
    assert "r1" in out and "awaiting_approval" in out
    assert max(len(line) for line in out.splitlines()) <= 100
    items = json.loads(ops(console, "queue", "--json"))
    assert [(i["kind"], i["id"], i["reason"]) for i in items] == [
        ("operation", "late", "escalate_to_human"), ("run", "r1", "awaiting_approval")]


def test_show_prints_the_verdict_attempts_and_evidence(console: Console) -> None:
    out = ops(console, "show", "late")
    assert "verdict indeterminate, next escalate_to_human" in out and "timeout" in out
    assert json.loads(ops(console, "show", "late", "--json"))["intent"]["provider"] == "slow"


def test_resolve_records_the_verdict_with_the_note(console: Console) -> None:
    out = ops(console, "resolve", "late", "--verdict", "verified_applied", "--note", "seen")
    assert "verdict verified_applied" in out
    [resolution] = console.store.facts("late").of(Resolution)
    assert (resolution.verdict, resolution.actor, resolution.note) == (
        Verdict.VERIFIED_APPLIED, "admin", "seen")
    assert json.loads(ops(console, "queue", "--json"))[0]["id"] == "r1"


def test_approve_lets_the_run_send_again_and_go_on(console: Console) -> None:
    assert "run r1: completed" in ops(console, "approve", "r1", "--decision", "not_applied",
                                      "--note", "not sent")
    assert console.send.attempts == [1, 2]
    [decided] = [e for e in SqlJournal(console.store).events("r1")
                 if e.kind is EventKind.APPROVAL_DECIDED]
    assert (decided.data["decision"], decided.data["actor"]) == ("not_applied", "admin")


def test_reject_refuses_the_call(console: Console) -> None:
    run = json.loads(ops(console, "reject", "r1", "--note", "wrong channel", "--json"))
    assert run["state"] == "completed" and console.send.attempts == [1]


def test_approving_an_operation_records_the_approval(console: Console) -> None:
    ops(console, "approve", "--operation", "late", "--note", "go ahead")
    [approval] = console.store.facts("late").of(Approval)
    assert (approval.actor, approval.note) == ("admin", "go ahead")


def test_runs_lists_and_filters(console: Console) -> None:
    out = ops(console, "runs", "--state", "awaiting_approval")
    assert "r1" in out and max(len(line) for line in out.splitlines()) <= 100
    assert json.loads(ops(console, "runs", "--unhealthy", "--json"))["items"] == []


def test_a_run_that_waits_for_nothing_cannot_be_approved(console: Console) -> None:
    ops(console, "reject", "r1")
    assert "waits for no approval" in ops(console, "approve", "r1", code=1)


def test_a_wrong_credential_says_so_and_exits_1(console: Console) -> None:
    assert "401" in ops(console, "queue", token="not-the-token", code=1)


def test_a_call_sent_already_needs_a_decision_that_says_what_happened(
        console: Console) -> None:
    for args in ((), ("--decision", "approve")):
        out = ops(console, "approve", "r1", *args, code=2)
        assert "--decision not_applied|applied|approve_retry" in out
    assert console.send.attempts == [1]


@pytest.fixture
def first_sends(tmp_path: Path) -> Iterator[Console]:
    with console_sidecar(tmp_path, first_sends=("r2", "r3")) as running:
        yield running


def test_the_queue_names_a_run_waiting_for_its_first_send(first_sends: Console) -> None:
    reasons = {i["id"]: i["reason"] for i in json.loads(ops(first_sends, "queue", "--json"))}
    assert reasons == {"late": "escalate_to_human", "r1": "awaiting_approval",
                       "r2": "first_send", "r3": "first_send"}


def test_approve_sends_a_call_waiting_for_its_first_send(first_sends: Console) -> None:
    assert "run r2: completed" in ops(first_sends, "approve", "r2", "--note", "asked twice")
    assert first_sends.refund.sent == ["ch_r2"]
    [decided] = [e for e in SqlJournal(first_sends.store).events("r2")
                 if e.kind is EventKind.APPROVAL_DECIDED]
    assert (decided.data["decision"], decided.data["note"]) == ("approve", "asked twice")


def test_a_first_send_takes_no_decision_about_what_happened(first_sends: Console) -> None:
    out = ops(first_sends, "approve", "r2", "--decision", "not_applied", code=2)
    assert "waits for approval before its first send: --decision approve" in out
    assert first_sends.refund.sent == []


def test_reject_refuses_a_first_send(first_sends: Console) -> None:
    assert "run r3: completed" in ops(first_sends, "reject", "r3", "--note", "no")
    assert first_sends.refund.sent == []
