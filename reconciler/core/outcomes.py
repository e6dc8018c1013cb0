"""What a call's result or exception says about its attempt, for any client library (the runtime's
tool gate, the tracked-effect client, `@effect` and the framework adapters all read it here).

Exceptions are read by class name along their MRO, so httpx, requests, urllib3, aiohttp,
stripe, openai, anthropic and slack_sdk (urllib underneath) are understood without importing any
of them. The SPEC's transport outcomes, and how each library's errors map onto them:

    not_sent          the connection was never made: nothing reached the provider
                      (connect refused or timed out, DNS failure, a bad URL)
    timeout           sent, no answer in time: the provider may have done the work
    connection_error  sent, the connection broke: the provider may have done the work
    response          the provider answered (an SDK's error with an HTTP status included)

A wrapper error that only says "connection problem" (stripe's APIConnectionError, openai's
APIConnectionError, requests' ConnectionError) is refined by what it wraps (`raise ... from`,
urllib3's `reason`): stripe wrapping a requests ConnectTimeout is `not_sent`. An exception
nothing here recognises is `connection_error`: it may have come after the send, so only the
provider can say what happened.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.core.domain import Outcome
from reconciler.core.schemas import MatchIn

#: (top-level package, class name) -> outcome. Looked up along the MRO, most specific first.
_BY_CLASS: dict[tuple[str, str], Outcome] = {
    # httpx (its public classes report __module__ "httpx")
    **{("httpx", n): Outcome.NOT_SENT for n in (
        "ConnectError", "ConnectTimeout", "PoolTimeout", "UnsupportedProtocol", "InvalidURL")},
    ("httpx", "TimeoutException"): Outcome.TIMEOUT,
    ("httpx", "TransportError"): Outcome.CONNECTION_ERROR,
    # requests and urllib3 (docs: requests.readthedocs.io "Errors and Exceptions")
    **{("requests", n): Outcome.NOT_SENT for n in (
        "ConnectTimeout", "InvalidURL", "InvalidSchema", "MissingSchema", "InvalidHeader")},
    ("requests", "Timeout"): Outcome.TIMEOUT,
    ("requests", "ConnectionError"): Outcome.CONNECTION_ERROR,
    ("requests", "ChunkedEncodingError"): Outcome.CONNECTION_ERROR,
    **{("urllib3", n): Outcome.NOT_SENT for n in (
        "NewConnectionError", "ConnectTimeoutError", "NameResolutionError", "LocationParseError")},
    ("urllib3", "TimeoutError"): Outcome.TIMEOUT,
    ("urllib3", "ProtocolError"): Outcome.CONNECTION_ERROR,
    ("urllib3", "MaxRetryError"): Outcome.CONNECTION_ERROR,  # refined by its `reason`
    # aiohttp (client_exceptions): ConnectionTimeoutError is a connect timeout (3.10+)
    ("aiohttp", "ClientConnectorError"): Outcome.NOT_SENT,
    ("aiohttp", "ConnectionTimeoutError"): Outcome.NOT_SENT,
    ("aiohttp", "InvalidURL"): Outcome.NOT_SENT,
    ("aiohttp", "ServerTimeoutError"): Outcome.TIMEOUT,
    ("aiohttp", "ClientConnectionError"): Outcome.CONNECTION_ERROR,
    ("aiohttp", "ClientPayloadError"): Outcome.CONNECTION_ERROR,
    # the providers' SDKs
    ("stripe", "APIConnectionError"): Outcome.CONNECTION_ERROR,
    ("openai", "APITimeoutError"): Outcome.TIMEOUT,
    ("openai", "APIConnectionError"): Outcome.CONNECTION_ERROR,
    ("anthropic", "APITimeoutError"): Outcome.TIMEOUT,
    ("anthropic", "APIConnectionError"): Outcome.CONNECTION_ERROR,
    # the standard library: slack_sdk's WebClient is urllib underneath
    ("socket", "gaierror"): Outcome.NOT_SENT,
    ("builtins", "ConnectionRefusedError"): Outcome.NOT_SENT,
    ("builtins", "TimeoutError"): Outcome.TIMEOUT,
    ("builtins", "ConnectionError"): Outcome.CONNECTION_ERROR,
    ("urllib", "URLError"): Outcome.CONNECTION_ERROR,
}
_MAX_DEPTH = 8
_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")


def _own_outcome(exc: BaseException) -> Outcome | None:
    for cls in type(exc).__mro__:
        found = _BY_CLASS.get((cls.__module__.partition(".")[0], cls.__name__))
        if found is not None:
            return found
    return None


def _wrapped(exc: BaseException) -> Iterator[BaseException]:
    """What an exception wraps on purpose: its cause (`raise ... from`), urllib3's and urllib's
    `reason`, and exceptions among its args (requests wraps urllib3's MaxRetryError that way).
    Not its context: an error merely raised while handling another (perhaps an earlier
    attempt's refusal) says nothing about whether this send reached the provider."""
    reason = getattr(exc, "reason", None)
    for inner in (exc.__cause__, reason, *exc.args):
        if isinstance(inner, BaseException):
            yield inner


def outcome_of(exc: BaseException) -> Outcome | None:
    """The transport outcome `exc` means, or None when it is not a transport failure known
    here. A `connection_error` is refined by what the exception wraps (see the module doc)."""
    seen: set[int] = set()
    queue = [exc]
    best: Outcome | None = None
    while queue and len(seen) < _MAX_DEPTH:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        own = _own_outcome(current)
        if own is not None and own is not Outcome.CONNECTION_ERROR:
            return own
        best = best or own
        queue.extend(_wrapped(current))
    return best


def _int_status(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and (
        100 <= value <= 599) else None


def status_of(value: object) -> int | None:
    """The HTTP status a response or an SDK object/error carries, if any: `status_code`
    (httpx, requests, slack_sdk, openai's APIStatusError), `status` (aiohttp), `http_status`
    (stripe's errors), `last_response.code` (stripe's objects), or the same on `.response`."""
    for holder in (value, getattr(value, "response", None), getattr(value, "last_response", None)):
        if holder is None:
            continue
        for name in ("status_code", "http_status", "status", "code"):
            try:
                found = _int_status(getattr(holder, name, None))
            except Exception:  # a property that needs a read body, a closed stream
                found = None
            if found is not None:
                return found
    return None


@dataclass(frozen=True, slots=True)
class ResultReading:
    """What a returned value tells the attempt: the status, and the provider's receipt."""

    status: int
    receipt: MatchIn | None


def _body(value: object) -> Mapping[str, Any] | None:
    if isinstance(value, Mapping):
        return value
    if isinstance(value, str | bytes) and value[:1] in ("{", b"{"):  # a tool's JSON answer
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return parsed if isinstance(parsed, Mapping) else None
    data = getattr(value, "data", None)  # slack_sdk's SlackResponse
    if isinstance(data, Mapping):
        return data
    read_json = getattr(value, "json", None)  # httpx and requests responses, not aiohttp's
    if callable(read_json) and not inspect.iscoroutinefunction(read_json) and (
            status_of(value) is not None):
        try:
            parsed = read_json()
        except Exception:  # not JSON, or an aiohttp coroutine we will not await here
            return None
        return parsed if isinstance(parsed, Mapping) else None
    return None


def _ref_and_hash(value: object) -> tuple[object, object]:
    body = _body(value)
    if body is not None:
        ref = body.get("id")
        if ref is None and "ts" in body and "channel" in body:  # Slack: channel/ts
            ref = f"{body['channel']}/{body['ts']}"
        return ref, body.get("request_hash")
    try:  # an SDK object: stripe's StripeObject, openai's and pydantic models
        return getattr(value, "id", None), None
    except Exception:
        return None, None


def read_result(value: object) -> ResultReading:
    """Read a returned value: its status (200 when it carries none: the callee returned, so it
    claims success) and a receipt from its `id` (a dict's, an SDK object's, a JSON body's).
    A `request_hash` the provider echoes binds the receipt; nothing else is taken from the
    body. Reading never raises: a value it cannot read gives no receipt, and the attempt is
    recorded all the same."""
    status = status_of(value) or 200
    ref, echoed = _ref_and_hash(value)
    if not isinstance(ref, str | int) or isinstance(ref, bool) or not (0 < len(str(ref)) <= 255):
        return ResultReading(status, None)
    bound = echoed if isinstance(echoed, str) and _HASH.match(echoed) else None
    return ResultReading(status, MatchIn(provider_ref=str(ref), request_hash=bound)
                  if 200 <= status < 300 else None)
