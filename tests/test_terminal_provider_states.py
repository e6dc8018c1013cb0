"""A provider that says what became of a call is heard: its terminal states become verdicts with
the provider's read as their evidence, instead of waiting out the deadline for a human.

Each test reads the provider's real answer shape through the recipe (httpx.MockTransport), and
the verdict engine decides on that read beside the attempt the worker recorded.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from reconciler.core.domain import Match, Outcome, Verdict
from reconciler.core.verdicts import evaluate

from builders import CONTRACT, attempt, facts, t
from probe_harness import answer, charge, observe, probe

DECLINED_PI = {**charge("pi_1", status="requires_payment_method"),
               "last_payment_error": {"type": "card_error", "code": "card_declined",
                                      "decline_code": "generic_decline",
                                      "message": "Your card was declined."}}
TWILIO = {"account_sid": "AC1", "username_env": "ACCOUNT_SID"}


def verdict_on(recipe: str, body: dict[str, Any], outcome: Outcome, status: int | None,
               **options: Any) -> tuple[Verdict, tuple[Match, ...]]:
    """The verdict once the attempt (at 1 s) and the recipe's read of `body` (at 5 s, after
    the settle time) are recorded, and what the read matched."""
    seen = replace(observe(probe(recipe, answer(body), **options)), operation_id="op-1",
                   at=t(5))
    decision = evaluate(facts(attempt(1, 1, outcome, status=status), seen), CONTRACT, t(6))
    return decision.verdict, seen.matches


@pytest.mark.parametrize("outcome", [Outcome.RESPONSE, Outcome.TIMEOUT])
def test_a_declined_payment_intent_is_verified_not_applied(outcome: Outcome) -> None:
    """Stripe declined the confirm (402, or a lost answer): the PaymentIntent is back in
    requires_payment_method with a last_payment_error. No charge was made, and Stripe says
    so: the call's effect did not apply."""
    status = 402 if outcome is Outcome.RESPONSE else None
    assert verdict_on("stripe.payment_intent", DECLINED_PI, outcome, status) == (
        Verdict.VERIFIED_NOT_APPLIED, ())


def test_a_payment_intent_never_confirmed_decides_nothing() -> None:
    """Without a last_payment_error, requires_payment_method is a PaymentIntent not yet
    confirmed: it may still become a payment, so the read proves no zero."""
    never_confirmed = charge("pi_1", status="requires_payment_method")
    verdict, _ = verdict_on("stripe.payment_intent", never_confirmed, Outcome.TIMEOUT, None)
    assert verdict is Verdict.INDETERMINATE


@pytest.mark.parametrize("message_status", ["partially_delivered", "undelivered"])
def test_a_twilio_message_that_left_twilio_is_verified_applied(message_status: str) -> None:
    """Some segments delivered, or the carrier reported it undelivered: the message was sent,
    and a retry would be a second message."""
    body = {"sid": "SM1", "account_sid": "AC1", "status": message_status}
    assert verdict_on("twilio.message", body, Outcome.TIMEOUT, None, **TWILIO) == (
        Verdict.VERIFIED_APPLIED, (Match("SM1"),))


def test_a_failed_twilio_message_is_verified_not_applied() -> None:
    body = {"sid": "SM1", "account_sid": "AC1", "status": "failed", "error_code": 30008}
    assert verdict_on("twilio.message", body, Outcome.TIMEOUT, None, **TWILIO) == (
        Verdict.VERIFIED_NOT_APPLIED, ())

