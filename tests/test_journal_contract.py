"""What every journal of agent runs promises (reconciler.core.ports.Journal): the same tests
against the in-memory journal, SQLite and PostgreSQL, each journal the one its store's kind
registers (reconciler.store.kinds), so that runtime tests on the memory journal mean what they
mean on a database."""

from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from reconciler.core.domain import Outcome, ProviderContract, Verdict
from reconciler.core.errors import (
    IllegalTransitionError,
    RunConflictError,
    RunError,
    UnknownRunError,
)
from reconciler.core.ports import Journal, Scheduled, Store
from reconciler.core.runs.events import EventKind, RunView
from reconciler.core.runs.states import RunState
from reconciler.core.summary import Summary
from reconciler.core.verdicts import decide
from reconciler.store.kinds import journal_of

from builders import CONTRACT, OP, attempt, intent, probe, t

S = RunState
LEASE_S = 30.0


@pytest.fixture
def journal(store: Store) -> Journal:
    """The journal beside `store`, the receipt store (each kind: conftest's `store`)."""
    return journal_of(store)


def created(journal: Journal, run_id: str = "run-1", at: float = 0, **data: Any) -> RunView:
    return journal.create(run_id, {"input": "task", "config": {}, **data}, t(at))


def started(journal: Journal, run_id: str = "run-1", at: float = 0) -> RunView:
    return journal.append(created(journal, run_id, at), EventKind.STARTED, {}, t(at))


def requested(tool_call_id: str = "toolu_1") -> dict[str, Any]:
    return {"turn": 1, "tool_call_id": tool_call_id, "name": "lookup", "input": {"q": [1, 2]},
            "arguments_hash": "sha256:" + "a" * 64, "effect": "read_only"}


def kinds(journal: Journal, run_id: str = "run-1", after: int = 0) -> list[EventKind]:
    return [e.kind for e in journal.events(run_id, after)]


# Creating and appending.


def test_a_new_run_is_queued_with_its_creation_event(journal: Journal) -> None:
    view = created(journal, correlation_id="ticket-1")
    assert (view.state, view.seq, view.correlation_id) == (S.QUEUED, 1, "ticket-1")
    [event] = journal.events("run-1")
    assert (event.seq, event.kind, event.at) == (1, EventKind.CREATED, t(0))
    assert journal.load("run-1") == view


def test_a_run_id_is_created_once(journal: Journal) -> None:
    created(journal)
    with pytest.raises(RunConflictError, match="exists already"):
        created(journal, at=5)
    assert kinds(journal) == [EventKind.CREATED]


def test_appended_events_are_numbered_in_order_and_the_run_is_their_fold(
        journal: Journal) -> None:
    view = started(journal, at=1)
    view = journal.append(view, EventKind.TOOL_REQUESTED, requested(), t(2))
    assert [e.seq for e in journal.events("run-1")] == [1, 2, 3]
    assert kinds(journal) == [EventKind.CREATED, EventKind.STARTED, EventKind.TOOL_REQUESTED]
    assert journal.load("run-1") == view
    assert view.state is S.AWAITING_TOOL and view.updated_at == t(2)


def test_events_after_a_sequence_number_are_the_later_ones(journal: Journal) -> None:
    view = started(journal)
    journal.append(view, EventKind.CANCELLED, {"reason": "x"}, t(1))
    assert [e.seq for e in journal.events("run-1", after=1)] == [2, 3]
    assert journal.events("run-1", after=3) == []


def test_each_run_numbers_its_own_events(journal: Journal) -> None:
    first, second = created(journal, "run-a"), created(journal, "run-b")
    journal.append(journal.append(first, EventKind.STARTED, {}, t(1)),
                   EventKind.CANCELLED, {"reason": "x"}, t(2))
    journal.append(second, EventKind.STARTED, {}, t(1))
    assert [e.seq for e in journal.events("run-a")] == [1, 2, 3]
    assert [e.seq for e in journal.events("run-b")] == [1, 2]


def test_a_payload_reads_back_as_json(journal: Journal) -> None:
    """What was appended comes back as the database keeps it: JSON (a tuple as a list), and
    never the caller's own dict."""
    view = started(journal)
    data = requested() | {"input": {"q": (1, 2)}}
    journal.append(view, EventKind.TOOL_REQUESTED, data, t(1))
    data["input"]["q"] = "changed afterwards"
    assert journal.events("run-1")[-1].data["input"] == {"q": [1, 2]}


def test_an_append_on_a_stale_view_conflicts_and_writes_nothing(journal: Journal) -> None:
    stale = created(journal)
    moved = journal.append(stale, EventKind.STARTED, {}, t(1))
    with pytest.raises(RunConflictError, match="reload"):
        journal.append(stale, EventKind.CANCELLED, {"reason": "late"}, t(2))
    assert kinds(journal) == [EventKind.CREATED, EventKind.STARTED]
    assert journal.load("run-1") == moved


def test_of_two_writers_on_one_view_only_the_first_appends(journal: Journal) -> None:
    """Two workers that both read seq n: one appends n+1, the other is told to reload."""
    view = started(journal)
    call = requested()
    journal.append(view, EventKind.TOOL_REQUESTED, call, t(1))
    with pytest.raises(RunConflictError):
        journal.append(view, EventKind.TOOL_REQUESTED, call | {"tool_call_id": "toolu_2"}, t(1))
    assert [e.data["tool_call_id"] for e in journal.events("run-1", after=2)] == ["toolu_1"]


def test_an_event_the_run_cannot_take_is_refused_and_writes_nothing(journal: Journal) -> None:
    view = created(journal)
    with pytest.raises(IllegalTransitionError, match="needs a live run"):
        journal.append(view, EventKind.TURN, {"turn": 1}, t(1))
    view = journal.append(view, EventKind.STARTED, {}, t(1))
    view = journal.append(view, EventKind.TOOL_REQUESTED, requested(), t(2))
    with pytest.raises(RunError, match="requested already"):
        journal.append(view, EventKind.TOOL_REQUESTED, requested(), t(3))
    assert journal.load("run-1") == view


def test_a_payload_that_is_not_json_is_refused_and_writes_nothing(journal: Journal) -> None:
    view = started(journal)
    with pytest.raises(TypeError):
        journal.append(view, EventKind.CANCELLED, {"reason": object()}, t(1))
    assert journal.load("run-1") == view


def test_an_unknown_run_is_named_as_such(journal: Journal) -> None:
    with pytest.raises(UnknownRunError):
        journal.load("nope")
    with pytest.raises(UnknownRunError):
        journal.events("nope")
    with pytest.raises(UnknownRunError):
        journal.claim("nope", "w", t(0), LEASE_S)
    assert not journal.claim_unattended("nope", "w", t(0), LEASE_S, t(0))


# The lease that keeps one worker on a run.


def test_one_worker_holds_a_run_until_its_lease_expires(journal: Journal) -> None:
    created(journal)
    assert journal.claim("run-1", "worker-a", t(0), LEASE_S)
    assert journal.claim("run-1", "worker-a", t(10), LEASE_S)  # renewing: until t(40)
    assert not journal.claim("run-1", "worker-b", t(39), LEASE_S)
    assert journal.claim("run-1", "worker-b", t(40), LEASE_S)


def test_a_held_run_is_taken_over_only_on_purpose(journal: Journal) -> None:
    created(journal)
    assert journal.claim("run-1", "worker-a", t(0), LEASE_S)
    assert journal.claim("run-1", "worker-c", t(1), LEASE_S, force=True)
    assert not journal.claim("run-1", "worker-a", t(2), LEASE_S)


def test_only_the_holder_releases_the_lease(journal: Journal) -> None:
    created(journal)
    assert journal.claim("run-1", "worker-a", t(0), LEASE_S)
    journal.release("run-1", "worker-b")
    assert not journal.claim("run-1", "worker-b", t(1), LEASE_S)
    journal.release("run-1", "worker-a")
    assert journal.claim("run-1", "worker-b", t(1), LEASE_S)


# Runs needing a worker.


def test_runs_whose_lease_lapsed_or_nobody_held_need_work(journal: Journal) -> None:
    created(journal, "held", at=0)
    created(journal, "lapsed", at=0)
    created(journal, "idle", at=0)
    created(journal, "fresh", at=50)
    assert journal.claim("held", "worker-a", t(40), LEASE_S)
    assert journal.claim("lapsed", "worker-b", t(0), LEASE_S)
    assert sorted(journal.needing_work(t(60), t(10), 10)) == ["idle", "lapsed"]


def test_only_live_runs_waiting_for_a_worker_need_work(journal: Journal) -> None:
    """Queued, running or awaiting a tool need a worker; a run paused for its client, one
    awaiting approval and one that stopped do not."""
    started(journal, "running")
    view = started(journal, "tool")
    journal.append(view, EventKind.TOOL_REQUESTED, requested(), t(0))
    created(journal, "queued")
    paused = started(journal, "paused")
    journal.append(paused, EventKind.CONTINUE_REQUESTED, {"request_id": "c1"}, t(0))
    approval = started(journal, "approval")
    journal.append(approval, EventKind.APPROVAL_REQUESTED,
                   {"tool_call_id": "t1", "resume_token": "tok", "payload": {}}, t(0))
    done = started(journal, "done")
    journal.append(done, EventKind.COMPLETED, {"output": "ok"}, t(0))
    assert sorted(journal.needing_work(t(100), t(50), 10)) == ["queued", "running", "tool"]


def test_the_longest_waiting_runs_need_work_first_at_most_the_limit(journal: Journal) -> None:
    created(journal, "idle-since-5", at=5)
    created(journal, "idle-since-1", at=1)
    created(journal, "lapsed-at-33", at=0)
    assert journal.claim("lapsed-at-33", "w", t(3), LEASE_S)
    assert journal.needing_work(t(100), t(50), 10) == ["idle-since-1", "idle-since-5",
                                                        "lapsed-at-33"]
    assert journal.needing_work(t(100), t(50), 2) == ["idle-since-1", "idle-since-5"]


def test_of_two_supervisors_only_one_takes_an_unattended_run(journal: Journal) -> None:
    created(journal)
    assert journal.claim_unattended("run-1", "replica-a", t(60), LEASE_S, t(10))
    assert not journal.claim_unattended("run-1", "replica-b", t(60), LEASE_S, t(10))
    assert not journal.claim("run-1", "replica-b", t(61), LEASE_S)
    assert journal.needing_work(t(61), t(10), 10) == []


def test_a_run_that_needs_no_worker_is_not_taken_unattended(journal: Journal) -> None:
    created(journal, "recent", at=50)
    view = started(journal, "done")
    journal.append(view, EventKind.COMPLETED, {"output": "ok"}, t(0))
    assert not journal.claim_unattended("recent", "replica-a", t(60), LEASE_S, t(10))
    assert not journal.claim_unattended("done", "replica-a", t(60), LEASE_S, t(10))


# Listing and counting.


def test_runs_are_listed_in_id_order_a_page_after_the_cursor(journal: Journal) -> None:
    for run_id in ("r3", "r1", "r2", "r4"):
        created(journal, run_id)
    assert [r.run_id for r in journal.list_runs()] == ["r1", "r2", "r3", "r4"]
    assert [r.run_id for r in journal.list_runs(limit=2)] == ["r1", "r2"]
    assert [r.run_id for r in journal.list_runs(after="r2", limit=2)] == ["r3", "r4"]


def test_runs_are_listed_by_state_and_correlation(journal: Journal) -> None:
    created(journal, "r1", correlation_id="ticket-1")
    started(journal, "r2")
    created(journal, "r3", correlation_id="ticket-1")
    assert [r.run_id for r in journal.list_runs(state="queued")] == ["r1", "r3"]
    assert [r.run_id for r in journal.list_runs(state="running")] == ["r2"]
    assert [r.run_id for r in journal.list_runs(correlation_id="ticket-1")] == ["r1", "r3"]
    assert [r.run_id for r in journal.list_runs(state="running",
                                                correlation_id="ticket-1")] == []


def test_a_listed_run_is_summed_up_as_its_events_leave_it(journal: Journal) -> None:
    view = started(journal, "r1", at=1)
    journal.append(view, EventKind.FAILED, {"error_code": "model_error"}, t(7))
    [summary] = journal.list_runs()
    assert (summary.state, summary.turn, summary.error_code, summary.stop_reason,
            summary.unhealthy) == ("failed", 0, "model_error", None, False)
    assert (summary.created_at, summary.updated_at) == (t(1), t(7))


def decided(summary: Summary, contract: ProviderContract, now: datetime) -> Scheduled:
    return Scheduled(decide(summary, contract, now), None)


def test_a_run_with_a_false_success_is_listed_unhealthy(journal: Journal,
                                                        store: Store) -> None:
    """SPEC 4, false_success: "mark the run unhealthy"; read from the receipt store beside."""
    created(journal, "r1")
    created(journal, "r2")
    store.put_contract(CONTRACT)
    store.record_intent(replace(intent(), run_id="r2", tool_call_id="t1"))
    store.record_attempt(attempt(1, 0, Outcome.RESPONSE, status=200))
    store.record_evidence(probe(100))
    assert store.decide(OP, decided, t(200)).decision.verdict is Verdict.FALSE_SUCCESS
    assert [r.run_id for r in journal.list_runs(unhealthy=True)] == ["r2"]
    assert [r.run_id for r in journal.list_runs(unhealthy=False)] == ["r1"]
    assert [r.unhealthy for r in journal.list_runs()] == [False, True]


def test_runs_are_counted_by_state_with_the_longest_waiting(journal: Journal) -> None:
    created(journal, "r1", at=5)
    created(journal, "r2", at=2)
    started(journal, "r3", at=9)
    assert journal.count_runs() == [("queued", 2, t(2)), ("running", 1, t(9))]


def test_no_runs_are_no_counts_and_an_empty_list(journal: Journal) -> None:
    assert journal.count_runs() == []
    assert journal.list_runs() == []
    assert journal.needing_work(t(0), t(0), 10) == []


def test_a_lease_runs_its_length_from_the_claim(journal: Journal) -> None:
    """The lease runs `ttl_s` from the claim's `now`, not from the run's last event."""
    created(journal, at=0)
    assert journal.claim("run-1", "worker-a", t(100), LEASE_S)
    assert journal.needing_work(t(100 + LEASE_S - 1), t(200), 10) == []
    assert journal.needing_work(t(100 + LEASE_S), t(0), 10) == ["run-1"]
