"""The sandbox provider, driven over real HTTP on loopback (docs/sandbox-api.md).

One server serves the whole module; each test starts from a reset state on a manual clock.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from reconciler.hashing import request_hash
from reconciler.sandbox import ManualClock, RunningSandbox, SandboxState, running_sandbox

JSON = dict[str, Any]


def marker(op: str) -> str:
    return f"<!-- reconciler:op={op} -->"


@dataclass(frozen=True)
class WriteCase:
    """A write endpoint: its body for an operation, its success status, and how the reference
    of the object it created (as /_sandbox/objects names it) reads from its answer."""

    provider: str
    path: str
    status: int
    body: Callable[[str], JSON]
    ref: Callable[[JSON], str]


PAY = WriteCase(
    "pay",
    "/pay/v1/charges",
    200,
    lambda op: {"amount": 1200, "currency": "eur", "metadata": {"operation_id": op}},
    lambda answer: answer["id"],
)
MAIL = WriteCase(
    "mail",
    "/mail/email",
    200,
    lambda op: {
        "From": "agent@example.com",
        "To": "user@example.com",
        "Subject": "Your order",
        "TextBody": "It shipped.",
        "Metadata": {"operation_id": op},
    },
    lambda answer: answer["MessageID"],
)
CHAT = WriteCase(
    "chat",
    "/chat/api/chat.postMessage",
    200,
    lambda op: {
        "channel": "C1",
        "text": "deployed",
        "metadata": {"event_type": "reconciler_op", "event_payload": {"operation_id": op}},
    },
    lambda answer: f"C1/{answer['ts']}",
)
ISSUES = WriteCase(
    "gh",
    "/gh/repos/acme/app/issues",
    201,
    lambda op: {"title": "Flaky deploy", "body": f"Seen twice.\n{marker(op)}"},
    lambda answer: f"acme/app#{answer['number']}",
)
WRITES = [pytest.param(case, id=case.provider) for case in (PAY, MAIL, CHAT, ISSUES)]


@pytest.fixture(scope="module")
def sandbox() -> Iterator[RunningSandbox]:
    with running_sandbox() as running:
        yield running


@pytest.fixture
def clock(sandbox: RunningSandbox) -> ManualClock:
    sandbox.state.reset()
    manual = ManualClock()
    sandbox.state.clock = manual
    return manual


@pytest.fixture(scope="module")
def http(sandbox: RunningSandbox) -> Iterator[httpx.Client]:
    # Shared because building a client (its TLS context) costs more than most tests here.
    with httpx.Client(base_url=sandbox.url, timeout=5.0) as shared:
        yield shared


@pytest.fixture
def client(http: httpx.Client, clock: ManualClock) -> httpx.Client:
    return http


def write(
    client: httpx.Client,
    case: WriteCase,
    op: str = "op-1",
    *,
    fault: str | None = None,
    key: str | None = None,
    timeout: float = 5.0,
) -> httpx.Response:
    headers = {}
    if fault is not None:
        headers["X-Sandbox-Fault"] = fault
    if key is not None:
        headers["Idempotency-Key"] = key
    return client.post(case.path, json=case.body(op), headers=headers, timeout=timeout)


def stored(client: httpx.Client, provider: str) -> list[JSON]:
    objects = client.get("/_sandbox/objects").json()["objects"]
    return [o for o in objects if o["provider"] == provider]


def configure(client: httpx.Client, **fields: Any) -> None:
    client.post("/_sandbox/config", json=fields).raise_for_status()


def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


# Faults, on every write endpoint.


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


@pytest.mark.parametrize("case", WRITES)
def test_error_after_commit_stores_the_effect_and_answers_502(
    client: httpx.Client, case: WriteCase
) -> None:
    answer = write(client, case, fault="error_after_commit")

    assert answer.status_code == 502
    assert "error" in answer.json()
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
        pytest.param(ISSUES, {"body": "no title"}, 422, {"message": "Validation Failed"}, id="gh"),
    ],
)
def test_invalid_body_answers_in_the_providers_error_shape_and_stores_nothing(
    client: httpx.Client, case: WriteCase, body: Any, status: int, error: JSON
) -> None:
    answer = client.post(case.path, json=body)

    assert answer.status_code == status
    assert_contains(answer.json(), error)
    assert stored(client, case.provider) == []


def assert_contains(actual: JSON, expected: JSON) -> None:
    for name, value in expected.items():
        if isinstance(value, dict):
            assert_contains(actual[name], value)
        else:
            assert actual[name] == value


# Payments: idempotency keys and the receipt lookup.


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
    client: httpx.Client, clock: ManualClock
) -> None:
    charge = write(client, PAY, key="k-1").json()

    receipt = client.get("/pay/v1/idempotency_keys/k-1")

    assert receipt.status_code == 200
    assert receipt.json() == {
        "key": "k-1",
        "charge_id": charge["id"],
        "request_hash": request_hash(PAY.body("op-1")),
        "created": int(clock.now()),
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


# Reads: by id (authoritative), search (lagging), lists (cached).


@dataclass(frozen=True)
class ByIdCase:
    write: WriteCase
    path: Callable[[JSON], str]
    missing_path: str
    missing: JSON


BY_ID = [
    pytest.param(
        ByIdCase(
            PAY,
            lambda answer: f"/pay/v1/charges/{answer['id']}",
            "/pay/v1/charges/ch_missing",
            {"error": {"type": "invalid_request_error", "code": "resource_missing"}},
        ),
        id="pay",
    ),
    pytest.param(
        ByIdCase(
            MAIL,
            lambda answer: f"/mail/messages/outbound/{answer['MessageID']}/details",
            "/mail/messages/outbound/00000000-0000-0000-0000-000000000000/details",
            {"ErrorCode": 701},
        ),
        id="mail",
    ),
    pytest.param(
        ByIdCase(
            ISSUES,
            lambda answer: f"/gh/repos/acme/app/issues/{answer['number']}",
            "/gh/repos/acme/app/issues/999999",
            {"message": "Not Found"},
        ),
        id="gh",
    ),
]


@pytest.mark.parametrize("case", BY_ID)
def test_get_by_id_returns_the_stored_object_with_its_request_hash(
    client: httpx.Client, case: ByIdCase
) -> None:
    answer = write(client, case.write).json()

    found = client.get(case.path(answer))

    assert found.status_code == 200
    assert case.write.ref(found.json()) == case.write.ref(answer)
    hash_field = "RequestHash" if case.write is MAIL else "request_hash"
    assert found.json()[hash_field] == request_hash(case.write.body("op-1"))


@pytest.mark.parametrize("case", BY_ID)
def test_get_by_id_answers_404_for_an_unknown_id(client: httpx.Client, case: ByIdCase) -> None:
    answer = client.get(case.missing_path)

    assert answer.status_code == 404
    assert_contains(answer.json(), case.missing)


@dataclass(frozen=True)
class SearchCase:
    write: WriteCase
    refs: Callable[[httpx.Client, str], list[str]]


def search_charges(client: httpx.Client, op: str) -> list[str]:
    query = f"metadata['operation_id']:'{op}'"
    found = client.get("/pay/v1/charges/search", params={"query": query}).json()
    return [charge["id"] for charge in found["data"]]


def search_mail(client: httpx.Client, op: str) -> list[str]:
    params = {"metadata_operation_id": op, "count": 50, "offset": 0}
    found = client.get("/mail/messages/outbound", params=params).json()
    return [message["MessageID"] for message in found["Messages"]]


def search_issues(client: httpx.Client, op: str) -> list[str]:
    found = client.get("/gh/search/issues", params={"q": f"{marker(op)} repo:acme/app"}).json()
    return [f"acme/app#{issue['number']}" for issue in found["items"]]


SEARCHES = [
    pytest.param(SearchCase(PAY, search_charges), id="pay"),
    pytest.param(SearchCase(MAIL, search_mail), id="mail"),
    pytest.param(SearchCase(ISSUES, search_issues), id="gh"),
]


@pytest.mark.parametrize("case", SEARCHES)
def test_search_only_sees_objects_older_than_search_lag(
    client: httpx.Client, clock: ManualClock, case: SearchCase
) -> None:
    configure(client, search_lag_s=5)
    ref = case.write.ref(write(client, case.write).json())

    assert case.refs(client, "op-1") == []
    clock.advance(4.9)
    assert case.refs(client, "op-1") == []
    clock.advance(0.1)
    assert case.refs(client, "op-1") == [ref]


@pytest.mark.parametrize("case", SEARCHES)
def test_search_finds_only_the_operation_asked_for(client: httpx.Client, case: SearchCase) -> None:
    ref = case.write.ref(write(client, case.write, "op-1").json())
    write(client, case.write, "op-2")

    assert case.refs(client, "op-1") == [ref]


def test_issue_search_matches_body_text_only_within_the_repo(client: httpx.Client) -> None:
    client.post("/gh/repos/acme/other/issues", json=ISSUES.body("op-1"))
    ref = ISSUES.ref(write(client, ISSUES).json())

    assert search_issues(client, "op-1") == [ref]


@dataclass(frozen=True)
class ListCase:
    write: WriteCase
    refs: Callable[[httpx.Client], list[str]]


def chat_history(client: httpx.Client) -> list[str]:
    params = {"channel": "C1", "include_all_metadata": "true", "limit": 100}
    found = client.get("/chat/api/conversations.history", params=params).json()
    return [f"C1/{message['ts']}" for message in found["messages"]]


def issue_list(client: httpx.Client) -> list[str]:
    params = {"state": "all", "per_page": 100, "page": 1}
    found = client.get("/gh/repos/acme/app/issues", params=params).json()
    return [f"acme/app#{issue['number']}" for issue in found]


LISTS = [
    pytest.param(ListCase(CHAT, chat_history), id="chat"),
    pytest.param(ListCase(ISSUES, issue_list), id="gh"),
]


@pytest.mark.parametrize("case", LISTS)
def test_cached_list_answers_the_snapshot_of_the_first_list_call(
    client: httpx.Client, case: ListCase
) -> None:
    configure(client, cached_list=True)
    older = case.write.ref(write(client, case.write, "op-1").json())
    assert case.refs(client) == [older]

    newer = case.write.ref(write(client, case.write, "op-2").json())

    assert case.refs(client) == [older]
    configure(client, cached_list=False)
    assert case.refs(client) == [newer, older]


@pytest.mark.parametrize("case", LISTS)
def test_setting_cached_list_again_retakes_the_snapshot(
    client: httpx.Client, case: ListCase
) -> None:
    configure(client, cached_list=True)
    older = case.write.ref(write(client, case.write, "op-1").json())
    case.refs(client)
    newer = case.write.ref(write(client, case.write, "op-2").json())

    configure(client, cached_list=True)

    assert case.refs(client) == [newer, older]


PROVIDER_READS = [
    "/pay/v1/charges/ch_x",
    "/pay/v1/charges/search?query=metadata['operation_id']:'op-1'",
    "/pay/v1/idempotency_keys/k-1",
    "/mail/messages/outbound?metadata_operation_id=op-1&count=10&offset=0",
    "/mail/messages/outbound/m-1/details",
    "/chat/api/conversations.history?channel=C1&include_all_metadata=true&limit=10",
    "/gh/repos/acme/app/issues/1",
    "/gh/search/issues?q=x repo:acme/app",
    "/gh/repos/acme/app/issues?state=all&per_page=10&page=1",
]


@pytest.mark.parametrize("path", PROVIDER_READS)
def test_read_unavailable_fails_every_provider_get_with_503(
    client: httpx.Client, path: str
) -> None:
    configure(client, read_unavailable=True)

    answer = client.get(path)

    assert answer.status_code == 503
    assert answer.json() == {"error": "read api unavailable"}


@pytest.mark.parametrize("case", WRITES)
def test_read_unavailable_leaves_writes_and_sandbox_endpoints_working(
    client: httpx.Client, case: WriteCase
) -> None:
    configure(client, read_unavailable=True)

    assert write(client, case).status_code == case.status
    assert len(stored(client, case.provider)) == 1
    assert client.get("/healthz").json() == {"ok": True}


# Provider details: chat, mail and issue paging.


def test_post_message_to_an_empty_channel_answers_channel_not_found(
    client: httpx.Client,
) -> None:
    answer = client.post(CHAT.path, json={**CHAT.body("op-1"), "channel": ""})

    assert answer.status_code == 200
    assert answer.json() == {"ok": False, "error": "channel_not_found"}


def test_history_shows_metadata_only_with_include_all_metadata(client: httpx.Client) -> None:
    write(client, CHAT)
    history = "/chat/api/conversations.history"

    plain = client.get(history, params={"channel": "C1"}).json()["messages"]
    full = client.get(history, params={"channel": "C1", "include_all_metadata": "true"}).json()

    assert "metadata" not in plain[0]
    assert full["messages"][0]["metadata"] == CHAT.body("op-1")["metadata"]
    assert full["messages"][0]["request_hash"] == request_hash(CHAT.body("op-1"))


def test_history_limit_reports_has_more(client: httpx.Client) -> None:
    for op in ("op-1", "op-2", "op-3"):
        write(client, CHAT, op)

    page = client.get("/chat/api/conversations.history", params={"channel": "C1", "limit": 2})

    assert len(page.json()["messages"]) == 2
    assert page.json()["has_more"] is True


def test_outbound_search_pages_with_count_and_offset(client: httpx.Client) -> None:
    refs = [MAIL.ref(write(client, MAIL, "op-1").json()) for _ in range(3)]
    params = {"metadata_operation_id": "op-1", "count": 2, "offset": 1}

    page = client.get("/mail/messages/outbound", params=params).json()

    assert page["TotalCount"] == 3
    assert [m["MessageID"] for m in page["Messages"]] == refs[::-1][1:3]


def test_issue_list_pages_newest_first(client: httpx.Client) -> None:
    refs = [ISSUES.ref(write(client, ISSUES, f"op-{n}").json()) for n in range(3)]
    params = {"state": "all", "per_page": 2, "page": 2}

    page = client.get("/gh/repos/acme/app/issues", params=params).json()

    assert [f"acme/app#{issue['number']}" for issue in page] == refs[::-1][2:]


# The sandbox's own endpoints, and running it.


def test_reset_clears_objects_and_config(client: httpx.Client) -> None:
    configure(client, search_lag_s=5, read_unavailable=True)
    write(client, PAY, key="k-1")

    client.post("/_sandbox/reset").raise_for_status()

    assert stored(client, "pay") == []
    assert client.get("/pay/v1/idempotency_keys/k-1").status_code == 404
    defaults = client.post("/_sandbox/config", json={}).json()
    assert defaults == {
        "search_lag_s": 0,
        "cached_list": False,
        "read_unavailable": False,
        "hold_s": 30,
    }


@pytest.mark.parametrize("fields", [{"search_lag": 1}, {"search_lag_s": -1}, {"hold_s": "x"}])
def test_config_rejects_unknown_fields_and_bad_values(client: httpx.Client, fields: JSON) -> None:
    assert client.post("/_sandbox/config", json=fields).status_code == 422


def test_running_sandbox_serves_on_an_ephemeral_loopback_port_until_exit() -> None:
    with running_sandbox() as running:
        assert running.url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{running.url}/healthz", timeout=5.0).json() == {"ok": True}

    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{running.url}/healthz", timeout=1.0)


def test_stopping_the_server_ends_a_held_lose_response_at_once() -> None:
    state = SandboxState(clock=ManualClock())
    state.configure(hold_s=30)

    def held_write(url: str) -> httpx.Response:
        with httpx.Client(base_url=url, timeout=10.0) as http:
            return write(http, PAY, fault="lose_response")

    with ThreadPoolExecutor(max_workers=1) as pool:
        with running_sandbox(state=state) as running:
            held = pool.submit(held_write, running.url)
            wait_until(lambda: len(state.objects()) == 1)
            stopping = time.monotonic()

        assert time.monotonic() - stopping < 5.0
        assert held.result(timeout=5.0).status_code == 504


def test_running_sandbox_raises_in_the_caller_when_the_port_is_taken() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]

        with pytest.raises(OSError), running_sandbox(port=port):
            pass
