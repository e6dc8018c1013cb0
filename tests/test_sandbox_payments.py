"""The sandbox's payments provider: Stripe's form bodies, idempotency keys, lists and errors,
and the sandbox's own key lookup, over real HTTP on loopback (docs/sandbox-api.md).

One server serves the whole module; each test starts from a reset state on a manual clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest

from reconciler.core.hashing import request_hash
from reconciler.sandbox import RunningSandbox
from reconciler.testing import ManualClock
from reconciler.testing.patience import PATIENCE_S

from sandbox_harness import PAY, configure, stored, wait_until, write


def test_key_replay_returns_the_stored_charge_with_idempotent_replayed(
    client: httpx.Client,
) -> None:
    first = write(client, PAY, key="k-1")

    again = write(client, PAY, key="k-1")

    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert again.json() == first.json()
    assert len(stored(client, "pay")) == 1


def test_reused_key_with_another_body_answers_400(client: httpx.Client) -> None:
    write(client, PAY, key="k-1")

    other = write(client, PAY, "op-2", key="k-1")

    assert other.status_code == 400
    assert other.json()["error"]["type"] == "idempotency_error"
    assert len(stored(client, "pay")) == 1


@contextmanager
def charge_in_flight(
    sandbox: RunningSandbox, client: httpx.Client, key: str
) -> Iterator[Future[httpx.Response]]:
    """A keyed charge held in flight by a delay, from another thread, until the block ends."""
    with (
        ThreadPoolExecutor(max_workers=1) as pool,
        httpx.Client(base_url=sandbox.url, timeout=PATIENCE_S) as other,
    ):
        first = pool.submit(write, other, PAY, key=key, fault="delay=0.8")
        wait_until(lambda: client.get(f"/pay/_sandbox/idempotency_keys/{key}").status_code != 404)
        yield first
        first.result(timeout=5.0)


def test_same_key_while_the_first_request_is_in_flight_answers_409(
    sandbox: RunningSandbox, client: httpx.Client
) -> None:
    with charge_in_flight(sandbox, client, "k-busy") as first:
        second = write(client, PAY, key="k-busy")

    assert second.status_code == 409
    assert second.json()["error"] == {
        "type": "idempotency_error",
        "code": "idempotency_key_in_use",
        "message": second.json()["error"]["message"],
    }
    assert first.result().status_code == 200
    assert len(stored(client, "pay")) == 1


def test_key_lookup_while_the_first_request_is_in_flight_answers_409(
    sandbox: RunningSandbox, client: httpx.Client
) -> None:
    with charge_in_flight(sandbox, client, "k-busy"):
        lookup = client.get("/pay/_sandbox/idempotency_keys/k-busy")

    assert lookup.status_code == 409
    assert lookup.json()["error"]["code"] == "idempotency_key_in_use"


@pytest.mark.parametrize("missing", ["amount", "currency"])
def test_charge_without_amount_or_currency_answers_400_invalid_request_error(
    client: httpx.Client, missing: str
) -> None:
    body = PAY.body("op-1")
    del body[missing]

    answer = client.post(PAY.path, json=body)

    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"


def test_key_lookup_returns_the_receipt_bound_to_the_first_request(
    client: httpx.Client, sandbox_clock: ManualClock
) -> None:
    charge = write(client, PAY, key="k-1").json()

    receipt = client.get("/pay/_sandbox/idempotency_keys/k-1")

    assert receipt.status_code == 200
    assert receipt.json() == {
        "key": "k-1",
        "charge_id": charge["id"],
        "request_hash": request_hash(PAY.body("op-1")),
        "created": int(sandbox_clock.now()),
    }


def test_key_lookup_of_a_key_never_seen_answers_404(client: httpx.Client) -> None:
    answer = client.get("/pay/_sandbox/idempotency_keys/never-sent")

    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "resource_missing"


@pytest.mark.parametrize("fault", ["error_after_commit", "lose_response"])
def test_retry_after_a_lost_answer_replays_the_committed_charge(
    client: httpx.Client, fault: str
) -> None:
    configure(client, hold_s=0.05)
    lost = write(client, PAY, key="k-1", fault=fault)
    [charge] = stored(client, "pay")

    retry = write(client, PAY, key="k-1")

    assert lost.status_code in (502, 504)
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json()["id"] == charge["ref"]
    assert len(stored(client, "pay")) == 1


def test_retry_after_fail_before_commit_creates_the_charge(client: httpx.Client) -> None:
    write(client, PAY, key="k-1", fault="fail_before_commit")

    retry = write(client, PAY, key="k-1")

    assert retry.status_code == 200
    assert "Idempotent-Replayed" not in retry.headers
    assert [o["ref"] for o in stored(client, "pay")] == [retry.json()["id"]]


def test_ack_no_effect_leaves_no_key_record_and_no_charge(client: httpx.Client) -> None:
    acked = write(client, PAY, key="k-1", fault="ack_no_effect").json()

    assert client.get("/pay/_sandbox/idempotency_keys/k-1").status_code == 404
    assert client.get(f"/pay/v1/charges/{acked['id']}").status_code == 404


def test_duplicate_with_a_key_records_the_first_charge(client: httpx.Client) -> None:
    write(client, PAY, key="k-1", fault="duplicate")
    first, _ = stored(client, "pay")

    receipt = client.get("/pay/_sandbox/idempotency_keys/k-1").json()

    assert receipt["charge_id"] == first["ref"]


def test_a_form_encoded_charge_is_read_as_stripe_sends_it(client: httpx.Client) -> None:
    form = {"amount": "1200", "currency": "eur", "metadata[operation_id]": "op-1"}

    answer = client.post(PAY.path, data=form, headers={"Idempotency-Key": "k-1"})
    again = client.post(PAY.path, data=form, headers={"Idempotency-Key": "k-1"})

    assert answer.status_code == 200
    charge = answer.json()
    assert (charge["amount"], charge["metadata"], charge["status"], charge["livemode"]) == (
        1200, {"operation_id": "op-1"}, "succeeded", False)
    assert "request_hash" not in charge
    assert again.json() == charge  # the JSON and form bodies of one charge are one request
    assert stored(client, "pay")[0]["request_hash"] == request_hash(PAY.body("op-1"))


def test_the_charge_list_pages_newest_first_within_the_created_window(
    client: httpx.Client, sandbox_clock: ManualClock
) -> None:
    old = write(client, PAY, "op-1").json()
    sandbox_clock.advance(100)
    newer = [write(client, PAY, f"op-{n}").json() for n in (2, 3, 4)]

    window = {"created[gte]": str(old["created"] + 50), "limit": "2"}
    first = client.get("/pay/v1/charges", params=window).json()
    rest = client.get("/pay/v1/charges",
                      params={**window, "starting_after": first["data"][-1]["id"]}).json()

    assert (first["object"], first["has_more"]) == ("list", True)
    assert [c["id"] for c in first["data"] + rest["data"]] == [c["id"] for c in newer[::-1]]
    assert rest["has_more"] is False


def test_a_key_is_forgotten_after_its_retention_and_a_reuse_is_a_new_request(
    client: httpx.Client, sandbox_clock: ManualClock
) -> None:
    first = write(client, PAY, key="k-1").json()
    sandbox_clock.advance(86_400 + 1)

    again = write(client, PAY, key="k-1")

    assert "Idempotent-Replayed" not in again.headers
    assert again.json()["id"] != first["id"]
    assert len(stored(client, "pay")) == 2


def test_a_payment_intent_is_created_confirmed_and_found_by_id_list_and_search(
    client: httpx.Client,
) -> None:
    form = {"amount": "1250", "currency": "eur", "confirm": "true",
            "payment_method": "pm_card_visa", "metadata[operation_id]": "op-1"}

    made = client.post("/pay/v1/payment_intents", data=form).json()

    assert (made["object"], made["status"]) == ("payment_intent", "succeeded")
    assert client.get(f"/pay/v1/payment_intents/{made['id']}").json() == made
    assert client.get(f"/pay/v1/charges/{made['id']}").status_code == 404
    listed = client.get("/pay/v1/payment_intents", params={"created[gte]": "0"}).json()
    assert [p["id"] for p in listed["data"]] == [made["id"]]
    found = client.get("/pay/v1/payment_intents/search",
                       params={"query": "metadata['operation_id']:'op-1'"}).json()
    assert [p["id"] for p in found["data"]] == [made["id"]]


def test_a_declined_card_answers_402_and_the_intent_stays_requires_payment_method(
    client: httpx.Client,
) -> None:
    form = {"amount": "1250", "currency": "eur", "confirm": "true",
            "payment_method": "pm_card_chargeDeclined"}

    declined = client.post("/pay/v1/payment_intents", data=form,
                           headers={"Idempotency-Key": "k-d"})
    replayed = client.post("/pay/v1/payment_intents", data=form,
                           headers={"Idempotency-Key": "k-d"})

    assert declined.status_code == replayed.status_code == 402
    error = declined.json()["error"]
    assert (error["type"], error["code"]) == ("card_error", "card_declined")
    assert error["payment_intent"]["status"] == "requires_payment_method"
    assert replayed.headers["Idempotent-Replayed"] == "true"  # Stripe saves errors too


def test_a_missing_parameter_is_stripes_parameter_missing(client: httpx.Client) -> None:
    answer = client.post("/pay/v1/payment_intents", data={"currency": "eur"})

    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "parameter_missing"
    assert answer.json()["error"]["param"] == "amount"


def test_a_saved_500_is_replayed_to_a_same_key_retry_as_stripe_does(client: httpx.Client) -> None:
    failed = write(client, PAY, key="k-500", fault="server_error")

    retry = write(client, PAY, key="k-500")

    assert failed.status_code == retry.status_code == 500
    assert failed.json()["error"]["type"] == "api_error"
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert stored(client, "pay") == []  # nothing was charged, and the key will not charge
