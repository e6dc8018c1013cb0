"""Calling the sandbox provider in tests (docs/sandbox-api.md): one case per write endpoint, and
the small requests every sandbox test makes.

The `sandbox`, `clock`, `http` and `client` fixtures are in conftest.py: one server per test
module, each test starting from a reset state on a manual clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from reconciler.sandbox.credentials import SANDBOX_CREDENTIALS
from reconciler.testing.patience import PATIENCE_S

JSON = dict[str, Any]


def marker(op: str) -> str:
    return f"<!-- reconciler:op={op} -->"


@dataclass(frozen=True)
class WriteCase:
    """A write endpoint: its body for an operation, its success status, and how the reference
    of the object it created (as /_sandbox/objects names it) reads from its answer."""

    provider: str
    path: str
    status: int
    body: Callable[[str], JSON]
    ref: Callable[[JSON], str]


PAY = WriteCase(
    "pay",
    "/pay/v1/charges",
    200,
    lambda op: {"amount": 1200, "currency": "eur", "metadata": {"operation_id": op}},
    lambda answer: answer["id"],
)
MAIL = WriteCase(
    "mail",
    "/mail/email",
    200,
    lambda op: {
        "From": "agent@example.com",
        "To": "user@example.com",
        "Subject": "Your order",
        "TextBody": "It shipped.",
        "Metadata": {"operation_id": op},
    },
    lambda answer: answer["MessageID"],
)
CHAT = WriteCase(
    "chat",
    "/chat/api/chat.postMessage",
    200,
    lambda op: {
        "channel": "C1",
        "text": "deployed",
        "metadata": {"event_type": "reconciler_op", "event_payload": {"operation_id": op}},
    },
    lambda answer: f"C1/{answer['ts']}",
)
ISSUES = WriteCase(
    "gh",
    "/gh/repos/acme/app/issues",
    201,
    lambda op: {"title": "Flaky deploy", "body": f"Seen twice.\n{marker(op)}"},
    lambda answer: f"acme/app#{answer['number']}",
)
WRITES = [pytest.param(case, id=case.provider) for case in (PAY, MAIL, CHAT, ISSUES)]


def write(
    client: httpx.Client,
    case: WriteCase,
    op: str = "op-1",
    *,
    fault: str | None = None,
    key: str | None = None,
    timeout: float = 5.0,
) -> httpx.Response:
    headers = dict(SANDBOX_CREDENTIALS.get(case.provider, {}))
    if fault is not None:
        headers["X-Sandbox-Fault"] = fault
    if key is not None:
        headers["Idempotency-Key"] = key
    return client.post(case.path, json=case.body(op), headers=headers, timeout=timeout)


def stored(client: httpx.Client, provider: str) -> list[JSON]:
    objects = client.get("/_sandbox/objects").json()["objects"]
    return [o for o in objects if o["provider"] == provider]


def configure(client: httpx.Client, **fields: Any) -> None:
    client.post("/_sandbox/config", json=fields).raise_for_status()


def wait_until(condition: Callable[[], bool], timeout_s: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def assert_contains(actual: JSON, expected: JSON) -> None:
    for name, value in expected.items():
        if isinstance(value, dict):
            assert_contains(actual[name], value)
        else:
            assert actual[name] == value
