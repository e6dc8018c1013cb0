"""Google's official `google-api-python-client` against the sandbox's Calendar API v3, unchanged
but for the endpoint (`client_options={"api_endpoint": ...}`, static discovery): it books an event
with an id it chose, reads it back, lists it by private extended property, and sees Google's
errors (401, 404, 409 duplicate); the recipes (probes/recipes/google_calendar.py) find a booking
whose answer the sandbox lost, bound to the request by the hash in its extended properties.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import google.oauth2.credentials

# Google's client libraries ship no type information.
import google_auth_httplib2  # type: ignore[import-untyped]
import httplib2  # type: ignore[import-untyped]
import pytest
from googleapiclient.discovery import build  # type: ignore[import-untyped]
from googleapiclient.errors import HttpError  # type: ignore[import-untyped]

from probes.base import ProbeTarget
from probes.errors import ProbeConfigError
from probes.recipes import recipe_factory
from probes.sight import finds_by, needs
from reconciler.core.domain import Authority, Carried, Match, Observation
from reconciler.core.hashing import request_hash
from reconciler.sandbox import RunningSandbox
from reconciler.testing import ManualClock

HOLD_S = 2.0
SDK_TIMEOUT_S = 0.5
OP = "op-booking-1"
TOKEN = "ya29.sandbox-token"
NOW = datetime.now(UTC)
ENV = {"GOOGLE_CALENDAR_TOKEN": TOKEN}
TEAM = "team@group.calendar.google.com"


@pytest.fixture(autouse=True)
def fresh(sandbox: RunningSandbox, sandbox_clock: ManualClock) -> None:
    """The kit's sandbox, reset on a manual clock; a lost answer is held past the SDK's
    timeout."""
    sandbox.state.configure(hold_s=HOLD_S)


def calendar(sandbox: RunningSandbox, *, timeout_s: float | None = None,
             signed_in: bool = True) -> Any:
    """The official client, as Google's quickstart builds it but for the endpoint."""
    options = {"api_endpoint": sandbox.url + "/calendar/v3/"}
    if not signed_in:  # an API key alone: no OAuth bearer token on the request
        return build("calendar", "v3", static_discovery=True, client_options=options,
                     developerKey="sandbox-api-key")
    token = google.oauth2.credentials.Credentials(token=TOKEN)  # type: ignore[no-untyped-call]
    http = google_auth_httplib2.AuthorizedHttp(token, http=httplib2.Http(timeout=timeout_s))
    return build("calendar", "v3", static_discovery=True, client_options=options, http=http)


def event_id() -> str:
    """A client-chosen id in Google's alphabet (base32hex: a-v, 0-9): a UUID's hex digits."""
    return uuid.uuid4().hex


#: What the agent hashes (SPEC section 2) and attaches as private extended properties.
PARAMS = {"operation_id": OP, "summary": "Dentist"}
HASH = request_hash(PARAMS)


def booking(chosen: str, **fields: Any) -> dict[str, Any]:
    return {"id": chosen, "summary": "Dentist",
            "start": {"dateTime": "2026-12-08T10:00:00Z"},
            "end": {"dateTime": "2026-12-08T10:30:00Z"},
            "extendedProperties": {"private": {"operation_id": OP, "request_hash": HASH}},
            **fields}


def target(key: str) -> ProbeTarget:
    return ProbeTarget(OP, key, "google_calendar", "events.insert", HASH, {}, intent_at=NOW,
                       dispatched_at=NOW)


def observe(recipe: str, sandbox: RunningSandbox, key: str, **options: Any) -> Observation:
    probe = recipe_factory(recipe)(recipe, {"base_url": sandbox.url, "tries": 1, **options},
                                   ENV)
    result = probe.probe(target(key))
    assert isinstance(result, Observation)
    return result


def reason(error: HttpError) -> str:
    details: list[dict[str, str]] = error.error_details
    return details[0]["reason"]


def test_an_event_booked_with_a_chosen_id_is_read_back_by_it_and_listed_by_its_property(
        sandbox: RunningSandbox) -> None:
    service, chosen = calendar(sandbox), event_id()
    made = service.events().insert(calendarId="primary", body=booking(chosen)).execute()
    got = service.events().get(calendarId="primary", eventId=chosen).execute()
    listed = service.events().list(
        calendarId="primary", privateExtendedProperty=f"operation_id={OP}").execute()
    assert made["id"] == got["id"] == chosen and got["kind"] == "calendar#event"
    assert got["status"] == "confirmed" and got["extendedProperties"]["private"]["request_hash"] \
        == HASH
    assert listed["kind"] == "calendar#events" and [e["id"] for e in listed["items"]] == [chosen]


def test_a_second_insert_with_the_same_id_is_googles_409_duplicate(
        sandbox: RunningSandbox) -> None:
    service, chosen = calendar(sandbox), event_id()
    service.events().insert(calendarId="primary", body=booking(chosen)).execute()
    with pytest.raises(HttpError) as raised:
        service.events().insert(calendarId="primary", body=booking(chosen)).execute()
    assert raised.value.status_code == 409 and reason(raised.value) == "duplicate"
    assert len(sandbox.state.objects()) == 1


def test_an_id_outside_base32hex_is_googles_400(sandbox: RunningSandbox) -> None:
    with pytest.raises(HttpError) as raised:
        calendar(sandbox).events().insert(calendarId="primary",
                                          body=booking("Not_Base32")).execute()
    assert raised.value.status_code == 400 and reason(raised.value) == "invalid"


def test_an_event_that_does_not_exist_is_googles_404_not_found(
        sandbox: RunningSandbox) -> None:
    with pytest.raises(HttpError) as raised:
        calendar(sandbox).events().get(calendarId="primary", eventId=event_id()).execute()
    assert raised.value.status_code == 404 and reason(raised.value) == "notFound"


def test_a_request_without_an_oauth_token_is_googles_401(sandbox: RunningSandbox) -> None:
    with pytest.raises(HttpError) as raised:
        calendar(sandbox, signed_in=False).events().insert(
            calendarId="primary", body=booking(event_id())).execute()
    assert raised.value.status_code == 401 and reason(raised.value) == "required"
    assert sandbox.state.objects() == []


def test_both_recipes_find_a_booking_whose_answer_was_lost(sandbox: RunningSandbox) -> None:
    chosen = event_id()
    sandbox.state.arm("calendar", "lose_response")
    with pytest.raises(TimeoutError):
        calendar(sandbox, timeout_s=SDK_TIMEOUT_S).events().insert(
            calendarId=TEAM, body=booking(chosen)).execute()
    by_id = observe("google_calendar.event", sandbox, chosen, calendar=TEAM)
    listed = observe("google_calendar.events.list", sandbox, chosen, calendar=TEAM)
    assert by_id.authority is Authority.AUTHORITATIVE and by_id.matches == (Match(chosen, HASH),)
    assert listed.authority is Authority.LAGGING and listed.matches == (Match(chosen, HASH),)


def test_a_404_by_id_is_a_zero_once_the_calendar_is_confirmed_visible(
        sandbox: RunningSandbox) -> None:
    zero = observe("google_calendar.event", sandbox, event_id())
    unseen = observe("google_calendar.event", sandbox, event_id(), calendar="no-such-calendar")
    assert zero.authority is Authority.AUTHORITATIVE and zero.matches == ()
    assert unseen.authority is Authority.UNAVAILABLE and "confirm read" in (unseen.error or "")


def test_the_list_follows_next_page_tokens(sandbox: RunningSandbox) -> None:
    # Two events of one operation (server-chosen ids, stored twice), one to a page.
    sandbox.state.arm("calendar", "duplicate")
    body = {key: value for key, value in booking("").items() if key != "id"}
    calendar(sandbox).events().insert(calendarId="primary", body=body).execute()
    listed = observe("google_calendar.events.list", sandbox, event_id(),
                     params={"maxResults": "1"})
    assert listed.authority is Authority.LAGGING and len(listed.matches) == 2


def test_an_event_of_another_operation_under_the_id_is_no_zero(
        sandbox: RunningSandbox) -> None:
    chosen = event_id()
    other = booking(chosen, extendedProperties={"private": {"operation_id": "op-other"}})
    calendar(sandbox).events().insert(calendarId="primary", body=other).execute()
    assert observe("google_calendar.event", sandbox, chosen).authority is Authority.UNAVAILABLE


def test_without_a_token_the_recipes_read_nothing(sandbox: RunningSandbox) -> None:
    probe = recipe_factory("google_calendar.event")(
        "google_calendar.event", {"base_url": sandbox.url, "tries": 1}, {})
    result = probe.probe(target(event_id()))
    assert isinstance(result, Observation) and result.authority is Authority.UNAVAILABLE
    assert "GOOGLE_CALENDAR_TOKEN" in (result.error or "")


@pytest.mark.parametrize(("recipe", "carried"), [
    ("google_calendar.event", Carried.IDEMPOTENCY_KEY),        # GET .../events/{the chosen id}
    ("google_calendar.events.list", Carried.OPERATION_ID),     # privateExtendedProperty
])
def test_each_recipe_finds_effects_by_what_the_insert_carried(recipe: str,
                                                             carried: Carried) -> None:
    probe = recipe_factory(recipe)(recipe, {"base_url": "https://www.googleapis.com",
                                            "calendar": TEAM}, ENV)
    needed = needs(probe)
    assert needed is not None and finds_by(needed) == {carried}


def test_a_calendar_that_is_not_an_id_is_refused_at_startup() -> None:
    with pytest.raises(ProbeConfigError, match="'calendar' must be a calendar id"):
        recipe_factory("google_calendar.event")(
            "g", {"base_url": "https://www.googleapis.com", "calendar": ""}, ENV)


@pytest.mark.parametrize("recipe", ["google_calendar.event", "google_calendar.events.list"])
@pytest.mark.parametrize(("trouble", "error"), [
    ({"read_unavailable": True}, "HTTP 503"), ({"rate_limited_s": 60.0}, "429")])
def test_a_read_while_google_is_down_or_rate_limited_is_unavailable_never_a_zero(
        sandbox: RunningSandbox, recipe: str, trouble: dict[str, Any], error: str) -> None:
    sandbox.state.configure(**trouble)
    seen = observe(recipe, sandbox, event_id())
    assert seen.authority is Authority.UNAVAILABLE and error in (seen.error or "")


def test_the_list_lags_behind_the_read_by_id(sandbox: RunningSandbox,
                                            sandbox_clock: ManualClock) -> None:
    chosen = event_id()
    sandbox.state.configure(search_lag_s=5)
    calendar(sandbox).events().insert(calendarId="primary", body=booking(chosen)).execute()
    early = observe("google_calendar.events.list", sandbox, chosen)
    sandbox_clock.advance(6)
    late = observe("google_calendar.events.list", sandbox, chosen)
    by_id = observe("google_calendar.event", sandbox, chosen)
    assert early.authority is Authority.LAGGING and early.matches == ()
    assert late.matches == by_id.matches == (Match(chosen, HASH),)


@pytest.mark.parametrize(("status", "authority", "found"), [
    ("tentative", Authority.AUTHORITATIVE, 1),   # a held slot is booked
    ("cancelled", Authority.UNAVAILABLE, 0),     # booked, then removed: a person looks
])
def test_what_an_events_status_says_about_the_booking(
        sandbox: RunningSandbox, status: str, authority: Authority, found: int) -> None:
    chosen = event_id()
    calendar(sandbox).events().insert(calendarId="primary",
                                      body=booking(chosen, status=status)).execute()
    seen = observe("google_calendar.event", sandbox, chosen)
    assert seen.authority is authority and len(seen.matches) == found


@pytest.mark.parametrize("booked", [True, False], ids=["found", "zero"])
def test_an_empty_page_with_a_next_page_token_is_read_past(sandbox: RunningSandbox,
                                                          booked: bool) -> None:
    # Google: a page "may be less than [maxResults], or none at all, even if there are more
    # events matching the query"; only the page without a nextPageToken ends the list.
    chosen = event_id()
    if booked:
        calendar(sandbox).events().insert(calendarId="primary", body=booking(chosen)).execute()
    sandbox.state.arm("calendar", "short_page", "read")
    listed = observe("google_calendar.events.list", sandbox, chosen)
    assert listed.authority is Authority.LAGGING
    assert listed.matches == ((Match(chosen, HASH),) if booked else ())
    assert sandbox.state.take_armed("calendar", "read") is None  # the fault was spent


def test_the_short_page_fault_answers_no_events_and_a_token_for_the_rest(
        sandbox: RunningSandbox) -> None:
    service, chosen = calendar(sandbox), event_id()
    service.events().insert(calendarId="primary", body=booking(chosen)).execute()
    sandbox.state.arm("calendar", "short_page", "read")
    first = service.events().list(calendarId="primary").execute()
    rest = service.events().list(calendarId="primary",
                                 pageToken=first["nextPageToken"]).execute()
    assert first["items"] == [] and [e["id"] for e in rest["items"]] == [chosen]
    assert "nextPageToken" not in rest


@pytest.mark.parametrize("side", ["write", "read"])
def test_a_rate_limit_fault_is_googles_429_rate_limit_exceeded(sandbox: RunningSandbox,
                                                              side: str) -> None:
    service, chosen = calendar(sandbox), event_id()
    sandbox.state.arm("calendar", "rate_limit=7", side)
    call = service.events().insert(calendarId="primary", body=booking(chosen)) \
        if side == "write" else service.events().get(calendarId="primary", eventId=chosen)
    with pytest.raises(HttpError) as raised:
        call.execute()
    assert raised.value.status_code == 429 and reason(raised.value) == "rateLimitExceeded"
    assert raised.value.resp["retry-after"] == "7"
    assert sandbox.state.objects() == []
