"""Provider details of the sandbox: chat messages and history, mail and issue paging, over real
HTTP on loopback (docs/sandbox-api.md).

One server serves the whole module; each test starts from a reset state on a manual clock.
"""

from __future__ import annotations

import httpx

from reconciler.testing import ManualClock

from sandbox_harness import CHAT, ISSUES, MAIL, write


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
    assert "request_hash" not in full["messages"][0]


def test_history_limit_reports_has_more(client: httpx.Client) -> None:
    for op in ("op-1", "op-2", "op-3"):
        write(client, CHAT, op)

    page = client.get("/chat/api/conversations.history", params={"channel": "C1", "limit": 2})

    assert len(page.json()["messages"]) == 2
    assert page.json()["has_more"] is True
    cursor = page.json()["response_metadata"]["next_cursor"]
    rest = client.get("/chat/api/conversations.history",
                      params={"channel": "C1", "limit": 2, "cursor": cursor}).json()
    assert (len(rest["messages"]), rest["has_more"], rest["response_metadata"]) == (
        1, False, {"next_cursor": ""})


def test_history_reads_only_the_window_between_oldest_and_latest(
    client: httpx.Client, sandbox_clock: ManualClock
) -> None:
    first = write(client, CHAT, "op-1").json()["ts"]
    sandbox_clock.advance(10)
    second = write(client, CHAT, "op-2").json()["ts"]
    history = "/chat/api/conversations.history"

    after = client.get(history, params={"channel": "C1", "oldest": first}).json()["messages"]
    before = client.get(history, params={"channel": "C1", "latest": second}).json()["messages"]

    assert [m["ts"] for m in after] == [second]
    assert [m["ts"] for m in before] == [first]


def test_history_of_a_string_that_is_no_conversation_id_answers_channel_not_found(
    client: httpx.Client,
) -> None:
    answer = client.get("/chat/api/conversations.history", params={"channel": "#general"})

    assert answer.json() == {"ok": False, "error": "channel_not_found"}


def test_history_of_a_channel_nobody_posted_to_answers_channel_not_found(
    client: httpx.Client,
) -> None:
    answer = client.get("/chat/api/conversations.history", params={"channel": "C0NOWHERE"})

    assert answer.json() == {"ok": False, "error": "channel_not_found"}


def test_a_channel_a_failed_post_went_to_exists_and_is_empty(client: httpx.Client) -> None:
    write(client, CHAT, fault="fail_before_commit")

    answer = client.get("/chat/api/conversations.history", params={"channel": "C1"})

    assert answer.json()["ok"] is True and answer.json()["messages"] == []


def test_an_unknown_cursor_answers_invalid_cursor(client: httpx.Client) -> None:
    write(client, CHAT)
    answer = client.get("/chat/api/conversations.history",
                        params={"channel": "C1", "cursor": "not-a-cursor"})

    assert answer.json() == {"ok": False, "error": "invalid_cursor"}


def test_issue_list_pages_with_link_and_filters_by_since(
    client: httpx.Client, sandbox_clock: ManualClock
) -> None:
    for op in ("op-1", "op-2", "op-3"):
        write(client, ISSUES, op)
    listing = "/gh/repos/acme/app/issues"

    first = client.get(listing, params={"per_page": 2})
    assert len(first.json()) == 2
    nxt = first.links["next"]["url"]
    second = client.get(nxt)
    assert len(second.json()) == 1 and "next" not in second.links
    later = client.get(listing, params={"since": "2100-01-01T00:00:00Z"})
    assert later.json() == []


def test_issue_search_says_whether_its_results_are_complete(client: httpx.Client) -> None:
    write(client, ISSUES, "op-1")

    found = client.get("/gh/search/issues",
                       params={"q": '"reconciler:op=op-1" repo:acme/app in:body'}).json()

    assert (found["total_count"], found["incomplete_results"]) == (1, False)


def test_outbound_search_filters_by_every_metadata_parameter(client: httpx.Client) -> None:
    write(client, MAIL, "op-1")
    write(client, MAIL, "op-2")
    search = "/mail/messages/outbound"

    found = client.get(search, params={"count": 10, "offset": 0,
                                       "metadata_operation_id": "op-2"}).json()
    too_far = client.get(search, params={"count": 500, "offset": 9_600})

    assert [m["Metadata"]["operation_id"] for m in found["Messages"]] == ["op-2"]
    assert found["Messages"][0]["Status"] == "Sent"
    assert (too_far.status_code, too_far.json()["ErrorCode"]) == (422, 603)


def test_outbound_search_pages_with_count_and_offset(client: httpx.Client) -> None:
    refs = [MAIL.ref(write(client, MAIL, "op-1").json()) for _ in range(3)]
    params: dict[str, str | int] = {"metadata_operation_id": "op-1", "count": 2, "offset": 1}

    page = client.get("/mail/messages/outbound", params=params).json()

    assert page["TotalCount"] == 3
    assert [m["MessageID"] for m in page["Messages"]] == refs[::-1][1:3]


def test_issue_list_pages_newest_first(client: httpx.Client) -> None:
    refs = [ISSUES.ref(write(client, ISSUES, f"op-{n}").json()) for n in range(3)]
    params: dict[str, str | int] = {"state": "all", "per_page": 2, "page": 2}

    page = client.get("/gh/repos/acme/app/issues", params=params).json()

    assert [f"acme/app#{issue['number']}" for issue in page] == refs[::-1][2:]
