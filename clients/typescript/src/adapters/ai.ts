/**
 * The Vercel AI SDK (`ai`): a tool's `execute`, gated. Pass it to `tool()` as its execute:
 *
 *   const charge = tool({
 *     description: "Charge an order", inputSchema: z.object({ order: z.string(), amount: z.number() }),
 *     contextSchema: z.object({ runId: z.string() }),
 *     execute: reconciledExecute(effects, "charge", async ({ order, amount }) => pay(order, amount)),
 *   });
 *   await generateText({ model, tools: { charge }, toolsContext: { charge: { runId } }, prompt });
 *
 * The operation is the run's call of the tool with these arguments (`toolOperation`): the run
 * comes from `scope` (default: the tool's context's `runId`), and the tool call id is recorded
 * with the intent. A call whose answer was lost, or a repeat the gate answers from the record,
 * returns what happened and what not to do (a string the model reads) instead of throwing: the
 * SDK would hand the model the bare error and let it call again.
 */
import { ToolOutcome, type ToolArguments, type ToolEffects } from "../tools.js";

/** What this adapter reads of the options `ai` passes an execute function (ai 5 to 7's
 * `ToolExecutionOptions`), by shape: no type of `ai` is imported, so any of them fits. */
export interface CallOptions {
  toolCallId: string;
  context?: unknown;
  experimental_context?: unknown;
}

export type Scope<O extends CallOptions> = (options: O) => string;

function runIdOf(context: unknown): string | undefined {
  const found = typeof context === "object" && context !== null
    ? (context as Record<string, unknown>).runId : undefined;
  return typeof found === "string" && found ? found : undefined;
}

/** The run a call belongs to: the `runId` of the tool's context (ai 7: the tool's
 * `contextSchema`, given per tool in `toolsContext`; ai 5 and 6: `experimental_context`). Give
 * `scope` when neither is set. */
export function contextScope(options: CallOptions): string {
  const found = runIdOf(options.context) ?? runIdOf(options.experimental_context);
  if (found === undefined) {
    throw new TypeError("reconciledExecute: no run id: give the tool a context with a runId " +
      "(`toolsContext`), or give a `scope` function");
  }
  return found;
}

/** `execute`, gated by `effects` as the tool `name`. */
export function reconciledExecute<I extends ToolArguments, R, O extends CallOptions = CallOptions>(
  effects: ToolEffects, name: string,
  execute: (input: I, options: O) => Promise<R>,
  scope: Scope<O> = contextScope,
): (input: I, options: O) => Promise<R | string> {
  return async (input, options) => {
    const result = await effects.run(scope(options), name, input,
      () => execute(input, options), options.toolCallId);
    return result instanceof ToolOutcome ? result.message : result;
  };
}
