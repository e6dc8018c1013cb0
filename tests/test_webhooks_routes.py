"""What all webhook routes share: the signature is their credential, not the bearer token; the
old unsigned route is gone with a pointer to the new ones; a delivery id is accepted once even
when two copies race."""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from pydantic import SecretStr

from sidecar_client import TOKEN, H, Sidecar, assert_problem, running_sidecar
from webhook_deliveries import deliver, encoded, event, receipts, set_secret, traces

pytestmark = pytest.mark.usefixtures("no_internal_errors")

CREDENTIALS = "postmark:6a0f2c"


def basic() -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(CREDENTIALS.encode()).decode()}


@pytest.fixture(autouse=True)
def _secret(monkeypatch: pytest.MonkeyPatch) -> None:
    set_secret(monkeypatch, "postmark", CREDENTIALS)


def test_webhooks_need_the_signature_not_the_bearer_token(store_url: str) -> None:
    with running_sidecar(store_url, token=SecretStr(TOKEN)) as sidecar:
        sidecar.intent("op-1", "postmark")
        body = encoded(event("postmark_delivery"))
        bearer_only = deliver(sidecar, "/v1/webhooks/postmark", body,
                              {"Authorization": f"Bearer {TOKEN}"})
        assert_problem(bearer_only, 401, "webhook-rejected")
        assert deliver(sidecar, "/v1/webhooks/postmark", body, basic()).status_code == 200
        assert receipts(sidecar, "op-1") == [
            ("webhook:postmark", "883953f4-6105-42a2-a16a-77a8eac79483", H)]
        assert_problem(httpx.get(sidecar.url + "/v1/operations/op-1"), 401, "unauthorized")
        schema = sidecar.get("/openapi.json")
        assert "security" not in schema["paths"]["/v1/webhooks/postmark"]["post"]
        assert "security" not in schema["paths"]["/v1/webhooks/standard/{provider}"]["post"]
        assert schema["paths"]["/v1/operations"]["post"]["security"] == [{"bearer": []}]


def test_the_unsigned_route_is_gone_and_says_where_deliveries_go(sidecar: Sidecar) -> None:
    sidecar.intent("op-1")
    response = sidecar.http.post("/v1/webhooks/pay", json={
        "operation_id": "op-1", "provider_ref": "ch_1", "request_hash": H})
    problem = assert_problem(response, 410, "webhook-route-gone")
    assert "/v1/webhooks/stripe" in problem["detail"]
    assert traces(sidecar.store) == (0, 0)


def test_two_copies_of_one_delivery_racing_are_accepted_once(sidecar: Sidecar) -> None:
    sidecar.intent("op-1", "postmark")
    body = encoded(event("postmark_delivery"))
    with ThreadPoolExecutor(4) as pool:
        statuses = sorted(pool.map(
            lambda _: deliver(sidecar, "/v1/webhooks/postmark", body, basic()).status_code,
            range(4)))
    assert statuses == [200, 401, 401, 401]
    assert traces(sidecar.store) == (1, 1)
