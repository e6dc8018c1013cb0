"""Choosing the agent's model by configuration rather than in code.

    RECONCILER_MODEL=openai:gpt-4.1-mini             # Chat Completions
    RECONCILER_MODEL=openai-responses:gpt-4.1-mini   # the Responses API
    RECONCILER_MODEL=anthropic:claude-sonnet-4-5     # the Messages API
    RECONCILER_MODEL_BASE_URL=http://127.0.0.1:11434/v1   # optional: Ollama, vLLM, a proxy...

`reconciler serve --agent` applies it to the agent it loads (its tools and configuration stay
the agent's). The keys stay where each provider's SDK reads them (OPENAI_API_KEY,
ANTHROPIC_API_KEY); OPENAI_BASE_URL works too, as with the SDK.
"""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.core.errors import AgentLoadError, ReconcilerError
from reconciler.runtime import anthropic
from reconciler.runtime.anthropic import AnthropicModel
from reconciler.runtime.models import Model
from reconciler.runtime.openai import OpenAIModel

MODEL_VARIABLE = "RECONCILER_MODEL"
BASE_URL_VARIABLE = "RECONCILER_MODEL_BASE_URL"
PROVIDERS = ("openai", "openai-responses", "anthropic")


def model_from_environment(environ: Mapping[str, str]) -> Model | None:
    """The model RECONCILER_MODEL names, or None when it is unset or empty. A malformed choice,
    or a provider whose key is missing, raises AgentLoadError saying what to set."""
    choice = environ.get(MODEL_VARIABLE, "").strip()
    if not choice:
        return None
    provider, _, name = choice.partition(":")
    if provider not in PROVIDERS or not name:
        raise AgentLoadError(f"{MODEL_VARIABLE}={choice!r}: write it as provider:model, the "
                               f"provider one of {', '.join(PROVIDERS)} (e.g. "
                               "openai:gpt-4.1-mini)")
    base_url = environ.get(BASE_URL_VARIABLE) or None
    try:
        if provider == "anthropic":
            return AnthropicModel(model=name, api_key=environ.get("ANTHROPIC_API_KEY", ""),
                                  base_url=base_url or anthropic.DEFAULT_BASE_URL)
        return OpenAIModel(model=name, api="chat" if provider == "openai" else "responses",
                           api_key=environ.get("OPENAI_API_KEY", ""),
                           base_url=base_url or environ.get("OPENAI_BASE_URL"))
    except ReconcilerError as exc:  # a missing key: the message names its variable
        raise AgentLoadError(f"{MODEL_VARIABLE}={choice!r}: {exc}") from None
