/** Every example in README.md and docs/integrations/typescript.md is a file under examples/,
 * shown there as written and run here against a real sidecar and sandbox. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { setTracingDisabled } from "@openai/agents";

import { chargeWithAgent } from "../examples/agents-tool.js";
import { chargeWithModel } from "../examples/ai-tool.js";
import { chargeOnce } from "../examples/charge.js";
import { chargeOverMcp } from "../examples/mcp-session.js";
import { Applied, toolOperation } from "../src/index.js";
import { ARGS, Payments } from "./charges.js";
import { PACKAGE_DIR, startStack, stripeFor, type Stack } from "./harness.js";
import { connectedClient } from "./mcp-server.js";
import { aiModelCallingCharge, ScriptedModel } from "./models.js";

setTracingDisabled(true);

const read = (path: string) => readFileSync(join(PACKAGE_DIR, path), "utf8");

describe("the examples are shown as written", () => {
  const shown: [string, string[]][] = [
    ["README.md", ["examples/charge.ts"]],
    ["../../docs/integrations/typescript.md",
      ["examples/ai-tool.ts", "examples/agents-tool.ts", "examples/mcp-session.ts"]],
  ];
  for (const [doc, examples] of shown) {
    for (const example of examples) {
      it(`${doc} shows ${example}`, () => {
        assert.ok(read(doc).includes("```ts\n" + read(example) + "```\n"),
          `${doc} must show ${example} verbatim in a ts block`);
      });
    }
  }
});

describe("the examples run", () => {
  let stack: Stack;
  before(async () => {
    stack = await startStack();
    process.env.RECONCILER_URL = stack.sidecar; // the examples' ReconcilerClient() reads it
  });
  after(async () => stack.close());

  it("README: chargeOnce after a lost answer is answered from the record: one charge",
    async () => {
      await stack.sandbox.arm("lose_response");
      const answer = await chargeOnce(stripeFor(stack.sandbox.url, 3000), "R-1", 1200);
      const charges = await stack.sandbox.charges("charge-R-1");
      assert.equal(charges.length, 1);
      assert.ok(answer instanceof Applied);
      assert.equal(answer.providerRef, charges[0]?.ref);
    });

  it("README: chargeOnce after a failure before commit is a granted retry: one charge",
    async () => {
      await stack.sandbox.arm("fail_before_commit");
      const answer = await chargeOnce(stripeFor(stack.sandbox.url), "R-2", 1200);
      const charges = await stack.sandbox.charges("charge-R-2");
      assert.equal(charges.length, 1);
      assert.ok(!(answer instanceof Applied));
      assert.equal(answer.id, charges[0]?.ref);
    });

  it("the ai tool charges once", async () => {
    const result = await chargeWithModel(aiModelCallingCharge("call_1"),
      stripeFor(stack.sandbox.url), "run-doc-ai");
    const charges = await stack.sandbox.charges(toolOperation("run-doc-ai", "charge", ARGS));
    assert.equal(charges.length, 1);
    assert.deepEqual(result.steps[0]?.toolResults[0]?.output,
      { id: charges[0]?.ref, status: "succeeded" });
  });

  it("the Agents SDK tool charges once; the model's repeat is told it is done", async () => {
    const result = await chargeWithAgent(new ScriptedModel("call_1", "call_2"),
      stripeFor(stack.sandbox.url), "run-doc-agents");
    const charges = await stack.sandbox.charges(toolOperation("run-doc-agents", "charge", ARGS));
    assert.equal(charges.length, 1);
    const outputs = result.newItems.filter((item) => item.type === "tool_call_output_item")
      .map((item) => JSON.stringify(item.output));
    assert.match(outputs[0] ?? "", new RegExp(charges[0]?.ref ?? "-"));
    assert.match(outputs[1] ?? "", /charge: done/);
  });

  it("the MCP session charges once", async () => {
    const payments = new Payments(stripeFor(stack.sandbox.url));
    const result = await chargeOverMcp(await connectedClient(payments), "run-doc-mcp");
    const charges = await stack.sandbox.charges(toolOperation("run-doc-mcp", "charge", ARGS));
    assert.equal(charges.length, 1);
    assert.equal(result.isError, undefined);
    assert.match(JSON.stringify(result.content), new RegExp(charges[0]?.ref ?? "-"));
  });
});
