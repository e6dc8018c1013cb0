"""HTTP plumbing the fake providers share: the state, the received body, error answers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import parse_qsl

from fastapi import Depends, Request

from reconciler.core.errors import HashInputError
from reconciler.core.hashing import request_hash
from reconciler.sandbox.faults import Faults, is_read, read_faults
from reconciler.sandbox.shapes import ProviderError, provider_root, rate_limited
from reconciler.sandbox.state import JSONObject, SandboxState

__all__ = ["JsonBody", "ProviderError", "State", "read_json_body", "read_stripe_body",
           "reads_available", "sandbox_state"]


# The dependencies here and in faults.py are `async def` though they never await: FastAPI runs
# a plain `def` dependency on its thread pool (https://fastapi.tiangolo.com/async/, "Dependencies"),
# one thread hop each, which was most of what a sandbox read cost.
async def sandbox_state(request: Request) -> SandboxState:
    state: SandboxState = request.app.state.sandbox
    return state


State = Annotated[SandboxState, Depends(sandbox_state)]


async def reads_available(request: Request, state: State,
                          faults: Annotated[Faults, Depends(read_faults)]) -> None:
    """Router dependency: with `read_unavailable`, every GET under a provider fails; with
    `rate_limited_s`, every read answers its provider's rate limit; a read's own faults
    (`X-Sandbox-Fault`) apply."""
    config = state.config
    if request.method == "GET" and config.read_unavailable:
        raise ProviderError(503, {"error": "read api unavailable"})
    if is_read(request) and config.rate_limited_s > 0:
        raise rate_limited(provider_root(request.url.path), config.rate_limited_s,
                           state.clock.now(), primary=True)


@dataclass(frozen=True, slots=True)
class JsonBody:
    data: JSONObject
    request_hash: str


async def read_json_body(request: Request) -> JsonBody | None:
    """The body as received and its hash, or None when it is not a hashable JSON object
    (each provider answers that in its own error shape)."""
    try:
        data = json.loads(await request.body())
        return JsonBody(data, request_hash(data)) if isinstance(data, dict) else None
    except (ValueError, HashInputError):
        return None


def _form_value(text: str) -> str | int:
    # Stripe's integers (amount) arrive as digits; the rest stay strings.
    return int(text) if text.isdigit() and not text.startswith("0") else text


async def read_stripe_body(request: Request) -> JsonBody | None:
    """A Stripe request body: form-encoded with bracketed keys (`metadata[operation_id]=...`),
    as Stripe's API and SDKs send it, or, for the sandbox's own callers, a JSON object."""
    if not request.headers.get("content-type", "").startswith(
            "application/x-www-form-urlencoded"):
        return await read_json_body(request)
    data: JSONObject = {}
    for key, value in parse_qsl((await request.body()).decode("utf-8", "replace"),
                                keep_blank_values=True):
        outer, bracket, inner = key.partition("[")
        if bracket and inner.endswith("]") and "[" not in inner:
            nested = data.setdefault(outer, {})
            if not isinstance(nested, dict):
                return None
            nested[inner[:-1]] = value
        elif not bracket:
            data[key] = _form_value(value)
        else:
            return None
    try:
        return JsonBody(data, request_hash(data))
    except HashInputError:
        return None
