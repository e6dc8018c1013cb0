"""An agent for the sidecar's runs API that needs no model provider and no network.

From the repository root (runs keep their conversation sealed under a run key):

    export RECONCILER_RUN_KEY=$(reconciler run-key)
    reconciler serve --agent examples.agent:agent --db sqlite:///runs.db &
    curl -s localhost:8765/v1/runs -H 'content-type: application/json' \\
         -d '{"input": "count the words of this task"}'

The run asks its one tool, `count_words` (read_only), to count the words of the task, then
answers with the count. The model is scripted (`ScriptedModel`): each step reads the
conversation so far, as a real model would. To run a real model, set RECONCILER_MODEL (say,
openai:gpt-4.1-mini with OPENAI_API_KEY: README, "Models by configuration"), or give `Agent`
an `AnthropicModel` or `OpenAIModel` instead; to let the agent change things, give it tools
with side effects (their `provider` names the provider contract and probes of the sidecar's
--config).
"""

from __future__ import annotations

from reconciler.core.domain import Effect
from reconciler.core.runs.messages import (
    ModelRequest,
    ModelResponse,
    TextBlock,
    ToolResultBlock,
    ToolSpec,
)
from reconciler.runtime.agent import Agent
from reconciler.runtime.scripted import ScriptedModel, call, say, tool_use
from reconciler.runtime.tools import Tool, ToolCall, ToolOutput


async def count_words(tool_call: ToolCall) -> ToolOutput:
    return ToolOutput(str(len(str(tool_call.input.get("text", "")).split())))


def ask_for_the_count(request: ModelRequest) -> ModelResponse:
    task = "".join(b.text for b in request.messages[0].content if isinstance(b, TextBlock))
    return call(tool_use("count_words", {"text": task}), text="Let me count the words.")


def answer_with_the_count(request: ModelRequest) -> ModelResponse:
    results = [b for b in request.messages[-1].content if isinstance(b, ToolResultBlock)]
    if not results or results[0].is_error:
        return say("I could not count the words.")
    return say(f"Your task has {results[0].content} words.")


COUNT_WORDS = Tool(
    ToolSpec("count_words", "Count the words of a text.",
             {"type": "object", "properties": {"text": {"type": "string"}},
              "required": ["text"]}),
    Effect.READ_ONLY, count_words)

agent = Agent(model=ScriptedModel([ask_for_the_count, answer_with_the_count]),
              tools=[COUNT_WORDS], config={"max_turns": 3})
