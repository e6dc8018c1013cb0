"""Google Calendar API v3: a booking's event, read back by the id the client chose, and listed by
the private extended property the agent attached.

    google_calendar.event        GET /calendar/v3/calendars/{calendar}/events/{idempotency_key}
                                 authoritative
    google_calendar.events.list  GET /calendar/v3/calendars/{calendar}/events
                                     ?privateExtendedProperty=operation_id=...   lagging, 300 s

The worker chooses the event's `id` before it sends `events.insert` and records it as the
intent's idempotency key: Google lets the client set it (base32hex, `a-v` and `0-9`, 5 to 1024
characters, unique per calendar) and answers a second insert with an id the calendar holds
`409 duplicate` ("The requested identifier already exists"), so the key is both what the
request carried and what the event is read back by. Google also says "we cannot guarantee
that ID collisions will be detected at event creation time": a repeated insert is not surely
refused, so docs/probes.md has the contract say `idempotency_keys = false` (no blind same-key
retry) while the id still finds the event.

The agent attaches `extendedProperties.private = {operation_id, request_hash}` (private
properties are "specific to the calendarId and eventId used in the request"): both recipes keep
only the events that carry this operation's id, and read the hash there. A `confirmed` or
`tentative` event is the effect; a `cancelled` one (deleted: `events.get` still returns it, and
the list does with `showDeleted=true`) decides nothing, since it was booked and then removed.

A 404 on the read by id is a zero only after a confirm read (`calendars.get` of the same
calendar answers a `calendar#calendar`): Google answers 404 `notFound` for a calendar the token
cannot see as well.

`calendar` (recipe option, default `primary`) names the calendar: a fixed part of the path,
not a correlation, since a read by id that also needed a returned reference would find effects
by nothing (probes/sight.py).

Lag and settle time: Google documents no consistency for `events.get` by id (it is the
event's key, read as authoritative, as the issue asks) and no visibility lag for `events.list`
filtered by an extended property; 300 s is the cautious default, the same as for GitHub's
undocumented search lag. Nor does Google document how long an insert may still be applied after
the caller gave up: the official Python client waits 60 s (`DEFAULT_HTTP_TIMEOUT_SEC` in
googleapiclient/http.py), which is the `ProviderContract` default `inflight_s`; keep at least
that.

Sources: https://developers.google.com/workspace/calendar/api/v3/reference/events#id (ids),
https://developers.google.com/workspace/calendar/api/v3/reference/events/insert,
https://developers.google.com/workspace/calendar/api/guides/errors (401, 404 notFound,
409 duplicate, 429 rateLimitExceeded),
https://developers.google.com/workspace/calendar/api/guides/extended-properties (private
properties, the `privateExtendedProperty=propertyName=value` filter),
https://developers.google.com/workspace/calendar/api/v3/reference/events/list (pageToken,
nextPageToken, showDeleted, maxResults up to 2500), and the Calendar v3 discovery document
shipped with google-api-python-client.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from probes.errors import ProbeConfigError
from probes.recipes.recipe import Recipe
from reconciler.core.domain import Authority

CITE = "https://developers.google.com/workspace/calendar/api/guides/extended-properties"

_COMMON: dict[str, Any] = {
    "token_env": "GOOGLE_CALENDAR_TOKEN", "ref": "id",
    "hash": "extendedProperties.private.request_hash",
    "where": {"extendedProperties.private.operation_id": "{operation_id}"},
    "status": "status", "effect_status": ["confirmed", "tentative"]}


def _calendar_path(options: dict[str, Any], where: str) -> str:
    """`/calendar/v3/calendars/{calendar}`, the calendar percent-encoded as a literal part of
    the path (its id is often an address: `...@group.calendar.google.com`)."""
    calendar = options.pop("calendar", "primary")
    if not isinstance(calendar, str) or not calendar.strip():
        raise ProbeConfigError(f"{where}: 'calendar' must be a calendar id ('primary', or an "
                               "address such as 'team@group.calendar.google.com')")
    # Braces would read as template fields; quote() encodes them along with the rest.
    return "/calendar/v3/calendars/" + quote(calendar, safe="@")


def _by_id(options: dict[str, Any], where: str) -> dict[str, Any]:
    calendar = _calendar_path(options, where)
    return {"path": calendar + "/events/{idempotency_key}",
            "confirm": [{"path": calendar, "where": {"kind": "calendar#calendar"}}], **options}


def _listed(options: dict[str, Any], where: str) -> dict[str, Any]:
    return {"path": _calendar_path(options, where) + "/events", **options}


RECIPES: dict[str, Recipe] = {
    "google_calendar.event": Recipe({
        **_COMMON, "item": "", "not_found": "zero", "not_found_where": {"error.code": 404},
        "authority": "authoritative"},
        Authority.AUTHORITATIVE,
        "https://developers.google.com/workspace/calendar/api/v3/reference/events/get",
        adapt=_by_id),
    "google_calendar.events.list": Recipe({
        **_COMMON, "items": "items",
        "params": {"privateExtendedProperty": "operation_id={operation_id}",
                   "showDeleted": "true", "maxResults": "250"},
        "pagination": {"style": "cursor", "next": "nextPageToken", "param": "pageToken"},
        "authority": "lagging"},
        Authority.LAGGING, CITE, least_lag_s=300.0, adapt=_listed),
}
