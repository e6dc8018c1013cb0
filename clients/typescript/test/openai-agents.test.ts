/**
 * The OpenAI Agents SDK: an agent (its model scripted through the SDK's own `Model` interface,
 * run by its own Runner) calls a charge tool whose first send fails before the provider commits
 * (503), then calls it again as the tool's answer allows:
 * - keyed: the gate grants the retry, which sends once: one charge at the sandbox;
 * - keyless: the gate refuses (no key, no retry), and the repeat sends nothing: no charge.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { Agent, run, setTracingDisabled, tool } from "@openai/agents";
import { z } from "zod";

import { reconciledExecute } from "../src/adapters/openai-agents.js";
import { ReconcilerClient, ToolEffects, toolOperation } from "../src/index.js";
import { ARGS, Payments } from "./charges.js";
import { startStack, stripeFor, type Stack } from "./harness.js";
import { ScriptedModel } from "./models.js";

setTracingDisabled(true);

let stack: Stack;
before(async () => {
  stack = await startStack();
});
after(async () => stack.close());

async function chargeTwice(runId: string, keyed: boolean): Promise<{ outputs: string[];
  payments: Payments }> {
  const payments = new Payments(stripeFor(stack.sandbox.url));
  const effects = new ToolEffects({
    provider: "stripe", backend: new ReconcilerClient({ baseUrl: stack.sidecar }),
    actions: { charge: "payment_intents.create" }, tagged: ["charge"],
    keyed: keyed ? ["charge"] : [],
  });
  const charge = tool({
    name: "charge", description: "Charge an order",
    parameters: z.object({ order: z.string(), amount: z.number() }),
    execute: reconciledExecute(effects, "charge", (args) => payments.charge(args)),
  });
  await stack.sandbox.arm("fail_before_commit"); // 503, nothing stored: a real failure
  const result = await run(new Agent({ name: "billing", model: new ScriptedModel("call_1", "call_2"),
    tools: [charge] }), "Charge order A-17 12.00 EUR", { context: { runId }, maxTurns: 5 });
  const outputs = result.newItems.filter((item) => item.type === "tool_call_output_item")
    .map((item) => JSON.stringify(item.output));
  return { outputs, payments };
}

describe("a charge whose first send failed before the provider committed", () => {
  it("keyed: the granted retry sends once, and the provider holds one charge", async () => {
    const { outputs, payments } = await chargeTwice("run-agents-keyed", true);
    assert.equal(outputs.length, 2);
    assert.match(outputs[0] ?? "", /not done.*You may call charge again, once/);
    assert.match(outputs[1] ?? "", /pi_/, "the retry's own result");
    assert.equal(payments.sends, 2, "the first send and the one granted retry");
    const charges = await stack.sandbox.charges(toolOperation("run-agents-keyed", "charge", ARGS));
    assert.equal(charges.length, 1);
  });

  it("keyless: the refused retry sends nothing, and the provider holds no charge", async () => {
    const { outputs, payments } = await chargeTwice("run-agents-keyless", false);
    assert.equal(outputs.length, 2);
    assert.match(outputs[0] ?? "", /no idempotency key, so it is not sent again/);
    assert.match(outputs[1] ?? "", /not sent: .*verified_not_applied/);
    assert.equal(payments.sends, 1, "only the first send left");
    const charges = await stack.sandbox.charges(
      toolOperation("run-agents-keyless", "charge", ARGS));
    assert.equal(charges.length, 0);
  });
});
