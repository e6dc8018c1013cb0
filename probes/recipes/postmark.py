"""Postmark: outbound message search by metadata, and a message's details.

    postmark.outbound  GET /messages/outbound?metadata_operation_id=  lagging, 60 s
    postmark.details   GET /messages/outbound/{id}/details             authoritative

The agent sends `Metadata = {operation_id, request_hash}`. The search pages by `offset`
(`count` + `offset` may not pass 10,000: a search with more is a cut read), reads from the
intent's time (`fromdate`, in the US Eastern time Postmark's API uses) less five minutes, and
needs `Accept: application/json`. A message `Sent`, `Queued` or `Processed` is the effect (a
queued message is sent later). Postmark answers API errors with HTTP 422 and an `ErrorCode`;
none of them is a zero: `701` was seen for a queued message that was sent afterwards, so the
details read never counts a missing message as absent.

Postmark does not document how soon a sent message is searchable, nor how long a send may still
be applied after its caller stopped waiting: both take the cautious default, a minute (SPEC
section 4), and a provider that takes no idempotency key is where a lag too short costs a
second email, so raise `visibility_lag_s` if searches have been seen slower.

Sources: https://postmarkapp.com/developer/api/messages-api (search parameters, Accept,
10,000 limit, Eastern time, metadata filter), https://postmarkapp.com/developer/api/overview
(422 and error codes).
"""

from __future__ import annotations

from typing import Any

from probes.recipes.recipe import CAUTIOUS_INFLIGHT_S, CAUTIOUS_LAG_S, Inflight, Recipe
from reconciler.core.domain import Authority

CITE = "https://postmarkapp.com/developer/api/messages-api"
#: Undocumented (see above): the cautious default.
SEARCH_LAG_S = CAUTIOUS_LAG_S
INFLIGHT = Inflight(CAUTIOUS_INFLIGHT_S, "undocumented (https://postmarkapp.com/developer/api/"
                    "email-api): the cautious default")

_COMMON: dict[str, Any] = {
    "ref": "MessageID", "hash": "Metadata.request_hash",
    "where": {"Metadata.operation_id": "{operation_id}"},
    "status": "Status", "effect_status": ["Sent", "Queued", "Processed"],
    "headers": {"Accept": "application/json"},
    "token_env": "POSTMARK_SERVER_TOKEN", "auth_header": "X-Postmark-Server-Token"}

RECIPES: dict[str, Recipe] = {
    "postmark.outbound": Recipe({
        "path": "/messages/outbound",
        "params": {"count": "500", "offset": "0", "metadata_operation_id": "{operation_id}",
                   "fromdate": "{intent_at:eastern-300}"},
        "items": "Messages", **_COMMON,
        "pagination": {"style": "offset", "param": "offset", "total": "TotalCount",
                       "limit": 10000},
        "authority": "lagging"}, Authority.LAGGING, CITE, least_lag_s=SEARCH_LAG_S,
        inflight=INFLIGHT),
    "postmark.details": Recipe({
        "path": "/messages/outbound/{correlation[message_id]}/details", "item": "", **_COMMON,
        "authority": "authoritative"}, Authority.AUTHORITATIVE, CITE, inflight=INFLIGHT),
}
