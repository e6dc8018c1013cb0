"""Properties over random event sequences: the engine never claims a verified verdict without
the evidence SPEC section 4 requires, and never grants a retry outside verified_not_applied, nor
for an intent without a key, nor on the word of an errored observation; once a human recorded
verified_applied, no evidence makes it verified_not_applied. And the summary a store folds fact
by fact decides as the whole history does.

The checks below restate the SPEC's evidence requirements independently of the engine's code.
"""

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeGuard

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.core.domain import (
    Approval,
    Attempt,
    Authority,
    Effect,
    Facts,
    Intent,
    Match,
    Observation,
    Outcome,
    ProviderContract,
    Receipt,
    RefusedRetry,
    Resolution,
    Verdict,
)
from reconciler.core.ports import Scheduled
from reconciler.core.verdicts import decide, evaluate
from reconciler.store.memory import MemoryStore

from builders import H0, K0, OP, OTHER_HASH, t

# Mostly close together (lag windows), sometimes far apart (key retention).
seconds = st.one_of(*[st.integers(0, 90)] * 4, st.integers(0, 4000)).map(float)
hashes = st.sampled_from([H0, OTHER_HASH])
refs = st.sampled_from(["ref_a", "ref_b", "ref_c"])
matches = st.lists(st.builds(Match, refs, st.one_of(st.none(), hashes)), max_size=3)

observations = st.builds(
    lambda at, authority, found, error: Observation(
        OP, t(at), "p", authority, tuple(found) if authority is not Authority.UNAVAILABLE else (),
        "boom" if authority is Authority.UNAVAILABLE else error),
    seconds, st.sampled_from([a for a in Authority if a is not Authority.HUMAN]),
    st.one_of(st.just([]), matches),
    # Now and then a read that names an authority yet answered with an error.
    st.sampled_from([None] * 5 + ["HTTP 500"]))
receipts = st.builds(lambda at, ref, h: Receipt(OP, t(at), ref, h, "lookup"),
                     seconds, refs, st.one_of(st.none(), hashes))
resolutions = st.builds(
    lambda at, v: Resolution(OP, t(at), v, "human", ""), seconds,
    st.sampled_from([Verdict.VERIFIED_APPLIED, Verdict.VERIFIED_NOT_APPLIED]))
approvals = st.builds(lambda at: Approval(OP, t(at), "human", ""), seconds)
evidence = st.lists(st.one_of(observations, receipts, resolutions, approvals), max_size=8)


@st.composite
def attempts(draw: st.DrawFn, key: str | None) -> tuple[Attempt, ...]:
    times = sorted(draw(st.lists(seconds, max_size=4)))
    out, n = [], 0
    for at in times:
        # Now and then a gap in the numbers: an attempt sent and never recorded.
        n += draw(st.sampled_from([1] * 5 + [2]))
        outcome = draw(st.sampled_from(list(Outcome)))
        out.append(Attempt(
            # Mostly consistent attempts, so that the rules after rule 2 get exercised too.
            OP, n, draw(st.sampled_from([key] * 7 + ["other-key"])), draw(st.sampled_from(
                [H0] * 7 + [OTHER_HASH])), t(at), outcome,
            draw(st.sampled_from([200, 201, 409, 500])) if outcome is Outcome.RESPONSE else None,
            draw(st.one_of(st.none(), st.builds(Match, refs, hashes)))))
    return tuple(out)


contracts = st.builds(
    lambda keys, lag, retention, max_attempts, compensable: ProviderContract(
        "pay", keys, retention, lag, max_attempts, 600.0, compensable),
    st.sampled_from([True, True, False]), st.sampled_from([0.0, 30.0, 30.0, 300.0]),
    st.sampled_from([60.0, 3600.0]), st.integers(1, 4), st.booleans())


@st.composite
def cases(draw: st.DrawFn, evidence: st.SearchStrategy[list[Any]] = evidence
          ) -> tuple[Facts, ProviderContract, float]:
    key = draw(st.sampled_from([K0, K0, None]))
    # The intent sometimes later than attempts stamped by a clock that is behind.
    intent = Intent(OP, H0, key, "pay", "charge", draw(st.sampled_from(list(Effect))),
                    t(draw(st.sampled_from([0, 0, 20]))))
    facts = Facts(intent, draw(attempts(key)), tuple(draw(evidence)))
    return facts, draw(contracts), draw(seconds)


def _seconds(at: datetime) -> float:
    return (at - t(0)).total_seconds()


def _latest_dispatch(facts: Facts) -> float:
    return max(_seconds(at) for at in (facts.intent.at, *(a.at for a in facts.attempts)))


def _earliest_dispatch(facts: Facts) -> float:
    """The earliest attempt, never before its intent; the intent when none was recorded."""
    return _seconds(min((max(a.at, facts.intent.at) for a in facts.attempts),
                        default=facts.intent.at))


def _usable(e: object) -> TypeGuard[Observation]:
    """An authoritative or lagging read that answered without an error."""
    return isinstance(e, Observation) and e.error is None and e.authority in (
        Authority.AUTHORITATIVE, Authority.LAGGING)


def _human_said(facts: Facts, verdict: Verdict) -> bool:
    """The last recorded resolution has this verdict, and no attempt, receipt or match was
    recorded after it (looser than the SPEC: a later conclusive zero is not looked at)."""
    placed = [(i, e) for i, e in enumerate(facts.evidence) if isinstance(e, Resolution)]
    if not placed:
        return False
    place, last = placed[-1]
    after = facts.evidence[place + 1:]
    return last.verdict is verdict and not any(a.at > last.at for a in facts.attempts) and not any(
        isinstance(e, Receipt) or (_usable(e) and bool(e.matches))
        for e in after)


def _proof_of_effect(facts: Facts) -> bool:
    """A match from an authoritative or lagging probe, or a receipt bound to the intent's hash."""
    proof_match = any(_usable(e) and e.matches for e in facts.evidence)
    bound = any(isinstance(e, Receipt) and e.request_hash == H0 for e in facts.evidence) or any(
        a.receipt is not None and a.receipt.request_hash == H0 for a in facts.attempts)
    return proof_match or bound


def _proof_of_absence(facts: Facts, contract: ProviderContract) -> bool:
    """No effect ever seen by an authoritative or lagging read, and the latest such read is a
    zero made after the latest dispatch (for lagging, at least visibility_lag_s after it)."""
    dispatched = t(_latest_dispatch(facts))
    usable = [e for e in facts.evidence if _usable(e)]
    if not usable or any(o.matches for o in usable):
        return False
    latest = sorted(usable, key=lambda o: o.at)[-1]
    lag = contract.visibility_lag_s if latest.authority is Authority.LAGGING else 0.0
    return latest.at > dispatched and latest.at >= dispatched + timedelta(seconds=lag)


@settings(max_examples=400, deadline=None)
@given(cases())
def test_verified_applied_only_with_proof_of_effect(case: tuple[Facts, ProviderContract, float]
                                                    ) -> None:
    facts, contract, now = case
    if evaluate(facts, contract, t(now)).verdict is Verdict.VERIFIED_APPLIED:
        assert _proof_of_effect(facts) or _human_said(facts, Verdict.VERIFIED_APPLIED)


@settings(max_examples=400, deadline=None)
@given(st.one_of(cases(), cases(st.lists(observations, max_size=4))))
def test_verified_not_applied_only_with_conclusive_absence(
        case: tuple[Facts, ProviderContract, float]) -> None:
    facts, contract, now = case
    if evaluate(facts, contract, t(now)).verdict is Verdict.VERIFIED_NOT_APPLIED:
        assert _proof_of_absence(facts, contract) or _human_said(
            facts, Verdict.VERIFIED_NOT_APPLIED)


@settings(max_examples=400, deadline=None)
@given(cases())
def test_retry_granted_only_when_verified_not_applied_and_within_limits(
        case: tuple[Facts, ProviderContract, float]) -> None:
    facts, contract, now = case
    decision = evaluate(facts, contract, t(now))
    if decision.retry_allowed:
        assert decision.verdict is Verdict.VERIFIED_NOT_APPLIED
        assert contract.idempotency_keys
        assert len(facts.attempts) < contract.max_attempts
        assert all(a.number < contract.max_attempts for a in facts.attempts)
        assert all(a.idempotency_key == K0 and a.request_hash == H0 for a in facts.attempts)
        assert now - _earliest_dispatch(facts) <= contract.key_retention_s
        if not contract.compensable:
            assert any(isinstance(e, Approval) and e.at > t(_latest_dispatch(facts))
                       for e in facts.evidence)


@settings(max_examples=200, deadline=None)
@given(cases())
def test_weak_and_unavailable_evidence_never_verifies(
        case: tuple[Facts, ProviderContract, float]) -> None:
    facts, contract, now = case
    only_hints = Facts(facts.intent, tuple(a for a in facts.attempts if a.receipt is None),
                       tuple(e for e in facts.evidence if isinstance(e, Observation)
                             and e.authority in (Authority.WEAK, Authority.UNAVAILABLE)))
    verdict = evaluate(only_hints, contract, t(now)).verdict
    assert verdict not in (Verdict.VERIFIED_APPLIED, Verdict.VERIFIED_NOT_APPLIED)


@settings(max_examples=300, deadline=None)
@given(cases())
def test_never_a_grant_for_an_intent_without_a_key(
        case: tuple[Facts, ProviderContract, float]) -> None:
    facts, contract, now = case
    keyless = replace(facts, intent=replace(facts.intent, idempotency_key=None), attempts=tuple(
        replace(a, idempotency_key=None) for a in facts.attempts))
    assert not evaluate(keyless, contract, t(now)).retry_allowed


@settings(max_examples=300, deadline=None)
@given(cases())
def test_never_verified_not_applied_once_a_human_recorded_verified_applied(
        case: tuple[Facts, ProviderContract, float]) -> None:
    """Whatever evidence follows, unless a human records verified_not_applied after it."""
    facts, contract, now = case
    applied = Resolution(OP, t(50), Verdict.VERIFIED_APPLIED, "human", "")
    placed = [i for i, e in enumerate(facts.evidence) if isinstance(e, Resolution)]
    cut = placed[0] if placed else len(facts.evidence)
    others = tuple(e for e in facts.evidence[cut:] if not isinstance(e, Resolution))
    after = replace(facts, evidence=(*facts.evidence[:cut], applied, *others))
    assert evaluate(after, contract, t(now)).verdict is not Verdict.VERIFIED_NOT_APPLIED


@settings(max_examples=300, deadline=None)
@given(cases())
def test_an_errored_observation_changes_neither_verdict_nor_grant(
        case: tuple[Facts, ProviderContract, float]) -> None:
    facts, contract, now = case
    without = replace(facts, evidence=tuple(
        e for e in facts.evidence if not (isinstance(e, Observation) and e.error is not None)))
    with_errors, clean = evaluate(facts, contract, t(now)), evaluate(without, contract, t(now))
    assert (with_errors.verdict, with_errors.retry_allowed) == (clean.verdict,
                                                                 clean.retry_allowed)


refusals = st.builds(lambda at: RefusedRetry(OP, t(at), OTHER_HASH, "other-key", "w"), seconds)


@st.composite
def recorded_orders(draw: st.DrawFn) -> tuple[Facts, ProviderContract, float, list[Any]]:
    """A case and the order a store recorded it in: evidence in its order, each attempt
    somewhere among it (now and then opened `dispatching` first and completed later)."""
    facts, contract, now = draw(cases(st.lists(st.one_of(
        observations, receipts, resolutions, approvals, refusals), max_size=8)))
    steps: list[Any] = list(facts.evidence)
    for a in facts.attempts:
        completed_at = draw(st.integers(0, len(steps)))
        steps.insert(completed_at, a)
        if a.outcome is not Outcome.DISPATCHING and draw(st.booleans()):
            opened = replace(a, outcome=Outcome.DISPATCHING, status=None, receipt=None)
            steps.insert(draw(st.integers(0, completed_at)), opened)
    return facts, contract, now, steps


@settings(max_examples=300, deadline=None)
@given(recorded_orders())
def test_a_summary_folded_fact_by_fact_decides_as_evaluating_all_the_facts(
        case: tuple[Facts, ProviderContract, float, list[Any]]) -> None:
    """The memory store decides from the summary it folds as it records (reconciler.core.summary);
    after every fact that is the verdict, findings and grant of the whole history."""
    facts, contract, now, steps = case
    store = MemoryStore()
    store.put_contract(contract)
    store.record_intent(facts.intent)
    for step in steps:
        if isinstance(step, Attempt):
            store.record_attempt(step)
        else:
            store.record_evidence(step)
        folded = store.decide(OP, lambda s, c, at: Scheduled(decide(s, c, at), None), t(now))
        assert folded.decision == evaluate(store.facts(OP), contract, t(now))
