"""Provider details of the sandbox: chat messages and history, mail and issue paging, over real
HTTP on loopback (docs/sandbox-api.md).

One server serves the whole module; each test starts from a reset state on a manual clock.
"""

from __future__ import annotations

import httpx

from reconciler.hashing import request_hash

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
    assert full["messages"][0]["request_hash"] == request_hash(CHAT.body("op-1"))


def test_history_limit_reports_has_more(client: httpx.Client) -> None:
    for op in ("op-1", "op-2", "op-3"):
        write(client, CHAT, op)

    page = client.get("/chat/api/conversations.history", params={"channel": "C1", "limit": 2})

    assert len(page.json()["messages"]) == 2
    assert page.json()["has_more"] is True


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
