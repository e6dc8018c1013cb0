"""The Anthropic Messages API as a `Model`: one POST /v1/messages per completion, on httpx.

A model call has no side effect outside: it reads a conversation and returns text. Sending it
again is therefore safe, unlike the tool calls the reconciler guards, so transient failures
(429, 5xx including 529 overloaded, timeouts, dropped connections) are retried here, a bounded
number of times. The API key goes into one request header and nowhere else: not in logs, not in
exception messages.
"""

from __future__ import annotations

import logging
import math
import os
from types import TracebackType
from typing import Any, Self

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

from reconciler.errors import ReconcilerError
from reconciler.runs.messages import (
    ModelRequest,
    ModelResponse,
    message_to_json,
    response_from_json,
    tool_to_json,
)
from reconciler.runtime.models import Model, ModelCallError

log = logging.getLogger(__name__)

API_VERSION = "2023-06-01"
KEY_VARIABLE = "ANTHROPIC_API_KEY"
#: Transient answers, besides every 5xx (529 is "overloaded"): a timeout, and "slow down".
_RETRY_STATUSES = frozenset({408, 429})


class MissingApiKeyError(ReconcilerError):
    """No API key: set the ANTHROPIC_API_KEY environment variable or pass api_key=."""


class _Retryable(Exception):
    """A failure worth another try; `retry_after_s` is the server's requested wait, if any."""

    def __init__(self, failure: ModelCallError, retry_after_s: float | None = None) -> None:
        super().__init__(str(failure))
        self.failure = failure
        self.retry_after_s = retry_after_s


class AnthropicModel(Model):
    """Completions from Anthropic's Messages API (non-streaming).

    `max_retries` retries follow the first try; each waits `backoff_s` doubling, or what the
    server's retry-after asks, never more than `max_wait_s`. A client passed in is used as is
    (and left open); otherwise the model owns one, closed by `aclose` or `async with`.
    """

    def __init__(self, *, api_key: str | None = None, model: str,
                 base_url: str = "https://api.anthropic.com",
                 client: httpx.AsyncClient | None = None, timeout_s: float = 60.0,
                 max_retries: int = 2, backoff_s: float = 0.5, max_wait_s: float = 30.0) -> None:
        key = api_key if api_key is not None else os.environ.get(KEY_VARIABLE, "")
        if not key:
            raise MissingApiKeyError(f"no Anthropic API key: set {KEY_VARIABLE} or pass api_key=")
        self.model = model
        self._url = f"{base_url.rstrip('/')}/v1/messages"
        self._headers = {"x-api-key": key, "anthropic-version": API_VERSION,
                         "content-type": "application/json"}
        self._key = key
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient()
        self._timeout = httpx.Timeout(timeout_s)
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_wait_s = max_wait_s

    def __repr__(self) -> str:  # the default would be harmless today; this stays keyless
        return f"AnthropicModel(model={self.model!r}, url={self._url!r})"

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body for `request`; an empty system prompt or tool list is left out."""
        body: dict[str, Any] = {"model": self.model, "max_tokens": request.max_tokens,
                                "messages": [message_to_json(m) for m in request.messages]}
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [tool_to_json(t) for t in request.tools]
        return body

    async def complete(self, request: ModelRequest) -> ModelResponse:
        body = self.body(request)
        retrying = AsyncRetrying(stop=stop_after_attempt(self.max_retries + 1), wait=self._wait,
                                 retry=retry_if_exception_type(_Retryable),
                                 before_sleep=_note_retry, reraise=True)
        try:
            # Cancellation is not caught anywhere below: it leaves httpx mid-request, which
            # closes the connection, so the API stops working on an answer no one will read.
            return await retrying(self._once, body)
        except _Retryable as exc:
            failure = exc.failure
        except ModelCallError as exc:
            failure = exc
        failure.attempts = retrying.statistics.get("attempt_number", 1)
        raise failure from None

    async def _once(self, body: dict[str, Any]) -> ModelResponse:
        try:
            response = await self._client.post(self._url, json=body, headers=self._headers,
                                               timeout=self._timeout)
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise _Retryable(ModelCallError(
                f"no answer from the Messages API ({type(exc).__name__}); check the network "
                "and base_url, or try again later")) from None
        if response.status_code == 200:
            return self._parsed(response)
        failure = self._failure(response)
        if response.status_code in _RETRY_STATUSES or response.status_code >= 500:
            raise _Retryable(failure, _retry_after_s(response))
        raise failure

    def _parsed(self, response: httpx.Response) -> ModelResponse:
        try:
            return response_from_json(response.json())
        except ValueError as exc:  # not JSON, or a ModelWireError
            raise ModelCallError(f"the Messages API answered 200 with a body this adapter cannot "
                                 f"read: {self._scrubbed(str(exc))}", status=200) from None

    def _failure(self, response: httpx.Response) -> ModelCallError:
        status = response.status_code
        error_type, message = _error_of(response)
        return ModelCallError(
            f"the Messages API answered {status} {error_type or '(no error type)'}: "
            f"{self._scrubbed(message)}; {_next_step(status)}",
            status=status, error_type=error_type)

    def _scrubbed(self, text: str) -> str:
        # The API never echoes the key as far as we know; this holds even if one day it does.
        return text.replace(self._key, "[redacted]")

    def _wait(self, state: RetryCallState) -> float:
        failure = state.outcome.exception() if state.outcome else None
        asked = failure.retry_after_s if isinstance(failure, _Retryable) else None
        backoff = self.backoff_s * 2.0 ** (state.attempt_number - 1)
        return min(asked if asked is not None else backoff, self.max_wait_s)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()


def _error_of(response: httpx.Response) -> tuple[str | None, str]:
    """The API's error.type and error.message, or (None, the start of the body) when the body is
    not the API's error shape (a proxy's page, say)."""
    try:
        error = response.json().get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            kind = error.get("type")
            return (kind if isinstance(kind, str) else None), error["message"]
    except (ValueError, AttributeError):
        pass
    return None, response.text[:200] or "(empty body)"


def _next_step(status: int) -> str:
    if status == 401:
        return f"check the API key ({KEY_VARIABLE})"
    if status == 403:
        return "the key lacks permission for this model or feature"
    if status == 429 or status >= 500:
        return "the API is busy or failing; try again later"
    return "the request was refused as sent; fix what the message names"


def _retry_after_s(response: httpx.Response) -> float | None:
    """The wait the server asks for, in seconds: retry-after-ms or retry-after (a number)."""
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
