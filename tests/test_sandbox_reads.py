"""The sandbox's reads, over real HTTP on loopback (docs/sandbox-api.md): by id (authoritative),
search (lagging), lists (cached), and all of them unavailable at once.

One server serves the whole module; each test starts from a reset state on a manual clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx
import pytest

from reconciler.testing import ManualClock

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
    marker,
    stored,
    write,
)


@dataclass(frozen=True)
class ByIdCase:
    write: WriteCase
    path: Callable[[JSON], str]
    missing_path: str
    missing: JSON
    missing_status: int = 404


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
            422,  # Postmark answers every API error with 422 and an ErrorCode
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
def test_get_by_id_returns_the_stored_object_and_nothing_the_provider_lacks(
    client: httpx.Client, case: ByIdCase
) -> None:
    answer = write(client, case.write).json()

    found = client.get(case.path(answer))

    assert found.status_code == 200
    assert case.write.ref(found.json()) == case.write.ref(answer)
    # No real provider returns a request hash: a probe binds only what the agent attached.
    assert not {"request_hash", "RequestHash"} & found.json().keys()


@pytest.mark.parametrize("case", BY_ID)
def test_get_by_id_answers_the_providers_not_found_for_an_unknown_id(
    client: httpx.Client, case: ByIdCase
) -> None:
    answer = client.get(case.missing_path)

    assert answer.status_code == case.missing_status
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
    params: dict[str, str | int] = {"metadata_operation_id": op, "count": 50, "offset": 0}
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
    client: httpx.Client, sandbox_clock: ManualClock, case: SearchCase
) -> None:
    configure(client, search_lag_s=5)
    ref = case.write.ref(write(client, case.write).json())

    assert case.refs(client, "op-1") == []
    sandbox_clock.advance(4.9)
    assert case.refs(client, "op-1") == []
    sandbox_clock.advance(0.1)
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
    params: dict[str, str | int] = {"channel": "C1", "include_all_metadata": "true", "limit": 100}
    found = client.get("/chat/api/conversations.history", params=params).json()
    return [f"C1/{message['ts']}" for message in found["messages"]]


def issue_list(client: httpx.Client) -> list[str]:
    params: dict[str, str | int] = {"state": "all", "per_page": 100, "page": 1}
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
    "/pay/v1/charges?created[gte]=0&limit=10",
    "/pay/_sandbox/idempotency_keys/k-1",
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
