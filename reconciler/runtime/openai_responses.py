"""The Responses API (POST {base}/responses) in the runtime's shapes, whole and streamed.

Sent stateless (store=false, the whole conversation as input items, no previous_response_id),
as with the Messages API. Shapes from openai/openai-python, src/openai/types/responses:
response_create_params.py (the request: input items, function_call / function_call_output),
response.py (output items: message, function_call, reasoning...) and the response_*_event.py
stream events (response.output_item.added, response.output_text.delta,
response.function_call_arguments.delta, response.completed / incomplete / failed, error).
"""

from __future__ import annotations

import json
from typing import Any

from reconciler.core.runs.messages import (
    Block,
    Delta,
    ModelRequest,
    ModelResponse,
    ModelWireError,
    TextBlock,
    TextDelta,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseDelta,
)
from reconciler.runtime.model_http import JsonEventDecoder, StreamError
from reconciler.runtime.openai_wire import (
    arguments_of,
    reported_usage,
    result_text,
    string_of,
)


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
                              "output": result_text(block)})
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
            raise StreamError.of(error)
        blocks: list[Block] = []
        for item in data["output"]:
            if item["type"] == "message":
                blocks.extend(TextBlock(string_of(part.get("text", part.get("refusal")),
                                                "output_text.text"))
                              for part in item["content"]
                              if part["type"] in ("output_text", "refusal"))
            elif item["type"] == "function_call":
                blocks.append(ToolUseBlock(string_of(item["call_id"], "function_call.call_id"),
                                           string_of(item["name"], "function_call.name"),
                                           arguments_of(item.get("arguments"))))
        return ModelResponse(tuple(blocks), _responses_stop(data, blocks),
                             reported_usage(data.get("usage"), "input_tokens", "output_tokens"))
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


class ResponsesStream(JsonEventDecoder):
    """Responses stream events: items announced by output_index, text and argument deltas, and
    a last response.completed (or .incomplete) carrying the whole response, which is the
    result. Deltas number blocks as that response's content does (reasoning items skipped)."""

    def __init__(self) -> None:
        super().__init__()
        self._blocks: dict[tuple[int, int], int] = {}  # (output_index, content_index) -> block
        self._calls: dict[int, tuple[str, str]] = {}  # output_index of a call -> (id, name)
        self._final: dict[str, Any] | None = None

    def read(self, event: str, data: dict[str, Any]) -> list[Delta]:
        kind = data.get("type", event)
        if kind == "error":  # its `type` is "error": the code says which
            raise StreamError.of(data, ("code",))
        if kind == "response.failed":
            raise StreamError.of(data["response"].get("error") or {})
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
            return [TextDelta(index, string_of(data["delta"], "delta"))]
        elif kind == "response.function_call_arguments.delta":
            call_id, name = self._calls[data["output_index"]]
            return [ToolUseDelta(self._blocks[(data["output_index"], -1)], call_id, name,
                                 string_of(data["delta"], "delta"))]
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
