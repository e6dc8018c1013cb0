"""Properties over random event sequences: the engine never claims a verified verdict without
the evidence SPEC section 4 requires, and never grants a retry outside verified_not_applied.

The checks below restate the SPEC's evidence requirements independently of the engine's code.
"""

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.domain import (
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
    Resolution,
    Verdict,
)
from reconciler.verdicts import evaluate

from builders import H0, K0, OP, OTHER_HASH, t

# Mostly close together (lag windows), sometimes far apart (key retention).
seconds = st.one_of(*[st.integers(0, 90)] * 4, st.integers(0, 4000)).map(float)
hashes = st.sampled_from([H0, OTHER_HASH])
refs = st.sampled_from(["ref_a", "ref_b", "ref_c"])
matches = st.lists(st.builds(Match, refs, st.one_of(st.none(), hashes)), max_size=3)

observations = st.builds(
    lambda at, authority, found: Observation(
        OP, t(at), "p", authority, tuple(found) if authority is not Authority.UNAVAILABLE else (),
        "boom" if authority is Authority.UNAVAILABLE else None),
    seconds, st.sampled_from([a for a in Authority if a is not Authority.HUMAN]),
    st.one_of(st.just([]), matches))
receipts = st.builds(lambda at, ref, h: Receipt(OP, t(at), ref, h, "lookup"),
                     seconds, refs, st.one_of(st.none(), hashes))
resolutions = st.builds(
    lambda at, v: Resolution(OP, t(at), v, "human", ""), seconds,
    st.sampled_from([Verdict.VERIFIED_APPLIED, Verdict.VERIFIED_NOT_APPLIED]))
approvals = st.builds(lambda at: Approval(OP, t(at), "human", ""), seconds)
evidence = st.lists(st.one_of(observations, receipts, resolutions, approvals), max_size=8)


@st.composite
def attempts(draw: st.DrawFn) -> tuple[Attempt, ...]:
    times = sorted(draw(st.lists(seconds, max_size=4)))
    out = []
    for n, at in enumerate(times, start=1):
        outcome = draw(st.sampled_from(list(Outcome)))
        out.append(Attempt(
            # Mostly consistent attempts, so that the rules after rule 2 get exercised too.
            OP, n, draw(st.sampled_from([K0] * 7 + ["other-key"])), draw(st.sampled_from(
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
    intent = Intent(OP, H0, K0, "pay", "charge", draw(st.sampled_from(list(Effect))), t(0))
    facts = Facts(intent, draw(attempts()), tuple(draw(evidence)))
    return facts, draw(contracts), draw(seconds)


def _latest_dispatch(facts: Facts) -> float:
    return max(((a.at - t(0)).total_seconds() for a in facts.attempts), default=0.0)


def _human_said(facts: Facts, verdict: Verdict) -> bool:
    """A resolution with this verdict, recorded after every attempt, receipt and proof."""
    proofs = [e.at for e in facts.evidence if isinstance(e, Receipt) or (
        isinstance(e, Observation) and e.authority in (Authority.AUTHORITATIVE, Authority.LAGGING))]
    latest_fact = max([a.at for a in facts.attempts] + proofs, default=None)
    return any(isinstance(e, Resolution) and e.verdict is verdict
               and (latest_fact is None or e.at > latest_fact) for e in facts.evidence)


def _proof_of_effect(facts: Facts) -> bool:
    """A match from an authoritative or lagging probe, or a receipt bound to the intent's hash."""
    proof_match = any(isinstance(e, Observation) and e.matches and e.authority in (
        Authority.AUTHORITATIVE, Authority.LAGGING) for e in facts.evidence)
    bound = any(isinstance(e, Receipt) and e.request_hash == H0 for e in facts.evidence) or any(
        a.receipt is not None and a.receipt.request_hash == H0 for a in facts.attempts)
    return proof_match or bound


def _proof_of_absence(facts: Facts, contract: ProviderContract) -> bool:
    """No effect ever seen by an authoritative or lagging read, and the latest such read is a
    zero made after the latest dispatch (for lagging, at least visibility_lag_s after it)."""
    dispatched = t(_latest_dispatch(facts))
    usable = [e for e in facts.evidence if isinstance(e, Observation)
              and e.authority in (Authority.AUTHORITATIVE, Authority.LAGGING)]
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
        assert all(a.idempotency_key == K0 and a.request_hash == H0 for a in facts.attempts)
        if facts.attempts:
            assert now - (facts.attempts[0].at - t(0)).total_seconds() <= contract.key_retention_s
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
