/**
 * The HTTP client for the sidecar (SPEC section 6), on the platform's `fetch`: the twin of
 * `reconciler.client.ReconcilerClient`. Its types are generated from the sidecar's OpenAPI
 * document (openapi.json, written by scripts/write_openapi.py; `npm run generate`).
 */
import type { components } from "./generated/sidecar.js";
import {
  RetryNotGrantedError,
  ServiceError,
  UnknownOperationError,
  type Problem,
} from "./errors.js";

type Schemas = components["schemas"];
export type IntentIn = Schemas["IntentIn"];
export type AttemptIn = Schemas["AttemptIn"];
export type ReceiptIn = Schemas["ReceiptIn"];
export type ObservationIn = Schemas["ObservationIn"];
export type ResolutionIn = Schemas["ResolutionIn"];
export type ApprovalIn = Schemas["ApprovalIn"];
export type RetryIn = Schemas["RetryIn"];
export type RetryOut = Schemas["RetryOut"];
export type OperationOut = Schemas["OperationOut"];
export type OperationListOut = Schemas["OperationListOut"];
export type Verdict = Schemas["Verdict"];
export type Effect = Schemas["Effect"];
export type Carried = Schemas["Carried"];

/** An answer to a recording call: the operation as it now stands, and whether the call
 * created something (false for an identical repeat). */
export interface Reply<T> {
  value: T;
  created: boolean;
}

/** What `effect()` needs of a client (a `ReconcilerClient` is one; a test may wrap one). */
export interface Recorder {
  recordIntent(intent: IntentIn): Promise<Reply<OperationOut>>;
  recordAttempt(operationId: string, attempt: AttemptIn): Promise<Reply<OperationOut>>;
  reconcile(operationId: string): Promise<OperationOut>;
  askRetry(operationId: string, retry: RetryIn): Promise<RetryOut>;
}

export const DEFAULT_URL = "http://127.0.0.1:8765";
/** The problem type of an opening refused for want of the live retry grant: do not send. */
export const NOT_GRANTED = "https://reconciler.dev/problems/retry-not-granted";
/** Retry answers that are refusals rather than errors (IETF Idempotency-Key draft statuses). */
const REFUSAL_STATUSES = new Set([409, 422]);

export interface ClientOptions {
  /** Default: $RECONCILER_URL, else http://127.0.0.1:8765. */
  baseUrl?: string;
  /** Bearer token; default: $RECONCILER_TOKEN. */
  token?: string;
  /** Per request, in ms: short, since the sidecar is local and a worker must not hang on its
   * bookkeeping (default 5000). */
  timeoutMs?: number;
  /** For `reconcile`, which runs the operation's probes at the provider, each bounded by the
   * sidecar's probe timeout (10 s by default), in ms (default 30000). */
  reconcileTimeoutMs?: number;
  /** How many times a 503 with Retry-After (the sidecar's admission limit: nothing was
   * processed) is sent again after the pause it asks (default 3; 0: never). */
  overloadRetries?: number;
  /** The longest Retry-After pause honoured, in ms (default 10000). */
  maxRetryAfterMs?: number;
  fetch?: typeof fetch;
}

function operationPath(operationId: string, suffix = ""): string {
  return `/v1/operations/${encodeURIComponent(operationId)}${suffix}`;
}

/**
 * Retry-After in ms: delta-seconds or an HTTP date (RFC 9110 section 10.2.3); undefined when
 * absent or unreadable.
 */
export function retryAfterMs(header: string | null, now = Date.now()): number | undefined {
  if (header === null || header.trim() === "") return undefined;
  const trimmed = header.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000;
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

async function problemOf(response: Response): Promise<Problem> {
  const text = await response.text();
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) {
      return parsed as Problem;
    }
  } catch {
    // not JSON: keep the start of the text as the detail
  }
  return { detail: text.slice(0, 200) };
}

export class ReconcilerClient implements Recorder {
  readonly baseUrl: string;
  readonly #headers: Record<string, string>;
  readonly #timeoutMs: number;
  readonly #reconcileTimeoutMs: number;
  readonly #overloadRetries: number;
  readonly #maxRetryAfterMs: number;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? process.env.RECONCILER_URL ?? DEFAULT_URL)
      .replace(/\/+$/, "");
    const token = options.token ?? process.env.RECONCILER_TOKEN;
    this.#headers = token ? { Authorization: `Bearer ${token}` } : {};
    this.#timeoutMs = options.timeoutMs ?? 5000;
    this.#reconcileTimeoutMs = options.reconcileTimeoutMs ?? 30_000;
    this.#overloadRetries = options.overloadRetries ?? 3;
    this.#maxRetryAfterMs = options.maxRetryAfterMs ?? 10_000;
    this.#fetch = options.fetch ?? fetch;
  }

  /** One request; a 503 carrying Retry-After is sent again after that pause, a bounded
   * number of times (the sidecar's admission answers it before reading the request). */
  async request(method: string, path: string, body?: unknown,
    query?: Record<string, string>, timeoutMs = this.#timeoutMs): Promise<Response> {
    const url = new URL(this.baseUrl + path);
    for (const [name, value] of Object.entries(query ?? {})) url.searchParams.set(name, value);
    for (let tries = 0; ; tries++) {
      const response = await this.#fetch(url, {
        method,
        headers: body === undefined ? this.#headers
          : { ...this.#headers, "Content-Type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
      const pause = response.status === 503
        ? retryAfterMs(response.headers.get("Retry-After")) : undefined;
      if (pause === undefined || tries >= this.#overloadRetries || pause > this.#maxRetryAfterMs) {
        return response;
      }
      await response.body?.cancel();
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }

  async #json<T>(response: Response, operationId?: string): Promise<T> {
    if (response.ok) return await response.json() as T;
    throw await this.#error(response, operationId);
  }

  async #error(response: Response, operationId?: string): Promise<Error> {
    const problem = await problemOf(response);
    if (response.status === 404 && operationId !== undefined) {
      return new UnknownOperationError(
        `the sidecar has no operation ${JSON.stringify(operationId)}; record its intent first`,
        operationId);
    }
    if (problem.type === NOT_GRANTED) {
      // Branch on the type, never the prose (RFC 9457): nothing may be sent.
      return new RetryNotGrantedError(problem.detail ?? "retry not granted", operationId);
    }
    return new ServiceError(response.status, problem, operationId);
  }

  async #recorded(response: Response, operationId: string): Promise<Reply<OperationOut>> {
    const value = await this.#json<OperationOut>(response, operationId);
    return { value, created: response.status === 201 };
  }

  /** POST /v1/operations: 201 new, 200 an identical repeat; 409 (ServiceError) a conflict. */
  async recordIntent(intent: IntentIn): Promise<Reply<OperationOut>> {
    // A 404 here would not mean "record the intent first": no operation id for that message.
    const response = await this.request("POST", "/v1/operations", intent);
    if (!response.ok) throw await this.#error(response);
    return { value: await response.json() as OperationOut, created: response.status === 201 };
  }

  async recordAttempt(operationId: string, attempt: AttemptIn): Promise<Reply<OperationOut>> {
    return this.#recorded(
      await this.request("POST", operationPath(operationId, "/attempts"), attempt), operationId);
  }

  async recordEvidence(operationId: string,
    evidence: ReceiptIn | ObservationIn): Promise<Reply<OperationOut>> {
    return this.#recorded(
      await this.request("POST", operationPath(operationId, "/evidence"), evidence), operationId);
  }

  async get(operationId: string): Promise<OperationOut> {
    return this.#json(await this.request("GET", operationPath(operationId)), operationId);
  }

  /** Ask before a retry. A refusal (409 another holder, 422 another key or hash) is an
   * answer, not an error: its problem document carries the same fields as a 200. */
  async askRetry(operationId: string, retry: RetryIn): Promise<RetryOut> {
    const response = await this.request("POST", operationPath(operationId, "/retry"), retry);
    if (response.ok) return await response.json() as RetryOut;
    if (REFUSAL_STATUSES.has(response.status)) {
      const problem = await problemOf(response);
      if ("allowed" in problem) return problem as unknown as RetryOut;
      throw new ServiceError(response.status, problem, operationId);
    }
    throw await this.#error(response, operationId);
  }

  async reconcile(operationId: string): Promise<OperationOut> {
    return this.#json(await this.request("POST", operationPath(operationId, "/reconcile"),
      undefined, undefined, this.#reconcileTimeoutMs), operationId);
  }

  async resolve(operationId: string, resolution: ResolutionIn): Promise<Reply<OperationOut>> {
    return this.#recorded(
      await this.request("POST", operationPath(operationId, "/resolution"), resolution),
      operationId);
  }

  async approve(operationId: string, approval: ApprovalIn): Promise<Reply<OperationOut>> {
    return this.#recorded(
      await this.request("POST", operationPath(operationId, "/approval"), approval), operationId);
  }

  async list(filter: { verdict?: Verdict; escalated?: boolean; after?: string;
    limit?: number } = {}): Promise<OperationListOut> {
    const query: Record<string, string> = { limit: String(filter.limit ?? 50) };
    if (filter.verdict !== undefined) query.verdict = filter.verdict;
    if (filter.escalated !== undefined) query.escalated = String(filter.escalated);
    if (filter.after !== undefined) query.after = filter.after;
    return this.#json(await this.request("GET", "/v1/operations", undefined, query));
  }
}
