"""HTTP plumbing the four fake providers share: the state, the received body, error answers."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import parse_qsl

from fastapi import Depends, Request
from fastapi.responses import JSONResponse

from reconciler.errors import HashInputError
from reconciler.hashing import request_hash
from reconciler.sandbox.state import JSONObject, SandboxState


class ProviderError(Exception):
    """An answer in a provider's own error shape, raised where returning one is not possible
    (dependencies, helpers)."""

    def __init__(self, status_code: int, body: JSONObject,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code, body)
        self.status_code = status_code
        self.body = body
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body, self.status_code, headers=self.headers)


# The dependencies here and in faults.py are `async def` though they never await: FastAPI runs
# a plain `def` dependency on its thread pool (https://fastapi.tiangolo.com/async/, "Dependencies"),
# one thread hop each, which was most of what a sandbox read cost.
async def sandbox_state(request: Request) -> SandboxState:
    state: SandboxState = request.app.state.sandbox
    return state


State = Annotated[SandboxState, Depends(sandbox_state)]


async def reads_available(request: Request, state: State) -> None:
    """Router dependency: with `read_unavailable`, every GET under a provider fails; with
    `rate_limited_s`, every read answers its provider's rate limit."""
    config = state.config
    if request.method == "GET" and config.read_unavailable:
        raise ProviderError(503, {"error": "read api unavailable"})
    reading = request.method == "GET" or request.url.path.startswith("/chat/api/conversations.")
    if reading and config.rate_limited_s > 0:
        raise _rate_limit(request.url.path.strip("/").split("/")[0], config.rate_limited_s,
                          state.clock.now())


def _rate_limit(root: str, wait_s: float, now: float) -> ProviderError:
    """Each provider's own answer to a spent rate limit."""
    seconds = str(math.ceil(wait_s))
    if root == "gh":  # a primary limit: 403, no Retry-After, the reset as a Unix time
        return ProviderError(403, {"message": "API rate limit exceeded",
                                   "documentation_url": "https://docs.github.com/rest/"
                                   "using-the-rest-api/rate-limits-for-the-rest-api"},
                             {"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "0",
                              "x-ratelimit-reset": str(math.ceil(now + wait_s))})
    if root == "chat":
        return ProviderError(429, {"ok": False, "error": "ratelimited"},
                             {"Retry-After": seconds})
    if root == "pay":
        return ProviderError(429, {"error": {
            "type": "invalid_request_error", "code": "rate_limit",
            "message": "Request rate limit exceeded."}})
    if root == "twilio":
        return ProviderError(429, {"code": 20429, "message": "Too Many Requests",
                                   "status": 429}, {"Retry-After": seconds})
    return ProviderError(429, {"ErrorCode": 0, "Message": "Rate limit exceeded"},
                         {"Retry-After": seconds})


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
