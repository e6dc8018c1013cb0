"""The Anthropic Messages API as a `Model`: one POST /v1/messages per completion, on httpx,
answered whole (`complete`) or streamed as server-sent events (`stream`).

Retries, streams and the key's safety are `model_http`'s (read there why a model call may be
retried). The stream's events are read as the SDK accumulates them (anthropic-sdk-python,
src/anthropic/lib/streaming/_messages.py, `accumulate_event`): message_start carries the usage
so far, content_block_start/delta/stop build each block (text_delta, input_json_delta), and
message_delta's usage counts are cumulative totals that overwrite those of message_start.
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx

from reconciler.core.errors import ReconcilerError
from reconciler.core.runs.messages import (
    Delta,
    ModelRequest,
    ModelResponse,
    ModelWireError,
    TextDelta,
    ToolUseDelta,
    message_to_json,
    response_from_json,
    tool_to_json,
)
from reconciler.runtime.model_http import (
    HttpModel,
    JsonEventDecoder,
    ProviderHttp,
    StreamError,
)
from reconciler.runtime.models import DeltaSink, StreamingModel

API_VERSION = "2023-06-01"
KEY_VARIABLE = "ANTHROPIC_API_KEY"
DEFAULT_BASE_URL = "https://api.anthropic.com"


class MissingApiKeyError(ReconcilerError):
    """No API key: set the ANTHROPIC_API_KEY environment variable or pass api_key=."""


class AnthropicModel(HttpModel, StreamingModel):
    """Completions from Anthropic's Messages API, whole or streamed.

    `max_retries` retries follow the first try; each waits `backoff_s` doubling, or what the
    server's retry-after asks, never more than `max_wait_s`. A client passed in is used as is
    (and left open); otherwise the model owns one, closed by `aclose` or `async with`.
    """

    def __init__(self, *, api_key: str | None = None, model: str,
                 base_url: str = DEFAULT_BASE_URL,
                 client: httpx.AsyncClient | None = None, timeout_s: float = 60.0,
                 max_retries: int = 2, backoff_s: float = 0.5, max_wait_s: float = 30.0) -> None:
        key = api_key if api_key is not None else os.environ.get(KEY_VARIABLE, "")
        if not key:
            raise MissingApiKeyError(f"no Anthropic API key: set {KEY_VARIABLE} or pass api_key=")
        self.model = model
        self._url = f"{base_url.rstrip('/')}/v1/messages"
        self._headers = {"x-api-key": key, "anthropic-version": API_VERSION,
                         "content-type": "application/json"}
        self._http = ProviderHttp(api="Messages API", key=key, key_variable=KEY_VARIABLE,
                                  client=client, timeout_s=timeout_s, max_retries=max_retries,
                                  backoff_s=backoff_s, max_wait_s=max_wait_s)

    def __repr__(self) -> str:  # the default would be harmless today; this stays keyless
        return f"AnthropicModel(model={self.model!r}, url={self._url!r})"

    def body(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON body for `request`; an empty system prompt or tool list is left out."""
        body: dict[str, Any] = {"model": self.model, "max_tokens": request.max_tokens,
                                "messages": [message_to_json(m) for m in request.messages]}
        if request.system:
            body["system"] = request.system
        if request.tools:
            body["tools"] = [tool_to_json(t) for t in request.tools]
        if stream:
            body["stream"] = True
        return body

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return await self._http.post(self._url, self._headers, self.body(request),
                                     response_from_json)

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        return await self._http.stream(self._url, self._headers,
                                       self.body(request, stream=True), _MessagesStream,
                                       on_delta)


class _MessagesStream(JsonEventDecoder):
    """One streamed answer, accumulated into the Messages API's response JSON. Event types it
    does not know (ping, and any added later) are skipped, as the API's versioning policy asks
    of clients; deltas of blocks this adapter does not support (thinking) are skipped too, and
    the block itself is refused at the end as `complete` refuses it."""

    def __init__(self) -> None:
        super().__init__()
        self._blocks: list[dict[str, Any]] = []
        self._json: dict[int, list[str]] = {}
        self._stop_reason: Any = None
        self._usage: dict[str, Any] = {}

    def read(self, event: str, data: dict[str, Any]) -> list[Delta]:
        kind = data.get("type")
        if kind == "error":
            error = data.get("error")
            error = error if isinstance(error, dict) else {}
            raise StreamError.of(error)
        if kind == "message_start":
            self._usage = dict(data["message"]["usage"])
        elif kind == "content_block_start":
            return self._start(data["index"], dict(data["content_block"]))
        elif kind == "content_block_delta":
            return self._delta(data["index"], data["delta"])
        elif kind == "content_block_stop":
            self._stop(data["index"])
        elif kind == "message_delta":
            self._stop_reason = data["delta"].get("stop_reason")
            self._usage.update({name: count for name, count in data.get("usage", {}).items()
                                if count is not None})
        elif kind == "message_stop":
            self.done = True
        return []

    def _start(self, index: int, block: dict[str, Any]) -> list[Delta]:
        if index != len(self._blocks):
            raise ModelWireError(f"content_block_start: index {index}, expected "
                                 f"{len(self._blocks)}")
        self._blocks.append(block)
        if block.get("type") == "tool_use":
            self._json[index] = []
            return [ToolUseDelta(index, block["id"], block["name"], "")]
        if block.get("type") == "text" and block.get("text"):
            return [TextDelta(index, block["text"])]
        return []

    def _delta(self, index: int, delta: dict[str, Any]) -> list[Delta]:
        block = self._block(index, "content_block_delta")
        if delta.get("type") == "text_delta" and block.get("type") == "text":
            block["text"] = block.get("text", "") + delta["text"]
            return [TextDelta(index, delta["text"])]
        if delta.get("type") == "input_json_delta" and block.get("type") == "tool_use":
            self._json[index].append(delta["partial_json"])
            return [ToolUseDelta(index, block["id"], block["name"], delta["partial_json"])]
        return []

    def _stop(self, index: int) -> None:
        block = self._block(index, "content_block_stop")
        if block.get("type") == "tool_use":
            arguments = "".join(self._json.pop(index, []))
            # A call without arguments streams no fragment at all: its input is {}.
            block["input"] = json.loads(arguments) if arguments else {}

    def _block(self, index: int, where: str) -> dict[str, Any]:
        if not 0 <= index < len(self._blocks):
            raise ModelWireError(f"{where}: no content block {index} was started")
        return self._blocks[index]

    def result(self) -> ModelResponse:
        return response_from_json({"content": self._blocks, "stop_reason": self._stop_reason,
                                   "usage": self._usage})
