/**
 * The Vercel AI SDK: a model (scripted, through `ai`'s own MockLanguageModelV4 and
 * generateText's tool loop) calls a keyless charge tool whose answer is lost after the provider
 * applied it, then calls it again as a model told "it failed" would: exactly one charge at the
 * sandbox, and both tool results say it is done.
 */
import assert from "node:assert/strict";
import { after, before, it } from "node:test";

import { generateText, isStepCount, tool } from "ai";
import { z } from "zod";

import { reconciledExecute } from "../src/adapters/ai.js";
import { ReconcilerClient, ToolEffects, toolOperation } from "../src/index.js";
import { ARGS, Payments } from "./charges.js";
import { startStack, stripeFor, type Stack } from "./harness.js";
import { aiModelCallingCharge } from "./models.js";

let stack: Stack;
before(async () => {
  stack = await startStack();
});
after(async () => stack.close());

it("a keyless charge that times out after the provider applied it, repeated, is one charge",
  async () => {
    const payments = new Payments(stripeFor(stack.sandbox.url, 3000));
    // Keyless: Stripe gets no key of ours to deduplicate by; only the gate stands between the
    // model's repeat and a second charge. Tagged: the probes find the charge by the id.
    const effects = new ToolEffects({
      provider: "stripe", backend: new ReconcilerClient({ baseUrl: stack.sidecar }),
      actions: { charge: "payment_intents.create" }, tagged: ["charge"],
    });
    const charge = tool({
      description: "Charge an order",
      inputSchema: z.object({ order: z.string(), amount: z.number() }),
      contextSchema: z.object({ runId: z.string() }),
      execute: reconciledExecute(effects, "charge", (args) => payments.charge(args)),
    });
    await stack.sandbox.arm("lose_response"); // committed, then no answer: the SDK times out

    const result = await generateText({
      model: aiModelCallingCharge("call_1", "call_2"),
      tools: { charge }, toolsContext: { charge: { runId: "run-ai-1" } },
      prompt: "Charge order A-17 12.00 EUR", stopWhen: isStepCount(3), maxRetries: 0,
    });


    const outputs = result.steps.flatMap((step) => step.toolResults.map((r) => String(r.output)));
    assert.equal(outputs.length, 2);
    const operationId = toolOperation("run-ai-1", "charge", ARGS);
    const charges = await stack.sandbox.charges(operationId);
    assert.equal(charges.length, 1, "exactly one effect at the provider");
    assert.equal(payments.sends, 1, "the repeat sent nothing");
    for (const output of outputs) assert.match(output, new RegExp(`charge: done \\(${charges[0]?.ref}\\)`));
  });
