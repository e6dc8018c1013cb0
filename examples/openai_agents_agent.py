"""An OpenAI Agents SDK agent whose charge tool goes through the reconciler, offline: the SDK's
own `ScriptedModel` (agents.testing) plays the model, the sandbox provider takes the charge.

    python examples/openai_agents_agent.py lose_response        # one charge; retry not sent
    python examples/openai_agents_agent.py fail_before_commit   # one charge, on the grant
"""

from __future__ import annotations

import sys

from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call
from sandbox_charge import ARGUMENTS, Payments, Report, report, sandbox_world

from reconciler.integrations.openai_agents import reconciled_tool
from reconciler.integrations.tool_calls import ToolEffects


def drive(payments: Payments, effects: ToolEffects, run_id: str) -> list[str]:
    """Run the agent as run `run_id`; what its tool calls answered the model."""
    # Asks for the charge, then once more (a new call id) whatever it was told.
    model = ScriptedModel([[function_call("charge", ARGUMENTS, call_id="call-1")],
                           [function_call("charge", ARGUMENTS, call_id="call-2")],
                           [assistant_message("finished")]])
    charge = reconciled_tool(function_tool(payments.charge), effects)
    result = Runner.run_sync(Agent(name="billing", model=model, tools=[charge]),
                             "charge order A-17", context={"run_id": run_id},
                             run_config=RunConfig(tracing_disabled=True))
    return [str(item.output) for item in result.new_items
            if isinstance(item, ToolCallOutputItem)]


def main(fault: str | None) -> Report:
    with sandbox_world(fault) as world:
        return report(world, drive(world.payments, world.effects, "run-openai-agents"))


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else None))
