/**
 * `effect()`: record, classify and gate any async side-effecting call; the twin of Python's
 * `reconciler.effect` (docs/effect.md).
 *
 *   first call ── intent ── open attempt 1 ── send ── complete it with the outcome ──▶ result
 *   same id again ── reconcile ── ask the gate ─┬─ granted: open attempt n+1 with the grant, send
 *                                               ├─ verified_applied: nothing sent ──▶ Applied
 *                                               └─ refused: nothing sent ──▶ RetryRefusedError
 *
 * Each attempt is recorded before it is sent (`dispatching`, with the retry grant's holder and
 * token) and completed after, so a worker killed between the send and the record leaves the
 * dispatch on record; a worker restarted with the same operation id counts as a retry from the
 * first dispatch on, and only the gate can say whether a second send is safe.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";

import {
  ReconcilerClient,
  type AttemptIn,
  type Carried,
  type Effect,
  type IntentIn,
  type OperationOut,
  type Recorder,
  type RetryOut,
  type Verdict,
} from "./client.js";
import { RetryNotGrantedError, RetryRefusedError, ServiceError } from "./errors.js";
import { requestHash } from "./hashing.js";
import { answerOf, outcomeOf, statusOf, type MatchIn, type Outcome } from "./outcomes.js";

/** What to do after a refusal, by verdict: said to the caller (and to a model, by adapters). */
export const NEXT_STEP: Record<Verdict, string> = {
  indeterminate: "the provider may or may not have done it: do not send it again; wait for " +
    "reconciliation or a human resolution, then call again with the same operation id (that " +
    "sends nothing unless the provider shows it not done and a same-key retry is open; a call " +
    "without a key never gets one)",
  duplicate_effect: "the provider did it more than once: stop, and compensate the extra " +
    "effect or hand it to a human",
  unsafe_retry: "a retry broke the provider's rules: halt this operation and hand it to a human",
  false_success: "the provider answered success but shows no effect: mark the run unhealthy " +
    "and hand it to a human",
  verified_not_applied: "the provider did not do it, yet no retry is open (no idempotency key, " +
    "the retry budget or window spent, or another caller holds the lease)",
  verified_applied: "it is done: use the recorded outcome",
};

/** A repeat call answered without sending: the provider already did it. */
export class Applied {
  readonly verdict = "verified_applied" as const;
  constructor(readonly operationId: string, readonly providerRef: string | null) {}

  toString(): string {
    const ref = this.providerRef ? ` as ${this.providerRef}` : "";
    return `operation ${this.operationId} was already applied by the provider${ref}; ` +
      "it was not sent again";
  }
}

/** A holder id unique to this process and call: host, pid, random suffix. */
export function defaultHolder(): string {
  const host = hostname().replace(/[^A-Za-z0-9.-]/g, "-") || "worker";
  return `${host}:${process.pid}:${randomBytes(4).toString("hex")}`;
}

/** What a call's request carries that a probe can find its effect by (SPEC section 3). */
export function carried(key: string | null, tagged: boolean): Carried[] {
  const found: Carried[] = [];
  if (key) found.push("idempotency_key");
  if (tagged) found.push("operation_id");
  return found.sort();
}

const warned = new Set<string>();

/** Once per (provider, action): its calls carry nothing a probe can find them by. */
function warnUnverifiable(provider: string, action: string): void {
  const name = `${provider}.${action}`;
  if (warned.has(name)) return;
  warned.add(name);
  process.emitWarning(`${name} sends the provider neither an idempotency key nor the operation ` +
    "id (declare them: key and tagged): no probe can verify its effects, and a call whose " +
    "answer is lost is never retried; it goes to a human", { code: "RECONCILER_UNVERIFIABLE" });
}

/** The distinct provider references an operation's attempts and evidence name. */
export function refsOf(operation: OperationOut): string[] {
  const refs: string[] = [];
  for (const attempt of operation.attempts) if (attempt.receipt) refs.push(attempt.receipt.provider_ref);
  for (const evidence of operation.evidence) {
    for (const match of evidence.matches ?? []) refs.push(match.provider_ref);
    if (evidence.kind === "receipt" && evidence.provider_ref) refs.push(evidence.provider_ref);
  }
  return [...new Set(refs)];
}

/** The error a refused retry raises: the verdict, the gate's reason, and what to do. */
export function refusal(operationId: string, answer: RetryOut): RetryRefusedError {
  const step = NEXT_STEP[answer.verdict] ?? "hand it to a human";
  return new RetryRefusedError(operationId, answer.verdict,
    `verdict ${answer.verdict}: ${answer.reason}. Next: ${step}`, answer.findings);
}

export type Classifier = (error: unknown) => Outcome | undefined;
export type ReceiptReader = (result: unknown) => MatchIn | null;
/** A value, or a function of the wrapped call's arguments that gives it. */
export type Given<T, A extends unknown[]> = T | ((...args: A) => T);

export interface EffectOptions<A extends unknown[]> {
  provider: string;
  action: string;
  /** Default `non_idempotent`; `read_only` calls pass straight through. */
  effect?: Effect;
  /** The operation's id; default: the key. The same id is the same operation: a repeat. */
  operationId?: Given<string, A>;
  /** The idempotency key the call sends the provider (`currentCall().idempotencyKey`). Give
   * it only when the call sends it (SPEC section 3); a retry grant needs one. */
  key?: Given<string | null, A>;
  /** True when the call attaches the operation id where the provider keeps metadata
   * (Stripe's `metadata[operation_id]`): a probe can then find its effect by it. */
  tagged?: boolean;
  /** What the request hash covers; default: the call's arguments, as an array. */
  params?: Given<unknown, A>;
  backend?: Recorder;
  classify?: Classifier;
  receipt?: ReceiptReader;
  holder?: string;
  runId?: Given<string | null, A>;
  toolCallId?: Given<string | null, A>;
  correlation?: Given<Record<string, string>, A>;
}

function valueOf<T, A extends unknown[]>(given: Given<T, A> | undefined, args: A): T | undefined {
  return typeof given === "function" ? (given as (...a: A) => T)(...args) : given;
}

let defaultBackend: Recorder | undefined;

/** The backend of every `effect()` that names none (undefined: a `ReconcilerClient` on
 * $RECONCILER_URL). */
export function useBackend(backend: Recorder | undefined): void {
  defaultBackend = backend;
}

function backendOr(given: Recorder | undefined): Recorder {
  return given ?? (defaultBackend ??= new ReconcilerClient());
}

const running = new AsyncLocalStorage<EffectCall>();

/** The operation whose send is running now, if any: how a wrapped function reads what it must
 * send, the idempotency key and the operation id to attach to the provider's metadata. */
export function currentCall(): EffectCall | undefined {
  return running.getStore();
}

/** One operation: its intent recorded by `begin`, then each `run` one gated attempt. */
export class EffectCall {
  readonly backend: Recorder;
  readonly holder: string;
  attempts = 0;
  resumed = false;
  standing: OperationOut | undefined;
  /** The outcome of this call's latest attempt, once it has made one. */
  lastOutcome: Outcome | undefined;
  /** The token of the retry grant the next send goes under (null: none). */
  grant: string | null = null;
  #lastAnswer: RetryOut | undefined;

  constructor(readonly intent: IntentIn, readonly options: {
    backend?: Recorder; holder?: string; classify?: Classifier; receipt?: ReceiptReader;
  } = {}) {
    this.backend = backendOr(options.backend);
    this.holder = options.holder ?? defaultHolder();
  }

  get operationId(): string {
    return this.intent.operation_id;
  }

  get idempotencyKey(): string | null {
    return this.intent.idempotency_key ?? null;
  }

  async begin(): Promise<void> {
    const recorded = await this.backend.recordIntent(this.intent);
    this.standing = recorded.value;
    this.attempts = Math.max(0, ...recorded.value.attempts.map((a) => a.attempt));
    this.resumed = !recorded.created;
  }

  /** Before a send: undefined to go ahead; Applied when it is done already; throws
   * RetryRefusedError when the gate refuses. A first send of a new intent needs no grant. */
  async gate(): Promise<Applied | undefined> {
    this.grant = null;
    if (this.attempts === 0 && !this.resumed) return undefined;
    try {
      this.standing = await this.backend.reconcile(this.operationId);
    } catch (error) {
      // 409: another sweeper is probing it right now; the gate still knows the verdict.
      if (!(error instanceof ServiceError && error.status === 409)) throw error;
    }
    const answer = await this.backend.askRetry(this.operationId, {
      idempotency_key: this.intent.idempotency_key ?? null,
      request_hash: this.intent.request_hash, holder: this.holder,
    });
    this.#lastAnswer = answer;
    if (answer.allowed) {
      if (answer.lease_expires_at !== null && Date.parse(answer.lease_expires_at) <= Date.now()) {
        throw new RetryRefusedError(this.operationId, answer.verdict,
          "the retry lease expired before dispatch; ask again", answer.findings);
      }
      // The number the grant allows comes next.
      if (typeof answer.attempt === "number") this.attempts = answer.attempt - 1;
      this.grant = answer.grant ?? null;
      return undefined;
    }
    if (answer.verdict === "verified_applied") {
      const refs = this.standing ? refsOf(this.standing) : [];
      return new Applied(this.operationId, refs[0] ?? null);
    }
    throw refusal(this.operationId, answer);
  }

  #opening(): AttemptIn {
    this.attempts += 1;
    return {
      attempt: this.attempts, idempotency_key: this.intent.idempotency_key ?? null,
      request_hash: this.intent.request_hash, at: new Date().toISOString(),
      outcome: "dispatching", holder: this.holder, grant: this.grant,
    };
  }

  /** The opened attempt, completed with what the send returned or threw. */
  #completed(opening: AttemptIn, sent: { result: unknown } | { error: unknown }): AttemptIn {
    let outcome: Outcome;
    let status: number | null = null;
    let receipt: MatchIn | null = null;
    if ("result" in sent) {
      const answer = answerOf(sent.result);
      outcome = "response";
      status = answer.status;
      receipt = answer.receipt;
      if (this.options.receipt) {
        try {
          receipt = this.options.receipt(sent.result);
        } catch {
          receipt = null; // a reader that fails must not cost the attempt its record
        }
      }
    } else {
      outcome = this.options.classify?.(sent.error) ?? outcomeOf(sent.error) ?? "connection_error";
      // An SDK's error for a 4xx/5xx: the provider answered.
      const answered = outcome === "connection_error" ? statusOf(sent.error) : undefined;
      if (answered !== undefined) {
        outcome = "response";
        status = answered;
      }
    }
    this.lastOutcome = outcome;
    return { ...opening, outcome, status, receipt };
  }

  /** Send once through `fn` (asking the gate first on a repeat); record what happened. */
  async run<T>(fn: () => Promise<T> | T): Promise<T | Applied> {
    const done = await this.gate();
    if (done !== undefined) return done;
    const opening = this.#opening();
    try {
      await this.backend.recordAttempt(this.operationId, opening);
    } catch (error) {
      if (!(error instanceof RetryNotGrantedError)) throw error;
      // The sidecar would not open the attempt: nothing was sent, nor may be.
      this.attempts -= 1;
      throw new RetryRefusedError(this.operationId, this.#lastAnswer?.verdict ?? "unknown",
        error.message);
    }
    let result: T;
    try {
      result = await running.run(this, fn);
    } catch (error) {
      await this.backend.recordAttempt(this.operationId, this.#completed(opening, { error }));
      throw error;
    }
    await this.backend.recordAttempt(this.operationId, this.#completed(opening, { result }));
    return result;
  }
}

/** The intent of one call of an effect: id, key, hash and what its request carries. */
export function intentOf<A extends unknown[]>(options: EffectOptions<A>, args: A): IntentIn {
  const key = valueOf(options.key, args) ?? null;
  const operationId = options.operationId !== undefined ? valueOf(options.operationId, args) : key;
  if (!operationId) {
    throw new TypeError(`effect(${options.provider}.${options.action}): give an operationId ` +
      "or a key; a repeat call is recognised by it");
  }
  const params = options.params !== undefined ? valueOf(options.params, args) : args;
  const carries = carried(key, options.tagged ?? false);
  if (carries.length === 0) warnUnverifiable(options.provider, options.action);
  return {
    operation_id: operationId, request_hash: requestHash(params), idempotency_key: key,
    provider: options.provider, action: options.action, effect: options.effect ?? "non_idempotent",
    run_id: valueOf(options.runId, args) ?? null,
    tool_call_id: valueOf(options.toolCallId, args) ?? null,
    correlation: valueOf(options.correlation, args) ?? {}, carries,
  };
}

/**
 * Track a side effect: returns `fn` wrapped so that each call records its intent, asks the
 * gate on a repeat, and records its attempt. A repeat answered from the record resolves to
 * `Applied` (nothing sent); a refused one rejects with `RetryRefusedError`.
 */
export function effect<F extends (...args: never[]) => Promise<unknown>>(
  options: EffectOptions<Parameters<F>>, fn: F,
): (...args: Parameters<F>) => Promise<Awaited<ReturnType<F>> | Applied> {
  if (options.effect === "read_only") { // a read is repeated freely: nothing to gate
    return fn as unknown as (...args: Parameters<F>) => Promise<Awaited<ReturnType<F>>>;
  }
  return async (...args: Parameters<F>) => {
    const call = new EffectCall(intentOf(options, args), options);
    await call.begin();
    return await call.run(() => fn(...args) as Promise<Awaited<ReturnType<F>>>);
  };
}
