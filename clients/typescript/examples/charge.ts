// effect() around Stripe's SDK: one charge per order, whatever happens on the wire.
import { currentCall, effect } from "@effect-reconciler/client";
import type Stripe from "stripe";

export function chargeOrder(stripe: Stripe) {
  return effect({
    provider: "stripe", action: "payment_intents.create",
    key: (order: string) => `charge-${order}`, // sent as Stripe's Idempotency-Key
    tagged: true, // the operation id goes into metadata[operation_id], where probes look
    params: (order: string, amount: number) => ({ order, amount }), // what the hash covers
  }, async (order: string, amount: number) => {
    const call = currentCall()!;
    return await stripe.paymentIntents.create({
      amount, currency: "eur", confirm: true, payment_method: "pm_card_visa",
      metadata: { operation_id: call.operationId },
    }, { idempotencyKey: call.idempotencyKey! });
  });
}

/** Charge an order once. After a failure the caller cannot read (a timeout), the same call
 * again is a question to the gate: sent only if the provider shows no charge and a retry is
 * granted; else the record's answer (`Applied`) or `RetryRefusedError`, nothing sent. */
export async function chargeOnce(stripe: Stripe, order: string, amount: number) {
  const charge = chargeOrder(stripe);
  try {
    return await charge(order, amount);
  } catch {
    return await charge(order, amount);
  }
}
