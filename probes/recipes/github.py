"""GitHub: an issue by number, a repository's issues since the intent, and issue search,
found by a marker the agent puts in the body, in either form docs/webhooks.md offers:
`<!-- reconciler:op=OPERATION_ID -->` or
`<!-- reconciler:op=OPERATION_ID request_hash=sha256:HEX -->` (the hash, when there, is the
match's request hash). The id is compared whole: `op=abc` is not found in `op=abcd`.

Anyone who can open an issue on the repository can write the marker into a body, so a match
proves the effect only in an issue the worker's own account opened (SPEC section 3): the
recipes need `account` (the login the token acts as, `user.login` of the issues it opens;
`NAME[bot]` for a GitHub App) and refuse to be built without it, since a probe that could
never prove an issue it found would hand every found issue to a human. A marker in an issue
someone else opened is a `weak` match: a hint, and no zero either.

    github.issue        GET /repos/{owner}/{repo}/issues/{number}  authoritative
    github.issues.list  GET /repos/{owner}/{repo}/issues?since=    lagging, 60 s
    github.search       GET /search/issues?q="reconciler:op=..."   lagging, 300 s

The list pages with the `Link` header and reads from the intent's time less five minutes
(`since` filters on `updated_at`, which a new issue has at its creation); its responses carry
`Cache-Control: max-age=60`, so a list may be up to a minute old. Search has its own rate
limit (30 requests a minute, authenticated) and may time out: `incomplete_results: true` is a
cut read, no zero. The quoted phrase `"reconciler:op=ID"` is in both marker forms, so the
search finds either; the marker check then keeps the exact id. GitHub does not document
search's indexing lag: the default is five minutes (SEARCH_LAG_S says why). A 404 is never a
zero: GitHub answers it for a repository the token cannot see too.

A spent rate limit is a 403 (or 429) with `x-ratelimit-remaining: 0` and `x-ratelimit-reset`,
or `Retry-After` for a secondary limit: waited out, or the read ends `rate limited`.

Sources: https://docs.github.com/en/rest/search/search (incomplete_results, rate limit),
https://docs.github.com/en/rest/using-the-rest-api/using-pagination-in-the-rest-api (Link),
https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api,
https://docs.github.com/en/rest/issues/issues#list-repository-issues (since), and the
github/rest-api-description OpenAPI description.
"""

from __future__ import annotations

from typing import Any

from probes.recipes.recipe import CAUTIOUS_INFLIGHT_S, Inflight, Recipe, by_account
from reconciler.core.domain import Authority

CITE = "https://docs.github.com/en/rest/search/search"

_REPO = "{correlation[owner]}/{correlation[repo]}"
_COMMON: dict[str, Any] = {
    "token_env": "GITHUB_TOKEN", "ref": "number", "marker": "body",
    "headers": {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}}
_LINK = {"style": "link"}

#: "If GitHub takes more than 10 seconds to process an API request, GitHub will terminate the
#: request" and "reserves the right to change the timeout window": a terminated request is not
#: said to have done nothing, and the window may grow, so the cautious minute stays.
INFLIGHT = Inflight(CAUTIOUS_INFLIGHT_S, "https://docs.github.com/en/rest/using-the-rest-api/"
                    "troubleshooting-the-rest-api#timeouts (10 s, may change): the cautious "
                    "default")
#: GitHub documents no lag for its lists; their answers carry `Cache-Control: private,
#: max-age=60, s-maxage=60` (the response examples of github/rest-api-description, and every
#: live answer), so a list may come from a cache up to a minute old: a minute, which is also
#: the cautious default.
LIST_LAG_S = 60.0
#: GitHub documents no indexing lag for search, which reads an index built apart from the
#: issues (https://docs.github.com/en/rest/search/search says only that a search may time out
#: and answer `incomplete_results`): five times the cautious minute, since a zero read too
#: early would open a retry that opens a second issue (GitHub takes no idempotency key).
SEARCH_LAG_S = 300.0


#: `account`: the login whose issues prove an effect; the author of anything else is not the
#: worker.
_by_account = by_account(
    "user.login", "the login the token opens issues as, e.g. 'my-bot' or 'my-app[bot]'",
    "a marker in an issue body anyone can write proves an effect only in an issue the "
    "worker's own account opened")


RECIPES: dict[str, Recipe] = {
    "github.issue": Recipe({"path": "/repos/" + _REPO + "/issues/{correlation[issue_number]}",
                            "item": "", **_COMMON, "authority": "authoritative"},
                           Authority.AUTHORITATIVE,
                           "https://docs.github.com/en/rest/issues/issues#get-an-issue",
                           adapt=_by_account, inflight=INFLIGHT),
    "github.issues.list": Recipe({
        "path": "/repos/" + _REPO + "/issues",
        "params": {"state": "all", "since": "{intent_at:iso-300}", "per_page": "100"},
        "items": "", **_COMMON, "pagination": _LINK, "authority": "lagging"},
        Authority.LAGGING,
        "https://docs.github.com/en/rest/issues/issues#list-repository-issues",
        least_lag_s=LIST_LAG_S, adapt=_by_account, inflight=INFLIGHT),
    "github.search": Recipe({
        "path": "/search/issues",
        "params": {"q": '"reconciler:op={operation_id}" repo:' + _REPO + " in:body",
                   "per_page": "100"},
        "items": "items", **_COMMON, "incomplete": "incomplete_results", "pagination": _LINK,
        "budget": "search", "budget_per_minute": 30, "authority": "lagging"},
        Authority.LAGGING, CITE, least_lag_s=SEARCH_LAG_S, adapt=_by_account,
        inflight=INFLIGHT),
}
