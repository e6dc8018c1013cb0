"""End to end over HTTP, sidecar and sandbox on loopback: a booking (Google Calendar
`events.insert`, sent by Google's own Python client) times out after the provider applied it,
and is reconciled to exactly one event, counted at the sandbox.

    intent ── insert (the sandbox commits at 1.5 s; the client gave up at 1.0 s) ── timeout
      ── /retry: refused (in doubt) ── /reconcile until the probes find the late event
      ── verified_applied ── /retry: refused ── one event at the sandbox

Keyed: the worker chose the event id and recorded it as the key, so `google_calendar.event`
reads it back by id (authoritative). Keyless: Google chose the id; only the private extended
property finds it (`google_calendar.events.list`), and the read by id is blind to it.
"""

from __future__ import annotations

import time
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import google.oauth2.credentials
import pytest

# Google's client libraries ship no type information.
from google_auth_httplib2 import AuthorizedHttp  # type: ignore[import-untyped]
from googleapiclient.discovery import build  # type: ignore[import-untyped]
from httplib2 import Http  # type: ignore[import-untyped]

from probes.config import parse_config
from reconciler.core.hashing import request_hash
from reconciler.sandbox import RunningSandbox

from sidecar_client import Sidecar, running_sidecar

#: The sandbox commits the insert this long after the call; the client gives up at 1 s.
DELAY_S = 1.5
TIMEOUT_S = 1.0
#: The contract: a timed-out insert may still be applied this long after dispatch (far past
#: DELAY_S, so a loaded machine cannot turn the late commit into a zero; the probes find the
#: event as soon as it lands, so the margin costs no time).
INFLIGHT_S = 10.0
TOKEN = "ya29.sandbox-token"
PROBES = """
[providers.google_calendar]
inflight_s = {inflight}
visibility_lag_s = 0.5
reconcile_deadline_s = 120

[[providers.google_calendar.probes]]
use = "google_calendar.events.list"
actions = ["events.insert"]
base_url = "{url}"
least_lag_s = 0.5                 # the sandbox's list does not lag; Google's is undocumented

[[providers.google_calendar.probes]]
use = "google_calendar.event"     # authoritative, read last: its zero counts at once
actions = ["events.insert"]
base_url = "{url}"
"""


@pytest.fixture
def sidecar(tmp_path: Path, sandbox: RunningSandbox) -> Iterator[Sidecar]:
    """The sidecar over HTTP, its Calendar probes built from the configuration above."""
    sandbox.state.reset()
    config = tomllib.loads(PROBES.format(url=sandbox.url, inflight=INFLIGHT_S))
    setup = parse_config(config, env={"GOOGLE_CALENDAR_TOKEN": TOKEN})["google_calendar"]
    with running_sidecar(f"sqlite:///{tmp_path / 'r.db'}") as running:
        running.store.put_contract(setup.contract)
        running.probes["google_calendar"] = list(setup.probes)
        yield running


def book(op: str, event_id: str | None) -> tuple[dict[str, Any], str]:
    """The event the agent books and the hash of its parameters (without the hash itself)."""
    params: dict[str, Any] = {
        "summary": "Dentist", "start": {"dateTime": "2026-12-08T10:00:00Z"},
        "end": {"dateTime": "2026-12-08T10:30:00Z"},
        "extendedProperties": {"private": {"operation_id": op}},
        **({"id": event_id} if event_id else {})}
    hash_ = request_hash(params)
    params["extendedProperties"]["private"]["request_hash"] = hash_
    return params, hash_


def insert_timing_out(sandbox: RunningSandbox, body: dict[str, Any]) -> None:
    """Google's client, its endpoint the sandbox's; the sandbox holds the insert past the
    client's timeout and then commits it."""
    sandbox.state.arm("calendar", f"delay={DELAY_S}")
    token = google.oauth2.credentials.Credentials(token=TOKEN)  # type: ignore[no-untyped-call]
    service = build("calendar", "v3", static_discovery=True,
                    client_options={"api_endpoint": sandbox.url + "/calendar/v3/"},
                    http=AuthorizedHttp(token, http=Http(timeout=TIMEOUT_S)))
    with pytest.raises(TimeoutError):
        service.events().insert(calendarId="primary", body=body).execute()


def events_at(sandbox: RunningSandbox) -> list[str]:
    return [record.ref for record in sandbox.state.objects() if record.provider == "calendar"]


def reconcile_until_found(sidecar: Sidecar, op: str, deadline_s: float = 60.0
                          ) -> dict[str, Any]:
    """/reconcile until the verdict is no longer in doubt (bounded in time)."""
    deadline = time.monotonic() + deadline_s
    while True:
        judged = sidecar.post(f"/v1/operations/{op}/reconcile", None, 200)
        if judged["verdict"] != "indeterminate" or time.monotonic() > deadline:
            return judged
        time.sleep(0.2)


@pytest.mark.parametrize("keyed", [True, False], ids=["chosen-id", "google-chosen-id"])
def test_a_booking_that_timed_out_after_it_was_applied_is_one_event(
        sidecar: Sidecar, sandbox: RunningSandbox, keyed: bool) -> None:
    op = f"run-b.call-{uuid.uuid4().hex[:8]}"
    event_id = uuid.uuid4().hex if keyed else None
    body, hash_ = book(op, event_id)
    sidecar.post("/v1/operations", {
        "operation_id": op, "request_hash": hash_, "idempotency_key": event_id,
        "provider": "google_calendar", "action": "events.insert", "effect": "non_idempotent",
        "carries": ["idempotency_key", "operation_id"] if keyed else ["operation_id"]})
    insert_timing_out(sandbox, body)
    sidecar.post(f"/v1/operations/{op}/attempts", {
        "attempt": 1, "idempotency_key": event_id, "request_hash": hash_, "outcome": "timeout"})
    retry = {"idempotency_key": event_id, "request_hash": hash_, "holder": "worker-1"}
    in_doubt = sidecar.post(f"/v1/operations/{op}/retry", retry, 200)

    judged = reconcile_until_found(sidecar, op)
    after = sidecar.post(f"/v1/operations/{op}/retry", retry, 200)

    assert not in_doubt["allowed"]
    assert judged["verdict"] == "verified_applied", judged
    found = {e["source"]: e["matches"] for e in judged["evidence"] if e["matches"]}
    expected = "google_calendar.event" if keyed else "google_calendar.events.list"
    assert [m["request_hash"] for m in found[expected]] == [hash_]
    if not keyed:  # nothing to read by id: the read proves nothing either way
        assert {e["authority"] for e in judged["evidence"]
                if e["source"] == "google_calendar.event"} == {"unavailable"}
    assert (after["allowed"], after["verdict"]) == (False, "verified_applied")
    assert len(events_at(sandbox)) == 1
    if keyed:
        assert events_at(sandbox) == [f"sandbox-bot@example.com/{event_id}"]
