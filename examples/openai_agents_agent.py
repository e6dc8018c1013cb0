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
from sandbox_charge import ARGUMENTS, Report, report, sandbox_world

from reconciler.integrations.openai_agents import reconciled_tool


def main(fault: str | None) -> Report:
    with sandbox_world(fault) as world:
        # Asks for the charge, then once more (a new call id) whatever it was told.
        model = ScriptedModel([[function_call("charge", ARGUMENTS, call_id="call-1")],
                               [function_call("charge", ARGUMENTS, call_id="call-2")],
                               [assistant_message("finished")]])
        charge = reconciled_tool(function_tool(world.payments.charge), world.effects)
        result = Runner.run_sync(Agent(name="billing", model=model, tools=[charge]),
                                 "charge order A-17", context={"run_id": "run-openai-agents"},
                                 run_config=RunConfig(tracing_disabled=True))
        return report(world, [str(item.output) for item in result.new_items
                              if isinstance(item, ToolCallOutputItem)])


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else None))
