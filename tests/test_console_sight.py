"""An operation whose action no configured probe can see (SPEC section 3: scope and
correlation): its page says why the provider's side stays empty, and what to configure."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from reconciler.core.domain import Carried, Facts, Match, Outcome
from reconciler.core.sight import Sight
from reconciler.service.ui.operation import unseen
from reconciler.testing import FakeProbe

from builders import attempt, facts, intent
from console_harness import console_sidecar, signed_in

BY_KEY, BY_ID, BY_REF = (frozenset({c}) for c in (Carried.IDEMPOTENCY_KEY,
                                                   Carried.OPERATION_ID, Carried.PROVIDER_REF))


def reads(covers: str, finds_by: frozenset[Carried], name: str = "charges") -> FakeProbe:
    return FakeProbe(AssertionError("the page reads no provider"), name=name,
                     sight=Sight(frozenset({covers}), finds_by))


def test_a_provider_without_probes_is_named() -> None:
    found = unseen(facts(), [])
    assert found is not None
    assert found.why == ["provider 'pay' has no probe configured on this sidecar: nothing "
                         "reads the provider, so no zero and no effect is ever seen"]
    assert "[providers.pay]" in found.fix and "'charge'" in found.fix
    assert "idempotency_key" in found.fix


def test_a_probe_that_does_not_cover_the_action_is_named() -> None:
    found = unseen(facts(), [reads("refund", BY_KEY, "refunds")])
    assert found is not None
    assert found.why == ["probe 'refunds' does not cover action 'charge': its empty reads "
                         "prove nothing"]


def test_a_probe_that_finds_effects_by_what_the_request_did_not_carry_is_named() -> None:
    found = unseen(facts(), [reads("charge", BY_ID)])
    assert found is not None and "something the request did not carry" in found.why[0]


def test_a_probe_that_can_see_the_effect_leaves_no_hint() -> None:
    assert unseen(facts(), [reads("refund", BY_KEY, "refunds"), reads("charge", BY_KEY)]) is None


def test_a_probe_reading_by_reference_sees_what_the_worker_got_a_reference_for() -> None:
    keyless = Facts(replace(intent(), carries=frozenset()))
    assert unseen(keyless, [reads("charge", BY_REF)]) is not None
    answered = replace(keyless, attempts=(attempt(1, 0, Outcome.RESPONSE, status=200,
                                                  receipt=Match("ch_1", None)),))
    assert unseen(answered, [reads("charge", BY_REF)]) is None


def test_the_operation_page_says_no_probe_can_see_its_action(tmp_path: Path) -> None:
    with console_sidecar(tmp_path) as console, signed_in(console.url) as (http, _):
        page = http.get("/ui/operation?id=late").text
    assert 'id="unseen"' in page
    assert "provider &#39;slow&#39; has no probe configured" in page
