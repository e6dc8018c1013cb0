"""One read-only HTTP GET, retried on transient trouble and bounded in time and size.

Transient means the provider may answer if asked again soon: connect errors, timeouts, dropped
connections, 429 and 502/503/504. Everything is bounded (tries, per-try timeout, a deadline
for all tries, a response size cap) because a reconcile pass must end even when a provider hangs.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import cache

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception_type

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard to try: `tries` in all, waits of `backoff_s` doubling, within `deadline_s`."""

    tries: int = 3
    backoff_s: float = 0.25
    timeout_s: float = 5.0
    deadline_s: float = 15.0
    max_bytes: int = 1 << 20


DEFAULT_POLICY = RetryPolicy()


@dataclass(frozen=True, slots=True)
class Reply:
    """A final (non-transient) answer; `at` is when the try that got it was sent."""

    at: datetime
    status: int
    content: bytes


class FetchError(Exception):
    """No usable answer; the message is short and holds no URL, header or response data."""


class _Transient(Exception):
    """Worth another try."""


class Clients:
    """The HTTP clients of one probe, each used by one call at a time and kept for the next.

    A call takes an idle client (or a new one) and gives it back when done, with its connection
    kept alive: a new client and connection per call cost more than the request itself, and
    one client shared by every call in flight costs more still (its pool serialises them). A
    call abandoned mid-request keeps its client. Redirects are not followed: one could carry
    the credential to another host, and a probe reads where it is configured to, nowhere else.
    """

    def __init__(self, headers: Mapping[str, str], transport: httpx.BaseTransport | None,
                 keep: int = 64) -> None:
        self.headers, self.transport, self.keep = dict(headers), transport, keep
        self._idle: list[httpx.Client] = []
        self._lock = threading.Lock()

    @contextmanager
    def client(self) -> Iterator[httpx.Client]:
        with self._lock:
            session = self._idle.pop() if self._idle else None
        if session is None:
            session = httpx.Client(headers=self.headers, transport=self.transport,
                                   verify=_tls(), follow_redirects=False)
        try:
            yield session
        finally:
            # As fresh as a new client for the next call: no cookie of this one goes along.
            session.cookies.clear()
            with self._lock:
                kept = len(self._idle) < self.keep
                if kept:
                    self._idle.append(session)
            if not kept:
                session.close()


@cache
def _tls() -> ssl.SSLContext:
    # Loading the CA bundle takes ~30 ms: once per process, not once per probe call.
    return httpx.create_ssl_context()


def get(session: httpx.Client, url: str, params: Mapping[str, str], policy: RetryPolicy,
        clock: Callable[[], datetime]) -> Reply:
    """GET `url` with `params` until a non-transient answer, or raise `FetchError`."""
    deadline = time.monotonic() + policy.deadline_s

    def remaining() -> float:
        return max(deadline - time.monotonic(), 0.0)

    def once() -> Reply:
        # The send time, not the arrival time, dates the answer: the provider's state is at least
        # this recent, which is the safe side for a lagging read's "late enough" test.
        at = clock()
        timeout = min(policy.timeout_s, max(remaining(), 0.05))
        try:
            with session.stream("GET", url, params=params, timeout=timeout) as response:
                if response.status_code in RETRY_STATUSES:
                    raise _Transient(f"HTTP {response.status_code}")
                return Reply(at, response.status_code, _read(response, deadline, policy))
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise _Transient(type(exc).__name__) from None
        except httpx.HTTPError as exc:
            raise FetchError(f"request failed: {type(exc).__name__}") from None

    def wait(state: RetryCallState) -> float:
        return min(policy.backoff_s * 2.0 ** (state.attempt_number - 1), remaining())

    def stop(state: RetryCallState) -> bool:
        return state.attempt_number >= policy.tries or remaining() <= 0

    def note_retry(state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome else None
        log.debug("probe read: %s on try %d, retrying", failure, state.attempt_number)

    retrying = Retrying(stop=stop, wait=wait, retry=retry_if_exception_type(_Transient),
                        before_sleep=note_retry, reraise=True)
    try:
        return retrying(once)
    except _Transient as exc:
        raise FetchError(f"{exc} after {retrying.statistics['attempt_number']} tries") from None


def _read(response: httpx.Response, deadline: float, policy: RetryPolicy) -> bytes:
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > policy.max_bytes:
            raise FetchError(f"response larger than {policy.max_bytes} bytes")
        if time.monotonic() > deadline:
            # A per-read timeout does not stop a server that trickles bytes; the deadline does.
            raise FetchError("response still arriving at the deadline")
    return bytes(body)
