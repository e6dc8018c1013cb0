"""What a probe sees (SPEC section 3, "a zero counts only where the probe could have seen the
effect"): every configured probe covers the actions its `actions` names and no other, finds
effects by what its reads are derived to hold the provider to (not by what it claims), and an
empty read of an operation it could not see is `unavailable` with `probe_blind`, naming the
question; its matches keep their authority."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import stripe

from probes.config import parse_config
from probes.errors import ProbeConfigError
from probes.http_json import http_json
from probes.mcp_read import mcp_read
from probes.recipes import RECIPES, recipe_factory
from probes.registry import ProbeRegistry
from probes.runner import ref_returned, seen
from reconciler.cli.configcheck import check_config, open_for_reading
from reconciler.core.domain import (
    Attempt,
    Authority,
    Carried,
    Effect,
    Facts,
    Intent,
    Match,
    Observation,
    Outcome,
    ProviderContract,
    Receipt,
)
from reconciler.core.errors import RetryRefusedError
from reconciler.core.sight import PROBE_BLIND, Sight
from reconciler.effect import current_call, effect
from reconciler.effect.backends import EmbeddedBackend
from reconciler.sandbox import running_sandbox
from reconciler.testing import FakeProbe

from builders import H0, K0

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def built_only(name: str, sight: Sight | None) -> FakeProbe:
    """The kit's fake probe, built and judged by its sight but never called; `sight=None` for
    one that declares none, as a plugin's or a hand-written probe may."""
    return FakeProbe(AssertionError("not called"), name=name, sight=sight)
OP, KEY, REF = Carried.OPERATION_ID, Carried.IDEMPOTENCY_KEY, Carried.PROVIDER_REF
BASE = "https://provider.test"


def registry() -> ProbeRegistry:
    """The built-ins only, so an installed plugin cannot change these tests."""
    built = ProbeRegistry()
    built.register("http_json", http_json)
    built.register("mcp_read", partial(mcp_read, connect=lambda: None))
    for name in RECIPES:
        built.register(name, recipe_factory(name))
    return built


def built(probe: dict[str, Any]) -> Sight:
    setup = parse_config({"providers": {"p": {"probes": [probe]}}}, env={},
                         registry=registry())["p"]
    return setup.probes[0].sight


#: Options a recipe needs beyond its base URL.
NEEDS: dict[str, dict[str, Any]] = {"github": {"account": "me"},
                                    "twilio": {"account_sid": "AC123"}}


@pytest.mark.parametrize(("recipe", "finds_by"), [
    ("stripe.payment_intents.search", {OP}),       # query metadata['operation_id']
    ("stripe.payment_intents.list", {OP}),         # where metadata.operation_id
    ("stripe.charges.list", {OP}),
    ("stripe.payment_intent", {REF}),              # GET /v1/payment_intents/{ref}
    ("stripe.charge", {REF}),
    ("slack.history", {OP}),                       # metadata.event_payload.operation_id
    ("github.search", {OP}),                       # the marker in the body
    ("github.issues.list", {OP}),
    ("github.issue", {REF}),
    ("postmark.outbound", {OP}),
    ("postmark.details", {REF}),
    ("twilio.message", {REF}),
    ("twilio.messages.list", set()),               # by recipient and date: nothing of ours
])
def test_what_a_recipe_finds_effects_by_is_derived_from_its_reads(
        recipe: str, finds_by: set[Carried]) -> None:
    options = NEEDS.get(recipe.split(".")[0], {})
    sight = built({"use": recipe, "base_url": BASE, "actions": ["a"], **options})
    assert sight.finds_by == finds_by and sight.covers == {"a"}


ITEMS = {"use": "http_json", "base_url": BASE, "items": "data", "ref": "id",
         "authority": "authoritative"}


@pytest.mark.parametrize(("options", "finds_by"), [
    ({"path": "/keys/{idempotency_key}", "items": None, "item": ""}, {KEY}),
    ({"params": {"key": "{idempotency_key}"}}, {KEY}),
    ({"where": {"metadata.operation_id": "{operation_id}"}}, {OP}),
    ({"contains": {"body": "op={operation_id}"}}, {OP}),
    # Held to both at once: found by neither alone, so by nothing.
    ({"where": {"metadata.operation_id": "{operation_id}",
                "metadata.key": "{idempotency_key}"}}, set()),
    # A request hash is no identifier a request can say it carried.
    ({"where": {"metadata.request_hash": "{request_hash}"}}, set()),
    # A list narrowed only by where to look (a channel) identifies nothing.
    ({"params": {"channel": "{correlation[channel]}"}}, set()),
])
def test_what_an_http_json_probe_finds_effects_by_is_what_its_templates_read(
        options: dict[str, Any], finds_by: set[Carried]) -> None:
    table = {k: v for k, v in {**ITEMS, **options}.items() if v is not None}
    assert built(table).finds_by == finds_by


def test_an_mcp_read_probe_finds_effects_by_what_its_where_reads() -> None:
    table = {"use": "mcp_read", "tool": "list", "ref": "id", "items": "charges",
             "arguments": {"order": "{correlation[order]}"}}
    assert built(table).finds_by == set()
    assert built({**table, "where": {"metadata.operation_id": "{operation_id}"}}).finds_by \
        == {OP}


def test_a_probe_that_names_no_actions_covers_none() -> None:
    assert built({**ITEMS, "where": {"metadata.operation_id": "{operation_id}"}}).covers \
        == set()


@pytest.mark.parametrize("actions", ["charge", [""], [1]])
def test_actions_must_be_a_list_of_action_names(actions: Any) -> None:
    with pytest.raises(ProbeConfigError, match="'actions' must be a list of action names"):
        built({**ITEMS, "actions": actions})


def test_a_plugin_probe_without_a_sight_finds_effects_by_nothing_and_is_warned_about_once(
        caplog: pytest.LogCaptureFixture) -> None:
    plugins = ProbeRegistry()
    plugins.register("acme.blind", lambda name, options, env: built_only(name, None))
    with caplog.at_level(logging.WARNING, logger="probes.registry"):
        first = plugins.build("acme.blind", {}, {}, actions=["charge"])
        second = plugins.build("acme.blind", {}, {}, name="again")
    assert first.sight == Sight(frozenset({"charge"}), frozenset())
    assert second.sight == Sight()
    assert [r.getMessage() for r in caplog.records].count(
        "probe 'acme.blind' declares no sight (what it finds effects by): none of its empty "
        "reads counts as a zero (docs/probes.md, \"What a probe sees\")") == 1


def test_a_plugin_probe_declares_what_it_finds_effects_by_and_the_configuration_what_it_covers(
        ) -> None:
    plugins = ProbeRegistry()
    declared = Sight(frozenset({"own"}), frozenset({KEY}))
    plugins.register("acme.keyed", lambda name, options, env: built_only(name, declared))
    assert plugins.build("acme.keyed", {}, {}).sight == declared
    assert plugins.build("acme.keyed", {}, {}, actions=["charge"]).sight == Sight(
        frozenset({"charge"}), frozenset({KEY}))


# --- an empty read of an operation the probe could not see -----------------------------------

def intent(action: str = "charge", key: str | None = K0,
           carries: frozenset[Carried] | None = None) -> Intent:
    return Intent("op-1", H0, key, "pay", action, Effect.NON_IDEMPOTENT, NOW, carries=carries)


def zero(authority: Authority = Authority.AUTHORITATIVE) -> Observation:
    return Observation("op-1", NOW, "reader", authority)


BY_KEY = built_only("reader", Sight(frozenset({"charge"}), frozenset({KEY})))
BY_OP = built_only("reader", Sight(frozenset({"charge"}), frozenset({OP})))
BY_REF = built_only("reader", Sight(frozenset({"charge"}), frozenset({REF})))


def NO() -> bool:
    """The provider returned no reference for the operation."""
    return False


def YES() -> bool:
    return True


def test_an_empty_read_by_a_probe_that_does_not_cover_the_action_is_unavailable_scope() -> None:
    out = seen(BY_KEY, intent("refunds.create"), zero(), NO)
    assert isinstance(out, Observation) and out.authority is Authority.UNAVAILABLE
    assert out.error is not None and out.error.startswith(f"{PROBE_BLIND}: scope: ")
    assert (out.at, out.probe, out.matches) == (NOW, "reader", ())


def test_an_empty_read_by_key_of_a_keyless_intent_is_unavailable_correlation() -> None:
    out = seen(BY_KEY, intent(key=None, carries=frozenset({OP})), zero(Authority.LAGGING), NO)
    assert isinstance(out, Observation) and out.authority is Authority.UNAVAILABLE
    assert out.error is not None and out.error.startswith(f"{PROBE_BLIND}: correlation: ")


def blind(answer: Observation | Receipt) -> bool:
    return isinstance(answer, Observation) and answer.authority is Authority.UNAVAILABLE


def test_a_worker_that_does_not_say_carried_its_recorded_key_alone() -> None:
    assert seen(BY_KEY, intent(), zero(), NO) == zero()
    assert blind(seen(BY_OP, intent(), zero(), NO))
    assert seen(BY_OP, intent(carries=frozenset({OP})), zero(), NO) == zero()


def test_a_match_by_a_blind_probe_keeps_its_authority() -> None:
    found = Observation("op-1", NOW, "reader", Authority.AUTHORITATIVE, (Match("ch_1"),))
    assert seen(BY_KEY, intent("refunds.create"), found, NO) == found
    assert seen(BY_KEY, intent(key=None), found, NO) == found


def test_a_probe_by_reference_sees_an_operation_once_the_provider_returned_a_ref() -> None:
    assert blind(seen(BY_REF, intent(), zero(), NO))
    assert seen(BY_REF, intent(), zero(), YES) == zero()


def test_a_receipt_or_an_attempts_receipt_is_a_returned_ref() -> None:
    facts = Facts(intent(), (Attempt("op-1", 1, K0, H0, NOW, Outcome.TIMEOUT),))
    assert not ref_returned(facts)
    answered = Attempt("op-1", 1, K0, H0, NOW, Outcome.RESPONSE, 200, Match("ch_1"))
    assert ref_returned(Facts(intent(), (answered,)))
    assert ref_returned(Facts(intent(), evidence=(Receipt("op-1", NOW, "ch_1", H0, "webhook"),)))


def test_weak_and_unavailable_reads_and_receipts_are_left_as_they_are() -> None:
    weak, down = zero(Authority.WEAK), Observation("op-1", NOW, "reader",
                                                   Authority.UNAVAILABLE, error="down")
    receipt = Receipt("op-1", NOW, "ch_1", H0, "lookup")
    for answer in (weak, down, receipt):
        assert seen(BY_KEY, intent("refunds.create"), answer, NO) == answer


# --- the field trial: docs/effect.md's charges.create against examples/reconciler.toml --------

EXAMPLE = Path(__file__).parent.parent / "examples" / "reconciler.toml"
#: Settled at once, zeros conclusive at once: only what the probes can see keeps a zero out.
SETTLED = ProviderContract("stripe", idempotency_keys=True, visibility_lag_s=0, inflight_s=0)


def test_a_charge_whose_answer_is_lost_is_never_sent_again_by_payment_intents_probes(
        tmp_path: Path, sandbox_credentials: None) -> None:
    """docs/effect.md's `charges.create` (keyed, tagged with the operation id) against
    examples/reconciler.toml, whose probes read PaymentIntents only: before, their empty reads
    were a conclusive zero, the retry was granted and the charge sent again."""
    with running_sandbox() as sandbox:
        sandbox.state.configure(hold_s=2.0)  # the answer outlives the client's timeout
        config = tmp_path / "reconciler.toml"
        config.write_text(EXAMPLE.read_text().replace("http://127.0.0.1:8081", sandbox.url))
        db = f"sqlite:///{tmp_path / 'r.db'}"
        faults = [{"X-Sandbox-Fault": "lose_response"}]
        client = stripe.StripeClient("sk_test_reconciler", max_network_retries=0,
                                     base_addresses={"api": f"{sandbox.url}/pay"},
                                     http_client=stripe.RequestsClient(timeout=0.5))
        with EmbeddedBackend(db, config=config, contracts=[SETTLED]) as store:
            @effect(provider="stripe", action="charges.create", effect="non_idempotent",
                    key=lambda order_id, amount: f"charge-{order_id}", tagged=True,
                    backend=store)
            def charge(order_id: str, amount: int) -> Any:
                call = current_call()
                assert call is not None
                return client.v1.charges.create(
                    params={"amount": amount, "currency": "eur",
                            "metadata": {"operation_id": call.operation_id}},
                    options={"idempotency_key": call.intent.idempotency_key,
                             "headers": faults.pop() if faults else {}})

            send: Any = charge  # as @effect types it: a wrapped call
            with pytest.raises(stripe.APIConnectionError):
                send("A-17", 1200)
            with pytest.raises(RetryRefusedError):
                send("A-17", 1200)
            operation = store.reconcile("charge-A-17")
        charges = [o for o in sandbox.state.objects() if o.ref.startswith("ch_")]
        assert len(charges) == 1 and len(operation.attempts) == 1
        assert {e.authority for e in operation.evidence} == {Authority.UNAVAILABLE}
        assert all((e.error or "").startswith("probe_blind: scope: ") for e in operation.evidence)

        reading = open_for_reading(db)
        try:
            report = check_config(config, env={}, store=reading)
        finally:
            reading.engine.dispose()
    errors = [str(p) for p in report.problems if p.level == "error"]
    assert len(errors) == 1 and errors[0].endswith(
        "error: action 'charges.create' of provider 'stripe' (non_idempotent, recorded in the "
        "store) is covered by no probe: no read proves it was not applied, so a lost answer "
        "is never retried and goes to a human; name it in the `actions` of a probe that reads "
        "where its effects appear")


def test_a_probe_given_in_code_without_a_sight_covers_nothing_and_is_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    bare = built_only("bare-in-code", None)
    with caplog.at_level(logging.WARNING, logger="probes.base"):
        outs = [seen(bare, intent(), zero(), NO) for _ in range(2)]
    assert all(blind(out) for out in outs)
    assert sum("'bare-in-code' has no sight" in r.getMessage() for r in caplog.records) == 1


def test_a_runtime_tool_says_what_its_request_carries() -> None:
    from reconciler.core.runs.messages import ToolSpec
    from reconciler.runtime.tools import Tool, ToolCall, ToolOutput

    async def handler(call: ToolCall) -> ToolOutput:
        return ToolOutput("ok")

    def tool(effect: Effect, **options: Any) -> Tool:
        return Tool(ToolSpec("t", "t", {"type": "object"}), effect, handler, provider="pay",
                    **options)

    assert tool(Effect.NON_IDEMPOTENT).carries == set()
    assert tool(Effect.IDEMPOTENT_WRITE).carries == {KEY}  # it sends the key by default
    assert tool(Effect.NON_IDEMPOTENT, uses_key=True, tagged=True).carries == {KEY, OP}
