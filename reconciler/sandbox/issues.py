"""Issues, GitHub's REST wire format, under /gh: no idempotency at all; found by a marker in the
body. Lists page with the `Link` header and filter by `since`; search answers
`incomplete_results` (true, with part of the matches, under the `incomplete_results` fault).
Every repository exists (`GET /repos/{owner}/{repo}`, as PyGithub's `get_repo` reads it), public
and owned by its owner.
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from reconciler.sandbox.credentials import github_token
from reconciler.sandbox.faults import Faults, perform_write, read_faults, requested_faults
from reconciler.sandbox.shapes import GITHUB_DOCS, github_error
from reconciler.sandbox.state import JSONObject
from reconciler.sandbox.wire import State, read_json_body, reads_available

PROVIDER = "gh"

# GitHub's issue id and number differ; keeping them apart here catches a probe that looks an
# issue up by the wrong one.
_ID_BASE = 100_000_000

router = APIRouter(prefix="/gh", tags=["issues"],
                   dependencies=[Depends(github_token), Depends(reads_available)])


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


_CREATE_DOCS = GITHUB_DOCS + "/issues/issues#create-an-issue"

#: The `*_url` templates of a repository, as GitHub shows them (a FullRepository in githubkit's
#: schema needs each; https://docs.github.com/rest/repos/repos#get-a-repository).
_REPO_URLS = {
    "archive": "/{archive_format}{/ref}", "assignees": "/assignees{/user}",
    "blobs": "/git/blobs{/sha}", "branches": "/branches{/branch}",
    "collaborators": "/collaborators{/collaborator}", "comments": "/comments{/number}",
    "commits": "/commits{/sha}", "compare": "/compare/{base}...{head}",
    "contents": "/contents/{+path}", "contributors": "/contributors",
    "deployments": "/deployments", "downloads": "/downloads", "events": "/events",
    "forks": "/forks", "git_commits": "/git/commits{/sha}", "git_refs": "/git/refs{/sha}",
    "git_tags": "/git/tags{/sha}", "hooks": "/hooks", "issue_comment": "/issues/comments{/number}",
    "issue_events": "/issues/events{/number}", "issues": "/issues{/number}",
    "keys": "/keys{/key_id}", "labels": "/labels{/name}", "languages": "/languages",
    "merges": "/merges", "milestones": "/milestones{/number}",
    "notifications": "/notifications{?since,all,participating}", "pulls": "/pulls{/number}",
    "releases": "/releases{/id}", "stargazers": "/stargazers", "statuses": "/statuses/{sha}",
    "subscribers": "/subscribers", "subscription": "/subscription", "tags": "/tags",
    "teams": "/teams", "trees": "/git/trees{/sha}"}


@router.get("/repos/{owner}/{repo}")
async def get_repository(request: Request, state: State, owner: str, repo: str) -> JSONObject:
    """Any repository, as GitHub shows a public one its token can push to."""
    api, html = f"{request.base_url}gh/repos/{owner}/{repo}", f"{request.base_url}{owner}/{repo}"
    stamp = _github_time(0)
    open_issues = sum(1 for r in state.listing(PROVIDER) if r.scope == f"{owner}/{repo}")
    return {
        "id": zlib.crc32(f"{owner}/{repo}".encode()) % _ID_BASE,
        "node_id": f"R_{owner}_{repo}", "name": repo,
        "full_name": f"{owner}/{repo}", "owner": {**_USER, "login": owner, "type": "User"},
        "private": False, "visibility": "public", "html_url": html, "description": None,
        "fork": False, "url": api, **{f"{name}_url": api + tail for name, tail in
                                     _REPO_URLS.items()},
        "git_url": f"git:{html.partition(':')[2]}.git", "ssh_url": f"git@sandbox:{owner}/{repo}",
        "clone_url": html + ".git", "svn_url": html, "mirror_url": None, "homepage": None,
        "language": None, "forks_count": 0, "forks": 0, "stargazers_count": 0,
        "watchers_count": 0, "watchers": 0, "subscribers_count": 0, "network_count": 0,
        "size": 0, "default_branch": "main", "open_issues_count": open_issues,
        "open_issues": open_issues, "has_issues": True, "has_projects": False,
        "has_wiki": False, "has_pages": False, "has_discussions": False, "has_downloads": False,
        "archived": False, "disabled": False, "license": None, "topics": [],
        "pushed_at": stamp, "created_at": stamp, "updated_at": stamp,
        "permissions": {"admin": False, "maintain": False, "push": True, "triage": True,
                        "pull": True}}


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
        raise github_error(400, "Problems parsing JSON", _CREATE_DOCS)
    title, text = body.data.get("title"), body.data.get("body", "")
    if not isinstance(title, str) or not title:
        raise github_error(422, "Invalid request.\n\n\"title\" wasn't supplied.", _CREATE_DOCS)
    if not isinstance(text, str):
        raise github_error(422, "Validation Failed", _CREATE_DOCS, errors=[
            {"resource": "Issue", "code": "invalid", "field": "body"}])
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
                               lambda status, message: github_error(status, message).response())


@router.get("/repos/{owner}/{repo}/issues/{number}")
async def get_issue(state: State, owner: str, repo: str, number: int) -> JSONResponse:
    record = state.get(PROVIDER, _ref(owner, repo, number))
    if record is None:
        raise github_error(404, "Not Found", GITHUB_DOCS + "/issues/issues#get-an-issue")
    return JSONResponse(record.data)


@router.get("/search/issues")
async def search_issues(state: State, q: str,
                        faults: Annotated[Faults, Depends(read_faults)]) -> JSONResponse:
    """Matches with the `score` and `search_type` GitHub's search answers carry
    (https://docs.github.com/rest/search/search#search-issues-and-pull-requests); a timed-out
    search (the `incomplete_results` fault) shows only the older half of its matches."""
    text, repo = _parse_search(q)
    items = [
        {**r.data, "score": 1.0}
        for r in state.search(PROVIDER)
        if (repo is None or r.scope == repo) and text in r.data["body"]
    ]
    if faults.incomplete_results:
        items = items[len(items) - len(items) // 2:]
    return JSONResponse({"total_count": len(items), "incomplete_results":
                         faults.incomplete_results, "search_type": "lexical", "items": items})


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
        raise github_error(422, "Validation Failed", GITHUB_DOCS + "/issues/issues", errors=[
            {"resource": "Issue", "field": "since", "code": "invalid"}]) from None
    found = [r.data for r in state.listing(PROVIDER) if r.scope == scope
             and (after is None or r.created_at >= after)]
    start = (page - 1) * per_page
    headers = {}
    if start + per_page < len(found):
        nxt = request.url.include_query_params(page=page + 1)
        headers["Link"] = f'<{nxt}>; rel="next"'
    return JSONResponse(found[start : start + per_page], headers=headers)
