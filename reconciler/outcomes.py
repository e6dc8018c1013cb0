"""What a caller saw of a dispatch, read off the exception its transport raised."""

from __future__ import annotations

import httpx

from reconciler.domain import Outcome


def outcome_of(exc: BaseException) -> Outcome | None:
    """The transport outcome an httpx exception means; None if it is not a transport failure.

    A connect failure means no byte of the request left the client; a timeout after that may
    have reached the provider, so it is a timeout, never `not_sent`."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return Outcome.NOT_SENT
    if isinstance(exc, httpx.TimeoutException):
        return Outcome.TIMEOUT
    if isinstance(exc, httpx.TransportError):
        return Outcome.CONNECTION_ERROR
    return None
