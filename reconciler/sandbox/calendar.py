"""Calendar events, Google Calendar API v3's wire format, at the paths the real API uses:

    POST /calendar/v3/calendars/{calendarId}/events            events.insert (Event body) -> 200
    GET  /calendar/v3/calendars/{calendarId}/events/{eventId}  events.get
    GET  /calendar/v3/calendars/{calendarId}/events            events.list: privateExtendedProperty,
                                                                sharedExtendedProperty (each
                                                                `name=value`, repeatable, all must
                                                                hold), showDeleted, maxResults,
                                                                pageToken
    GET  /calendar/v3/calendars/{calendarId}                   calendars.get

so `googleapiclient.discovery.build("calendar", "v3", client_options={"api_endpoint":
SANDBOX + "/calendar/v3/"})` drives it unchanged. Every route wants `Authorization: Bearer
<token>` (any token: the sandbox has no accounts); without one the answer is Google's 401.
`primary` is the token's user's own calendar (`sandbox-bot@example.com`); any other id with an
`@` exists (a secondary calendar's id is `...@group.calendar.google.com`), and one without is a
404, as an unknown calendar is at Google.

The client may choose the event id (base32hex: `a-v`, `0-9`, 5 to 1024 characters); a second
insert with an id the calendar holds is Google's 409 `duplicate`. The check and the store run
with no await between them, on the server's one event loop, so two inserts cannot both pass it.
With the `duplicate` fault, an event whose id the client chose is still stored once (Google
keeps one event per id); one with a server-chosen id is stored twice. The list is the lagging
read (`search_lag_s`), the get by id never lags. The sandbox's faults apply as for every
provider (a `rate_limit` one answers Google's 429).

Errors are Google's: `{"error": {"code", "message", "errors": [{"domain", "reason",
"message"}], "status"}}` (https://developers.google.com/workspace/calendar/api/guides/errors);
unknown paths under /calendar/v3 too. Google Calendar's push notifications carry a channel
token, not a signature, so there is no webhook route (docs/providers/google-calendar.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse

from reconciler.sandbox.faults import Faults, perform_write, read_faults, requested_faults
from reconciler.sandbox.state import JSONObject, Record
from reconciler.sandbox.wire import ProviderError, State, read_json_body

PROVIDER = "calendar"
USER = "sandbox-bot@example.com"

#: https://developers.google.com/workspace/calendar/api/v3/reference/events#id
_EVENT_ID = re.compile(r"[a-v0-9]{5,1024}")
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
           404: "NOT_FOUND", 409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED",
           500: "INTERNAL", 502: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
_MAX_RESULTS = 2500
_DEFAULT_RESULTS = 250


def google_error(status: int, message: str, reason: str = "backendError",
                 domain: str = "global", **location: str) -> JSONObject:
    """Google's error body; `location` adds `location` and `locationType` to the error item."""
    item = {"domain": domain, "reason": reason, "message": message, **location}
    return {"error": {"code": status, "message": message, "errors": [item],
                      "status": _STATUS.get(status, "UNKNOWN")}}


def _error(status: int, message: str, reason: str = "backendError", **location: str
           ) -> JSONResponse:
    return JSONResponse(google_error(status, message, reason, **location), status)


_NOT_FOUND = google_error(404, "Not Found", "notFound")


async def _authorized(request: Request) -> None:
    """Google's 401 for a request without an OAuth bearer token (the errors guide's shapes)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if not scheme:
        raise ProviderError(401, google_error(
            401, "Request is missing required authentication credential. Expected OAuth 2 "
            "access token, login cookie or other valid authentication credential.",
            "required", location="Authorization", locationType="header"),
            {"WWW-Authenticate": 'Bearer realm="https://accounts.google.com/"'})
    if scheme.lower() != "bearer" or not token.strip():
        raise ProviderError(401, google_error(
            401, "Invalid Credentials", "authError", location="Authorization",
            locationType="header"),
            {"WWW-Authenticate": 'Bearer realm="https://accounts.google.com/", '
                                 'error="invalid_token"'})


def _rate_limited(wait_s: float) -> ProviderError:
    """Google's 429 `rateLimitExceeded` (the errors guide), asking for `wait_s`."""
    return ProviderError(429, google_error(429, "Rate Limit Exceeded", "rateLimitExceeded",
                                           domain="usageLimits"),
                         {"Retry-After": str(max(1, math.ceil(wait_s)))})


async def _readable(request: Request, state: State) -> None:
    """The sandbox's read-side config in Google's shapes: the read API down is a 503
    `backendError`, a spent rate limit Google's 429."""
    if request.method != "GET":
        return
    config = state.config
    if config.read_unavailable:
        raise ProviderError(503, google_error(503, "Backend Error"))
    if config.rate_limited_s > 0:
        raise _rate_limited(config.rate_limited_s)


FaultsOf = Callable[[Request, str | None], Awaitable[Faults]]


async def _google_shaped(faults_of: FaultsOf, request: Request, header: str | None) -> Faults:
    """The sandbox's faults for this request; its `rate_limit` fault in Google's 429."""
    try:
        return await faults_of(request, header)
    except ProviderError as exc:
        if exc.status_code != 429:
            raise
        raise _rate_limited(float(exc.headers.get("Retry-After", "1"))) from exc


async def _write_faults(request: Request,
                        x_sandbox_fault: Annotated[str | None, Header()] = None) -> Faults:
    return await _google_shaped(requested_faults, request, x_sandbox_fault)


async def _read_faults(request: Request,
                       x_sandbox_fault: Annotated[str | None, Header()] = None) -> Faults:
    return await _google_shaped(read_faults, request, x_sandbox_fault)


# A read's own faults (a delay, a short page; `X-Sandbox-Fault` or armed) as for every
# provider; FastAPI runs a dependency once per request, so list_events sees the same ones.
ReadFaults = Annotated[Faults, Depends(_read_faults)]
router = APIRouter(prefix="/calendar/v3", tags=["calendar"],
                   dependencies=[Depends(_authorized), Depends(_read_faults), Depends(_readable)])


def _calendar(calendar_id: str) -> str:
    """The calendar's own id (`primary` is the user's); an id that names none is a 404."""
    if calendar_id == "primary":
        return USER
    if "@" not in calendar_id:
        raise ProviderError(404, _NOT_FOUND)
    return calendar_id


def _rfc3339(unix_s: float) -> str:
    """Google's timestamps: RFC 3339 in UTC, to the millisecond."""
    stamp = datetime.fromtimestamp(unix_s, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def _ref(calendar: str, event_id: str) -> str:
    return f"{calendar}/{event_id}"


def _invalid(message: str, reason: str = "invalid") -> ProviderError:
    return ProviderError(400, google_error(400, message, reason))


def _event_body(data: JSONObject) -> str | None:
    """The client's event id (None: the server chooses); a bad event is Google's 400."""
    event_id = data.get("id")
    if event_id is not None and (not isinstance(event_id, str)
                                 or not _EVENT_ID.fullmatch(event_id)):
        raise _invalid("Invalid resource id value.")
    for edge in ("start", "end"):
        when = data.get(edge)
        if not isinstance(when, dict) or not (when.get("dateTime") or when.get("date")):
            raise _invalid(f"Missing {edge} time.", "required")
    extended = data.get("extendedProperties", {})
    if not isinstance(extended, dict) or not all(
            isinstance(props, dict) and all(isinstance(v, str) for v in props.values())
            for props in extended.values()):
        raise _invalid("Invalid extended properties.")
    return event_id


@router.post("/calendars/{calendar_id}/events")
async def insert_event(request: Request, state: State, calendar_id: str,
                       faults: Annotated[Faults, Depends(_write_faults)]) -> JSONResponse:
    calendar = _calendar(calendar_id)
    body = await read_json_body(request)
    if body is None:
        return _error(400, "Parse Error", "parseError")
    chosen = _event_body(body.data)

    def build(seq: int, now: float) -> tuple[str, JSONObject]:
        # A server-chosen id: 26 base32hex characters, as Google's are.
        event_id = chosen or f"{seq:026x}"
        stamp = _rfc3339(now)
        return _ref(calendar, event_id), {
            **body.data, "kind": "calendar#event", "etag": f'"{seq}{int(now * 1000)}"',
            "id": event_id, "status": body.data.get("status", "confirmed"),
            "htmlLink": f"https://www.google.com/calendar/event?eid={event_id}",
            "created": stamp, "updated": stamp,
            "creator": {"email": USER, "self": True},
            "organizer": {"email": calendar, "self": True},
            "iCalUID": f"{event_id}@google.com", "sequence": 0,
            "reminders": body.data.get("reminders", {"useDefault": True}),
            "eventType": body.data.get("eventType", "default")}

    def commit(copies: int) -> JSONResponse:
        if chosen is not None and state.get(PROVIDER, _ref(calendar, chosen)) is not None:
            return _error(409, "The requested identifier already exists.", "duplicate")
        event = state.commit(PROVIDER, body.request_hash, build, copies=copies, scope=calendar)
        return JSONResponse(event.data)

    return await perform_write(state, faults, commit, _error)


@router.get("/calendars/{calendar_id}/events/{event_id}")
async def get_event(state: State, calendar_id: str, event_id: str) -> JSONResponse:
    record = state.get(PROVIDER, _ref(_calendar(calendar_id), event_id))
    if record is None:
        return JSONResponse(_NOT_FOUND, 404)
    return JSONResponse(record.data)


def _property_filters(request: Request, name: str, kind: str) -> list[tuple[str, str, str]]:
    """`privateExtendedProperty=propertyName=value` as (kind, name, value); it may repeat."""
    pairs = []
    for given in request.query_params.getlist(name):
        key, equals, value = given.partition("=")
        if not equals or not key:
            raise _invalid(f"Invalid {name} value: expected propertyName=value.")
        pairs.append((kind, key, value))
    return pairs


def _has(event: JSONObject, kind: str, key: str, value: str) -> bool:
    props: Any = event.get("extendedProperties", {}).get(kind)
    return isinstance(props, dict) and props.get(key) == value


def _count(text: str | None, name: str, default: int, least: int) -> int:
    if text is None:
        return default
    if not text.isdigit() or len(text) > 9 or int(text) < least:
        raise _invalid(f"Invalid value for {name}: {text[:40]}")
    return int(text)


@router.get("/calendars/{calendar_id}/events")
async def list_events(request: Request, state: State, calendar_id: str,
                      faults: ReadFaults) -> JSONResponse:
    calendar = _calendar(calendar_id)
    query = request.query_params
    filters = (_property_filters(request, "privateExtendedProperty", "private")
               + _property_filters(request, "sharedExtendedProperty", "shared"))
    show_deleted = query.get("showDeleted", "false") == "true"
    # "The page size can never be larger than 2500 events" (the discovery document).
    per_page = min(_count(query.get("maxResults"), "maxResults", _DEFAULT_RESULTS, 1),
                   _MAX_RESULTS)
    # Page tokens are opaque to clients; here, `p` and the offset of the page.
    token = query.get("pageToken")
    if token and not token.startswith("p"):
        raise _invalid("Invalid page token.")
    start = _count(token[1:], "pageToken", 0, 0) if token else 0
    found = [r.data for r in reversed(state.search(PROVIDER))
             if _listed(r, calendar, filters, show_deleted)]
    # "The number of events in the resulting page may be less than this value, or none at
    # all, even if there are more events matching the query" (events.list, maxResults): the
    # short_page fault answers none, and a token for the rest.
    end = start if faults.short_page else start + per_page
    answer: JSONObject = {
        "kind": "calendar#events", "etag": f'"{len(found)}"', "summary": calendar,
        "updated": _rfc3339(state.clock.now()), "timeZone": "UTC", "accessRole": "owner",
        "defaultReminders": [], "items": found[start:end]}
    if end < len(found) or faults.short_page:
        answer["nextPageToken"] = f"p{end}"
    return JSONResponse(answer)


def _listed(record: Record, calendar: str, filters: list[tuple[str, str, str]],
            show_deleted: bool) -> bool:
    return (record.scope == calendar
            and (show_deleted or record.data.get("status") != "cancelled")
            and all(_has(record.data, *check) for check in filters))


@router.get("/calendars/{calendar_id}")
async def get_calendar(calendar_id: str) -> JSONResponse:
    calendar = _calendar(calendar_id)
    return JSONResponse({"kind": "calendar#calendar", "etag": '"0"', "id": calendar,
                         "summary": calendar, "timeZone": "UTC",
                         "conferenceProperties": {"allowedConferenceSolutionTypes": []}})


@router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                  include_in_schema=False)
async def unknown_route(rest: str) -> JSONResponse:
    """Google answers a path it does not serve with its own 404, never FastAPI's `detail`."""
    return JSONResponse(_NOT_FOUND, 404)
