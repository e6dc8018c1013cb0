// A Vercel AI SDK tool whose every call goes through the retry gate.
import { currentCall, ReconcilerClient, ToolEffects } from "@effect-reconciler/client";
import { reconciledExecute } from "@effect-reconciler/client/ai";
import { generateText, isStepCount, tool, type LanguageModel } from "ai";
import type Stripe from "stripe";
import { z } from "zod";

export async function chargeWithModel(model: LanguageModel, stripe: Stripe, runId: string) {
  const effects = new ToolEffects({
    provider: "stripe", backend: new ReconcilerClient(), // $RECONCILER_URL
    actions: { charge: "payment_intents.create" },
    tagged: ["charge"], // it attaches the operation id to the PaymentIntent's metadata
  });
  const charge = tool({
    description: "Charge an order, amount in cents",
    inputSchema: z.object({ order: z.string(), amount: z.number().int() }),
    contextSchema: z.object({ runId: z.string() }),
    execute: reconciledExecute(effects, "charge", async ({ order, amount }) => {
      const intent = await stripe.paymentIntents.create({
        amount, currency: "eur", confirm: true, payment_method: "pm_card_visa",
        metadata: { operation_id: currentCall()!.operationId, order },
      });
      return { id: intent.id, status: intent.status };
    }),
  });
  return await generateText({
    model, tools: { charge }, toolsContext: { charge: { runId } },
    prompt: "Charge order A-17 12.00 EUR", stopWhen: isStepCount(3),
  });
}
