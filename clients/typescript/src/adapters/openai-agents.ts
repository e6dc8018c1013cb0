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
import { ToolOutcome, type ToolArguments, type ToolEffects } from "../tools.js";

/** What this adapter reads of the run context the SDK passes an execute function (its
 * `RunContext`), by shape: no type of the SDK is imported. */
export interface RunContextLike {
  context?: unknown;
}

/** What the SDK passes an execute function after the run context (its `ToolCallDetails`). */
export interface CallDetails {
  toolCall?: { callId?: string };
}

export type Scope<X extends RunContextLike> = (context: X | undefined) => string;

/** The run a call belongs to: the run context's `runId` (attribute or key, as the Python
 * adapter reads it). Give `scope` when it is not set. */
export function contextScope(context: RunContextLike | undefined): string {
  const inner = context?.context;
  const found = typeof inner === "object" && inner !== null
    ? (inner as Record<string, unknown>).runId : undefined;
  if (typeof found !== "string" || !found) {
    throw new TypeError("reconciledExecute: no run id: pass `context: { runId }` to run(), " +
      "or give a `scope` function");
  }
  return found;
}

/** `execute`, gated by `effects` as the tool `name`. */
export function reconciledExecute<I extends ToolArguments, R,
  X extends RunContextLike = RunContextLike>(
  effects: ToolEffects, name: string,
  execute: (input: I, context?: X, details?: CallDetails) => Promise<R>,
  scope: Scope<X> = contextScope,
): (input: I, context?: X, details?: CallDetails) => Promise<R | string> {
  return async (input, context, details) => {
    const result = await effects.run(scope(context), name, input,
      () => execute(input, context, details), details?.toolCall?.callId);
    return result instanceof ToolOutcome ? result.message : result;
  };
}
