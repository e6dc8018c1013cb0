"""The sandbox's faults (X-Sandbox-Fault), on every write endpoint, over real HTTP on loopback
(docs/sandbox-api.md).

One server serves the whole module; each test starts from a reset state on a manual clock.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from reconciler.core.hashing import request_hash
from reconciler.sandbox.faults import holds_answer

from sandbox_harness import (
    CHAT,
    ISSUES,
    JSON,
    MAIL,
    PAY,
    WRITES,
    WriteCase,
    assert_contains,
    configure,
    stored,
    write,
)


@pytest.mark.parametrize("case", WRITES)
def test_write_without_fault_stores_one_object_with_the_hash_of_the_received_body(
    client: httpx.Client, case: WriteCase
) -> None:
    answer = write(client, case)

    assert answer.status_code == case.status
    [record] = stored(client, case.provider)
    assert record["ref"] == case.ref(answer.json())
    assert record["request_hash"] == request_hash(case.body("op-1"))


@pytest.mark.parametrize("case", WRITES)
def test_lose_response_commits_then_holds_the_request_past_the_client_timeout(
    client: httpx.Client, case: WriteCase
) -> None:
    configure(client, hold_s=5)

    with pytest.raises(httpx.ReadTimeout):
        write(client, case, fault="lose_response", timeout=0.3)

    assert len(stored(client, case.provider)) == 1


@pytest.mark.parametrize("case", WRITES)
def test_lose_response_answers_504_once_hold_s_has_passed(
    client: httpx.Client, case: WriteCase
) -> None:
    configure(client, hold_s=0.05)

    answer = write(client, case, fault="lose_response")

    assert answer.status_code == 504
    assert len(stored(client, case.provider)) == 1


@pytest.mark.parametrize("case", WRITES)
def test_delay_answers_normally_after_the_delay(client: httpx.Client, case: WriteCase) -> None:
    started = time.monotonic()

    answer = write(client, case, fault="delay=0.2")

    assert time.monotonic() - started >= 0.2
    assert answer.status_code == case.status
    assert len(stored(client, case.provider)) == 1


ERROR_FIELD = {"pay": "error", "mail": "ErrorCode", "chat": "error", "gh": "message"}


@pytest.mark.parametrize("case", WRITES)
def test_error_after_commit_stores_the_effect_and_answers_502(
    client: httpx.Client, case: WriteCase
) -> None:
    answer = write(client, case, fault="error_after_commit")

    assert answer.status_code == 502
    # In the provider's own error shape, so its SDK reads it as it would the provider's.
    assert ERROR_FIELD[case.provider] in answer.json()
    assert len(stored(client, case.provider)) == 1


@pytest.mark.parametrize("case", WRITES)
def test_duplicate_stores_two_objects_and_answers_with_the_first(
    client: httpx.Client, case: WriteCase
) -> None:
    answer = write(client, case, fault="duplicate", key="k-dup" if case is PAY else None)

    assert answer.status_code == case.status
    first, second = stored(client, case.provider)
    assert first["ref"] != second["ref"]
    assert first["request_hash"] == second["request_hash"] == request_hash(case.body("op-1"))
    assert case.ref(answer.json()) == first["ref"]


@pytest.mark.parametrize("case", WRITES)
def test_ack_no_effect_answers_2xx_with_an_id_but_stores_nothing(
    client: httpx.Client, case: WriteCase
) -> None:
    answer = write(client, case, fault="ack_no_effect")

    assert answer.status_code == case.status
    assert case.ref(answer.json())
    assert stored(client, case.provider) == []


@pytest.mark.parametrize("case", WRITES)
def test_fail_before_commit_answers_503_and_stores_nothing(
    client: httpx.Client, case: WriteCase
) -> None:
    answer = write(client, case, fault="fail_before_commit")

    assert answer.status_code == 503
    assert stored(client, case.provider) == []


@pytest.mark.parametrize("case", WRITES)
def test_combined_faults_all_apply(client: httpx.Client, case: WriteCase) -> None:
    started = time.monotonic()

    answer = write(client, case, fault="delay=0.1, error_after_commit")

    assert time.monotonic() - started >= 0.1
    assert answer.status_code == 502
    assert len(stored(client, case.provider)) == 1


@pytest.mark.parametrize("case", WRITES)
@pytest.mark.parametrize(
    "fault", ["lose-response", "delay", "delay=-1", "delay=soon", "duplicate=2"]
)
def test_unknown_or_malformed_fault_answers_400_and_stores_nothing(
    client: httpx.Client, case: WriteCase, fault: str
) -> None:
    answer = write(client, case, fault=fault)

    assert answer.status_code == 400
    assert isinstance(answer.json()["error"], str)
    assert stored(client, case.provider) == []


@pytest.mark.parametrize(
    ("case", "body", "status", "error"),
    [
        pytest.param(PAY, [1], 400, {"error": {"type": "invalid_request_error"}}, id="pay"),
        pytest.param(MAIL, {"Subject": "no To"}, 422, {"ErrorCode": 300}, id="mail"),
        pytest.param(CHAT, {"channel": "C1"}, 200, {"ok": False, "error": "no_text"}, id="chat"),
        pytest.param(ISSUES, {"body": "no title"}, 422, {
            "message": 'Invalid request.\n\n"title" wasn\'t supplied.', "status": "422"}, id="gh"),
    ],
)
def test_invalid_body_answers_in_the_providers_error_shape_and_stores_nothing(
    client: httpx.Client, case: WriteCase, body: Any, status: int, error: JSON
) -> None:
    answer = client.post(case.path, json=body)

    assert answer.status_code == status
    assert_contains(answer.json(), error)
    assert stored(client, case.provider) == []


@pytest.mark.parametrize(("header", "held"), [
    (None, False), ("lose_response", True), ("delay=0.4", True),
    ("duplicate,delay=0.1", True), ("ack_no_effect", False), ("error_after_commit", False)])
def test_only_a_lost_or_delayed_answer_is_held_from_the_client(header: str | None,
                                                               held: bool) -> None:
    assert holds_answer(header) is held
