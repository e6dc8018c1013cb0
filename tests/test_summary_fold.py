"""The summary a store folds fact by fact (reconciler.core.summary: `add_attempt`, `complete`,
`add_evidence`) decides as the fold of the whole history (`summarize`) does, at any time, for
any order the facts reach the store in: many reports of one attempt, openings completed later,
retries of a non_idempotent action in order and out of it, clocks that disagree. And a retry
that arrives in order is folded where it stands: only one out of order needs the whole history.
"""

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_verdict_properties import (
    approvals,
    contracts,
    observations,
    receipts,
    refusals,
    resolutions,
    seconds,
)

from reconciler.core.domain import (
    Attempt,
    Authority,
    Effect,
    Facts,
    Intent,
    Observation,
    Outcome,
    ProviderContract,
)
from reconciler.core.ports import Scheduled
from reconciler.core.summary import Summary, summarize
from reconciler.core.verdicts import decide
from reconciler.store.memory import MemoryStore

from builders import CONTRACT, H0, K0, OP, OTHER_HASH, intent, t

TIMES = [0.0, 15.0, 45.0, 120.0, 4000.0, 9000.0]


@st.composite
def reports(draw: st.DrawFn) -> list[Attempt]:
    """One report of an attempt, now and then opened `dispatching` first (the opening comes
    first; the completion is another step, somewhere later)."""
    outcome = draw(st.sampled_from([o for o in Outcome if o is not Outcome.DISPATCHING]))
    at = t(draw(seconds))
    report = Attempt(
        OP, draw(st.integers(1, 6)), draw(st.sampled_from([K0] * 6 + ["other-key"])),
        draw(st.sampled_from([H0] * 6 + [OTHER_HASH])), at, outcome,
        draw(st.sampled_from([200, 409, 500])) if outcome is Outcome.RESPONSE else None,
        recorded_at=draw(st.sampled_from([None, at, t(draw(seconds))])),
        ungranted=draw(st.sampled_from([False] * 5 + [True])))
    if draw(st.booleans()):
        return [replace(report, outcome=Outcome.DISPATCHING, status=None), report]
    return [report]


@st.composite
def histories(draw: st.DrawFn) -> tuple[Intent, ProviderContract, list[Any]]:
    """An intent, a contract and the facts in the order they reach the store."""
    effect = draw(st.sampled_from([Effect.NON_IDEMPOTENT] * 3 + list(Effect)))
    steps: list[Any] = draw(st.lists(st.one_of(
        observations, receipts, resolutions, approvals, refusals), max_size=8))
    for pair in draw(st.lists(reports(), max_size=8)):
        opened = draw(st.integers(0, len(steps)))
        steps.insert(opened, pair[0])
        if len(pair) == 2:
            steps.insert(draw(st.integers(opened + 1, len(steps))), pair[1])
    return intent(effect), draw(contracts), steps


def _summary(store: MemoryStore, contract: ProviderContract) -> Summary:
    """The summary the store decides from, as its rule is handed it."""
    seen: list[Summary] = []

    def rule(summary: Summary, c: ProviderContract, now: Any) -> Scheduled:
        seen.append(summary)
        return Scheduled(decide(summary, c, now), None)

    store.decide(OP, rule, t(0))
    return seen[0]


@settings(max_examples=400, deadline=None)
@given(histories())
def test_the_folded_summary_decides_as_the_whole_history_at_every_time(
        case: tuple[Intent, ProviderContract, list[Any]]) -> None:
    first, contract, steps = case
    store = MemoryStore()
    store.put_contract(contract)
    store.record_intent(first)
    for step in steps:
        if isinstance(step, Attempt):
            store.record_attempt(step)
        else:
            store.record_evidence(step)
        folded, whole = _summary(store, contract), summarize(store.facts(OP))
        for now in TIMES:
            assert decide(folded, contract, t(now)) == decide(whole, contract, t(now))


def _retries(count: int, probe_every: int = 3) -> list[Any]:
    """A non_idempotent action retried `count` times in order, one second apart, each opened
    as dispatching and completed with a timeout, an authoritative zero now and then between."""
    steps: list[Any] = []
    for n in range(1, count + 1):
        opened = Attempt(OP, n, K0, H0, t(10 * n), Outcome.DISPATCHING, recorded_at=t(10 * n))
        steps += [opened, replace(opened, outcome=Outcome.TIMEOUT, recorded_at=t(10 * n + 1))]
        if n % probe_every == 0:
            steps.append(Observation(OP, t(10 * n + 5), "p", Authority.AUTHORITATIVE,
                                     recorded_at=t(10 * n + 5)))
    return steps


def test_a_retry_in_order_is_folded_where_it_stands_and_decides_as_the_whole_history(
        ) -> None:
    summary, steps = Summary(intent()), _retries(30)
    recorded: list[Attempt] = []
    evidence = []
    for step in steps:
        if not isinstance(step, Attempt):
            summary.add_evidence(step)
            evidence.append(step)
        elif step.outcome is Outcome.DISPATCHING:
            assert summary.add_attempt(step), f"attempt {step.number} refolded"
            recorded.append(step)
        else:
            done = replace(step, recorded_at=recorded[-1].recorded_at,
                           completed_at=step.recorded_at)
            summary.complete(recorded[-1], done)
            recorded[-1] = done
    whole = summarize(Facts(intent(), tuple(recorded), tuple(evidence)))
    assert len(summary.before_retries) == len(whole.before_retries) == 29
    for now in [*TIMES, 400.0]:
        assert decide(summary, CONTRACT, t(now)) == decide(whole, CONTRACT, t(now))


def test_a_retry_out_of_order_asks_for_the_whole_history() -> None:
    """A retry numbered below one recorded, or one dated before evidence already recorded,
    changes what was known before a retry: the summary folds nothing and says so."""
    summary = Summary(intent())
    assert summary.add_attempt(Attempt(OP, 3, K0, H0, t(30), Outcome.TIMEOUT))
    assert not summary.add_attempt(Attempt(OP, 2, K0, H0, t(20), Outcome.TIMEOUT))
    summary = Summary(intent())
    summary.add_evidence(Observation(OP, t(50), "p", Authority.AUTHORITATIVE))
    assert not summary.add_attempt(Attempt(OP, 2, K0, H0, t(40), Outcome.TIMEOUT))
    assert summary.reports == 0


def test_the_memory_store_folds_attempts_in_order_without_refolding_the_history(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Reports, completions and in-order retries are folded where they stand: recording one
    costs the same at any number of attempts (the whole-history fold is never called)."""
    store = MemoryStore()
    store.record_intent(intent())

    def refold(facts: Facts) -> Summary:
        raise AssertionError(f"refolded {len(facts.attempts)} reports")

    monkeypatch.setattr("reconciler.store.memory_operation.summarize", refold)
    for step in _retries(50):
        if isinstance(step, Attempt):
            assert store.record_attempt(step)
        else:
            store.record_evidence(step)
    assert store.record_attempt(Attempt(OP, 50, K0, H0, t(500), Outcome.RESPONSE, 409,
                                        recorded_at=t(600)))  # another report of the last
    monkeypatch.undo()
    for now in TIMES:
        assert decide(_summary(store, CONTRACT), CONTRACT, t(now)) == decide(
            summarize(store.facts(OP)), CONTRACT, t(now))


def test_a_decision_keeps_the_facts_it_was_drawn_from_when_an_opening_is_completed_after(
        ) -> None:
    store = MemoryStore()
    store.record_intent(intent(Effect.IDEMPOTENT_WRITE))
    opened = Attempt(OP, 1, K0, H0, t(1), Outcome.DISPATCHING, recorded_at=t(1))
    store.record_attempt(opened)
    before = store.decide(OP, lambda s, c, at: Scheduled(decide(s, c, at), None), t(2))
    store.record_attempt(replace(opened, outcome=Outcome.TIMEOUT, recorded_at=t(3)))
    after = store.decide(OP, lambda s, c, at: Scheduled(decide(s, c, at), None), t(4))
    assert [a.outcome for a in before.facts.attempts] == [Outcome.DISPATCHING]
    assert [(a.outcome, a.completed_at) for a in after.facts.attempts] == [
        (Outcome.TIMEOUT, t(3))]
