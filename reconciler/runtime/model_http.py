"""Calls to a model provider's HTTP API, for the provider adapters: bounded retries of transient
failures, server-sent event streams, failures that never carry the key.

A model call has no side effect outside: it reads a conversation and returns text. Sending it
again is therefore safe, unlike the tool calls the reconciler guards, so transient failures
(408, 429, every 5xx including Anthropic's 529 overloaded, timeouts, dropped connections) are
retried here, a bounded number of times. A stream is retried the same way until its first delta
reaches the caller's sink; after that a retry would hand the sink a second, different answer:

    POST ─▶ status ─▶ event ─ event ─▶ delta ─ delta ─ ... ─▶ last event
    └─ 429 / 5xx / no answer / error event: retried ─┘└─ any failure: failed for good

The API key goes into one request header and nowhere else: not in logs, not in exception
messages (a provider's message is scrubbed of it, should one ever echo it).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from types import TracebackType
from typing import Any, Protocol, Self

import httpx
from httpx_sse import ServerSentEvent, aconnect_sse
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from reconciler.core.runs.messages import Delta, ModelResponse, ModelWireError
from reconciler.runtime.models import DeltaSink, ModelCallError

log = logging.getLogger(__name__)

#: Transient answers, besides every 5xx: a timeout, and "slow down".
_RETRY_STATUSES = frozenset({408, 429})
#: Error types (Anthropic's `error.type`, OpenAI's `type` or `code`) a stream may end with that
#: say "try again" rather than "this request is wrong".
_TRANSIENT_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error",
                               "server_error", "rate_limit_exceeded", "timeout"})
_TRANSPORT_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


class StreamError(Exception):
    """A failure reported inside a 200 answer (a stream's error event, a failed response),
    raised by a decoder or parser: the provider's error type (or code) and message."""

    def __init__(self, error_type: str | None, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message

    @classmethod
    def of(cls, error: dict[str, Any], names: tuple[str, ...] = ("type", "code")) -> StreamError:
        """The failure an error object reports: its type (or code) and its message."""
        return cls(error_type_of(error, names), str(error.get("message", "(no message)")))


class StreamDecoder(Protocol):
    """One provider's stream read into a response: `feed` takes each event in order and returns
    the deltas it adds, `done` says the last event came, `result` is the response. Malformed
    events raise ValueError (a ModelWireError), error events StreamError."""

    done: bool

    def feed(self, event: ServerSentEvent) -> list[Delta]: ...

    def result(self) -> ModelResponse: ...


class JsonEventDecoder:
    """A stream whose events carry JSON objects: subclasses `read` each one into the deltas it
    adds, and set `done` at the last event. A missing or mistyped field is a ModelWireError."""

    def __init__(self) -> None:
        self.done = False

    def feed(self, event: ServerSentEvent) -> list[Delta]:
        if not event.data:
            return []
        data = json.loads(event.data)
        if not isinstance(data, dict):
            raise ModelWireError(f"a stream event's data must be an object, not {data!r:.80}")
        try:
            return self.read(event.event, data)
        except (KeyError, TypeError, AttributeError, IndexError) as exc:
            raise ModelWireError(f"{data.get('type', event.event)} event: a field is missing or "
                                 f"malformed ({type(exc).__name__}: {exc})") from None

    def read(self, event: str, data: dict[str, Any]) -> list[Delta]:
        raise NotImplementedError


class _Retryable(Exception):
    """A failure worth another try; `retry_after_s` is the server's requested wait, if any."""

    def __init__(self, failure: ModelCallError, retry_after_s: float | None = None) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.retry_after_s = retry_after_s


class HttpModel:
    """What a model over `ProviderHttp` shares: it is an async context manager, and leaving it
    (or `aclose`) closes the HTTP client."""

    _http: ProviderHttp

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()


class ProviderHttp:
    """One provider's HTTP calls. `api` names it in messages ("the Messages API"),
    `key_variable` is where users set the key. `max_retries` retries follow the first try; each
    waits `backoff_s` doubling, or what the server's retry-after asks, never more than
    `max_wait_s`. A client passed in is used as is (and left open); otherwise one is owned,
    closed by `aclose`."""

    def __init__(self, *, api: str, key: str, key_variable: str,
                 client: httpx.AsyncClient | None, timeout_s: float, max_retries: int,
                 backoff_s: float, max_wait_s: float) -> None:
        self.api = api
        self.key_variable = key_variable
        self._key = key
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient()
        self._timeout = httpx.Timeout(timeout_s)
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_wait_s = max_wait_s

    async def post(self, url: str, headers: dict[str, str], body: dict[str, Any],
                   parse: Callable[[Any], ModelResponse]) -> ModelResponse:
        """POST `body` and `parse` the JSON of the 200 answer, retrying transient failures."""
        async def attempt() -> ModelResponse:
            return await self._post_once(url, headers, body, parse)
        return await self._retried(attempt)

    async def stream(self, url: str, headers: dict[str, str], body: dict[str, Any],
                     decoder: Callable[[], StreamDecoder], on_delta: DeltaSink) -> ModelResponse:
        """POST `body` for an event stream, read it with a fresh `decoder()` per try and hand
        each delta to `on_delta` (whose own exceptions propagate as they are)."""
        async def attempt() -> ModelResponse:
            return await self._stream_once(url, headers, body, decoder(), on_delta)
        return await self._retried(attempt)

    async def _retried(self, attempt: Callable[[], Awaitable[ModelResponse]]) -> ModelResponse:
        # `attempt` must be a coroutine function: tenacity calls anything else without awaiting.
        retrying = AsyncRetrying(stop=stop_after_attempt(self.max_retries + 1), wait=self._wait,
                                 retry=retry_if_exception_type(_Retryable),
                                 before_sleep=_note_retry, reraise=True)
        try:
            # Cancellation is not caught anywhere below: it leaves httpx mid-request (or
            # mid-stream), which closes the connection, so the provider stops working on an
            # answer no one will read.
            return await retrying(attempt)
        except _Retryable as exc:
            failure = exc.failure
        except ModelCallError as exc:
            failure = exc
        failure.attempts = retrying.statistics.get("attempt_number", 1)
        raise failure from None

    async def _post_once(self, url: str, headers: dict[str, str], body: dict[str, Any],
                         parse: Callable[[Any], ModelResponse]) -> ModelResponse:
        try:
            response = await self._client.post(url, json=body, headers=headers,
                                               timeout=self._timeout)
        except _TRANSPORT_ERRORS as exc:
            raise self._no_answer(exc) from None
        if response.status_code != 200:
            raise self._refusal(response)
        try:
            return parse(response.json())
        except StreamError as exc:  # a 200 answer that reports a failure (a failed response)
            raise self._failed(exc, emitted=False) from None
        except ValueError as exc:  # not JSON, or a ModelWireError
            raise self._unreadable(exc) from None

    async def _stream_once(self, url: str, headers: dict[str, str], body: dict[str, Any],
                           decoder: StreamDecoder, on_delta: DeltaSink) -> ModelResponse:
        emitted = False
        try:
            async with aconnect_sse(self._client, "POST", url, json=body, headers=dict(headers),
                                    timeout=self._timeout) as source:
                if source.response.status_code != 200:
                    await source.response.aread()
                    raise self._refusal(source.response)
                async with aclosing(source.aiter_sse()) as events:
                    async for event in events:
                        for delta in self._decoded(decoder, event, emitted):
                            emitted = True
                            on_delta(delta)
                        if decoder.done:
                            break
        except _TRANSPORT_ERRORS as exc:
            if emitted:
                raise ModelCallError(
                    f"the {self.api} stream broke after part of the answer "
                    f"({type(exc).__name__}); not retried, as the caller has seen that part",
                    status=200) from None
            raise self._no_answer(exc) from None
        if not decoder.done:
            failure = ModelCallError(f"the {self.api} stream ended before its last event",
                                     status=200)
            if emitted:
                raise failure
            raise _Retryable(failure)
        try:
            return decoder.result()
        except ValueError as exc:
            raise self._unreadable(exc) from None

    def _decoded(self, decoder: StreamDecoder, event: ServerSentEvent,
                 emitted: bool) -> list[Delta]:
        try:
            return decoder.feed(event)
        except StreamError as exc:
            raise self._failed(exc, emitted=emitted) from None
        except ValueError as exc:  # malformed event data, or a ModelWireError
            raise self._unreadable(exc) from None

    def _no_answer(self, exc: Exception) -> _Retryable:
        return _Retryable(ModelCallError(
            f"no answer from the {self.api} ({type(exc).__name__}); check the network and "
            "base_url, or try again later"))

    def _refusal(self, response: httpx.Response) -> ModelCallError | _Retryable:
        status = response.status_code
        error_type, message = _error_of(response)
        failure = ModelCallError(
            f"the {self.api} answered {status} {error_type or '(no error type)'}: "
            f"{self._scrubbed(message)}; {self._next_step(status)}",
            status=status, error_type=error_type)
        if status in _RETRY_STATUSES or status >= 500:
            return _Retryable(failure, _retry_after_s(response))
        return failure

    def _failed(self, exc: StreamError, *, emitted: bool) -> ModelCallError | _Retryable:
        failure = ModelCallError(
            f"the {self.api} answered 200 but failed with {exc.error_type or '(no error type)'}: "
            f"{self._scrubbed(exc.message)}", status=200, error_type=exc.error_type)
        if exc.error_type in _TRANSIENT_ERRORS and not emitted:
            return _Retryable(failure)
        return failure

    def _unreadable(self, exc: Exception) -> ModelCallError:
        return ModelCallError(f"the {self.api} answered 200 with a body this adapter cannot "
                              f"read: {self._scrubbed(str(exc))}", status=200)

    def _next_step(self, status: int) -> str:
        if status == 401:
            return f"check the API key ({self.key_variable})"
        if status == 403:
            return "the key lacks permission for this model or feature"
        if status in _RETRY_STATUSES or status >= 500:
            return "the API is busy or failing; try again later"
        return "the request was refused as sent; fix what the message names"

    def _scrubbed(self, text: str) -> str:
        return text.replace(self._key, "[redacted]")

    def _wait(self, state: RetryCallState) -> float:
        failure = state.outcome.exception() if state.outcome else None
        asked = failure.retry_after_s if isinstance(failure, _Retryable) else None
        backoff = self.backoff_s * 2.0 ** (state.attempt_number - 1)
        return min(asked if asked is not None else backoff, self.max_wait_s)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()


def _error_of(response: httpx.Response) -> tuple[str | None, str]:
    """The error's type (or, for OpenAI, its code when the type is null) and message, or
    (None, the start of the body) when the body is not an API's error shape (a proxy's page)."""
    try:
        error = response.json().get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error_type_of(error), error["message"]
    except (ValueError, AttributeError):
        pass
    return None, response.text[:200] or "(empty body)"


def error_type_of(error: dict[str, Any], names: tuple[str, ...] = ("type", "code")) -> str | None:
    """An error object's `type`, else its `code` (OpenAI sends either, the other null)."""
    for name in names:
        value = error.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _retry_after_s(response: httpx.Response) -> float | None:
    """The wait the server asks for, in seconds: retry-after-ms or retry-after (a number).
    (Both Anthropic's and OpenAI's SDKs read these two headers the same way.)"""
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            seconds = float(response.headers[header]) * scale
        except (KeyError, ValueError):
            continue
        if math.isfinite(seconds):
            return max(seconds, 0.0)
    return None


def _note_retry(state: RetryCallState) -> None:
    failure = state.outcome.exception() if state.outcome else None
    log.warning("model call failed on try %d, retrying: %s", state.attempt_number, failure)
