"""The sidecar's bearer token, and the secrets it never shows or stores, over real HTTP, on
SQLite and on PostgreSQL.

Each test gets a fresh store (a new SQLite file, or a new PostgreSQL schema) and its own server
on an ephemeral loopback port.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import MetaData, select
from standardwebhooks.webhooks import Webhook

from reconciler.core.hashing import request_hash

from sidecar_client import TOKEN, Sidecar, assert_problem, running_sidecar, zero_probe

WEBHOOK_SECRET = "whsec_" + "c2VjcmV0LWZvci10ZXN0cy1vbmx5"

# Input must never reach the catch-all 500 (the fixture is in conftest.py).
pytestmark = pytest.mark.usefixtures("no_internal_errors")


def test_token_is_required_when_configured(store_url: str) -> None:
    with running_sidecar(store_url, token=SecretStr(TOKEN)) as sidecar:
        anonymous = httpx.get(sidecar.url + "/v1/operations")
        problem = assert_problem(anonymous, 401, "unauthorized")
        assert anonymous.headers["www-authenticate"] == "Bearer"
        assert TOKEN not in anonymous.text and "detail" in problem
        wrong = httpx.get(sidecar.url + "/v1/operations",
                          headers={"Authorization": "Bearer " + TOKEN[:-1]})
        assert_problem(wrong, 401, "unauthorized")
        assert wrong.headers["www-authenticate"].startswith("Bearer error=")
        assert httpx.get(sidecar.url + "/openapi.json").status_code == 401
        assert httpx.get(sidecar.url + "/healthz").status_code == 200
        assert sidecar.get("/v1/operations") == {"items": [], "next_cursor": None}


def test_store_holds_no_secrets_after_a_run(sidecar: Sidecar,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk_live_" + uuid.uuid4().hex
    arguments = {"to": "alice@example.com", "text": "your code is 4711", "api_key": secret}
    hash_ = request_hash(arguments)
    sidecar.probes["pay"] = [zero_probe()]
    responses = [sidecar.intent("op-1", hash_=hash_)]
    responses.append(sidecar.post("/v1/operations/op-1/attempts", {
        "attempt": 1, "idempotency_key": "key-op-1", "request_hash": hash_,
        "outcome": "timeout"}))
    responses.append(sidecar.post("/v1/operations/op-1/reconcile", None, 200))
    responses.append(sidecar.retry("op-1", hash_=hash_).json())
    # A provider's delivery carries contents too; only its id and the receipt are kept.
    monkeypatch.setenv("RECONCILER_WEBHOOK_SECRET_STANDARD_PAY", WEBHOOK_SECRET)
    body = json.dumps({"type": "message.sent", "data": {
        "id": "msg_1", "text": arguments["text"], "api_key": secret,
        "metadata": {"operation_id": "op-1", "request_hash": hash_}}}).encode()
    at = datetime.now(UTC)
    responses.append(httpx.post(sidecar.url + "/v1/webhooks/standard/pay", content=body, headers={
        "Content-Type": "application/json", "webhook-id": "msg_delivery_1",
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(WEBHOOK_SECRET).sign("msg_delivery_1", at, body.decode()),
    }).json())
    assert responses[-1]["recorded"] is True
    responses.append(sidecar.get("/v1/operations/op-1"))
    assert secret not in repr(responses) and arguments["text"] not in repr(responses)
    metadata = MetaData()
    metadata.reflect(sidecar.store.engine)
    with sidecar.store.engine.connect() as conn:
        stored = repr([conn.execute(select(t)).all() for t in metadata.sorted_tables])
    assert hash_ in stored
    assert secret not in stored and arguments["text"] not in stored
