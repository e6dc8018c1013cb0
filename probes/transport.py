"""One read-only HTTP GET, retried on transient trouble and bounded in time and size.

Transient means the provider may answer if asked again soon: connect errors, timeouts, dropped
connections, 429 and 502/503/504, and GitHub's rate-limit 403 (`x-ratelimit-remaining: 0`).
A rate-limit answer is waited out as the provider asks (`Retry-After` in seconds or as an HTTP
date, GitHub's `x-ratelimit-reset`), never sooner, and closes the provider's request budget for
every probe sharing it (probes/budget.py); a wait that would pass the deadline ends the read as
`rate limited`. Everything is bounded (tries, per-try timeout, one deadline for all tries and
pages, a response size cap) because a reconcile pass must end even when a provider hangs.

The wire below is the lean HTTP/1.1 client on an event loop (`probes/http11.py`, `aget`),
or httpx, blocking, when a transport is injected (tests, embedding) or the environment names a
proxy (`Clients`, `get`); both raise httpx's exception classes, mapped here.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import urllib.request
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import cache
from typing import Any, Protocol

import httpx
from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception_type

from probes.budget import Budget, BudgetSpent
from probes.http11 import LeanClient

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
    headers: Mapping[str, str] = field(default_factory=dict)


class FetchError(Exception):
    """No usable answer; the message is short and holds no URL, header or response data.
    `retry_after`: the provider asked for a pause (a rate limit's `Retry-After` past the
    deadline, or the request budget it shares), in seconds: no request went out that the
    provider answered, so the read was not made, and another is worth making only after it."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _Transient(Exception):
    """Worth another try; `retry_after` is the provider's own wait, in seconds, if it gave one."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Head(Protocol):
    """What decides whether an answer is worth another try: its status and headers."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...


def retry_after(response: Head, now: Callable[[], float] = time.time) -> float | None:
    """The wait a rate-limit answer asks for, in seconds; None when it names none."""
    value = response.headers.get("retry-after")
    if value is not None:
        value = value.strip()
        if value.isdigit():
            return float(value)
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(when.timestamp() - now(), 0.0)
    reset = response.headers.get("x-ratelimit-reset")
    if reset is not None and reset.strip().isdigit():
        return max(float(reset) - now(), 0.0)
    return None


def _rate_limited(response: Head) -> bool:
    # GitHub answers a spent primary rate limit with 403 and x-ratelimit-remaining: 0, and a
    # secondary one with 403 or 429 and Retry-After; a plain 403 is a permission error.
    if response.status_code == 429:
        return True
    return response.status_code == 403 and (
        response.headers.get("x-ratelimit-remaining") == "0"
        or "retry-after" in response.headers)


class Clients:
    """The HTTP clients of one probe, each used by one call at a time and kept for the next.

    A call takes an idle client (or a new one) and gives it back when done, with its connection
    kept alive: a new client and connection per call cost more than the request itself, and
    one client shared by every call in flight costs more still (its pool serialises them). A
    call abandoned mid-request keeps its client. Redirects are not followed: one could carry
    the credential to another host, and a probe reads where it is configured to, nowhere else.

    A call on the probe loop takes an `http11.LeanClient` (`aclient`: several times
    cheaper per read than httpx's own); one that reads through httpx takes an `httpx.Client`
    (`client`): when a transport is given (a test's `httpx.MockTransport`, an embedder's) or
    the environment names a proxy at the time the client is made (`HTTP_PROXY`,
    `HTTPS_PROXY`, `ALL_PROXY`: httpx honours them, and `NO_PROXY`, as it always did here).
    """

    def __init__(self, headers: Mapping[str, str], transport: httpx.BaseTransport | None,
                 keep: int = 64) -> None:
        self.headers, self.transport, self.keep = dict(headers), transport, keep
        # No lock: a deque's appends and pops are thread-safe (the collections docs), and with
        # 64 calls in flight a lock around them was contended.
        self._idle: deque[httpx.Client] = deque()
        self._idle_async: deque[tuple[asyncio.AbstractEventLoop, LeanClient]] = deque()

    @contextmanager
    def client(self) -> Iterator[httpx.Client]:
        """An idle `httpx.Client`, or a new one, given back when done (calls that are not
        `lean`)."""
        try:
            session = self._idle.pop()
        except IndexError:
            session = httpx.Client(headers=self.headers, transport=self.transport,
                                   verify=_tls(), follow_redirects=False)
        try:
            yield session
        finally:
            # As fresh as a new client for the next call: no cookie of this one goes along.
            session.cookies.clear()
            # Two calls ending at once may both keep theirs: `keep` is a bound give or take.
            if len(self._idle) < self.keep:
                self._idle.append(session)
            else:
                session.close()

    @property
    def lean(self) -> bool:
        """Whether calls go over the lean client on an event loop (`aclient`), not httpx (a
        transport given, or a proxy named in the environment when the client would be made: an
        idle one was made lean, and reading the environment costs more than a read's own
        work)."""
        return self.transport is None and (bool(self._idle_async) or not _proxied())

    @asynccontextmanager
    async def aclient(self) -> AsyncIterator[LeanClient]:
        """`client` for calls on one event loop (the probe loop's): an idle
        `http11.LeanClient`, or a new one, given back when done."""
        loop = asyncio.get_running_loop()
        session = None
        while self._idle_async and session is None:
            kept, session = self._idle_async.pop()
            if kept is not loop:
                session = None  # its connections died with the loop they were made on
        if session is None:
            session = LeanClient(self.headers, _tls())
        try:
            yield session
        finally:
            if len(self._idle_async) < self.keep:
                self._idle_async.append((loop, session))
            else:
                session.close()


def _proxied() -> bool:
    # The variables httpx reads with trust_env (it asks urllib.request.getproxies too).
    return any(scheme in ("http", "https", "all")
               for scheme in urllib.request.getproxies())


@cache
def _tls() -> ssl.SSLContext:
    # Loading the CA bundle takes ~30 ms: once per process, not once per probe call.
    return httpx.create_ssl_context()


class _Tries:
    """The bounds of one read, shared by `get` and `aget`: tenacity's stop, wait and retry
    strategies, the per-try timeout, and what a spent read reports.

    The first try runs before tenacity is involved: most reads need one, and setting up
    tenacity's machinery (above all `AsyncRetrying`'s) cost about as much as the read's
    own parsing. When it fails, tenacity is handed that failure as its own first attempt (the
    replay raises it again, without I/O), so it stops, waits and counts exactly as if it had
    run the first try itself:

        try 1 ──✗──▶ tenacity: attempt 1 = the replayed failure ─▶ wait ─▶ try 2 ─▶ ...
    """

    def __init__(self, policy: RetryPolicy, deadline: float | None) -> None:
        self.policy = policy
        self.deadline = time.monotonic() + policy.deadline_s if deadline is None else deadline

    def remaining(self) -> float:
        return max(self.deadline - time.monotonic(), 0.0)

    def timeout(self) -> float:
        return min(self.policy.timeout_s, max(self.remaining(), 0.05))

    def strategies(self) -> dict[str, Any]:
        def asked_wait(state: RetryCallState) -> float | None:
            failure = state.outcome.exception() if state.outcome else None
            return failure.retry_after if isinstance(failure, _Transient) else None

        def wait(state: RetryCallState) -> float:
            asked = asked_wait(state)
            backoff = self.policy.backoff_s * 2.0 ** (state.attempt_number - 1)
            return min(max(backoff, asked or 0.0), self.remaining())

        def stop(state: RetryCallState) -> bool:
            asked = asked_wait(state)
            return (state.attempt_number >= self.policy.tries or self.remaining() <= 0
                    or (asked is not None and asked > self.remaining()))

        def note_retry(state: RetryCallState) -> None:
            failure = state.outcome.exception() if state.outcome else None
            log.debug("probe read: %s on try %d, retrying", failure, state.attempt_number)

        return {"stop": stop, "wait": wait, "retry": retry_if_exception_type(_Transient),
                "before_sleep": note_retry, "reraise": True}

    def spent(self, exc: _Transient, tries: int) -> FetchError:
        if exc.retry_after is not None and exc.retry_after > self.remaining():
            return FetchError(f"{exc}, asked to wait {exc.retry_after:g}s: past the deadline "
                              f"(after {tries} tries)", exc.retry_after)
        return FetchError(f"{exc} after {tries} tries")


class _Body:
    """An answer's body as it arrives, held to the size cap and the read's deadline."""

    def __init__(self, tries: _Tries) -> None:
        self.tries = tries
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.tries.policy.max_bytes:
            raise FetchError(f"response larger than {self.tries.policy.max_bytes} bytes")
        if time.monotonic() > self.tries.deadline:
            # A per-read timeout does not stop a server that trickles bytes; the deadline does.
            raise FetchError("response still arriving at the deadline")


def _transient(response: Head, budget: Budget | None) -> None:
    """`_Transient` for an answer worth another try (a rate limit closes the budget)."""
    if _rate_limited(response) or response.status_code in RETRY_STATUSES:
        wait = retry_after(response)
        if wait is not None and budget is not None:
            budget.close_for(wait)
        limited = "rate limited: " if _rate_limited(response) else ""
        raise _Transient(f"{limited}HTTP {response.status_code}", wait)


@contextmanager
def _wire_errors() -> Iterator[None]:
    """httpx's exception classes (either client raises them) as `_Transient` or `FetchError`."""
    try:
        yield
    except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
        raise _Transient(type(exc).__name__) from None
    except httpx.HTTPError as exc:
        raise FetchError(f"request failed: {type(exc).__name__}") from None


@contextmanager
def _budget_spent() -> Iterator[None]:
    """A request the provider's budget cannot fit before the deadline, as a failed read."""
    try:
        yield
    except BudgetSpent as exc:
        raise FetchError(f"rate limited: {exc}", exc.ready_in) from None


def get(session: httpx.Client, url: str, params: Mapping[str, str], policy: RetryPolicy,
        clock: Callable[[], datetime], *, deadline: float | None = None,
        headers: Mapping[str, str] | None = None, budget: Budget | None = None) -> Reply:
    """GET `url` with `params` until a non-transient answer, or raise `FetchError`.

    `deadline` (monotonic) bounds every try, wait and byte; by default `policy.deadline_s` from
    now. `budget`, when given, is spent once per try.
    """
    tries = _Tries(policy, deadline)

    def once() -> Reply:
        if budget is not None:
            with _budget_spent():
                budget.take(tries.deadline)
        # The send time, not the arrival time, dates the answer: the provider's state is at least
        # this recent, which is the safe side for a lagging read's "late enough" test.
        at = clock()
        with _wire_errors(), session.stream("GET", url, params=params or None, headers=headers,
                                            timeout=tries.timeout()) as response:
            _transient(response, budget)
            body = _Body(tries)
            for chunk in response.iter_bytes():
                body.add(chunk)
            return Reply(at, response.status_code, bytes(body.data), dict(response.headers))

    try:
        return once()
    except _Transient as exc:
        first = [exc]

    def again() -> Reply:
        if first:
            raise first.pop()
        return once()

    retrying = Retrying(**tries.strategies())
    try:
        return retrying(again)
    except _Transient as exc:
        raise tries.spent(exc, retrying.statistics["attempt_number"]) from None


async def aget(session: LeanClient, url: str, params: Mapping[str, str],
               policy: RetryPolicy, clock: Callable[[], datetime], *,
               deadline: float | None = None, headers: Mapping[str, str] | None = None,
               budget: Budget | None = None) -> Reply:
    """`get` on an event loop, over `http11`: the same tries, bounds and errors."""
    tries = _Tries(policy, deadline)

    async def once() -> Reply:
        if budget is not None:
            with _budget_spent():
                await budget.atake(tries.deadline)
        at = clock()
        with _wire_errors():
            async with session.stream(url, params=params or None, headers=headers,
                                      timeout=tries.timeout()) as response:
                _transient(response, budget)
                body = _Body(tries)
                async for chunk in response.aiter_bytes():
                    body.add(chunk)
                return Reply(at, response.status_code, bytes(body.data), dict(response.headers))

    try:
        return await once()
    except _Transient as exc:
        first = [exc]

    async def again() -> Reply:
        if first:
            raise first.pop()
        return await once()

    retrying = AsyncRetrying(**tries.strategies())
    try:
        return await retrying(again)
    except _Transient as exc:
        raise tries.spent(exc, retrying.statistics["attempt_number"]) from None
