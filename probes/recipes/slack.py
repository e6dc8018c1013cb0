"""Slack: a channel's history, and a thread's replies, found by message metadata.

    slack.history  GET /api/conversations.history  authoritative, blind to thread replies
    slack.replies  GET /api/conversations.replies  authoritative (thread replies are never in
                                                   conversations.history)

conversations.history "returns only parent messages" (conversations.replies' reference): a
reply posted into a thread is not there, so an empty history proves nothing about an intent
whose correlation names a `thread_ts`; it is recorded `unavailable` (`blind_to`), and the
thread is read with `slack.replies`. A worker that posts into a thread records `thread_ts` in
the intent's correlation (the replies read needs it anyway).

The agent posts with `metadata = {event_type, event_payload: {operation_id, request_hash}}`;
the probe asks for it (`include_all_metadata`), reads from the intent's time less five minutes
(`oldest`), and follows `response_metadata.next_cursor`. Slack may return fewer messages than
`limit` with `has_more: true`: such a page, when no next page was read, is a cut read and
never a zero. An answer with `ok: false` (`channel_not_found`, `ratelimited`, ...) is no answer.

Rate: non-Marketplace apps are held to 1 request a minute and 15 messages a page since
2025-05-29 (existing installs from 2026-03-03), others to Tier 3 (50+ a minute). The recipe
asks 15 a page and budgets 50 requests a minute per workspace; set `budget_per_minute = 1`
for an app outside the Marketplace.

Sources: https://docs.slack.dev/reference/methods/conversations.history (cursor, has_more,
oldest/latest, limit "fewer than the requested number of items may be returned", rate
limits), https://docs.slack.dev/reference/methods/conversations.replies,
https://docs.slack.dev/messaging/message-metadata.
"""

from __future__ import annotations

from typing import Any

from probes.recipes.recipe import CAUTIOUS_INFLIGHT_S, Inflight, Recipe
from reconciler.core.domain import Authority

CITE = "https://docs.slack.dev/reference/methods/conversations.history"
#: Slack documents no bound on how long a chat.postMessage may still land after its caller
#: stopped waiting (slack_sdk's WebClient waits 30 s, `timeout=30`): the cautious minute.
INFLIGHT = Inflight(CAUTIOUS_INFLIGHT_S, "undocumented (https://docs.slack.dev/reference/"
                    "methods/chat.postMessage; slack_sdk waits 30 s): the cautious default")

_COMMON: dict[str, Any] = {
    "token_env": "SLACK_BOT_TOKEN", "require": {"ok": True}, "items": "messages", "ref": "ts",
    "hash": "metadata.event_payload.request_hash",
    "where": {"metadata.event_payload.operation_id": "{operation_id}"},
    "pagination": {"style": "cursor", "next": "response_metadata.next_cursor",
                   "param": "cursor", "more": "has_more"},
    "budget_per_minute": 50, "authority": "authoritative"}
_PARAMS = {"channel": "{correlation[channel]}", "oldest": "{intent_at:unix6-300}",
           "include_all_metadata": "true", "limit": "15"}

RECIPES: dict[str, Recipe] = {
    "slack.history": Recipe({"path": "/api/conversations.history", "params": _PARAMS,
                             "blind_to": ["thread_ts"], **_COMMON}, Authority.AUTHORITATIVE,
                            CITE, inflight=INFLIGHT),
    "slack.replies": Recipe({"path": "/api/conversations.replies",
                             "params": {**_PARAMS, "ts": "{correlation[thread_ts]}"}, **_COMMON},
                            Authority.AUTHORITATIVE,
                            "https://docs.slack.dev/reference/methods/conversations.replies",
                            inflight=INFLIGHT),
}
