"""A local fake of OpenAI's Chat Completions (POST /v1/chat/completions) and Responses
(POST /v1/responses) APIs, for the adapter's tests.

Close to the real API where an adapter could get it wrong: Bearer authentication (a wrong key is
refused with the key masked in the message, as OpenAI does), the request bodies (required
fields, every tool result answering an earlier call), the response and chunk shapes of
openai/openai-python's types (chat.completion, chat.completion.chunk ending in [DONE] with a
usage chunk when asked, response objects and response.* stream events), the error JSON, and
retry-after on 429. One script (`reply`) is rendered in whichever API, whole or streamed.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fake_api import FakeApi, Frame, frame, pieces
from service_harness import serving

KEY = "sk-proj-fake-0123456789abcdef"
CREATED = 1_767_225_600
#: The error type (and code) the real API sends with each status.
ERRORS = {400: ("invalid_request_error", None), 401: ("invalid_request_error", "invalid_api_key"),
          404: ("invalid_request_error", "model_not_found"),
          429: ("requests", "rate_limit_exceeded"), 500: ("server_error", None),
          503: ("server_error", None)}


@dataclass(frozen=True)
class Script:
    """One answer: text, then tool calls (call id, name, arguments: an object, or a string
    sent as is), and the token counts."""

    text: str = ""
    calls: tuple[tuple[str, str, dict[str, Any] | str], ...] = ()
    prompt: int = 12
    completion: int = 3
    cached: int = 0
    truncated: bool = False  # stopped by the output limit
    reasoning: bool = False  # a Responses reasoning item before the output


class _ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class _ChatBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1)
    messages: list[_ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    max_completion_tokens: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    temperature: float | None = None


class _ResponsesBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    max_output_tokens: int | None = Field(None, ge=16)
    store: bool = True
    stream: bool = False
    temperature: float | None = None


#: How a server numbers streamed tool calls: as OpenAI does, not at all (older Ollama, some
#: proxies), or 0 for every call (ollama/ollama#15457).
Numbering = Literal["openai", "missing", "reused"]


@dataclass
class FakeOpenAI(FakeApi):
    key: str = KEY
    replies: deque[Script] = field(default_factory=deque)
    tool_call_index: Numbering = "openai"

    def reply(self, text: str = "", *calls: tuple[str, str, dict[str, Any] | str],
              prompt: int = 12, completion: int = 3, cached: int = 0, truncated: bool = False,
              reasoning: bool = False) -> None:
        """Queue the next successful answer."""
        self.replies.append(Script(text, calls, prompt, completion, cached, truncated,
                                   reasoning))

    def next_script(self) -> Script:
        return self.replies.popleft() if self.replies else Script("(no scripted reply)")


@contextmanager
def running_fake() -> Iterator[FakeOpenAI]:
    """A fresh fake on a loopback port; its `url` + "/v1" is the base URL for the adapter."""
    fake = FakeOpenAI()
    with serving(app(fake)) as url:
        fake.url = url
        yield fake


def error(status: int, message: str, headers: dict[str, str] | None = None,
          param: str | None = None) -> JSONResponse:
    kind, code = ERRORS.get(status, ("server_error", None))
    return JSONResponse({"error": {"message": message, "type": kind, "param": param,
                                   "code": code}}, status, headers=headers)


def app(fake: FakeOpenAI) -> FastAPI:
    api = FastAPI()

    async def guarded(request: Request) -> Response | Any:
        body = await fake.record(request)
        auth = request.headers.get("authorization", "")
        if auth != f"Bearer {fake.key}":
            given = auth.removeprefix("Bearer ")
            return error(401, f"Incorrect API key provided: {given[:8]}***{given[-4:]}. You "
                         "can find your API key at https://platform.openai.com/account/api-keys.")
        return body

    async def admitted(request: Request, invalid: Callable[[Any], str | None]) -> Response | Any:
        """The request's body, or the answer the API (or a scripted failure) gives instead:
        a wrong key, an invalid body, a held request, a queued failure, in that order."""
        body = await guarded(request)
        if isinstance(body, Response):
            return body
        if problem := invalid(body):
            return error(400, problem)
        if (failed := await fake.scripted_failure(request, error)) is not None:
            return failed
        return body

    @api.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        body = await admitted(request, _invalid_chat)
        if isinstance(body, Response):
            return body
        script = fake.next_script()
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return fake.streamed(request, chat_chunks(script, body["model"], usage,
                                                      fake.tool_call_index), chat_error)
        return JSONResponse(chat_completion(script, body["model"]))

    @api.post("/v1/responses")
    async def responses(request: Request) -> Response:
        body = await admitted(request, _invalid_responses)
        if isinstance(body, Response):
            return body
        script = fake.next_script()
        if body.get("stream"):
            return fake.streamed(request, response_events(script, body["model"]),
                                 responses_error)
        return JSONResponse(response_object(script, body["model"]))

    return api


# --- Chat Completions ---------------------------------------------------------------------

def _invalid_chat(body: Any) -> str | None:
    try:
        parsed = _ChatBody.model_validate(body)
    except ValidationError as exc:
        return _first(exc)
    if parsed.max_tokens is not None and parsed.max_completion_tokens is not None:
        return "max_tokens and max_completion_tokens cannot both be set"
    called: set[str] = set()
    for index, message in enumerate(parsed.messages):
        if message.role == "assistant":
            called = {call["id"] for call in message.tool_calls or []}
            if message.content is None and not message.tool_calls:
                return f"messages[{index}]: an assistant message needs content or tool_calls"
        elif message.role == "tool":
            if message.tool_call_id not in called:
                return (f"Invalid parameter: messages with role 'tool' must be a response to a "
                        f"preceeding message with 'tool_calls'. (messages[{index}])")
        else:
            called = set()
    return None


def _usage_chat(script: Script) -> dict[str, Any]:
    return {"prompt_tokens": script.prompt, "completion_tokens": script.completion,
            "total_tokens": script.prompt + script.completion,
            "prompt_tokens_details": {"cached_tokens": script.cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0,
                                          "rejected_prediction_tokens": 0}}


def _finish(script: Script) -> str:
    return "length" if script.truncated else "tool_calls" if script.calls else "stop"


def chat_completion(script: Script, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": script.text or None,
                               "refusal": None, "annotations": []}
    if script.calls:
        message["tool_calls"] = [{"id": id_, "type": "function", "function": {
            "name": name, "arguments": _encoded(arguments)}}
            for id_, name, arguments in script.calls]
    return {"id": "chatcmpl-fake", "object": "chat.completion", "created": CREATED,
            "model": model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                         "finish_reason": _finish(script)}],
            "usage": _usage_chat(script), "service_tier": "default",
            "system_fingerprint": "fp_fake"}


def chat_chunks(script: Script, model: str, include_usage: bool,
                numbering: Numbering = "openai") -> list[Frame]:
    def chunk(delta: dict[str, Any] | None, finish: str | None = None, *,
              is_delta: bool = False, usage: dict[str, Any] | None = None) -> Frame:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None,
                                             "finish_reason": finish}]
        data: dict[str, Any] = {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                                "created": CREATED, "model": model,
                                "system_fingerprint": "fp_fake", "choices": choices}
        if include_usage:
            data["usage"] = usage
        return frame(data, delta=is_delta)

    frames = [chunk({"role": "assistant", "content": "", "refusal": None})]
    if script.text:
        frames += [chunk({"content": piece}, is_delta=True) for piece in pieces(script.text)]
    for number, (id_, name, arguments) in enumerate(script.calls):
        index = {"openai": {"index": number}, "missing": {}, "reused": {"index": 0}}[numbering]
        frames.append(chunk({"tool_calls": [{**index, "id": id_, "type": "function",
                                             "function": {"name": name, "arguments": ""}}]},
                            is_delta=True))
        frames += [chunk({"tool_calls": [{**index, "function": {"arguments": piece}}]},
                         is_delta=True) for piece in pieces(_encoded(arguments), 5)]
    frames.append(chunk({}, _finish(script)))
    if include_usage:
        frames.append(chunk(None, usage=_usage_chat(script)))
    frames.append(frame("[DONE]"))
    return frames


def chat_error(kind: str) -> Frame:
    return frame({"error": {"message": f"fake {kind} mid-stream", "type": kind, "param": None,
                            "code": None}})


# --- Responses ----------------------------------------------------------------------------

def _invalid_responses(body: Any) -> str | None:
    try:
        parsed = _ResponsesBody.model_validate(body)
    except ValidationError as exc:
        return _first(exc)
    called: set[str] = set()
    for index, item in enumerate(parsed.input if isinstance(parsed.input, list) else []):
        kind = item.get("type", "message")
        if kind == "function_call":
            if not isinstance(item.get("arguments"), str) or "call_id" not in item:
                return f"input[{index}]: a function_call needs call_id and string arguments"
            called.add(item["call_id"])
        elif kind == "function_call_output":
            if item.get("call_id") not in called:
                return (f"No tool call found for function call output with call_id "
                        f"{item.get('call_id')}. (input[{index}])")
        elif kind == "message" and item.get("role") not in ("user", "assistant", "system",
                                                             "developer"):
            return f"input[{index}].role: invalid role {item.get('role')!r}"
    return None


def _usage_responses(script: Script) -> dict[str, Any]:
    return {"input_tokens": script.prompt,
            "input_tokens_details": {"cached_tokens": script.cached},
            "output_tokens": script.completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": script.prompt + script.completion}


def _output(script: Script) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = []
    if script.reasoning:
        output.append({"type": "reasoning", "id": "rs_fake", "summary": []})
    if script.text:
        output.append({"type": "message", "id": "msg_fake", "status": "completed",
                       "role": "assistant", "content": [
                           {"type": "output_text", "text": script.text, "annotations": [],
                            "logprobs": []}]})
    output += [{"type": "function_call", "id": f"fc_{id_}", "call_id": id_, "name": name,
                "arguments": _encoded(arguments), "status": "completed"}
               for id_, name, arguments in script.calls]
    return output


def response_object(script: Script, model: str, *, status: str | None = None
                    ) -> dict[str, Any]:
    done = "incomplete" if script.truncated else "completed"
    return {"id": "resp_fake", "object": "response", "created_at": CREATED,
            "status": status or done, "error": None, "model": model,
            "incomplete_details": {"reason": "max_output_tokens"} if script.truncated else None,
            "output": _output(script) if status is None else [],
            "usage": _usage_responses(script) if status is None else None,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "store": False}


def response_events(script: Script, model: str) -> list[Frame]:
    sequence = iter(range(10_000))

    def event(kind: str, carries_delta: bool = False, /, **fields: Any) -> Frame:
        return frame({"type": kind, "sequence_number": next(sequence), **fields}, kind,
                     delta=carries_delta)

    frames = [event("response.created",
                    response=response_object(script, model, status="in_progress")),
              event("response.in_progress",
                    response=response_object(script, model, status="in_progress"))]
    for index, item in enumerate(_output(script)):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            frames.append(event("response.output_item.added", output_index=index,
                                item={**item, "status": "in_progress", "content": []}))
            part = {"type": "output_text", "text": "", "annotations": []}
            frames.append(event("response.content_part.added", item_id=item["id"],
                                output_index=index, content_index=0, part=part))
            frames += [event("response.output_text.delta", True, item_id=item["id"],
                             output_index=index, content_index=0, delta=piece, logprobs=[])
                       for piece in pieces(text)]
            frames.append(event("response.output_text.done", item_id=item["id"],
                                output_index=index, content_index=0, text=text, logprobs=[]))
        elif item["type"] == "function_call":
            frames.append(event("response.output_item.added", True, output_index=index,
                                item={**item, "status": "in_progress", "arguments": ""}))
            frames += [event("response.function_call_arguments.delta", True,
                             item_id=item["id"], output_index=index, delta=piece)
                       for piece in pieces(item["arguments"], 5)]
            frames.append(event("response.function_call_arguments.done", item_id=item["id"],
                                output_index=index, arguments=item["arguments"]))
        else:
            frames.append(event("response.output_item.added", output_index=index, item=item))
        frames.append(event("response.output_item.done", output_index=index, item=item))
    final = response_object(script, model)
    frames.append(event(f"response.{final['status']}", response=final))
    return frames


def responses_error(kind: str) -> Frame:
    return frame({"type": "error", "code": kind, "message": f"fake {kind} mid-stream",
                  "param": None, "sequence_number": 0}, "error")


def _encoded(arguments: dict[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _first(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc']) or 'body'}: {first['msg']}"
