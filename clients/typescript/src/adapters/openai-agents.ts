/**
 * The OpenAI Agents SDK for JavaScript (`@openai/agents`): a function tool's `execute`, gated.
 * Pass it to `tool()` as its execute:
 *
 *   const charge = tool({
 *     name: "charge", description: "Charge an order",
 *     parameters: z.object({ order: z.string(), amount: z.number() }),
 *     execute: reconciledExecute(effects, "charge", async ({ order, amount }) => pay(order, amount)),
 *   });
 *   await run(agent, "Charge order A-17", { context: { runId } });
 *
 * The SDK's default error handler answers any tool error with "An error occurred while running
 * the tool. Please try again.": for a charge whose answer was lost, that is the blind retry this
 * product exists to stop. The gated execute answers such a call with what happened and what not
 * to do instead, and a repeat with the record's answer; only errors raised before anything was
 * sent reach the tool's `errorFunction`.
 */
import type { RunContext } from "@openai/agents";

import { ToolOutcome, type ToolArguments, type ToolEffects } from "../tools.js";

/** What the SDK passes an execute function after the input (its `ToolCallDetails`). */
export interface CallDetails {
  toolCall?: { callId?: string };
}

export type Scope<C> = (context: RunContext<C> | undefined) => string;

/** The run a call belongs to: the run context's `runId` (attribute or key, as the Python
 * adapter reads it). Give `scope` when it is not set. */
export function contextScope<C>(context: RunContext<C> | undefined): string {
  const inner = context?.context as unknown;
  const found = typeof inner === "object" && inner !== null
    ? (inner as Record<string, unknown>).runId : undefined;
  if (typeof found !== "string" || !found) {
    throw new TypeError("reconciledExecute: no run id: pass `context: { runId }` to run(), " +
      "or give a `scope` function");
  }
  return found;
}

/** `execute`, gated by `effects` as the tool `name`. */
export function reconciledExecute<I extends ToolArguments, O, C = unknown>(
  effects: ToolEffects, name: string,
  execute: (input: I, context?: RunContext<C>, details?: CallDetails) => Promise<O>,
  scope: Scope<C> = contextScope,
): (input: I, context?: RunContext<C>, details?: CallDetails) => Promise<O | string> {
  return async (input, context, details) => {
    const result = await effects.run(scope(context), name, input,
      () => execute(input, context, details), details?.toolCall?.callId);
    return result instanceof ToolOutcome ? result.message : result;
  };
}
