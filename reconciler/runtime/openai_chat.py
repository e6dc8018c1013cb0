"""Chat Completions (POST {base}/chat/completions) in the runtime's shapes, whole and streamed.

Shapes from openai/openai-python, src/openai/types/chat: completion_create_params.py (the
request), chat_completion.py (the answer) and chat_completion_chunk.py (the stream: chunks of
`choices[].delta` with content and `tool_calls` fragments, whose id and name come with the
first fragment of each call and later ones carry only its index; a last chunk without choices
carrying the usage when stream_options.include_usage is set; then `data: [DONE]`).
"""

from __future__ import annotations

import json
from typing import Any

from httpx_sse import ServerSentEvent

from reconciler.core.runs.messages import (
    Block,
    Delta,
    Message,
    ModelRequest,
    ModelResponse,
    ModelWireError,
    TextBlock,
    TextDelta,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseDelta,
    Usage,
)
from reconciler.runtime.model_http import JsonEventDecoder, StreamError
from reconciler.runtime.openai_wire import (
    arguments_of,
    reported_usage,
    result_text,
    string_of,
)

#: Chat Completions' finish_reason as the runtime's stop_reason (others pass through).
_STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use",
                 "length": "max_tokens"}


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
    results = [{"role": "tool", "tool_call_id": b.tool_use_id, "content": result_text(b)}
               for b in message.content if isinstance(b, ToolResultBlock)]
    return results + ([{"role": "user", "content": text}] if text or not results else [])


def chat_response(data: Any) -> ModelResponse:
    """A chat.completion object as a response (its first choice)."""
    try:
        choice = data["choices"][0]
        message = choice["message"]
        blocks: list[Block] = []
        if text := (message.get("content") or message.get("refusal")):
            blocks.append(TextBlock(string_of(text, "message.content")))
        for call in message.get("tool_calls") or []:
            function = call["function"]
            blocks.append(ToolUseBlock(string_of(call["id"], "tool_calls[].id"),
                                       string_of(function["name"], "function.name"),
                                       arguments_of(function.get("arguments"))))
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
    return reported_usage(usage, "prompt_tokens", "completion_tokens")


class ChatStream(JsonEventDecoder):
    """chat.completion.chunk events: content and tool_calls fragments (a call's id and name
    come with its first fragment, later ones carry only its index), then the finish_reason,
    then a usage chunk, then [DONE]. Blocks are numbered in order of first appearance."""

    def __init__(self) -> None:
        super().__init__()
        self._blocks: list[dict[str, Any]] = []
        self._text_block: int | None = None
        self._calls: dict[int, int] = {}  # tool_calls[].index -> block index
        self._last_call: int | None = None
        self._finish: str | None = None
        self._usage: Any = None

    def feed(self, event: ServerSentEvent) -> list[Delta]:
        if event.data.strip() == "[DONE]":
            self.done = True
            return []
        return super().feed(event)

    def read(self, event: str, data: dict[str, Any]) -> list[Delta]:
        if isinstance(data.get("error"), dict):  # what the SDK raises on, whatever the event
            raise StreamError.of(data["error"])
        if data.get("usage") is not None:
            self._usage = data["usage"]
        deltas: list[Delta] = []
        for choice in data.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if text := (delta.get("content") or delta.get("refusal")):
                deltas.append(self._text(string_of(text, "delta.content")))
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
        call_id, key = call.get("id"), call.get("index")
        # OpenAI numbers the calls; compatible servers may leave the index out (Gemini proxies,
        # older Ollama: ollama/ollama#7881) or send 0 for every call (ollama/ollama#15457), so
        # a fragment whose id differs from the call it would continue starts a new one.
        index = self._calls.get(key) if key is not None else (
            self._last_call if call_id is None else None)
        if index is not None and call_id and self._blocks[index]["id"] != call_id:
            index = None
        if index is None:
            index = len(self._blocks)
            self._blocks.append({"type": "tool_use", "id": string_of(call_id, "tool_calls.id"),
                                 "name": string_of(function.get("name"), "function.name"),
                                 "arguments": ""})
            if key is not None:
                self._calls[key] = index
        self._last_call = index
        block = self._blocks[index]
        block["arguments"] += fragment
        return ToolUseDelta(index, block["id"], block["name"], fragment)

    def result(self) -> ModelResponse:
        blocks: list[Block] = [
            TextBlock(b["text"]) if b["type"] == "text"
            else ToolUseBlock(b["id"], b["name"], arguments_of(b["arguments"]))
            for b in self._blocks]
        return ModelResponse(tuple(blocks), _stop_reason(self._finish), _chat_usage(self._usage))
