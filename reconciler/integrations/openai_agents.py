"""OpenAI Agents SDK: `reconciled_tool` wraps a `FunctionTool` (what `@function_tool` makes)
so that every invocation goes through the gate.

    charge = reconciled_tool(function_tool(charge_fn), effects, scope=lambda c: c.context.run_id)
    agent = Agent(name="billing", tools=[charge])

The SDK's default failure handler answers any tool error with "An error occurred while running
the tool. Please try again." (agents/tool.py `default_tool_error_function`): for a charge whose
answer was lost, that is the blind retry this product exists to stop. The wrapped tool sees the
error first: a lost answer or a refused retry reaches the model as what happened and what not
to do; an error the provider answered (a 4xx) still goes to the tool's own failure handler.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agents import FunctionTool, RunContextWrapper
from agents.tool import (
    resolve_function_tool_failure_error_function,
    set_function_tool_failure_error_function,
)
from agents.tool_context import ToolContext

from reconciler.core.domain import Effect, Verdict
from reconciler.core.errors import ServiceError, UnknownOperationError
from reconciler.effect import default_backend
from reconciler.integrations.tool_calls import ToolEffects, ToolOutcome, tool_operation


def context_scope(ctx: RunContextWrapper[Any]) -> str:
    """The run a call belongs to: the run context's `run_id` (attribute or key), else the
    run's trace group id. Give `scope` explicitly when neither is set."""
    context = ctx.context
    found = (context.get("run_id") if isinstance(context, Mapping)
             else getattr(context, "run_id", None))
    run_config = getattr(ctx, "run_config", None)
    return str(found or getattr(run_config, "group_id", None) or "openai-agents")


#: The verdicts after which only a human can say whether a call may go ahead.
NEEDS_A_HUMAN = frozenset({Verdict.INDETERMINATE, Verdict.UNSAFE_RETRY,
                           Verdict.DUPLICATE_EFFECT, Verdict.FALSE_SUCCESS})


def needs_a_human(effects: ToolEffects, scope: Callable[[RunContextWrapper[Any]], str],
                  tool: str) -> Callable[[RunContextWrapper[Any], dict[str, Any], str],
                                         Awaitable[bool]]:
    """A `needs_approval` function: a call that repeats an operation whose verdict only a
    human can settle pauses the run (`RunResult.interruptions`) instead of being refused. The
    human records a resolution (`reconciler.client.ReconcilerClient.resolve`, or the sidecar's
    POST /v1/operations/{id}/resolution), approves the item, and the run resumes: the gate then
    answers from that resolution."""
    async def check(ctx: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str
                    ) -> bool:
        if effects.effect_of(tool) is Effect.READ_ONLY:
            return False
        operation_id = tool_operation(scope(ctx), tool, arguments)
        backend = effects.backend or default_backend()
        try:
            standing = await asyncio.to_thread(backend.reconcile, operation_id)
        except (UnknownOperationError, ServiceError):  # a first call: nothing to settle
            return False
        return standing.verdict in NEEDS_A_HUMAN
    return check


def reconciled_tool(tool: FunctionTool, effects: ToolEffects,
                    scope: Callable[[RunContextWrapper[Any]], str] = context_scope,
                    approvals: bool = False) -> FunctionTool:
    """A copy of `tool` whose every call is an effect of `effects`. With `approvals`, a call
    that only a human can settle uses the SDK's approval mechanism (`needs_a_human`)."""
    fallback = resolve_function_tool_failure_error_function(tool)
    # The inner copy raises instead of answering "try again": its errors are ours to read.
    inner = set_function_tool_failure_error_function(dataclasses.replace(tool), None)

    async def on_invoke(ctx: ToolContext[Any], input_json: str) -> Any:
        arguments = json.loads(input_json) if input_json else {}

        async def invoke() -> Any:
            return await inner.on_invoke_tool(ctx, input_json)

        try:
            result = await effects.arun(scope(ctx), tool.name, arguments, invoke)
        except Exception as exc:  # the provider answered with an error: the tool's own handling
            if fallback is None:
                raise
            said = fallback(ctx, exc)
            return await said if inspect.isawaitable(said) else said
        return str(result) if isinstance(result, ToolOutcome) else result

    wrapped = dataclasses.replace(tool, on_invoke_tool=on_invoke)
    if approvals:
        wrapped.needs_approval = needs_a_human(effects, scope, tool.name)
    return set_function_tool_failure_error_function(wrapped, None)
