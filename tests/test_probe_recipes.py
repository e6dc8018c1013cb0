"""Each recipe's reading of its provider (payments, mail, chat, issues), against
httpx.MockTransport (no network).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from probes.errors import ProbeConfigError
from reconciler.domain import Authority, Match, Receipt

from probe_harness import OP, SECRET, Handler, answer, charge, observe, probe, target


def test_stripe_search_keeps_only_this_operations_charges() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"object": "search_result", "data": [
            charge("ch_1"), charge("ch_2", op="op-10"), charge("ch_3"), charge("ch_1")]})

    obs = observe(probe("stripe_like.search", handler))
    assert obs.authority is Authority.LAGGING and obs.error is None
    assert obs.matches == (Match("ch_1", "sha256:ch_1"), Match("ch_3", "sha256:ch_3"))
    assert seen[0].url.path == "/pay/v1/charges/search"
    assert seen[0].url.params["query"] == "metadata['operation_id']:'op-1'"


def test_stripe_charge_by_reference() -> None:
    assert observe(probe("stripe_like.charge", answer(charge("ch_1")))).matches == (
        Match("ch_1", "sha256:ch_1"),)
    missing = {"error": {"type": "invalid_request_error", "code": "resource_missing"}}
    zero = observe(probe("stripe_like.charge", answer(missing, 404)))
    assert (zero.authority, zero.matches, zero.error) == (Authority.AUTHORITATIVE, (), None)
    # Someone else's charge under our reference proves nothing either way.
    other = observe(probe("stripe_like.charge", answer(charge("ch_1", op="op-2"))))
    assert other.authority is Authority.UNAVAILABLE
    unknown = observe(probe("stripe_like.charge", answer({})), target(correlation={}))
    assert unknown.error == "correlation ref missing: charge_id"


def test_stripe_idempotency_record_is_a_receipt_and_its_absence_an_authoritative_zero() -> None:
    seen: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path)
        return httpx.Response(200, json={"key": "key/1", "charge_id": "ch_9",
                                         "request_hash": "sha256:h0", "created": 1})

    receipt = probe("stripe_like.idempotency_record", handler).probe(
        target(idempotency_key="key/1"))
    assert isinstance(receipt, Receipt)
    assert (receipt.provider_ref, receipt.request_hash, receipt.source) == (
        "ch_9", "sha256:h0", "lookup")
    assert seen == [b"/pay/v1/idempotency_keys/key%2F1"]  # a key cannot change the path

    missing = {"error": {"type": "invalid_request_error", "code": "resource_missing"}}
    zero = observe(probe("stripe_like.idempotency_record", answer(missing, 404)))
    assert (zero.authority, zero.matches) == (Authority.AUTHORITATIVE, ())
    no_key = observe(probe("stripe_like.idempotency_record", answer({})),
                     target(idempotency_key=None))
    assert no_key.error == "operation has no idempotency key"


@pytest.mark.parametrize("body", [{"detail": "Not Found"}, "<html>not found</html>"])
def test_a_404_that_is_not_the_providers_no_such_object_is_no_zero(body: Any) -> None:
    # A wrong base_url answers 404 too; reading that as "no effect" could open a retry.
    handler: Handler = (answer(body, 404) if isinstance(body, dict)
                        else lambda request: httpx.Response(404, text=body))
    obs = observe(probe("stripe_like.idempotency_record", handler))
    assert (obs.authority, obs.error) == (Authority.UNAVAILABLE, "HTTP 404")


def test_postmark_search_and_by_id() -> None:
    headers: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        headers.append(request.headers.get("X-Postmark-Server-Token"))
        return httpx.Response(200, json={"TotalCount": 2, "Messages": [
            {"MessageID": "m-1", "Metadata": {"operation_id": OP}, "RequestHash": "sha256:a"},
            {"MessageID": "m-2", "Metadata": {"operation_id": "op-2"}, "RequestHash": "x"}]})

    search = observe(probe("postmark_like.search", handler, token_env="PAY_KEY"))
    assert (search.authority, search.matches) == (Authority.LAGGING, (Match("m-1", "sha256:a"),))
    assert headers == [SECRET]

    message = {"MessageID": "m-1", "Metadata": {"operation_id": OP}, "RequestHash": "sha256:a"}
    by_id = observe(probe("postmark_like.by_id", answer(message)))
    assert (by_id.authority, by_id.matches) == (Authority.AUTHORITATIVE, search.matches)
    zero = observe(probe("postmark_like.by_id", answer({"ErrorCode": 701}, 404)))
    assert (zero.authority, zero.matches) == (Authority.AUTHORITATIVE, ())


def slack_history(*ops: str, ok: bool = True) -> Handler:
    messages = [{"ts": f"{i}.000", "text": "hi", "request_hash": None,
                 "metadata": {"event_type": "x", "event_payload": {"operation_id": op}}}
                for i, op in enumerate(ops)]
    return answer({"ok": ok, "messages": messages, "has_more": False})


def test_slack_history_is_authoritative_unless_configured_weak() -> None:
    obs = observe(probe("slack_like.history", slack_history("op-2", OP)))
    assert (obs.authority, obs.matches) == (Authority.AUTHORITATIVE, (Match("1.000"),))
    weak = observe(probe("slack_like.history", slack_history("op-2"), authority="weak"))
    assert (weak.authority, weak.matches) == (Authority.WEAK, ())
    refused = observe(probe("slack_like.history", slack_history(OP, ok=False)))
    assert refused.error == "the response failed the check on 'ok'"


def test_slack_full_page_without_a_match_proves_nothing() -> None:
    full = observe(probe("slack_like.history", slack_history(*["op-2"] * 200)))
    assert (full.authority, full.matches) == (Authority.WEAK, ())
    found = observe(probe("slack_like.history", slack_history(*["op-2"] * 199, OP)))
    assert found.authority is Authority.AUTHORITATIVE and len(found.matches) == 1


def issue(number: int, op: str) -> dict[str, Any]:
    return {"id": 1000 + number, "number": number, "title": "t", "request_hash": None,
            "body": f"text\n<!-- reconciler:op={op} -->"}


def test_github_search_matches_the_exact_marker_only() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"total_count": 2,
                                         "items": [issue(7, OP), issue(8, "op-10")]})

    obs = observe(probe("github_like.search", handler))
    assert (obs.authority, obs.matches) == (Authority.LAGGING, (Match("7"),))
    assert seen[0].url.params["q"] == "reconciler:op=op-1 repo:octo/hello"


def test_github_issue_list_is_weak_by_default_and_capped_at_lagging() -> None:
    handler = answer([issue(3, "op-2"), issue(2, OP)])
    obs = observe(probe("github_like.issue_list", handler))
    assert (obs.authority, obs.matches) == (Authority.WEAK, (Match("2"),))
    assert observe(probe("github_like.issue_list", handler, authority="lagging")).authority \
        is Authority.LAGGING
    with pytest.raises(ProbeConfigError, match="proves at most 'lagging'"):
        probe("github_like.issue_list", handler, authority="authoritative")


def test_a_recipe_fixes_its_shape() -> None:
    with pytest.raises(ProbeConfigError, match="path fixed by the recipe"):
        probe("stripe_like.search", answer({}), path="/elsewhere")
