"""What OpenAI's Chat Completions and Responses APIs share, for their adapters: token usage with
cached input moved out of the input count, tool arguments as a JSON object in a string, and a
tool result that is an error sent as "Error: ..." (neither API has an error flag for it).

OpenAI counts cached input inside prompt_tokens / input_tokens (openai/openai-python,
src/openai/types/completion_usage.py and responses/response_usage.py: `cached_tokens`, and
`cache_write_tokens` where reported); the runtime's `Usage` follows Anthropic's, whose
input_tokens excludes both, so that budgets over `Usage.total()` count each token once.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from reconciler.core.runs.messages import ModelWireError, ToolResultBlock, Usage

log = logging.getLogger(__name__)


def usage_of(prompt: Any, completion: Any, details: Any) -> Usage:
    """The four counts from a prompt (or input) count, an output count and the prompt's
    details object (cached_tokens, cache_write_tokens; either may be missing)."""
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


def reported_usage(usage: Any, input_field: str, output_field: str) -> Usage:
    """An answer's usage object (None: not reported) as the four counts, by the API's names for
    the input and output counts; the input's details are `<input name>_details`."""
    if usage is None:
        # Chat Completions' usage is optional (some compatible servers send none when
        # streaming).
        log.warning("the model API reported no token usage: token budgets cannot count this "
                    "call")
        return Usage()
    return usage_of(usage[input_field], usage[output_field], usage.get(f"{input_field}_details"))


def arguments_of(arguments: Any) -> dict[str, Any]:
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


def string_of(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ModelWireError(f"{where} must be a string, not {type(value).__name__}")
    return value


def result_text(block: ToolResultBlock) -> str:
    return f"Error: {block.content}" if block.is_error else block.content
