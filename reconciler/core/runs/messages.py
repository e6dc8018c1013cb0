"""What a run's conversation is made of: content blocks, messages, usage, requests, responses.

The shapes follow Anthropic's Messages API (text, tool_use, tool_result blocks; four token
counts) because it is the richest common denominator; other providers' adapters translate to it.
The JSON functions read and write that wire shape, for the adapter and for journaling a
conversation so that a resumed run can send it again. Pure data: no I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from reconciler.core.errors import ReconcilerError

T = TypeVar("T")


class ModelWireError(ReconcilerError, ValueError):
    """JSON that is not a block, message or usage in the Messages API shape; fix the field named."""


@dataclass(frozen=True, slots=True)
class TextBlock:
    text: str


@dataclass(frozen=True, slots=True)
class ToolUseBlock:
    id: str
    name: str
    input: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ToolResultBlock:
    tool_use_id: str
    content: str
    is_error: bool = False


Block = TextBlock | ToolUseBlock | ToolResultBlock


@dataclass(frozen=True, slots=True)
class Message:
    role: Literal["user", "assistant"]
    content: tuple[Block, ...]

    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        return tuple(block for block in self.content if isinstance(block, ToolUseBlock))


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens,
                     self.output_tokens + other.output_tokens,
                     self.cache_creation_input_tokens + other.cache_creation_input_tokens,
                     self.cache_read_input_tokens + other.cache_read_input_tokens)

    def total(self) -> int:
        return (self.input_tokens + self.output_tokens + self.cache_creation_input_tokens
                + self.cache_read_input_tokens)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]  # empty: the model must answer without tools
    max_tokens: int = 1024


@dataclass(frozen=True, slots=True)
class ModelResponse:
    content: tuple[Block, ...]
    stop_reason: str  # "end_turn" | "tool_use" | "max_tokens" | "stop_sequence" ...
    usage: Usage

    def message(self) -> Message:
        """The assistant message to append to the conversation."""
        return Message("assistant", self.content)


@dataclass(frozen=True, slots=True)
class TextDelta:
    """More text for the answer's content block number `index`."""

    index: int
    text: str


@dataclass(frozen=True, slots=True)
class ToolUseDelta:
    """More of the arguments of the tool call in content block `index`: `partial_json` is a
    fragment of its input's JSON (possibly empty, when the call is announced). The whole call is
    only known from the final response."""

    index: int
    id: str
    name: str
    partial_json: str


Delta = TextDelta | ToolUseDelta


def block_to_json(block: Block) -> dict[str, Any]:
    match block:
        case TextBlock(text):
            return {"type": "text", "text": text}
        case ToolUseBlock(id_, name, input_):
            return {"type": "tool_use", "id": id_, "name": name, "input": dict(input_)}
        case ToolResultBlock(tool_use_id, content, is_error):
            return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content,
                    "is_error": is_error}
    raise ModelWireError(f"not a content block: {type(block).__name__}")


def block_from_json(data: Mapping[str, Any]) -> Block:
    kind = _field(data, "type", str, "block")
    where = f"{kind} block"
    if kind == "text":
        return TextBlock(_field(data, "text", str, where))
    if kind == "tool_use":
        return ToolUseBlock(_field(data, "id", str, where), _field(data, "name", str, where),
                            _field(data, "input", dict, where))
    if kind == "tool_result":
        is_error = data.get("is_error", False)
        if not isinstance(is_error, bool):
            raise ModelWireError(f"tool_result block: 'is_error' must be a boolean, "
                                 f"not {type(is_error).__name__}")
        return ToolResultBlock(_field(data, "tool_use_id", str, where),
                               _field(data, "content", str, where), is_error)
    raise ModelWireError(f"unsupported content block type {kind!r}: expected text, tool_use "
                         "or tool_result")


def message_to_json(message: Message) -> dict[str, Any]:
    return {"role": message.role, "content": [block_to_json(b) for b in message.content]}


def message_from_json(data: Mapping[str, Any]) -> Message:
    role = _field(data, "role", str, "message")
    if role not in ("user", "assistant"):
        raise ModelWireError(f"message: 'role' must be 'user' or 'assistant', not {role!r}")
    return Message("user" if role == "user" else "assistant",
                   _blocks_from_json(_field(data, "content", list, "message")))


def _blocks_from_json(data: list[Any]) -> tuple[Block, ...]:
    blocks = []
    for index, item in enumerate(data):
        if not isinstance(item, Mapping):
            raise ModelWireError(f"content[{index}]: a block must be an object, "
                                 f"not {type(item).__name__}")
        try:
            blocks.append(block_from_json(item))
        except ModelWireError as exc:
            raise ModelWireError(f"content[{index}]: {exc}") from None
    return tuple(blocks)


def delta_to_json(delta: Delta) -> dict[str, Any]:
    """A delta as the JSON of an appended event (the shapes follow the Messages API's stream)."""
    match delta:
        case TextDelta(index, text):
            return {"type": "text_delta", "index": index, "text": text}
        case ToolUseDelta(index, id_, name, partial_json):
            return {"type": "tool_use_delta", "index": index, "id": id_, "name": name,
                    "partial_json": partial_json}
    raise ModelWireError(f"not a delta: {type(delta).__name__}")


def usage_to_json(usage: Usage) -> dict[str, int]:
    return {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens}


def usage_from_json(data: Mapping[str, Any]) -> Usage:
    """Input and output counts are required; the cache counts may be missing or null (0)."""
    counts = {}
    for name in ("input_tokens", "output_tokens", "cache_creation_input_tokens",
                 "cache_read_input_tokens"):
        value = data.get(name)
        if value is None and name.startswith("cache_"):
            value = 0
        # bool is an int to Python, never a token count to the API.
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ModelWireError(f"usage: {name!r} must be a count (integer >= 0), "
                                 f"not {value!r}")
        counts[name] = value
    return Usage(**counts)


def response_to_json(response: ModelResponse) -> dict[str, Any]:
    return {"content": [block_to_json(b) for b in response.content],
            "stop_reason": response.stop_reason, "usage": usage_to_json(response.usage)}


def response_from_json(data: Mapping[str, Any]) -> ModelResponse:
    """A response from its JSON, ours or the Messages API's (whose extra fields are ignored)."""
    return ModelResponse(_blocks_from_json(_field(data, "content", list, "response")),
                         _field(data, "stop_reason", str, "response"),
                         usage_from_json(_field(data, "usage", dict, "response")))


def tool_to_json(tool: ToolSpec) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description,
            "input_schema": dict(tool.input_schema)}


def _field(data: Mapping[str, Any], name: str, kind: type[T], where: str) -> T:
    if not isinstance(data, Mapping):
        raise ModelWireError(f"{where}: expected an object, not {type(data).__name__}")
    if name not in data:
        raise ModelWireError(f"{where}: {name!r} is missing")
    value = data[name]
    if not isinstance(value, kind):
        raise ModelWireError(f"{where}: {name!r} must be {_KIND_NAMES[kind]}, "
                             f"not {type(value).__name__}")
    return value


_KIND_NAMES: dict[type, str] = {str: "a string", dict: "an object", list: "an array"}
