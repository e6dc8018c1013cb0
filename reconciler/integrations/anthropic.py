"""The Anthropic SDK's tool runner (`client.beta.messages.tool_runner`): `reconciled` wraps a
`@beta_tool` (or `@beta_async_tool`) so that each call the runner makes goes through the gate.

    runner = client.beta.messages.tool_runner(
        model=..., max_tokens=1024, messages=[...],
        tools=[reconciled(charge, effects, scope=run_id)])

The runner hands a tool only its input, so the scope (the run the calls belong to) is given
when the tool is wrapped: one wrapped tool per run, the same `scope` when a run is resumed.
"""

from __future__ import annotations

from typing import Any

from anthropic.lib.tools import (
    BetaAsyncBuiltinFunctionTool,
    BetaAsyncFunctionTool,
    BetaBuiltinFunctionTool,
    BetaFunctionTool,
)
from anthropic.lib.tools._beta_functions import BetaFunctionToolResultType
from anthropic.types.beta import BetaToolUnionParam

from reconciler.integrations.tool_calls import ToolEffects, ToolOutcome


class ReconciledTool(BetaBuiltinFunctionTool):
    """A sync tool whose calls are effects of `effects`."""

    def __init__(self, tool: BetaFunctionTool[Any], effects: ToolEffects, scope: str) -> None:
        self.tool, self.effects, self.scope = tool, effects, scope

    def to_dict(self) -> BetaToolUnionParam:
        return self.tool.to_dict()

    def call(self, input: object) -> BetaFunctionToolResultType:
        arguments = dict(input) if isinstance(input, dict) else {}
        result = self.effects.run(self.scope, self.tool.name, arguments,
                                  lambda: self.tool.call(input))
        return str(result) if isinstance(result, ToolOutcome) else result


class AsyncReconciledTool(BetaAsyncBuiltinFunctionTool):
    """The async twin, for `client.beta.messages.tool_runner` on `AsyncAnthropic`."""

    def __init__(self, tool: BetaAsyncFunctionTool[Any], effects: ToolEffects,
                 scope: str) -> None:
        self.tool, self.effects, self.scope = tool, effects, scope

    def to_dict(self) -> BetaToolUnionParam:
        return self.tool.to_dict()

    async def call(self, input: object) -> BetaFunctionToolResultType:
        arguments = dict(input) if isinstance(input, dict) else {}

        async def invoke() -> BetaFunctionToolResultType:
            return await self.tool.call(input)

        result = await self.effects.arun(self.scope, self.tool.name, arguments, invoke)
        return str(result) if isinstance(result, ToolOutcome) else result


def reconciled(tool: BetaFunctionTool[Any], effects: ToolEffects, scope: str) -> ReconciledTool:
    """`tool` with its calls through the gate, for the run `scope`."""
    return ReconciledTool(tool, effects, scope)
