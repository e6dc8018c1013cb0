"""A zero proves nothing the probe could not see (issue 31): the recipes find every marker form
the docs offer and prove an effect only in content the worker's own account wrote, a history
read proves no zero for a thread reply, a page that does not say it is the last is a cut read,
and `http_json` pages on a last-page flag and checks membership in a list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from probes.errors import ProbeConfigError
from probes.http_json import HttpJsonProbe, http_json
from probes.recipes import recipe_factory
from reconciler.core.domain import Authority, Match, Observation
from reconciler.sandbox import RunningSandbox
from reconciler.sandbox.credentials import SANDBOX_ENV
from reconciler.testing import ManualClock

from probe_harness import BASE, OP, Handler, answer, charge, observe, probe, target

HASH = "sha256:" + "ab" * 32
ACCOUNT = "octo-bot"
#: Each GitHub recipe and how its answer holds the issues.
GITHUB: dict[str, Callable[[list[dict[str, Any]]], Any]] = {
    "github.issue": lambda issues: issues[0],
    "github.issues.list": lambda issues: issues,
    "github.search": lambda issues: {"total_count": len(issues), "incomplete_results": False,
                                     "items": issues}}


def issue(number: int, body: str, author: str = ACCOUNT) -> dict[str, Any]:
    return {"id": 1000 + number, "number": number, "title": "t", "state": "open", "body": body,
            "user": {"login": author, "type": "User"}}


def github(recipe: str, *issues: dict[str, Any], **options: Any) -> Observation:
    return observe(probe(recipe, answer(GITHUB[recipe](list(issues))),
                         **{"account": ACCOUNT, **options}))


def cut(obs: Observation, why: str) -> None:
    assert (obs.authority, obs.matches) == (Authority.UNAVAILABLE, ()), obs
    assert obs.error is not None and why in obs.error, obs.error


# --- GitHub: every marker form, and only the worker's own issues prove ------------------------


@pytest.mark.parametrize("recipe", GITHUB)
def test_the_github_recipes_match_the_marker_with_a_request_hash(recipe: str) -> None:
    # docs/webhooks.md offers both forms; the hash form binds the match to the request.
    found = github(recipe, issue(7, f"Disk full.\n<!-- reconciler:op={OP} request_hash={HASH} -->"))
    assert found.matches == (Match("7", HASH),)
    plain = github(recipe, issue(7, f"Disk full.\n<!-- reconciler:op={OP} -->"))
    assert plain.matches == (Match("7"),)


@pytest.mark.parametrize("recipe", ["github.issues.list", "github.search"])
def test_a_marker_is_matched_by_its_whole_operation_id(recipe: str) -> None:
    longer = [issue(8, f"<!-- reconciler:op={OP}0 request_hash={HASH} -->"),
              issue(9, f"<!-- reconciler:op={OP}0 -->")]
    obs = github(recipe, *longer)
    assert obs.matches == () and obs.authority is not Authority.UNAVAILABLE


def test_the_github_search_phrase_is_in_both_marker_forms() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"total_count": 0, "incomplete_results": False,
                                         "items": []})

    observe(probe("github.search", handler, account=ACCOUNT))
    phrase = seen[0].url.params["q"].split('"')[1]
    assert phrase in f"<!-- reconciler:op={OP} -->"
    assert phrase in f"<!-- reconciler:op={OP} request_hash={HASH} -->"


@pytest.mark.parametrize("recipe", GITHUB)
def test_a_marker_in_an_issue_someone_else_opened_is_a_weak_match(recipe: str) -> None:
    # SPEC section 3: anyone who can open an issue can write the marker into its body.
    planted = github(recipe, issue(7, f"<!-- reconciler:op={OP} -->", author="mallory"))
    assert (planted.authority, planted.matches, planted.error) == (
        Authority.WEAK, (Match("7"),), None)


def test_the_workers_own_issue_proves_beside_a_planted_one() -> None:
    ours, theirs = (issue(7, f"<!-- reconciler:op={OP} -->"),
                    issue(8, f"<!-- reconciler:op={OP} -->", author="mallory"))
    obs = github("github.search", theirs, ours)
    assert (obs.authority, obs.matches) == (Authority.LAGGING, (Match("7"),))


@pytest.mark.parametrize("recipe", GITHUB)
def test_a_github_recipe_without_the_workers_account_is_refused_at_startup(recipe: str) -> None:
    with pytest.raises(ProbeConfigError, match=r"'account' .* is required"):
        probe(recipe, answer({}))
    with pytest.raises(ProbeConfigError, match="'account'"):
        probe(recipe, answer({}), account=" ")


def test_a_marker_planted_at_the_sandbox_by_another_user_proves_nothing(
        sandbox: RunningSandbox, client: httpx.Client) -> None:
    def search() -> Observation:
        built = recipe_factory("github.search")("github.search", {
            "base_url": sandbox.url + "/gh", "account": "sandbox-bot", "tries": 1}, SANDBOX_ENV)
        return observe(built, target(correlation={"owner": "octo", "repo": "hello"}))

    marked = {"title": "Disk full", "body": f"<!-- reconciler:op={OP} request_hash={HASH} -->"}
    planted = client.post("/gh/repos/octo/hello/issues", json=marked,
                          headers={"X-Sandbox-User": "mallory"})
    assert planted.json()["user"]["login"] == "mallory"
    assert (search().authority, search().matches) == (
        Authority.WEAK, (Match(str(planted.json()["number"]), HASH),))
    ours = client.post("/gh/repos/octo/hello/issues", json=marked).json()["number"]
    assert (search().authority, search().matches) == (Authority.LAGGING,
                                                      (Match(str(ours), HASH),))


# --- Slack: a history read cannot see a thread reply ------------------------------------------


def slack_history(*ops: str) -> Handler:
    messages = [{"type": "message", "ts": "1767268800.000001", "text": "hi",
                 "metadata": {"event_type": "reconciler_operation",
                              "event_payload": {"operation_id": op, "request_hash": HASH}}}
                for op in ops]
    return answer({"ok": True, "messages": messages, "has_more": False,
                   "response_metadata": {"next_cursor": ""}})


IN_THREAD = target(correlation={"channel": "C1", "thread_ts": "1767268700.000100"})


def test_slack_history_proves_no_zero_for_a_message_posted_in_a_thread() -> None:
    # conversations.history "returns only parent messages" (conversations.replies' reference).
    cut(observe(probe("slack.history", slack_history()), IN_THREAD), "'thread_ts'")
    top_level = observe(probe("slack.history", slack_history()))
    assert (top_level.authority, top_level.matches) == (Authority.AUTHORITATIVE, ())


def test_a_thread_reply_found_in_the_history_still_proves() -> None:
    # A reply also sent to the channel (reply_broadcast) is in the history.
    obs = observe(probe("slack.history", slack_history(OP)), IN_THREAD)
    assert (obs.authority, obs.matches) == (Authority.AUTHORITATIVE,
                                            (Match("1767268800.000001", HASH),))


def test_a_thread_reply_at_the_sandbox_is_no_zero_of_the_history(
        sandbox: RunningSandbox, client: httpx.Client, sandbox_clock: ManualClock) -> None:
    parent = client.post("/chat/api/chat.postMessage",
                         json={"channel": "C1", "text": "Deploying."}).json()["ts"]
    metadata = {"event_type": "reconciler_operation",
                "event_payload": {"operation_id": OP, "request_hash": HASH}}
    client.post("/chat/api/chat.postMessage", json={"channel": "C1", "text": "Done.",
                                                    "thread_ts": parent, "metadata": metadata})
    replied = target(correlation={"channel": "C1", "thread_ts": parent},
                     intent_at=sandbox_clock())

    def read(recipe: str) -> Observation:
        built = recipe_factory(recipe)(recipe, {"base_url": sandbox.url + "/chat",
                                                "tries": 1}, SANDBOX_ENV)
        return observe(built, replied)

    cut(read("slack.history"), "'thread_ts'")
    assert read("slack.replies").authority is Authority.AUTHORITATIVE
    assert [m.request_hash for m in read("slack.replies").matches] == [HASH]


# --- Stripe: a page that does not say has_more is a cut read ----------------------------------


@pytest.mark.parametrize("recipe", ["stripe.payment_intents.list", "stripe.charges.list",
                                    "stripe.payment_intents.search"])
def test_a_stripe_page_without_has_more_is_no_zero(recipe: str) -> None:
    silent = observe(probe(recipe, answer({"object": "list", "data": [charge("pi_9", "op-2")]})))
    cut(silent, "has_more is missing")
    said = observe(probe(recipe, answer({"object": "list", "has_more": False,
                                         "data": [charge("pi_9", "op-2")]})))
    assert (said.authority, said.matches) in {(Authority.AUTHORITATIVE, ()),
                                              (Authority.LAGGING, ())}


def test_a_stripe_page_without_has_more_keeps_the_match_it_found() -> None:
    silent = answer({"object": "list", "data": [charge("ch_1")]})
    obs = observe(probe("stripe.charges.list", silent))
    assert (obs.authority, obs.matches) == (Authority.AUTHORITATIVE,
                                            (Match("ch_1", "sha256:ch_1"),))


# --- http_json: a last-page flag, and membership in a list ------------------------------------

#: Jira Cloud's enhanced search (/rest/api/3/search/jql): `nextPageToken`, and `isLast`.
JIRA: dict[str, Any] = {
    "base_url": BASE, "path": "/rest/api/3/search/jql", "auth": "none", "backoff_s": 0,
    "params": {"jql": 'labels = "op-{operation_id}"'}, "items": "issues", "ref": "key",
    "member": {"fields.labels": "op-{operation_id}"}, "authority": "lagging",
    "pagination": {"style": "cursor", "next": "nextPageToken", "param": "nextPageToken",
                   "last_flag": "isLast"}}


def jira(handler: Handler, **options: Any) -> HttpJsonProbe:
    return http_json("jira", {**JIRA, **options}, {}, transport=httpx.MockTransport(handler))


def ticket(key: str, *labels: str) -> dict[str, Any]:
    return {"id": key.lower(), "key": key, "fields": {"labels": list(labels)}}


def test_a_last_page_flag_ends_the_read_or_leads_on() -> None:
    bodies = iter([{"issues": [ticket("OPS-2", "op-op-2")], "nextPageToken": "t2",
                    "isLast": False},
                   {"issues": [ticket("OPS-1", "urgent", f"op-{OP}")], "isLast": True}])
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=next(bodies))

    obs = observe(jira(handler))
    assert (obs.authority, obs.matches) == (Authority.LAGGING, (Match("OPS-1"),))
    assert seen[1].url.params["nextPageToken"] == "t2"


@pytest.mark.parametrize(("body", "why"), [
    ({"issues": [], "isLast": False}, "isLast is false but nextPageToken is empty"),
    ({"issues": []}, "isLast is missing"),
    ({"issues": [], "isLast": "yes"}, "isLast is missing"),
])
def test_a_page_that_does_not_say_it_is_the_last_is_a_cut_read(body: dict[str, Any],
                                                                why: str) -> None:
    cut(observe(jira(answer(body))), why)


def test_a_complete_read_with_the_value_in_no_list_is_a_zero() -> None:
    obs = observe(jira(answer({"issues": [ticket("OPS-3", f"op-{OP}0"), ticket("OPS-4")],
                               "isLast": True})))
    assert (obs.authority, obs.matches) == (Authority.LAGGING, ())


def test_a_membership_check_needs_a_list_holding_the_very_value() -> None:
    items = [{"key": "A", "fields": {"labels": f"op-{OP}"}},      # text, not a list
             {"key": "B", "fields": {"labels": [f"op-{OP}x"]}},   # another value
             {"key": "C", "fields": {}}]                           # no field
    obs = observe(jira(answer({"issues": items, "isLast": True})))
    assert obs.matches == ()


def test_more_and_last_flag_together_are_refused() -> None:
    both = {**JIRA["pagination"], "more": "hasMore"}
    with pytest.raises(ProbeConfigError, match="one of 'more'"):
        jira(answer({}), pagination=both)
