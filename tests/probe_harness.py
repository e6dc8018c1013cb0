"""Driving the declarative HTTP probe in tests without a network: a probe target, a recipe's
probe over httpx.MockTransport, canned answers, and a charge as the payments provider shows it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from probes.base import Probe, ProbeTarget
from probes.http_json import HttpJsonProbe
from probes.recipes import recipe_factory
from reconciler.core.domain import Observation

BASE = "http://provider.test/pay"
OP = "op-1"
SECRET = "sk_live_do_not_leak"
Handler = Callable[[httpx.Request], httpx.Response]
_BUDGETS = itertools.count()


def target(**changes: Any) -> ProbeTarget:
    fields: dict[str, Any] = {
        "operation_id": OP, "idempotency_key": "key-1", "provider": "payments",
        "action": "charge", "request_hash": "sha256:h0",
        "correlation": {"charge": "ch_1", "payment_intent": "pi_1", "message_id": "m-1",
                        "channel": "C1", "owner": "octo",
                        "repo": "hello", "issue_number": "7", "message_sid": "SM1",
                        "to": "+15550001111"},
        "intent_at": datetime(2026, 1, 1, 12, 0, tzinfo=UTC)}
    return ProbeTarget(**{**fields, **changes})


def probe(recipe: str, handler: Handler, **options: Any) -> HttpJsonProbe:
    """A recipe's probe over a mock transport that refuses anything but GET, with a request
    budget of its own (budgets are shared by name across the process)."""

    def read_only(request: httpx.Request) -> httpx.Response:
        assert request.method == "GET"
        return handler(request)

    return recipe_factory(recipe)(
        recipe, {"base_url": BASE, "backoff_s": 0, "token_env": "PAY_KEY",
                 "budget": f"test-{next(_BUDGETS)}", **options},
        {"PAY_KEY": SECRET, "ACCOUNT_SID": "AC1"},
        transport=httpx.MockTransport(read_only))


def answer(body: Any, status: int = 200) -> Handler:
    return lambda request: httpx.Response(status, json=body)


def observe(p: Probe, t: ProbeTarget | None = None) -> Observation:
    result = p.probe(t or target())
    assert isinstance(result, Observation)
    return result


def charge(ref: str, op: str = OP, status: str = "succeeded",
           kind: str = "payment_intent") -> dict[str, Any]:
    """A Stripe object as the API shows it, tagged the way docs/probes.md tells agents to."""
    return {"id": ref, "object": kind, "status": status, "livemode": False,
            "metadata": {"operation_id": op, "request_hash": f"sha256:{ref}"}}
