"""The SQL store keeps each operation's summary between decisions (reconciler/store/folds.py):
a decision reads only what the state row's fact counts say is new, and reads everything
whenever what it reads does not add up to them. SQLite and PostgreSQL."""

import random
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from sqlalchemy import Connection, event, text

from reconciler.core.domain import Authority, Decision, Facts, Outcome, ProviderContract, Verdict
from reconciler.core.ports import Delivery, Round, Scheduled
from reconciler.core.summary import Summary, summarize
from reconciler.core.verdicts import decide
from reconciler.store import decisions
from reconciler.store.kinds import leases_of
from reconciler.store.schema import open_store
from reconciler.store.sql import SqlStore, appending

from builders import CONTRACT, OP, attempt, intent, probe, receipt, resolution, t


def decided(summary: Summary, contract: ProviderContract, now: datetime) -> Scheduled:
    return Scheduled(decide(summary, contract, now), None)


#: The folds are the SQL stores' own: the `store` fixture gives SQLite and PostgreSQL.
pytestmark = pytest.mark.store_kinds("sqlite", "postgresql")


@pytest.fixture(autouse=True)
def contract(store: SqlStore) -> None:
    """Every test's store knows the provider's contract."""
    store.put_contract(CONTRACT)


@pytest.fixture
def replicas(store: SqlStore) -> Iterator[tuple[SqlStore, SqlStore]]:
    """Two stores on one database, as two sidecar replicas are: `store` and a second one."""
    second = open_store(store.engine.url.render_as_string(hide_password=False))
    yield store, second
    second.engine.dispose()


def counts(store: SqlStore, op: str = OP) -> tuple[int, int, int]:
    with store.engine.connect() as conn:
        row = conn.execute(text("SELECT attempt_rows, completions, evidence_rows FROM "
                                "operation_state WHERE operation_id = :op"), {"op": op}).one()
    return row[0], row[1], row[2]


def rows_of(store: SqlStore, op: str = OP) -> tuple[int, int]:
    with store.engine.connect() as conn:
        return (conn.execute(text("SELECT count(*) FROM attempts WHERE operation_id = :op"),
                             {"op": op}).scalar_one(),
                conn.execute(text("SELECT count(*) FROM evidence WHERE operation_id = :op"),
                             {"op": op}).scalar_one())


def fact_reads(store: SqlStore) -> list[str]:
    """The selects of attempt and evidence rows `store` runs from now on."""
    seen: list[str] = []

    def heard(_conn: object, _cursor: object, statement: str, *_rest: object) -> None:
        flat = " ".join(statement.split())
        if flat.startswith("SELECT") and (" FROM attempts" in flat or " FROM evidence" in flat):
            seen.append(flat)

    event.listen(store.engine, "before_cursor_execute", heard)
    return seen


def fresh_decision(store: SqlStore, at: float) -> Decision:
    """The decision the whole history gives, folded from nothing."""
    return decide(summarize(store.facts(OP)), CONTRACT, t(at))


def test_every_write_of_a_fact_counts_it_on_the_state_row(store: SqlStore) -> None:
    store.record_intent(intent())
    assert counts(store) == (0, 0, 0)
    store.record_attempt(attempt(1, 1, Outcome.DISPATCHING))
    store.record_attempt(attempt(1, 1, Outcome.TIMEOUT))       # completes the open report
    store.record_attempt(attempt(1, 1, Outcome.RESPONSE, status=200))  # another report
    store.record_evidence(probe(5, Authority.AUTHORITATIVE))
    with pytest.raises(Exception, match="already recorded"):
        store.record_intent(replace(intent(), request_hash="sha256:" + "c" * 64))  # a conflict
    store.record_delivery(Delivery("stripe", "evt_1", t(6), None), receipt(6))
    leases = leases_of(store)
    assert leases.claim(OP, "s1", t(7), 60)
    leases.close_rounds("s1", [Round(intent(), [probe(8), probe(9)])],
                        lambda s, c, n: Scheduled(decide(s, c, t(9)), None), t(9))
    assert counts(store) == (2, 1, 5)
    assert rows_of(store) == (2, 5)


def test_a_decision_with_nothing_new_reads_no_fact_rows(store: SqlStore) -> None:
    store.record_intent(intent())
    for n in range(1, 4):
        store.record_attempt(attempt(n, n))
    store.decide(OP, decided, t(10))
    reads = fact_reads(store)
    store.decide(OP, decided, t(11))
    assert reads == []


def test_a_decision_after_new_facts_reads_only_the_rows_after_the_last_one_read(
        store: SqlStore) -> None:
    store.record_intent(intent())
    for n in range(1, 20):
        store.record_attempt(attempt(n, n))
    store.decide(OP, decided, t(30))
    reads = fact_reads(store)
    store.record_attempt_and_decide(attempt(20, 20), decided, t(31))
    store.record_evidence(probe(32))
    judged = store.decide(OP, decided, t(33))
    assert reads and all("attempts.id >" in r or "evidence.id >" in r for r in reads), reads
    assert judged.decision == fresh_decision(store, 33)
    assert len(judged.facts.attempts) == 20 and len(judged.facts.evidence) == 1


def test_facts_another_replica_recorded_are_caught_up_by_their_counts(
        replicas: tuple[SqlStore, SqlStore]) -> None:
    first, second = replicas
    first.record_intent(intent())
    first.record_attempt(attempt(1, 1))
    assert first.decide(OP, decided, t(2)).decision.verdict is Verdict.INDETERMINATE
    second.record_evidence(receipt(3))
    judged = first.decide(OP, decided, t(4))
    assert judged.decision.verdict is Verdict.VERIFIED_APPLIED
    assert judged.decision == fresh_decision(first, 4)


def test_a_row_committed_below_the_last_id_read_makes_the_whole_history_read(
        store: SqlStore) -> None:
    """PostgreSQL hands out ids before commit: a row with a lower id can commit after a higher
    one was read. Reading on from the last id would miss it; its count does not."""
    store.record_intent(intent())
    store.record_evidence(probe(1, Authority.AUTHORITATIVE))
    store.record_evidence(probe(2, Authority.AUTHORITATIVE))
    with store.engine.begin() as conn:  # the first row goes, to come back later below the last
        first = conn.execute(text("SELECT min(id) FROM evidence")).scalar_one()
        conn.execute(text("DELETE FROM evidence WHERE id = :id"), {"id": first})
        conn.execute(text("UPDATE operation_state SET evidence_rows = 1"))
    store.decide(OP, decided, t(3))
    with store.engine.begin() as conn:  # it commits now, under the last id read, counted
        conn.execute(text("INSERT INTO evidence (id, operation_id, kind, at, provider_ref, "
                          "request_hash, source) VALUES (:id, :op, 'receipt', :at, 'ch_1', "
                          ":hash, 'lookup')"),
                     {"id": first, "op": OP, "at": t(1), "hash": intent().request_hash})
        conn.execute(text("UPDATE operation_state SET evidence_rows = 2"))
    judged = store.decide(OP, decided, t(4))
    assert [type(e).__name__ for e in judged.facts.evidence] == ["Receipt", "Observation"]
    assert judged.decision == fresh_decision(store, 4)


def test_a_summary_folded_in_a_transaction_that_rolled_back_is_not_kept(store: SqlStore) -> None:
    store.record_intent(intent())
    store.decide(OP, decided, t(1))

    def decide_then_fail(conn: Connection) -> None:
        decisions.decide_in(conn, store.deciding, OP, decided, t(2))
        raise RuntimeError("the rest of the transaction failed")

    with pytest.raises(RuntimeError):
        store.commit([*appending(receipt(2)), decide_then_fail], OP)
    assert store.deciding.folds.take(OP) is None
    judged = store.decide(OP, decided, t(3))
    assert judged.facts.evidence == () and judged.decision == fresh_decision(store, 3)


def test_a_completion_after_a_decision_leaves_that_decisions_facts_as_they_were(
        store: SqlStore) -> None:
    store.record_intent(intent())
    store.record_attempt(attempt(1, 1, Outcome.DISPATCHING))
    before = store.decide(OP, decided, t(2))
    store.record_attempt(attempt(1, 1, Outcome.RESPONSE, status=200))
    after = store.decide(OP, decided, t(3))
    assert [a.outcome for a in before.facts.attempts] == [Outcome.DISPATCHING]
    assert [a.outcome for a in after.facts.attempts] == [Outcome.RESPONSE]
    assert after.decision == fresh_decision(store, 3)


def test_kept_and_whole_history_decisions_agree_over_a_long_mixed_history(
        store: SqlStore) -> None:
    """Bounded: 120 facts of every kind, in an order drawn from a fixed seed."""
    draw = random.Random(31)
    store.record_intent(intent())
    number, at = 0, 0.0
    for _ in range(120):
        at += draw.choice((0.5, 1, 5))
        kind = draw.random()
        if kind < 0.35:
            number += 1
            outcome = draw.choice((Outcome.DISPATCHING, Outcome.TIMEOUT, Outcome.CONNECTION_ERROR))
            store.record_attempt_and_decide(attempt(number, at, outcome), decided, t(at))
        elif kind < 0.5 and number:
            store.record_attempt(attempt(draw.randint(1, number), at, Outcome.TIMEOUT))
        elif kind < 0.85:
            store.record_evidence(probe(at, draw.choice(list(Authority)),
                                        *(["ch_1"] if draw.random() < 0.1 else [])))
        else:
            store.record_evidence(resolution(at, draw.choice(
                (Verdict.VERIFIED_NOT_APPLIED, Verdict.VERIFIED_APPLIED))))
        judged = store.decide(OP, decided, t(at) + timedelta(seconds=1))
        whole = store.facts(OP)
        assert judged.facts == whole
        assert judged.decision == decide(summarize(whole), CONTRACT,
                                         t(at) + timedelta(seconds=1))
    assert store.deciding.folds.take(OP) is not None  # kept to the end, not read again each time


def test_a_fresh_decision_over_facts_read_whole_is_the_one_kept(store: SqlStore) -> None:
    """The fold read from nothing vouches for exactly the rows it read."""
    store.record_intent(intent())
    store.record_attempt(attempt(1, 1))
    store.decide(OP, decided, t(2))
    kept = store.deciding.folds.take(OP)
    assert kept is not None
    assert kept.counts == counts(store) and kept.facts() == store.facts(OP)
    assert isinstance(kept.facts(), Facts)
