"""OpenAI-compatible APIs as a `Model`: Chat Completions with tools (POST {base}/chat/completions)
or the Responses API (POST {base}/responses), answered whole or streamed, on httpx.

The same wire is served by OpenAI, Azure OpenAI (its v1 API), vLLM, Ollama, OpenRouter and
LiteLLM; only the base URL (and key) changes, as with the official SDK: `base_url` defaults to
OPENAI_BASE_URL, else https://api.openai.com/v1, and the key comes from OPENAI_API_KEY, sent as
`Authorization: Bearer`. Retries, streams and the key's safety are `model_http`'s.

The shapes follow openai/openai-python (src/openai/types): chat/completion_create_params.py,
chat/chat_completion.py and chat_completion_chunk.py (a stream of `chat.completion.chunk`s
ending in `data: [DONE]`, the usage in a last chunk without choices when
stream_options.include_usage is set), responses/response_create_params.py, response.py and the
response_*_event.py stream events (response.output_item.added, response.output_text.delta,
response.function_call_arguments.delta, response.completed / incomplete / failed, error).

Translation to the runtime's Messages-API shapes:

    runtime                        Chat Completions                 Responses
    system                         {"role": "system"} first         "instructions"
    user text                      {"role": "user"}                 {"role": "user"} item
    assistant text + ToolUseBlock  {"role": "assistant",            {"role": "assistant"} item +
                                    "tool_calls": [function]}        {"type": "function_call"}
    ToolResultBlock                {"role": "tool", tool_call_id}   {"type": "function_call_output"}
    usage: input (uncached)        prompt_tokens - cached - written input_tokens - cached - written
           cache read              prompt_tokens_details            input_tokens_details
                                    .cached_tokens                   .cached_tokens
           cache creation          ...cache_write_tokens, else 0    ...cache_write_tokens, else 0

OpenAI counts cached input inside prompt/input tokens; the runtime's `Usage` (Anthropic's) does
not, so the cached part is moved out, and budgets over `Usage.total()` count each token once. A
tool result that is an error is sent as "Error: ..." (neither API has an error flag for it).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal, Self

import httpx
from httpx_sse import ServerSentEvent

from reconciler.errors import ReconcilerError
from reconciler.runtime.model_http import (
    JsonEventDecoder,
    ProviderHttp,
    StreamDecoder,
    StreamError,
    error_type_of,
)
from reconciler.runtime.models import (
    Block,
    Delta,
    DeltaSink,
    Message,
    ModelRequest,
    ModelResponse,
    ModelWireError,
    StreamingModel,
    TextBlock,
    TextDelta,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseDelta,
    Usage,
)

log = logging.getLogger(__name__)

KEY_VARIABLE = "OPENAI_API_KEY"
BASE_URL_VARIABLE = "OPENAI_BASE_URL"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
Api = Literal["chat", "responses"]
#: Chat Completions' finish_reason as the runtime's stop_reason (others pass through).
_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use",
                 "length": "max_tokens"}


class MissingOpenAIKeyError(ReconcilerError):
    """No API key: set the OPENAI_API_KEY environment variable or pass api_key= (a local server
    that checks no key, such as Ollama or vLLM, accepts any non-empty value)."""


class OpenAIModel(StreamingModel):
    """Completions from an OpenAI-compatible API: `api="chat"` (Chat Completions, the widest
    supported) or `api="responses"` (the Responses API, sent stateless with store=false: every
    call carries the whole conversation, as with the Messages API).

    `max_tokens_field` names the output limit of Chat Completions: OpenAI's current
    "max_completion_tokens" (its reasoning models refuse the older "max_tokens", which some
    compatible servers still expect). Retries as AnthropicModel's; a client passed in is used
    as is (and left open), otherwise the model owns one, closed by `aclose` or `async with`.
    """

    def __init__(self, *, model: str, api: Api = "chat", api_key: str | None = None,
                 base_url: str | None = None, client: httpx.AsyncClient | None = None,
                 timeout_s: float = 60.0, max_retries: int = 2, backoff_s: float = 0.5,
                 max_wait_s: float = 30.0,
                 max_tokens_field: Literal["max_completion_tokens", "max_tokens"] =
                 "max_completion_tokens") -> None:
        if api not in ("chat", "responses"):
            raise ValueError(f"api must be 'chat' or 'responses', not {api!r}")
        key = api_key if api_key is not None else os.environ.get(KEY_VARIABLE, "")
        if not key:
            raise MissingOpenAIKeyError(f"no OpenAI API key: set {KEY_VARIABLE} or pass "
                                        "api_key=")
        base = base_url or os.environ.get(BASE_URL_VARIABLE) or DEFAULT_BASE_URL
        self.model = model
        self.api = api
        self.max_tokens_field = max_tokens_field
        self._url = base.rstrip("/") + ("/chat/completions" if api == "chat" else "/responses")
        self._headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        self._http = ProviderHttp(
            api="Chat Completions API" if api == "chat" else "Responses API", key=key,
            key_variable=KEY_VARIABLE, client=client, timeout_s=timeout_s,
            max_retries=max_retries, backoff_s=backoff_s, max_wait_s=max_wait_s)

    def __repr__(self) -> str:
        return f"OpenAIModel(model={self.model!r}, api={self.api!r}, url={self._url!r})"

    def body(self, request: ModelRequest, *, stream: bool = False) -> dict[str, Any]:
        """The JSON body for `request` in this model's API."""
        if self.api == "chat":
            body = chat_body(self.model, request, self.max_tokens_field)
            if stream:
                body["stream"] = True
                body["stream_options"] = {"include_usage": True}
        else:
            body = responses_body(self.model, request)
            if stream:
                body["stream"] = True
        return body

    async def complete(self, request: ModelRequest) -> ModelResponse:
        parse = chat_response if self.api == "chat" else responses_response
        return await self._http.post(self._url, self._headers, self.body(request), parse)

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        decoder: Callable[[], StreamDecoder] = (
            (lambda: _ChatStream(on_delta)) if self.api == "chat"
            else (lambda: _ResponsesStream(on_delta)))
        return await self._http.stream(self._url, self._headers,
                                       self.body(request, stream=True), decoder)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()


# --- Chat Completions ---------------------------------------------------------------------

def chat_body(model: str, request: ModelRequest,
              max_tokens_field: str = "max_completion_tokens") -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    for message in request.messages:
        messages.extend(_chat_messages(message))
    body: dict[str, Any] = {"model": model, "messages": messages,
                            max_tokens_field: request.max_tokens}
    if request.tools:
        body["tools"] = [{"type": "function", "function": {
            "name": t.name, "description": t.description, "parameters": dict(t.input_schema)}}
            for t in request.tools]
    return body


def _chat_messages(message: Message) -> list[dict[str, Any]]:
    text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
    if message.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": text or None}
        uses = message.tool_uses()
        if uses:
            out["tool_calls"] = [{"id": u.id, "type": "function", "function": {
                "name": u.name, "arguments": json.dumps(dict(u.input))}} for u in uses]
        return [out]
    # The tool messages must follow the assistant message that called them, before any text.
    results = [{"role": "tool", "tool_call_id": b.tool_use_id, "content": _result_text(b)}
               for b in message.content if isinstance(b, ToolResultBlock)]
    return results + ([{"role": "user", "content": text}] if text or not results else [])


def chat_response(data: Any) -> ModelResponse:
    """A chat.completion object as a response (its first choice)."""
    try:
        choice = data["choices"][0]
        message = choice["message"]
        blocks: list[Block] = []
        if text := (message.get("content") or message.get("refusal")):
            blocks.append(TextBlock(_string(text, "message.content")))
        for call in message.get("tool_calls") or []:
            function = call["function"]
            blocks.append(ToolUseBlock(_string(call["id"], "tool_calls[].id"),
                                       _string(function["name"], "function.name"),
                                       _arguments(function.get("arguments"))))
        finish = choice.get("finish_reason")
        return ModelResponse(tuple(blocks), _stop_reason(finish), _chat_usage(data.get("usage")))
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ModelWireError(f"chat.completion: a field is missing or malformed "
                             f"({type(exc).__name__}: {exc})") from None


def _stop_reason(finish: Any) -> str:
    if not isinstance(finish, str) or not finish:
        return "end_turn"
    return _STOP_REASONS.get(finish, finish)


def _chat_usage(usage: Any) -> Usage:
    if usage is None:
        return _unreported()
    return _usage(usage["prompt_tokens"], usage["completion_tokens"],
                  usage.get("prompt_tokens_details"))


class _ChatStream(JsonEventDecoder):
    """chat.completion.chunk events: content and tool_calls fragments (a call's id and name
    come with its first fragment, later ones carry only its index), then the finish_reason,
    then a usage chunk, then [DONE]. Blocks are numbered in order of first appearance."""

    def __init__(self, on_delta: DeltaSink) -> None:
        super().__init__(on_delta)
        self._blocks: list[dict[str, Any]] = []
        self._text_block: int | None = None
        self._calls: dict[int, int] = {}  # tool_calls[].index -> block index
        self._finish: str | None = None
        self._usage: Any = None

    def feed(self, event: ServerSentEvent) -> None:
        if event.data.strip() == "[DONE]":
            self.done = True
            return
        super().feed(event)

    def read(self, event: str, data: dict[str, Any]) -> list[Delta]:
        if isinstance(data.get("error"), dict):  # what the SDK raises on, whatever the event
            raise StreamError(error_type_of(data["error"]),
                              str(data["error"].get("message", "(no message)")))
        if data.get("usage") is not None:
            self._usage = data["usage"]
        deltas: list[Delta] = []
        for choice in data.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if text := (delta.get("content") or delta.get("refusal")):
                deltas.append(self._text(_string(text, "delta.content")))
            for call in delta.get("tool_calls") or []:
                deltas.append(self._call(call))
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return deltas

    def _text(self, text: str) -> TextDelta:
        if self._text_block is None:
            self._text_block = len(self._blocks)
            self._blocks.append({"type": "text", "text": ""})
        self._blocks[self._text_block]["text"] += text
        return TextDelta(self._text_block, text)

    def _call(self, call: dict[str, Any]) -> ToolUseDelta:
        function = call.get("function") or {}
        fragment = function.get("arguments") or ""
        index = self._calls.get(call["index"])
        if index is None:
            index = self._calls[call["index"]] = len(self._blocks)
            self._blocks.append({"type": "tool_use", "id": _string(call["id"], "tool_calls.id"),
                                 "name": _string(function["name"], "function.name"),
                                 "arguments": ""})
        block = self._blocks[index]
        block["arguments"] += fragment
        return ToolUseDelta(index, block["id"], block["name"], fragment)

    def result(self) -> ModelResponse:
        blocks: list[Block] = [
            TextBlock(b["text"]) if b["type"] == "text"
            else ToolUseBlock(b["id"], b["name"], _arguments(b["arguments"]))
            for b in self._blocks]
        return ModelResponse(tuple(blocks), _stop_reason(self._finish), _chat_usage(self._usage))


# --- Responses ----------------------------------------------------------------------------

def responses_body(model: str, request: ModelRequest) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for message in request.messages:
        text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
        if text:
            items.append({"role": message.role, "content": text})
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                # No item id (fc_...): a call sent back with its id but without the reasoning
                # item that preceded it is refused by reasoning models; call_id is what pairs.
                items.append({"type": "function_call", "call_id": block.id, "name": block.name,
                              "arguments": json.dumps(dict(block.input))})
            elif isinstance(block, ToolResultBlock):
                items.append({"type": "function_call_output", "call_id": block.tool_use_id,
                              "output": _result_text(block)})
    body: dict[str, Any] = {"model": model, "input": items,
                            "max_output_tokens": request.max_tokens, "store": False}
    if request.system:
        body["instructions"] = request.system
    if request.tools:
        body["tools"] = [{"type": "function", "name": t.name, "description": t.description,
                          "parameters": dict(t.input_schema), "strict": False}
                         for t in request.tools]
    return body


def responses_response(data: Any) -> ModelResponse:
    """A `response` object as a response: its message text and function calls, in order
    (reasoning and other items are skipped)."""
    try:
        if data.get("status") == "failed":
            error = data.get("error") or {}
            raise StreamError(error_type_of(error), str(error.get("message", "(no message)")))
        blocks: list[Block] = []
        for item in data["output"]:
            if item["type"] == "message":
                blocks.extend(TextBlock(_string(part.get("text", part.get("refusal")),
                                                "output_text.text"))
                              for part in item["content"]
                              if part["type"] in ("output_text", "refusal"))
            elif item["type"] == "function_call":
                blocks.append(ToolUseBlock(_string(item["call_id"], "function_call.call_id"),
                                           _string(item["name"], "function_call.name"),
                                           _arguments(item.get("arguments"))))
        return ModelResponse(tuple(blocks), _responses_stop(data, blocks),
                             _responses_usage(data.get("usage")))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ModelWireError(f"response: a field is missing or malformed "
                             f"({type(exc).__name__}: {exc})") from None


def _responses_stop(data: dict[str, Any], blocks: list[Block]) -> str:
    if any(isinstance(b, ToolUseBlock) for b in blocks):
        return "tool_use"
    if data.get("status") == "incomplete":
        reason = (data.get("incomplete_details") or {}).get("reason")
        return "max_tokens" if reason == "max_output_tokens" else str(reason or "incomplete")
    return "end_turn"


def _responses_usage(usage: Any) -> Usage:
    if usage is None:
        return _unreported()
    return _usage(usage["input_tokens"], usage["output_tokens"],
                  usage.get("input_tokens_details"))


class _ResponsesStream(JsonEventDecoder):
    """Responses stream events: items announced by output_index, text and argument deltas, and
    a last response.completed (or .incomplete) carrying the whole response, which is the
    result. Deltas number blocks as that response's content does (reasoning items skipped)."""

    def __init__(self, on_delta: DeltaSink) -> None:
        super().__init__(on_delta)
        self._blocks: dict[tuple[int, int], int] = {}  # (output_index, content_index) -> block
        self._calls: dict[int, tuple[str, str]] = {}  # output_index of a call -> (id, name)
        self._final: dict[str, Any] | None = None

    def read(self, event: str, data: dict[str, Any]) -> list[Delta]:
        kind = data.get("type", event)
        if kind == "error":  # its `type` is "error": the code says which
            raise StreamError(error_type_of(data, ("code",)),
                              str(data.get("message", "(no message)")))
        if kind == "response.failed":
            error = data["response"].get("error") or {}
            raise StreamError(error_type_of(error), str(error.get("message", "(no message)")))
        if kind in ("response.completed", "response.incomplete"):
            self._final = data["response"]
            self.done = True
        elif kind == "response.output_item.added" and data["item"]["type"] == "function_call":
            item = data["item"]
            index = self._block(data["output_index"], -1)
            self._calls[data["output_index"]] = (item["call_id"], item["name"])
            return [ToolUseDelta(index, item["call_id"], item["name"],
                                 item.get("arguments") or "")]
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            index = self._block(data["output_index"], data["content_index"])
            return [TextDelta(index, _string(data["delta"], "delta"))]
        elif kind == "response.function_call_arguments.delta":
            call_id, name = self._calls[data["output_index"]]
            return [ToolUseDelta(self._blocks[(data["output_index"], -1)], call_id, name,
                                 _string(data["delta"], "delta"))]
        return []

    def _block(self, output_index: int, content_index: int) -> int:
        key = (output_index, content_index)
        if key not in self._blocks:
            self._blocks[key] = len(self._blocks)
        return self._blocks[key]

    def result(self) -> ModelResponse:
        if self._final is None:
            raise ModelWireError("the stream ended without its response")
        return responses_response(self._final)


# --- shared -------------------------------------------------------------------------------

def _usage(prompt: Any, completion: Any, details: Any) -> Usage:
    details = details or {}
    cached = details.get("cached_tokens") or 0
    written = details.get("cache_write_tokens") or 0
    counts = (prompt, completion, cached, written)
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        raise ModelWireError(f"usage: the token counts must be integers >= 0, not {counts!r}")
    if cached + written > prompt:
        # Not counted inside the prompt by this server: the prompt is the uncached part.
        return Usage(prompt, completion, written, cached)
    return Usage(prompt - cached - written, completion, written, cached)


def _unreported() -> Usage:
    # Chat Completions' usage is optional (some compatible servers send none when streaming).
    log.warning("the model API reported no token usage: token budgets cannot count this call")
    return Usage()


def _arguments(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments: a JSON object in a string (empty means no arguments)."""
    if arguments in (None, ""):
        return {}
    if not isinstance(arguments, str):
        raise ModelWireError(f"tool call arguments must be a JSON string, not "
                             f"{type(arguments).__name__}")
    try:
        value = json.loads(arguments)
    except ValueError:
        raise ModelWireError(f"tool call arguments are not JSON: {arguments[:80]!r}") from None
    if not isinstance(value, dict):
        raise ModelWireError(f"tool call arguments must be a JSON object, not {arguments[:80]!r}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ModelWireError(f"{where} must be a string, not {type(value).__name__}")
    return value


def _result_text(block: ToolResultBlock) -> str:
    return f"Error: {block.content}" if block.is_error else block.content
