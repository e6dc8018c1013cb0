"""GitHub: an issue by number, a repository's issues since the intent, and issue search,
found by a marker the agent puts in the body (`<!-- reconciler:op=OPERATION_ID -->`).

    github.issue        GET /repos/{owner}/{repo}/issues/{number}  authoritative
    github.issues.list  GET /repos/{owner}/{repo}/issues?since=    lagging, 60 s
    github.search       GET /search/issues?q="reconciler:op=..."   lagging, 300 s

The list pages with the `Link` header and reads from the intent's time less five minutes
(`since` filters on `updated_at`, which a new issue has at its creation); its responses carry
`Cache-Control: max-age=60`, so a list may be up to a minute old. Search has its own rate
limit (30 requests a minute, authenticated) and may time out: `incomplete_results: true` is a
cut read, no zero. GitHub does not document search's indexing lag (users report minutes): the
default is five minutes. A 404 is never a zero: GitHub answers it for a repository the token
cannot see too.

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

from probes.recipes.recipe import Recipe
from reconciler.domain import Authority

CITE = "https://docs.github.com/en/rest/search/search"

_REPO = "{correlation[owner]}/{correlation[repo]}"
_MARKER = {"body": "<!-- reconciler:op={operation_id} -->"}
_COMMON: dict[str, Any] = {
    "token_env": "GITHUB_TOKEN", "ref": "number", "contains": _MARKER,
    "headers": {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}}
_LINK = {"style": "link"}

RECIPES: dict[str, Recipe] = {
    "github.issue": Recipe({"path": "/repos/" + _REPO + "/issues/{correlation[issue_number]}",
                            "item": "", **_COMMON, "authority": "authoritative"},
                           Authority.AUTHORITATIVE,
                           "https://docs.github.com/en/rest/issues/issues#get-an-issue"),
    "github.issues.list": Recipe({
        "path": "/repos/" + _REPO + "/issues",
        "params": {"state": "all", "since": "{intent_at:iso-300}", "per_page": "100"},
        "items": "", **_COMMON, "pagination": _LINK, "authority": "lagging"},
        Authority.LAGGING,
        "https://docs.github.com/en/rest/issues/issues#list-repository-issues",
        least_lag_s=60.0),
    "github.search": Recipe({
        "path": "/search/issues",
        "params": {"q": '"reconciler:op={operation_id}" repo:' + _REPO + " in:body",
                   "per_page": "100"},
        "items": "items", **_COMMON, "incomplete": "incomplete_results", "pagination": _LINK,
        "budget": "search", "budget_per_minute": 30, "authority": "lagging"},
        Authority.LAGGING, CITE, least_lag_s=300.0),
}
