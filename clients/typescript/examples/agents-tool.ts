// An OpenAI Agents SDK function tool whose every call goes through the retry gate.
import { currentCall, ReconcilerClient, ToolEffects } from "@effect-reconciler/client";
import { reconciledExecute } from "@effect-reconciler/client/openai-agents";
import { Agent, run, tool, type Model } from "@openai/agents";
import type Stripe from "stripe";
import { z } from "zod";

export async function chargeWithAgent(model: string | Model, stripe: Stripe, runId: string) {
  const effects = new ToolEffects({
    provider: "stripe", backend: new ReconcilerClient(), // $RECONCILER_URL
    actions: { charge: "payment_intents.create" },
    keyed: ["charge"], // it sends the operation id as Stripe's Idempotency-Key
    tagged: ["charge"], // and attaches it to the PaymentIntent's metadata
  });
  const charge = tool({
    name: "charge", description: "Charge an order, amount in cents",
    parameters: z.object({ order: z.string(), amount: z.number().int() }),
    execute: reconciledExecute(effects, "charge", async ({ order, amount }) => {
      const call = currentCall()!;
      const intent = await stripe.paymentIntents.create({
        amount, currency: "eur", confirm: true, payment_method: "pm_card_visa",
        metadata: { operation_id: call.operationId, order },
      }, { idempotencyKey: call.idempotencyKey! });
      return { id: intent.id, status: intent.status };
    }),
  });
  const agent = new Agent({ name: "billing", model, tools: [charge] });
  return await run(agent, "Charge order A-17 12.00 EUR", { context: { runId } });
}
