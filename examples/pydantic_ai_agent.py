"""A Pydantic AI agent whose charge tool goes through the reconciler, offline: Pydantic AI's
own `FunctionModel` scripts the model, the sandbox provider takes the charge.

    python examples/pydantic_ai_agent.py lose_response        # one charge; the retry not sent
    python examples/pydantic_ai_agent.py fail_before_commit   # one charge, on the granted retry
"""

from __future__ import annotations

import sys

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from sandbox_charge import ARGUMENTS, Payments, Report, report, sandbox_world

from reconciler.integrations.pydantic_ai import ReconciledToolset
from reconciler.integrations.tool_calls import ToolEffects


def tool_results(messages: list[ModelMessage]) -> list[str]:
    return [str(p.content) for m in messages if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, ToolReturnPart)]


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    seen = tool_results(messages)
    if len(seen) < 2:  # asks for the charge, then once more whatever it was told
        return ModelResponse(parts=[ToolCallPart("charge", ARGUMENTS,
                                                 tool_call_id=f"call-{len(seen) + 1}")])
    return ModelResponse(parts=[TextPart("finished")])


def drive(payments: Payments, effects: ToolEffects, run_id: str) -> list[str]:
    """Run the agent as run `run_id`; what its tool calls answered the model."""
    toolset = ReconciledToolset(FunctionToolset([payments.charge]), effects=effects)
    result = Agent(FunctionModel(model), toolsets=[toolset]).run_sync("charge order A-17",
                                                                      run_id=run_id)
    return tool_results(result.all_messages())


def main(fault: str | None) -> Report:
    with sandbox_world(fault) as world:
        return report(world, drive(world.payments, world.effects, "run-pydantic-ai"))


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else None))
