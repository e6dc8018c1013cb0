/**
 * An MCP client session of `@modelcontextprotocol/sdk`, gated: every `callTool` of a tool with
 * side effects records its intent, asks the gate on a repeat and records its attempt, as the
 * Python MCP proxy (reconciler/mcpproxy) does for any client.
 *
 *   const client = new Client({ name: "worker", version: "1.0.0" });
 *   await client.connect(transport);
 *   const tools = reconciledClient(client, effects, { scope: runId });
 *   const result = await tools.callTool({ name: "charge", arguments: { order: "A-17" } });
 *
 * The request's `_meta` carries what the intent says the request carries, under the proxy's
 * names: `io.reconciler/idempotency_key` for a `keyed` tool (the upstream sends it on to the
 * provider) and `io.reconciler/operation_id` for a `tagged` one (it attaches it where the
 * provider keeps metadata). A run named in `_meta["io.reconciler/run_id"]` is the call's scope.
 * A result with `isError` is the upstream's own answer, recorded and handed back unchanged; a
 * call whose answer was lost, or a repeat, is answered with a text result saying what happened.
 */
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";

import { currentCall } from "../effect.js";
import { answerOf, type MatchIn, type Outcome } from "../outcomes.js";
import { ToolOutcome, ToolEffects } from "../tools.js";

export const RUN_META = "io.reconciler/run_id";
export const KEY_META = "io.reconciler/idempotency_key";
export const OPERATION_META = "io.reconciler/operation_id";
/** The SDK's JSON-RPC error codes (types.ts ErrorCode) for a lost answer. */
const CONNECTION_CLOSED = -32000;
const REQUEST_TIMEOUT = -32001;

type CallTool = Client["callTool"];
type CallParams = Parameters<CallTool>[0];
type CallResult = Awaited<ReturnType<CallTool>>;

/** The upstream tool answered with `isError`: a response, and no claim of success. */
export class UpstreamToolError extends Error {
  override name = "UpstreamToolError";
  /** As a gateway would say it: the upstream answered, with an error. */
  readonly status = 502;
  constructor(readonly result: CallResult) {
    super("the upstream tool answered with an error");
  }
}

/** An MCP request that timed out, or a connection that closed under it, is ambiguous: the
 * tool may have run. */
export function mcpOutcome(error: unknown): Outcome | undefined {
  const code = typeof error === "object" && error !== null
    ? (error as { code?: unknown }).code : undefined;
  if (code === REQUEST_TIMEOUT) return "timeout";
  if (code === CONNECTION_CLOSED) return "connection_error";
  return undefined;
}

/** The provider's reference in a tool result, as the Python proxy reads it: the `id` of its
 * first text block read as JSON, else of its structured content. */
export function mcpReceipt(result: unknown): MatchIn | null {
  const { content, structuredContent } = result as { content?: unknown;
    structuredContent?: unknown };
  const text = Array.isArray(content)
    ? (content as { type?: unknown; text?: unknown }[]).find((c) => c.type === "text")?.text
    : undefined;
  const found = typeof text === "string" ? answerOf(text).receipt : null;
  return found ?? (structuredContent ? answerOf(structuredContent).receipt : null);
}

export interface ReconciledClientOptions {
  /** The run the calls belong to, when a call's `_meta` names none. */
  scope: string;
}

/** The session's `callTool`, gated; every other method is the client's own. */
export interface ReconciledClient {
  callTool: CallTool;
}

/** `client`, its tool calls gated by `effects` (its `classify` defaults to `mcpOutcome`, its
 * `receipt` to `mcpReceipt`). */
export function reconciledClient(client: Pick<Client, "callTool">, effects: ToolEffects,
  options: ReconciledClientOptions): ReconciledClient {
  const gated = new ToolEffects({
    ...effects.options,
    classify: effects.options.classify ?? mcpOutcome,
    receipt: effects.options.receipt ?? mcpReceipt,
    passthrough: (error) => error instanceof UpstreamToolError ||
      (effects.options.passthrough?.(error) ?? false),
  });
  const tagged = new Set(effects.options.tagged ?? []);
  return {
    async callTool(params: CallParams, resultSchema?, requestOptions?) {
      const given = params._meta?.[RUN_META];
      const scope = typeof given === "string" && given ? given : options.scope;
      const args = params.arguments ?? {};
      try {
        const answer = await gated.run(scope, params.name, args, async () => {
          const call = currentCall();
          const meta: Record<string, unknown> = { ...params._meta };
          if (call?.idempotencyKey) meta[KEY_META] = call.idempotencyKey;
          if (call && tagged.has(params.name)) meta[OPERATION_META] = call.operationId;
          const result = await client.callTool({ ...params, _meta: meta }, resultSchema,
            requestOptions);
          if (result.isError) throw new UpstreamToolError(result);
          return result;
        });
        if (answer instanceof ToolOutcome) {
          return { content: [{ type: "text", text: answer.message }], isError: answer.final };
        }
        return answer;
      } catch (error) {
        if (error instanceof UpstreamToolError) return error.result;
        throw error;
      }
    },
  };
}
