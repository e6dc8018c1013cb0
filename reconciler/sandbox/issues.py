"""Issues, GitHub's REST wire format, under /gh: no idempotency at all; found by a marker in the
body. Lists page with the `Link` header and filter by `since`; search answers
`incomplete_results` (always false here: the sandbox never times out a search).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from reconciler.sandbox.faults import Faults, perform_write, requested_faults
from reconciler.sandbox.state import JSONObject
from reconciler.sandbox.wire import State, read_json_body, reads_available

PROVIDER = "gh"

# GitHub's issue id and number differ; keeping them apart here catches a probe that looks an
# issue up by the wrong one.
_ID_BASE = 100_000_000

router = APIRouter(prefix="/gh", tags=["issues"], dependencies=[Depends(reads_available)])


#: The token's user, as GitHub shows a `simple-user`.
_USER = {
    "login": "sandbox-bot", "id": 1, "node_id": "U_sandbox", "type": "Bot", "site_admin": False,
    "avatar_url": "", "gravatar_id": "", "url": "", "html_url": "", "followers_url": "",
    "following_url": "", "gists_url": "", "starred_url": "", "subscriptions_url": "",
    "organizations_url": "", "repos_url": "", "events_url": "", "received_events_url": ""}


def _author(request: Request) -> JSONObject:
    """Who opens the issue: the token's user, or (`X-Sandbox-User: LOGIN`) another user of the
    repository, as anyone who can open an issue there could write the marker too."""
    login = request.headers.get("x-sandbox-user")
    return {**_USER, "login": login, "id": 2, "node_id": f"U_{login}", "type": "User"} \
        if login else _USER


def _github_time(unix_s: float) -> str:
    """GitHub's timestamps: ISO 8601 in UTC, to the second."""
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ref(owner: str, repo: str, number: int) -> str:
    return f"{owner}/{repo}#{number}"


def _parse_search(q: str) -> tuple[str, str | None]:
    """`<text> repo:<owner>/<repo> [in:body]` -> (text, repo). Only `repo:` and `in:` are
    qualifiers, because the marker itself (`reconciler:op=...`) looks like one; the text may be
    double-quoted."""
    words = q.split()
    repos = [w.removeprefix("repo:") for w in words if w.startswith("repo:")]
    text = " ".join(w for w in words if not w.startswith(("repo:", "in:")))
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    return text, repos[-1] if repos else None


@router.post("/repos/{owner}/{repo}/issues", status_code=201)
async def create_issue(
    request: Request,
    state: State,
    faults: Annotated[Faults, Depends(requested_faults)],
    owner: str,
    repo: str,
) -> JSONResponse:
    body = await read_json_body(request)
    if body is None:
        return JSONResponse({"message": "Problems parsing JSON"}, 400)
    title, text = body.data.get("title"), body.data.get("body", "")
    if not isinstance(title, str) or not title or not isinstance(text, str):
        return JSONResponse({"message": "Validation Failed"}, 422)
    base_url = str(request.base_url)
    user = _author(request)

    def build(seq: int, now: float) -> tuple[str, JSONObject]:
        # Numbers are unique across the sandbox rather than per repo: simpler, and still unique
        # within each repo, which is all a probe relies on.
        api = f"{base_url}gh/repos/{owner}/{repo}/issues/{seq}"
        stamp = _github_time(now)
        return _ref(owner, repo, seq), {
            "id": _ID_BASE + seq, "node_id": f"I_sandbox{seq}", "url": api,
            "repository_url": f"{base_url}gh/repos/{owner}/{repo}",
            "labels_url": api + "/labels{/name}", "comments_url": api + "/comments",
            "events_url": api + "/events", "html_url": f"{base_url}{owner}/{repo}/issues/{seq}",
            "number": seq, "state": "open", "title": title, "body": text,
            "user": user, "labels": [], "assignee": None, "assignees": [], "milestone": None,
            "locked": False, "comments": 0, "closed_at": None, "created_at": stamp,
            "updated_at": stamp, "author_association": "OWNER",
        }

    def commit(copies: int) -> JSONResponse:
        issue = state.commit(
            PROVIDER, body.request_hash, build, copies=copies, scope=f"{owner}/{repo}"
        )
        return JSONResponse(issue.data, 201)

    return await perform_write(state, faults, commit,
                               lambda status, message: JSONResponse({"message": message}, status))


@router.get("/repos/{owner}/{repo}/issues/{number}")
async def get_issue(state: State, owner: str, repo: str, number: int) -> JSONResponse:
    record = state.get(PROVIDER, _ref(owner, repo, number))
    if record is None:
        return JSONResponse({"message": "Not Found"}, 404)
    return JSONResponse(record.data)


@router.get("/search/issues")
async def search_issues(state: State, q: str) -> JSONResponse:
    text, repo = _parse_search(q)
    items = [
        r.data
        for r in state.search(PROVIDER)
        if (repo is None or r.scope == repo) and text in r.data["body"]
    ]
    return JSONResponse({"total_count": len(items), "incomplete_results": False, "items": items})


# `state=` is accepted and ignored, since sandbox issues are never closed.
@router.get("/repos/{owner}/{repo}/issues")
async def list_issues(
    request: Request,
    state: State,
    owner: str,
    repo: str,
    per_page: Annotated[int, Query(ge=1, le=100)] = 30,
    page: Annotated[int, Query(ge=1)] = 1,
    since: str | None = None,
) -> JSONResponse:
    scope = f"{owner}/{repo}"
    try:
        after = None if since is None else datetime.fromisoformat(since).timestamp()
    except ValueError:
        return JSONResponse({"message": "Invalid value for since"}, 422)
    found = [r.data for r in state.listing(PROVIDER) if r.scope == scope
             and (after is None or r.created_at >= after)]
    start = (page - 1) * per_page
    headers = {}
    if start + per_page < len(found):
        nxt = request.url.include_query_params(page=page + 1)
        headers["Link"] = f'<{nxt}>; rel="next"'
    return JSONResponse(found[start : start + per_page], headers=headers)
