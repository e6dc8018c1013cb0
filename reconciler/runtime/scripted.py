"""A model that plays a script: for tests and the demo, with no provider and no network.

The step to play is read off the request, not kept in the model: step n answers a conversation
holding n assistant messages. A run resumed in a new process after a crash, with the same script,
therefore continues at the step it had reached, as a real model would continue the conversation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reconciler.core.runs.messages import (
    Block,
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolUseBlock,
    Usage,
)
from reconciler.runtime.models import Model

#: A step: the response itself, or a function of the request that computes it (to answer from
#: the tool results the conversation holds).
Step = ModelResponse | Callable[[ModelRequest], ModelResponse]

#: A step's usage when it states none: the model charges its own default instead.
UNSET_USAGE = Usage()
#: Charged for every scripted response that does not state its own usage.
DEFAULT_USAGE = Usage(input_tokens=100, output_tokens=20)
#: What the model says once the script has no step for the conversation.
EXHAUSTED_TEXT = "The script has no more steps."


def say(text: str, *, usage: Usage = UNSET_USAGE) -> ModelResponse:
    """A final answer: `text`, stop reason end_turn."""
    return ModelResponse((TextBlock(text),), "end_turn", usage)


def tool_use(name: str, input: Mapping[str, Any] | None = None, *,
             id: str = "") -> ToolUseBlock:
    """A tool call for `call`. Without an `id` the model numbers it when played (see
    `ScriptedModel`), so a script needs no ids of its own."""
    return ToolUseBlock(id, name, dict(input or {}))


def call(*uses: ToolUseBlock, text: str | None = None, usage: Usage = UNSET_USAGE) -> ModelResponse:
    """Tool calls (after an optional `text`), stop reason tool_use."""
    lead: tuple[Block, ...] = (TextBlock(text),) if text is not None else ()
    return ModelResponse((*lead, *uses), "tool_use", usage)


class ScriptedModel(Model):
    """Answers request n (n = assistant messages already in the conversation) with step n.

    When it plays a step, the model fills in what the step left unset: a usage of all zeros
    becomes `usage`, and a tool use without an id gets `toolu_s{step}_{position}` (the same in
    every process, so a resumed run sees the ids it saw before). Past the last step it answers
    `EXHAUSTED_TEXT` with end_turn, so a run always ends. Every request is kept in `requests`.
    """

    def __init__(self, steps: Iterable[Step], *, usage: Usage = DEFAULT_USAGE) -> None:
        self.steps = tuple(steps)
        self.usage = usage
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        index = sum(1 for message in request.messages if message.role == "assistant")
        if index >= len(self.steps):
            return self._filled(say(EXHAUSTED_TEXT), index)
        step = self.steps[index]
        return self._filled(step if isinstance(step, ModelResponse) else step(request), index)

    def _filled(self, response: ModelResponse, index: int) -> ModelResponse:
        content = tuple(
            dataclasses.replace(block, id=f"toolu_s{index}_{position}")
            if isinstance(block, ToolUseBlock) and not block.id else block
            for position, block in enumerate(response.content))
        usage = self.usage if response.usage == UNSET_USAGE else response.usage
        return dataclasses.replace(response, content=content, usage=usage)
