"""Jira Cloud's REST API under /jira (the site's root), at both versions its clients use:

    GET  /rest/api/{2,3}/serverInfo          the site, `deploymentType: Cloud` (no login)
    GET  /rest/api/{2,3}/myself              the user the credentials log in as
    GET  /rest/api/{2,3}/field               the fields issues carry
    POST /rest/api/{2,3}/issue               create -> 201 {id, key, self}
    GET  /rest/api/{2,3}/issue/{idOrKey}     one issue (`fields`, `properties` narrow it)
    GET  /rest/api/{2,3}/search/jql          the enhanced JQL search: `nextPageToken`, `isLast`

HTTP Basic with an email and an API token: any address with an `@` and any non-empty token
log in, each address as its own user (its `accountId` derived from it, as `GET /myself`
shows), so a test can have another user create an issue. Anything else is Jira Cloud's 401,
a plain-text "Client must be authenticated to access this resource." (seen from real sites:
github.com/atlassian/gajira-login/issues/59, github.com/jira-node/node-jira-client/issues/255).

No idempotency key: Jira has none. A project is known by its key (`fields.project.key`), and
exists as soon as an issue names it. The search reads the lagging index (`search_lag_s`), as
Jira's does (https://developer.atlassian.com/cloud/jira/platform/search-and-reconcile/), and
understands the JQL of reconciler/sandbox/jql.py. Errors are Jira's
`{"errorMessages": [...], "errors": {...}}`
(https://developer.atlassian.com/cloud/jira/platform/rest/v3/intro/#status-codes).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from reconciler.sandbox import jql
from reconciler.sandbox.faults import Faults, perform_write, requested_faults
from reconciler.sandbox.state import JSONObject, Record
from reconciler.sandbox.wire import ProviderError, State, read_json_body

PROVIDER = "jira"
#: Jira's own issue ids and keys differ; numbering the ids apart catches a read by the wrong one.
_ID_BASE = 10_000
_PROJECT_KEY = re.compile(r"[A-Z][A-Z0-9_]{1,9}")
#: The most issues a search page holds when fields are asked for (Jira: up to 100; 5000 for ids).
_PAGE_MAX = 100
_NOT_FOUND = "Issue does not exist or you do not have permission to see it."
_UNAUTHENTICATED = "Client must be authenticated to access this resource."


def error(status: int, *messages: str, **errors: str) -> JSONResponse:
    """Jira's error body."""
    return JSONResponse({"errorMessages": list(messages), "errors": errors}, status)


async def _reads_available(request: Request, state: State) -> None:
    """The sandbox's read faults, in Jira's shapes: a 503, and a 429 with `Retry-After`
    (https://developer.atlassian.com/cloud/jira/platform/rate-limiting/)."""
    config = state.config
    if request.method != "GET":
        return
    if config.read_unavailable:
        raise ProviderError(503, {"errorMessages": ["Service unavailable"], "errors": {}})
    if config.rate_limited_s > 0:
        raise ProviderError(429, {"errorMessages": ["Rate limit exceeded."], "errors": {}},
                            {"Retry-After": str(math.ceil(config.rate_limited_s))})


router = APIRouter(prefix="/jira", tags=["jira"], dependencies=[Depends(_reads_available)])
_api = APIRouter()


def account_id(email: str) -> str:
    """The accountId a sandbox user logs in as: derived from the email, in Atlassian's
    `<number>:<uuid>` form."""
    return "712020:" + str(uuid.uuid5(uuid.NAMESPACE_URL, "mailto:" + email.lower()))


def _user(request: Request) -> JSONObject | None:
    """The user HTTP Basic logs in as, or None (Jira's 401)."""
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    try:
        email, _, token = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError, binascii.Error):
        return None
    if scheme.lower() != "basic" or "@" not in email or not token:
        return None
    ident = account_id(email)
    return {"self": f"{_root(request)}user?accountId={ident}", "accountId": ident,
            "accountType": "atlassian", "emailAddress": email,
            "displayName": email.partition("@")[0], "active": True, "timeZone": "UTC"}


def _denied() -> Response:
    return PlainTextResponse(_UNAUTHENTICATED, 401,
                             headers={"WWW-Authenticate": 'Basic realm="protected-area"'})


def _root(request: Request) -> str:
    """This version's API root as the client called it (`.../rest/api/3/`)."""
    path = request.url.path
    return str(request.base_url) + path[1:path.index("/rest/api/") + len("/rest/api/") + 2]


def _jira_time(unix_s: float) -> str:
    """Jira's timestamps: `2026-01-01T00:00:00.000+0000`."""
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "+0000"


@_api.get("/serverInfo")
async def server_info(request: Request, state: State) -> JSONObject:
    now = state.clock.now()
    return {"baseUrl": str(request.base_url) + "jira", "version": "1001.0.0-SNAPSHOT",
            "versionNumbers": [1001, 0, 0], "deploymentType": "Cloud", "buildNumber": 100_000,
            "buildDate": _jira_time(0), "serverTime": _jira_time(now),
            "scmInfo": "sandbox", "serverTitle": "Jira"}


#: The system fields the sandbox's issues carry, as `GET /field` lists them (the `jira` package
#: reads the list to map JQL clause names to field ids before a search).
_FIELDS = ("summary", "description", "labels", "project", "issuetype", "creator", "reporter",
           "created", "updated", "status")


@_api.get("/field")
async def list_fields(request: Request) -> Response:
    if _user(request) is None:
        return _denied()
    return JSONResponse([{"id": name, "key": name, "name": name.capitalize(), "custom": False,
                          "orderable": True, "navigable": True, "searchable": True,
                          "clauseNames": [name]} for name in _FIELDS])


@_api.get("/myself")
async def myself(request: Request) -> Response:
    user = _user(request)
    return _denied() if user is None else JSONResponse(user)


def _invalid(fields: Any, properties: Any) -> dict[str, str]:
    """Jira's field errors for a create body (`errors`, by field)."""
    if not isinstance(fields, dict):
        return {"fields": "Field 'fields' is required."}
    problems: dict[str, str] = {}
    project = fields.get("project")
    key = project.get("key") if isinstance(project, dict) else None
    if not (isinstance(key, str) and _PROJECT_KEY.fullmatch(key)):
        problems["project"] = "Specify a valid project ID or key"
    issuetype = fields.get("issuetype")
    if not (isinstance(issuetype, dict) and (issuetype.get("name") or issuetype.get("id"))):
        problems["issuetype"] = "Specify an issue type"
    summary = fields.get("summary")
    if not (isinstance(summary, str) and summary.strip()):
        problems["summary"] = "You must specify a summary of the issue."
    labels = fields.get("labels", [])
    if not (isinstance(labels, list) and all(isinstance(label, str) for label in labels)):
        problems["labels"] = "Field 'labels' must be a list of strings."
    elif any(not label or " " in label or len(label) > 255 for label in labels):
        problems["labels"] = "A label must not be empty, hold a space or pass 255 characters."
    if not (isinstance(properties, list) and all(
            isinstance(p, dict) and isinstance(p.get("key"), str) and "value" in p
            for p in properties)):
        problems["properties"] = "Properties must be a list of {key, value}."
    return problems


@_api.post("/issue", status_code=201)
async def create_issue(request: Request, state: State,
                       faults: Annotated[Faults, Depends(requested_faults)]) -> Response:
    user = _user(request)
    if user is None:
        return _denied()
    body = await read_json_body(request)
    if body is None:
        return error(400, "The request body is not a JSON object.")
    fields, properties = body.data.get("fields"), body.data.get("properties", [])
    problems = _invalid(fields, properties)
    if problems:
        return error(400, **problems)
    assert isinstance(fields, dict) and isinstance(properties, list)
    project = fields["project"]["key"]
    issuetype = fields["issuetype"]

    def build(seq: int, now: float) -> tuple[str, JSONObject]:
        # Keys are numbered across the sandbox rather than per project: still unique.
        key, stamp = f"{project}-{seq}", _jira_time(now)
        return key, {
            "id": str(_ID_BASE + seq), "key": key,
            "fields": {**fields, "labels": list(fields.get("labels", [])),
                       # Projects exist by key here; the id only has to stay the same.
                       "project": {"id": str(_ID_BASE + sum(map(ord, project))), "key": project,
                                   "name": project},
                       "issuetype": {"id": str(issuetype.get("id", "10001")),
                                     "name": issuetype.get("name", "Task"), "subtask": False},
                       "creator": user, "reporter": user, "created": stamp, "updated": stamp,
                       "status": {"name": "To Do", "statusCategory": {"key": "new"}}},
            "properties": {p["key"]: p["value"] for p in properties}}

    def commit(copies: int) -> JSONResponse:
        made = state.commit(PROVIDER, body.request_hash, build, copies=copies, scope=project)
        return JSONResponse({"id": made.data["id"], "key": made.ref,
                             "self": f"{_root(request)}issue/{made.data['id']}"}, 201)

    return await perform_write(state, faults, commit, lambda status, message: error(
        status, message))


def _listed(request: Request, name: str) -> list[str] | None:
    """A comma-separated list parameter, given once or repeated (clients do both)."""
    given = request.query_params.getlist(name)
    return [v.strip() for value in given for v in value.split(",") if v.strip()] \
        if given else None


def _shown(request: Request, issue: JSONObject, default_fields: list[str]) -> JSONObject:
    """The issue as Jira shows it: only the `fields` asked for (`*all`, `*navigable` or
    names; `-name` leaves one out), and the entity `properties` asked for."""
    wanted = _listed(request, "fields") or default_fields
    every = bool({"*all", "*navigable"} & set(wanted))
    fields = {name: value for name, value in issue["fields"].items()
              if (every or name in wanted) and f"-{name}" not in wanted}
    shown: JSONObject = {
        "expand": "renderedFields,names,schema,operations,editmeta,changelog",
        "id": issue["id"], "self": f"{_root(request)}issue/{issue['id']}", "key": issue["key"],
        "fields": fields}
    keys = _listed(request, "properties")
    if keys is not None:
        stored = issue["properties"]
        shown["properties"] = {k: v for k, v in stored.items() if "*all" in keys or k in keys}
    return shown


def _find(state: State, id_or_key: str) -> Record | None:
    record = state.get(PROVIDER, id_or_key)
    if record is None and id_or_key.isdigit():
        record = next((r for r in state.listing(PROVIDER) if r.data["id"] == id_or_key), None)
    return record


@_api.get("/issue/{id_or_key}")
async def get_issue(request: Request, state: State, id_or_key: str) -> Response:
    if _user(request) is None:
        return _denied()
    record = _find(state, id_or_key)
    if record is None:
        return error(404, _NOT_FOUND)
    return JSONResponse(_shown(request, record.data, ["*all"]))


def _token(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode()


def _offset(token: str | None) -> int | None:
    if not token:
        return 0
    try:
        kind, _, number = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
    except (ValueError, UnicodeDecodeError, binascii.Error):
        return None
    return int(number) if kind == "offset" and number.isdigit() else None


@_api.get("/search/jql")
async def search(request: Request, state: State) -> Response:
    if _user(request) is None:
        return _denied()
    params = request.query_params
    try:
        query = jql.parse(params.get("jql", ""))
    except jql.JqlError as exc:
        return error(400, str(exc))
    offset, asked = _offset(params.get("nextPageToken")), params.get("maxResults", "50")
    if offset is None:
        return error(400, "The nextPageToken is not valid.")
    if not asked.isdigit():
        return error(400, f"The value '{asked}' is invalid for the 'maxResults' parameter.")
    found = sorted((r for r in state.search(PROVIDER) if query.matches(r.data)),
                   key=lambda r: r.seq, reverse=query.descending)
    # Jira may return fewer than asked; 0 asks for its default.
    size = min(int(asked) or 50, _PAGE_MAX)
    page = found[offset:offset + size]
    last = offset + size >= len(found)
    answer: JSONObject = {"issues": [_shown(request, r.data, ["id"]) for r in page],
                          "isLast": last}
    if not last:
        answer["nextPageToken"] = _token(offset + size)
    return JSONResponse(answer)


# Jira Cloud serves both: the `jira` package defaults to version 2, Atlassian's docs to 3.
router.include_router(_api, prefix="/rest/api/3")
router.include_router(_api, prefix="/rest/api/2")


@router.api_route("/rest/{rest:path}", methods=["GET", "POST", "PUT", "DELETE"],
                  include_in_schema=False)
async def unknown_resource(request: Request, rest: str) -> JSONResponse:
    """What Jira's REST layer answers for a resource it does not have (seen from real sites:
    github.com/solidify/jira-azuredevops-migrator/issues/13,
    github.com/qoomon/Jira-Issue-Card-Printer/issues/48)."""
    return JSONResponse({"message": f"null for uri: {request.url}", "status-code": 404}, 404)
