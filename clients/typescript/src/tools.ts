/**
 * A tool call as an effect, and what the model is told when it is not the tool's own result:
 * the twin of `reconciler/integrations/tool_calls.py`, which the adapters (ai, @openai/agents,
 * MCP) share.
 *
 * A model that retries a tool makes a new tool call (a new tool call id) with the same
 * arguments, so the operation is the call's identity: the run, the tool's name and its canonical
 * arguments (`toolOperation`). The same charge asked for twice in one run is one operation; a
 * model that means a second charge says so in the arguments (an order id). The tool call id of
 * the first call is recorded with the intent.
 */
import type { Effect, Recorder, Verdict } from "./client.js";
import { RetryRefusedError, ServiceError } from "./errors.js";
import {
  Applied,
  EffectCall,
  intentOf,
  refsOf,
  type Classifier,
  type ReceiptReader,
} from "./effect.js";
import { toolOperation } from "./hashing.js";

export type ToolArguments = Record<string, unknown>;

/** What the model is told instead of the tool's result: what happened, what not to do. */
export class ToolOutcome {
  constructor(readonly tool: string, readonly operationId: string,
    readonly verdict: Verdict | null, readonly message: string,
    /** false when the effect did not happen and a call with the same arguments may be made */
    readonly final = true) {}

  toString(): string {
    return this.message;
  }
}

export interface ToolEffectsOptions {
  provider: string;
  backend?: Recorder;
  /** A tool's class; any other tool is `defaultEffect`; `read_only` tools pass through. */
  effects?: Record<string, Effect>;
  defaultEffect?: Effect;
  /** A tool's action name at the provider (default: the tool's name). */
  actions?: Record<string, string>;
  /** The tools that send the provider the idempotency key they are given
   * (`currentCall().idempotencyKey`, the operation id). Any other tool's intent records none:
   * a key recorded but not sent is a false statement of the intent (SPEC section 3). */
  keyed?: Iterable<string>;
  /** The tools that attach the operation id (`currentCall().operationId`) where the provider
   * keeps metadata, so a probe can find their effects by it. */
  tagged?: Iterable<string>;
  /** Per tool, the argument names whose values are references a probe needs (an order id):
   * they go into the intent's correlation; no other argument leaves the process. */
  correlate?: Record<string, string[]>;
  /** Per tool, the provider request made from (operation id, arguments): what the request hash
   * covers. Default: the arguments. */
  requests?: Record<string, (operationId: string, args: ToolArguments) => unknown>;
  /** Who asks the gate for retries (default: one holder per call). A worker its supervisor
   * restarts under the same name gives that name, to renew a grant its predecessor held. */
  holder?: string;
  classify?: Classifier;
  receipt?: ReceiptReader;
  /** Errors handed back as they are (recorded, not reconciled). */
  passthrough?: (error: unknown) => boolean;
}

function refText(call: EffectCall): string {
  const refs = call.standing ? refsOf(call.standing) : [];
  return refs.length > 0 ? ` (${refs[0]})` : "";
}

function errorText(error: unknown): string {
  const name = error instanceof Error ? error.name : typeof error;
  return error instanceof Error ? `${name}: ${error.message}` : name;
}

/** The message for a call that failed on the wire (`failure`) or was answered from the
 * record, read from the operation's verdict. */
export function told(tool: string, call: EffectCall, failure?: unknown): ToolOutcome {
  const verdict = call.standing?.verdict ?? null;
  let lost = "";
  if (failure !== undefined && call.lastOutcome === "response") {
    lost = `the provider answered with an error (${errorText(failure)})`.slice(0, 300);
  } else if (failure !== undefined) {
    const name = failure instanceof Error ? failure.name : typeof failure;
    lost = `the call failed (${call.lastOutcome ?? "unknown"}: ${name})`;
  }
  if (verdict === "verified_applied") {
    const why = lost ? `${lost}, but the provider shows the effect`
      : "An earlier call reached the provider; nothing was sent again";
    return new ToolOutcome(tool, call.operationId, verdict,
      `${tool}: done${refText(call)}. ${why[0]?.toUpperCase()}${why.slice(1)}. ` +
      `Do not call ${tool} again for this.`);
  }
  if (verdict === "verified_not_applied" && !call.idempotencyKey) {
    // The gate grants no retry without a key (SPEC rule 6): "call again" would be refused.
    return new ToolOutcome(tool, call.operationId, verdict,
      `${tool}: not done: ${lost || "the call failed"} and the provider shows no effect, but ` +
      `${tool} sends the provider no idempotency key, so it is not sent again: a human ` +
      `decides. Do not call ${tool} again with these arguments.`);
  }
  if (verdict === "verified_not_applied") {
    return new ToolOutcome(tool, call.operationId, verdict,
      `${tool}: not done: ${lost || "the call failed"} and the provider shows no effect. ` +
      `You may call ${tool} again, once, with the same arguments.`, false);
  }
  return new ToolOutcome(tool, call.operationId, verdict,
    `${tool}: outcome unknown: ${lost || "the call failed"} and the provider does not show ` +
    `yet whether it happened (verdict ${verdict ?? "none"}). Do not call ${tool} again and do ` +
    "not tell the user it failed: it is being reconciled, and a human decides if it stays " +
    "unknown.");
}

async function reconciled(call: EffectCall): Promise<void> {
  try {
    call.standing = await call.backend.reconcile(call.operationId);
  } catch (error) {
    // 409: another sweeper is probing it; the verdict stays as recorded.
    if (!(error instanceof ServiceError && error.status === 409)) throw error;
  }
}

/** Which tools have side effects, at which provider, and where their records go. */
export class ToolEffects {
  readonly #keyed: Set<string>;
  readonly #tagged: Set<string>;

  constructor(readonly options: ToolEffectsOptions) {
    this.#keyed = new Set(options.keyed ?? []);
    this.#tagged = new Set(options.tagged ?? []);
  }

  effectOf(tool: string): Effect {
    return this.options.effects?.[tool] ?? this.options.defaultEffect ?? "non_idempotent";
  }

  /** The operation a call of `tool` with `args` in run `scope` is (SPEC section 2). */
  operationOf(scope: string, tool: string, args: ToolArguments): string {
    return toolOperation(scope, tool, args);
  }

  #call(scope: string, tool: string, args: ToolArguments, toolCallId?: string): EffectCall {
    const operationId = this.operationOf(scope, tool, args);
    const request = this.options.requests?.[tool];
    const correlation: Record<string, string> = {};
    for (const name of this.options.correlate?.[tool] ?? []) {
      const value = args[name];
      if (typeof value === "string" || typeof value === "number") correlation[name] = String(value);
    }
    const intent = intentOf({
      provider: this.options.provider, action: this.options.actions?.[tool] ?? tool,
      effect: this.effectOf(tool), operationId,
      key: this.#keyed.has(tool) ? operationId : null, tagged: this.#tagged.has(tool),
      params: request ? request(operationId, args) : args, runId: scope,
      toolCallId: toolCallId ?? null, correlation,
    }, []);
    return new EffectCall(intent, this.options);
  }

  /**
   * Run one tool call through the gate; the model gets the result or a `ToolOutcome`. A call
   * that failed on the wire is reconciled and told as its verdict; an error raised before
   * anything was sent is the tool's own, and is thrown.
   */
  async run<T>(scope: string, tool: string, args: ToolArguments, invoke: () => Promise<T>,
    toolCallId?: string): Promise<T | ToolOutcome> {
    if (this.effectOf(tool) === "read_only") return await invoke();
    const call = this.#call(scope, tool, args, toolCallId);
    let result: T | Applied;
    try {
      await call.begin();
      try {
        result = await call.run(invoke);
      } catch (error) {
        if (call.lastOutcome === undefined || this.options.passthrough?.(error)) throw error;
        await reconciled(call);
        return told(tool, call, error);
      }
    } catch (error) {
      if (!(error instanceof RetryRefusedError)) throw error;
      return new ToolOutcome(tool, error.operationId ?? call.operationId,
        error.verdict as Verdict, `${tool}: not sent: ${error.message}. Do not call ${tool} ` +
        "again with these arguments.");
    }
    return result instanceof Applied ? told(tool, call) : result;
  }
}
