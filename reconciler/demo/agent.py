"""The agent worker's side of the demo: what it sends to each sandbox provider, and the facts it
records around one dispatch (SPEC section 2).

The intent is planned from the exact JSON body before anything is sent; the body goes out as
those canonical bytes, so the hash the provider records for it (docs/sandbox-api.md) is the
intent's, and a receipt echoed back is *bound*. After the call, the transport outcome is all
the agent knows: a response (with its receipt when the provider names the effect), a timeout, or
a connection error. Integration tests reuse these shapes to drive the sandbox the same way.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

import httpx

from probes.matching import dig
from probes.recipes.jira import LABEL
from reconciler.core.domain import Attempt, Carried, Effect, Intent, Match, Outcome
from reconciler.core.hashing import canonical_json, derive_idempotency_key, request_hash
from reconciler.sandbox.credentials import SANDBOX_CREDENTIALS

#: Where a body template takes the operation id, which is what the provider keeps for probes.
OPERATION = "{operation_id}"
CHANNEL = "C0DEMO"
OWNER, REPO = "acme", "demo"
TWILIO_ACCOUNT, SMS_TO = "AC0DEMO", "+15550001111"
#: The Jira project the agent files its issues in, and who it logs in as (the sandbox's Jira
#: takes any address and token: these are no secrets).
JIRA_PROJECT, JIRA_EMAIL, JIRA_TOKEN = "OPS", "agent@example.test", "sandbox-token"


@dataclass(frozen=True, slots=True)
class Shape:
    """How an agent performs one action at one sandbox provider.

    `root` is the provider's prefix on the sandbox (also its probes' `base_url`); `body` a JSON
    template whose strings may hold `{operation_id}`; `receipt_ref`/`receipt_hash` are dotted
    paths, in a 2xx answer, of the effect's reference and of the request hash the provider
    recorded (None where the provider does not echo one).
    """

    provider: str
    action: str
    effect: Effect
    root: str
    path: str
    body: Mapping[str, Any]
    receipt_ref: str
    receipt_hash: str | None = None
    keyed: bool = False
    correlation: Mapping[str, str] = field(default_factory=dict)
    #: Sent form-encoded (Twilio) instead of as canonical JSON bytes.
    form: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    #: The body field the key travels in instead of an `Idempotency-Key` header (Google
    #: Calendar's client-chosen event `id`).
    key_field: str | None = None

    def params(self, operation_id: str, key: str | None = None) -> dict[str, Any]:
        """The exact JSON body the agent sends for `operation_id` (and its key)."""
        filled: dict[str, Any] = _fill(self.body, operation_id)
        if self.key_field is not None and key is not None:
            filled[self.key_field] = key
        return filled

    def request(self, operation_id: str, key: str | None = None
                ) -> tuple[dict[str, str], bytes]:
        """The headers and bytes of the body for `operation_id`."""
        params = self.params(operation_id, key)
        if self.form:
            return ({**self.headers, "Content-Type": "application/x-www-form-urlencoded"},
                    urlencode(params).encode())
        return {**self.headers, "Content-Type": "application/json"}, canonical_json(params)


def _fill(template: Any, operation_id: str) -> Any:
    if isinstance(template, str):
        return template.replace(OPERATION, operation_id)
    if isinstance(template, Mapping):
        return {key: _fill(value, operation_id) for key, value in template.items()}
    if isinstance(template, list):
        return [_fill(value, operation_id) for value in template]
    return template


SHAPES: dict[str, Shape] = {shape.provider: shape for shape in (
    # With a provider idempotency key, a same-key retry is idempotent: the only retryable one.
    Shape("payments", "charges.create", Effect.IDEMPOTENT_WRITE, "/pay", "/v1/charges",
          {"amount": 1250, "currency": "eur", "metadata": {"operation_id": OPERATION}},
          receipt_ref="id", keyed=True, headers=SANDBOX_CREDENTIALS["pay"]),
    # Providers answer a reference but no request hash: a reference, never a bound receipt.
    Shape("email", "email.send", Effect.NON_IDEMPOTENT, "/mail", "/email",
          {"From": "agent@example.test", "To": "customer@example.test",
           "Subject": "Your booking", "TextBody": "Booked for Tuesday.",
           "Metadata": {"operation_id": OPERATION}},
          receipt_ref="MessageID", headers=SANDBOX_CREDENTIALS["mail"]),
    Shape("chat", "chat.postMessage", Effect.NON_IDEMPOTENT, "/chat", "/api/chat.postMessage",
          {"channel": CHANNEL, "text": "Deploy finished.",
           "metadata": {"event_type": "agent_action",
                        "event_payload": {"operation_id": OPERATION}}},
          receipt_ref="ts", correlation={"channel": CHANNEL},
          headers=SANDBOX_CREDENTIALS["chat"]),
    # GitHub has no idempotency at all; the marker in the body is how the issue is found again.
    Shape("issues", "issues.create", Effect.NON_IDEMPOTENT, "/gh", f"/repos/{OWNER}/{REPO}/issues",
          {"title": "Flaky deploy",
           "body": f"Seen twice today.\n<!-- reconciler:op={OPERATION} -->"},
          receipt_ref="number", correlation={"owner": OWNER, "repo": REPO},
          headers=SANDBOX_CREDENTIALS["gh"]),
    # A text message carries nothing to tie it to the operation: only its SID can find it.
    Shape("sms", "messages.create", Effect.NON_IDEMPOTENT, "/twilio",
          f"/2010-04-01/Accounts/{TWILIO_ACCOUNT}/Messages.json",
          {"To": SMS_TO, "From": "+15550002222", "Body": "Your table is booked."},
          receipt_ref="sid", correlation={"to": SMS_TO}, form=True,
          headers={"Authorization": "Basic " + base64.b64encode(
              f"{TWILIO_ACCOUNT}:sandbox-token".encode()).decode()}),
    # Jira has no idempotency key either; the label is how its JQL search finds the issue.
    Shape("jira", "issue.create", Effect.NON_IDEMPOTENT, "/jira", "/rest/api/3/issue",
          {"fields": {"project": {"key": JIRA_PROJECT}, "issuetype": {"name": "Task"},
                      "summary": "Flaky deploy", "labels": [LABEL]}},
          receipt_ref="key", correlation={"project": JIRA_PROJECT},
          headers={"Authorization": "Basic " + base64.b64encode(
              f"{JIRA_EMAIL}:{JIRA_TOKEN}".encode()).decode()}),
    # Google Calendar: the agent chooses the event's id (its key) and tags the event with the
    # operation id in its private extended properties; served at Google's own paths.
    Shape("calendar", "events.insert", Effect.NON_IDEMPOTENT, "",
          "/calendar/v3/calendars/primary/events",
          {"summary": "Dentist", "start": {"dateTime": "2026-12-08T10:00:00Z"},
           "end": {"dateTime": "2026-12-08T10:30:00Z"},
           "extendedProperties": {"private": {"operation_id": OPERATION}}},
          receipt_ref="id", keyed=True, key_field="id",
          headers={"Authorization": "Bearer sandbox-token"}),
)}


def plan_intent(shape: Shape, operation_id: str, at: datetime, run_id: str) -> Intent:
    """The intent for one tool call, to record before dispatch. The tool call id is the
    operation id, so the derived key is stable across restarts of the same run."""
    key = derive_idempotency_key(run_id, operation_id) if shape.keyed else None
    if key is not None and shape.key_field is not None:
        # An event id is base32hex (a-v, 0-9): the key's hex digest is, its `rk_` is not.
        key = key.removeprefix("rk_")
    # What the request carries that a probe can find it by (SPEC section 3): the key when one
    # is sent, the operation id where the body attaches it (metadata, a marker).
    tagged = OPERATION in repr(shape.body)
    carries = frozenset({Carried.IDEMPOTENCY_KEY} if key else ()) | frozenset(
        {Carried.OPERATION_ID} if tagged else ())
    return Intent(operation_id, request_hash(shape.params(operation_id, key)), key,
                  shape.provider,
                  shape.action, shape.effect, at, run_id=run_id, tool_call_id=operation_id,
                  correlation=dict(shape.correlation), carries=carries)


def dispatch(http: httpx.Client, base_url: str, shape: Shape, intent: Intent, number: int,
             at: datetime, *, fault: str | None = None, timeout_s: float = 0.3) -> Attempt:
    """Send attempt `number` of `intent` (with a sandbox fault) and say what the caller saw.
    `at` is the dispatch time, taken by the caller before the call."""
    headers, content = shape.request(intent.operation_id, intent.idempotency_key)
    if intent.idempotency_key is not None and shape.key_field is None:
        headers["Idempotency-Key"] = intent.idempotency_key
    if fault is not None:
        headers["X-Sandbox-Fault"] = fault

    def seen(outcome: Outcome, status: int | None = None,
             receipt: Match | None = None) -> Attempt:
        return Attempt(intent.operation_id, number, intent.idempotency_key, intent.request_hash,
                       at, outcome, status, receipt)

    try:
        response = http.post(base_url + shape.root + shape.path, headers=headers,
                             content=content, timeout=timeout_s)
    except (httpx.ConnectError, httpx.ConnectTimeout):
        return seen(Outcome.CONNECTION_ERROR)
    except httpx.TimeoutException:
        return seen(Outcome.TIMEOUT)
    except httpx.TransportError:
        return seen(Outcome.CONNECTION_ERROR)
    return seen(Outcome.RESPONSE, response.status_code, receipt_of(shape, response))


def receipt_of(shape: Shape, response: httpx.Response) -> Match | None:
    """The effect a 2xx answer names, with the request hash the provider recorded if it says."""
    if not response.is_success:
        return None
    try:
        body = response.json()
        ref = dig(body, shape.receipt_ref)
    except (ValueError, LookupError):
        return None
    if isinstance(ref, bool) or not isinstance(ref, str | int):
        return None
    try:
        bound = dig(body, shape.receipt_hash) if shape.receipt_hash else None
    except LookupError:
        bound = None
    return Match(str(ref), bound if isinstance(bound, str) else None)
