"""OpenAI-compatible APIs as a `Model`: Chat Completions with tools (POST {base}/chat/completions)
or the Responses API (POST {base}/responses), answered whole or streamed, on httpx.

The same wire is served by OpenAI, Azure OpenAI (its v1 API), vLLM, Ollama, OpenRouter and
LiteLLM; only the base URL (and key) changes, as with the official SDK: `base_url` defaults to
OPENAI_BASE_URL, else https://api.openai.com/v1, and the key comes from OPENAI_API_KEY, sent as
`Authorization: Bearer`. Retries, streams and the key's safety are `model_http`'s.

The wire of each API is in `openai_chat` and `openai_responses`, what they share in
`openai_wire`. Azure's v1 API takes the plain OpenAI client with base_url
https://<resource>.openai.azure.com/openai/v1/ and the deployment as the model
(learn.microsoft.com/azure/foundry/openai/api-version-lifecycle).

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
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Literal

import httpx

from reconciler.core.errors import ReconcilerError
from reconciler.core.runs.messages import ModelRequest, ModelResponse
from reconciler.runtime.model_http import HttpModel, ProviderHttp, StreamDecoder
from reconciler.runtime.models import DeltaSink, StreamingModel
from reconciler.runtime.openai_chat import ChatStream, chat_body, chat_response
from reconciler.runtime.openai_responses import (
    ResponsesStream,
    responses_body,
    responses_response,
)

KEY_VARIABLE = "OPENAI_API_KEY"
BASE_URL_VARIABLE = "OPENAI_BASE_URL"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
Api = Literal["chat", "responses"]


class MissingOpenAIKeyError(ReconcilerError):
    """No API key: set the OPENAI_API_KEY environment variable or pass api_key= (a local server
    that checks no key, such as Ollama or vLLM, accepts any non-empty value)."""


class OpenAIModel(HttpModel, StreamingModel):
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
        decoder: Callable[[], StreamDecoder] = (ChatStream if self.api == "chat"
                                                else ResponsesStream)
        return await self._http.stream(self._url, self._headers,
                                       self.body(request, stream=True), decoder, on_delta)
