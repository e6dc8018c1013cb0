"""Pydantic AI: a toolset wrapper (`WrapperToolset`, pydantic_ai/toolsets/wrapper.py, the
extension point for changing how tools run) that puts every tool call through the gate.

    agent = Agent(model, toolsets=[ReconciledToolset(FunctionToolset([charge]), effects)])

A call that fails on the wire, or a repeat the gate refuses or answers from the record, reaches
the model as a tool result saying what happened and what not to do (`ToolOutcome`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.toolsets import WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from reconciler.integrations.tool_calls import ToolEffects, ToolOutcome


def _run_scope(ctx: RunContext[Any]) -> str:
    return ctx.run_id or "pydantic-ai"


@dataclass
class ReconciledToolset(WrapperToolset[Any]):
    """`wrapped`'s tools, each call an effect of `effects`. `scope` names the run a call
    belongs to (default: the run's `run_id`; pass `Agent.run(..., run_id=...)` the same id
    when a restarted worker resumes a run, so its calls are the same operations)."""

    effects: ToolEffects = field(kw_only=True)
    scope: Callable[[RunContext[Any]], str] = field(default=_run_scope, kw_only=True)

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        async def invoke() -> Any:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)

        result = await self.effects.arun(self.scope(ctx), name, tool_args, invoke)
        return str(result) if isinstance(result, ToolOutcome) else result
