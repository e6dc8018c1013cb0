/** The charge every end-to-end test makes: a PaymentIntent through Stripe's SDK, carrying what
 * its intent says it carries (the operation id in `metadata[operation_id]`, where the sidecar's
 * probes find it; the idempotency key when the tool is keyed). */
import type Stripe from "stripe";

import { currentCall } from "../src/index.js";

export interface ChargeArgs {
  [name: string]: unknown;
  order: string;
  amount: number;
}

export const ARGS: ChargeArgs = { order: "A-17", amount: 1200 };

/** What a send carries to the provider. */
export interface Carried {
  operationId: string;
  idempotencyKey: string | null;
}

/** What the running gated call says its send must carry. */
export function fromCurrentCall(): Carried {
  const call = currentCall();
  if (!call) throw new Error("charge runs inside a gated call");
  return { operationId: call.operationId, idempotencyKey: call.idempotencyKey };
}

/** Counts the sends that left for the provider (the sandbox counts the effects). */
export class Payments {
  sends = 0;
  constructor(readonly stripe: Stripe) {}

  async charge(args: ChargeArgs, sent: Carried = fromCurrentCall()): Promise<{ id: string;
    status: string }> {
    this.sends += 1;
    const intent = await this.stripe.paymentIntents.create({
      amount: args.amount, currency: "eur", confirm: true, payment_method: "pm_card_visa",
      metadata: { operation_id: sent.operationId, order: args.order },
    }, sent.idempotencyKey ? { idempotencyKey: sent.idempotencyKey } : {});
    return { id: intent.id, status: intent.status };
  }
}
