"""The sandbox's payments provider: idempotency keys and the receipt lookup, over real HTTP on
loopback (docs/sandbox-api.md).

One server serves the whole module; each test starts from a reset state on a manual clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest

from reconciler.hashing import request_hash
from reconciler.sandbox import ManualClock, RunningSandbox

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
        httpx.Client(base_url=sandbox.url, timeout=5.0) as other,
    ):
        first = pool.submit(write, other, PAY, key=key, fault="delay=0.8")
        wait_until(lambda: client.get(f"/pay/v1/idempotency_keys/{key}").status_code != 404)
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
        "code": "request_in_flight",
        "message": second.json()["error"]["message"],
    }
    assert first.result().status_code == 200
    assert len(stored(client, "pay")) == 1


def test_key_lookup_while_the_first_request_is_in_flight_answers_409(
    sandbox: RunningSandbox, client: httpx.Client
) -> None:
    with charge_in_flight(sandbox, client, "k-busy"):
        lookup = client.get("/pay/v1/idempotency_keys/k-busy")

    assert lookup.status_code == 409
    assert lookup.json()["error"]["code"] == "request_in_flight"


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

    receipt = client.get("/pay/v1/idempotency_keys/k-1")

    assert receipt.status_code == 200
    assert receipt.json() == {
        "key": "k-1",
        "charge_id": charge["id"],
        "request_hash": request_hash(PAY.body("op-1")),
        "created": int(sandbox_clock.now()),
    }


def test_key_lookup_of_a_key_never_seen_answers_404(client: httpx.Client) -> None:
    answer = client.get("/pay/v1/idempotency_keys/never-sent")

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

    assert client.get("/pay/v1/idempotency_keys/k-1").status_code == 404
    assert client.get(f"/pay/v1/charges/{acked['id']}").status_code == 404


def test_duplicate_with_a_key_records_the_first_charge(client: httpx.Client) -> None:
    write(client, PAY, key="k-1", fault="duplicate")
    first, _ = stored(client, "pay")

    receipt = client.get("/pay/v1/idempotency_keys/k-1").json()

    assert receipt["charge_id"] == first["ref"]
