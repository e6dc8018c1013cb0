"""The `jira` package (pycontribs, https://jira.readthedocs.io) against the sandbox's Jira Cloud,
unchanged but for the server URL: it creates an issue, reads it back by key, searches it with
JQL page by page, and reads Jira's errors (401, 404, a 400 for JQL it cannot run) as it reads a
real site's; and the jira recipes find the issue the SDK created when its answer was lost.

Jira has no idempotency key, so nothing here retries a create: the only safe way on after a
lost answer is the probe (docs/providers/jira.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import requests
from jira import JIRA, JIRAError

from probes.base import ProbeTarget
from probes.recipes import recipe_factory
from probes.recipes.jira import LABEL
from reconciler.core.domain import Authority, Observation
from reconciler.core.hashing import request_hash
from reconciler.sandbox import RunningSandbox
from reconciler.sandbox.jira import account_id

HOLD_S = 2.0
SDK_TIMEOUT_S = 0.5
OP = "op-jira-1"
NOW = datetime.now(UTC)
EMAIL, TOKEN = "agent@example.test", "sandbox-api-token"
MARK = LABEL.format(operation_id=OP)
HASH = request_hash({"operation_id": OP})


@pytest.fixture(autouse=True)
def fresh(sandbox: RunningSandbox) -> None:
    """The kit's sandbox (one server for the module), emptied, on real time."""
    sandbox.state.reset()
    sandbox.state.configure(hold_s=HOLD_S)


def jira(sandbox: RunningSandbox, email: str = EMAIL, token: str = TOKEN) -> JIRA:
    """The SDK as a Jira Cloud user sets it up, the site's URL swapped for the sandbox's."""
    return JIRA(server=sandbox.url + "/jira", basic_auth=(email, token), max_retries=0,
                timeout=SDK_TIMEOUT_S)


def fields(*labels: str, summary: str = "Flaky deploy") -> dict[str, Any]:
    return {"project": {"key": "OPS"}, "issuetype": {"name": "Task"}, "summary": summary,
            "labels": list(labels)}


def observe(recipe: str, sandbox: RunningSandbox, **options: Any) -> Observation:
    env = {"JIRA_EMAIL": EMAIL, "JIRA_API_TOKEN": TOKEN}
    correlation = options.pop("correlation", {"project": "OPS"})
    probe = recipe_factory(recipe)(recipe, {
        "base_url": sandbox.url + "/jira", "tries": 1, "account": account_id(EMAIL),
        **options}, env)
    result = probe.probe(ProbeTarget(OP, None, "jira", "create_issue", HASH,
                                     correlation, intent_at=NOW, dispatched_at=NOW))
    assert isinstance(result, Observation)
    return result


def test_an_issue_whose_answer_was_lost_is_found_by_the_jql_search_and_by_its_key(
        sandbox: RunningSandbox) -> None:
    client = jira(sandbox)
    # Armed for the next write under /jira: the SDK sends no header of ours.
    httpx.post(sandbox.url + "/_sandbox/faults",
               json={"provider": "jira", "fault": "lose_response"}).raise_for_status()

    with pytest.raises(requests.exceptions.ReadTimeout):
        client.create_issue(fields=fields("deploys", MARK), prefetch=False)

    searched = observe("jira.search", sandbox, least_lag_s=0)
    [match] = searched.matches
    assert searched.authority is Authority.LAGGING
    issue = client.issue(match.provider_ref)
    assert issue.fields.summary == "Flaky deploy" and MARK in issue.fields.labels
    assert issue.fields.creator.accountId == client.myself()["accountId"] == account_id(EMAIL)
    by_key = observe("jira.issue", sandbox, correlation={"issue_key": match.provider_ref})
    assert (by_key.authority, by_key.matches) == (Authority.AUTHORITATIVE, searched.matches)


def test_the_sdk_creates_and_reads_back_by_key_and_by_id(sandbox: RunningSandbox) -> None:
    client = jira(sandbox)
    created = client.create_issue(fields=fields(MARK))   # prefetch: reads it back by key
    again = client.issue(created.id)
    assert (again.key, again.fields.summary, again.fields.project.key) == (
        created.key, "Flaky deploy", "OPS")
    assert created.key.startswith("OPS-") and created.id != created.key


def test_a_jql_search_pages_with_next_page_token_until_is_last(sandbox: RunningSandbox) -> None:
    client = jira(sandbox)
    keys = [client.create_issue(fields=fields(MARK, summary=f"n{n}"), prefetch=False).key
            for n in range(3)]
    query = f'project = OPS AND labels = "{MARK}" ORDER BY created DESC'

    first = client.enhanced_search_issues(query, maxResults=2, json_result=True)
    assert isinstance(first, dict) and first["isLast"] is False
    rest = client.enhanced_search_issues(query, nextPageToken=first["nextPageToken"],
                                         maxResults=2, json_result=True)
    assert isinstance(rest, dict) and rest["isLast"] is True and "nextPageToken" not in rest
    assert [i["key"] for i in first["issues"] + rest["issues"]] == keys[::-1]
    every = client.enhanced_search_issues(query, maxResults=0)   # the SDK follows the pages
    assert [i.key for i in every] == keys[::-1]
    # The recipe pages too, one issue a page here, and ends where the page says isLast.
    paged = observe("jira.search", sandbox, least_lag_s=0, params={"maxResults": "1"})
    assert sorted(m.provider_ref for m in paged.matches) == sorted(keys)


def test_jira_errors_reach_the_sdk_in_jiras_shape(sandbox: RunningSandbox) -> None:
    with pytest.raises(JIRAError) as unauthenticated:
        jira(sandbox, token="").myself()
    assert unauthenticated.value.status_code == 401
    client = jira(sandbox)
    with pytest.raises(JIRAError) as missing:
        client.issue("OPS-404")
    assert missing.value.status_code == 404
    assert "Issue does not exist or you do not have permission to see it." in str(missing.value)
    with pytest.raises(JIRAError) as bad_jql:
        client.enhanced_search_issues("nosuchfield = deploy")
    assert bad_jql.value.status_code == 400
    assert "Field 'nosuchfield' does not exist" in str(bad_jql.value)
    with pytest.raises(JIRAError) as invalid:
        client.create_issue(fields={"project": {"key": "OPS"}, "issuetype": {"name": "Task"}})
    assert invalid.value.status_code == 400 and "summary" in str(invalid.value)


def test_an_unauthenticated_read_is_unavailable_never_a_zero(sandbox: RunningSandbox) -> None:
    jira(sandbox).create_issue(fields=fields(MARK), prefetch=False)
    probe = recipe_factory("jira.search")("jira.search", {
        "base_url": sandbox.url + "/jira", "tries": 1, "account": account_id(EMAIL),
        "least_lag_s": 0}, {"JIRA_EMAIL": "no-address", "JIRA_API_TOKEN": TOKEN})
    seen = probe.probe(ProbeTarget(OP, None, "jira", "create_issue", HASH, {"project": "OPS"},
                                   intent_at=NOW, dispatched_at=NOW))
    assert isinstance(seen, Observation)
    assert (seen.authority, seen.error) == (Authority.UNAVAILABLE, "HTTP 401")


def test_the_label_on_an_issue_someone_else_created_is_only_a_hint(
        sandbox: RunningSandbox) -> None:
    jira(sandbox, email="someone@example.test").create_issue(fields=fields(MARK),
                                                             prefetch=False)
    hint = observe("jira.search", sandbox, least_lag_s=0)
    assert hint.authority is Authority.WEAK and len(hint.matches) == 1


def test_the_search_index_lags_the_issue_it_does_not_show_yet(sandbox: RunningSandbox) -> None:
    created = jira(sandbox).create_issue(fields=fields(MARK), prefetch=False)
    sandbox.state.configure(search_lag_s=600)

    lagging = observe("jira.search", sandbox, least_lag_s=0)
    by_key = observe("jira.issue", sandbox, correlation={"issue_key": created.key})

    # A zero, but a lagging one: the verdict waits out the lag before it counts (SPEC 3).
    assert (lagging.authority, lagging.matches) == (Authority.LAGGING, ())
    assert [m.provider_ref for m in by_key.matches] == [created.key]
