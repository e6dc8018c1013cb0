/**
 * What a call's result or error says about its attempt, for any client library: the twin of
 * `reconciler/core/outcomes.py`. Errors are read by shape (their `code`, `name`, class names along
 * the prototype chain, `status`), so none of the libraries is imported:
 *
 *   not_sent          the connection was never made: nothing reached the provider
 *   timeout           sent, no answer in time: the provider may have done the work
 *   connection_error  sent, the connection broke: the provider may have done the work
 *   response          the provider answered (an SDK error with an HTTP status included)
 *
 * How each library says it:
 * - fetch (undici): `TypeError("fetch failed")` with the socket error as its `cause`
 *   (`ECONNREFUSED`, `UND_ERR_CONNECT_TIMEOUT`, `UND_ERR_HEADERS_TIMEOUT`, `UND_ERR_SOCKET`...,
 *   https://undici.nodejs.org/#/docs/api/Errors); `AbortSignal.timeout()` rejects with a
 *   `TimeoutError` DOMException, an abort with an `AbortError`.
 * - axios: `AxiosError` with `code` `ECONNABORTED`/`ETIMEDOUT` on a timeout, the socket's code
 *   otherwise, `response.status` when the server answered (https://axios-http.com/docs/handling_errors).
 * - Stripe: `StripeConnectionError` (its `type`) wrapping the socket error in `detail`, whose
 *   `code` is `ETIMEDOUT` on a timeout (stripe-node RequestSender._generateConnectionError);
 *   API errors carry `statusCode`.
 * - OpenAI: `APIConnectionTimeoutError` / `APIConnectionError` (with the fetch error as
 *   `cause`); `APIError`s with a `status`.
 *
 * An ambiguous wrapper is refined by what it wraps (`cause`, Stripe's `detail`, an
 * AggregateError's `errors`). An error nothing here recognises is `connection_error`, never
 * `not_sent`: it may have come after the send, so only the provider can say.
 */
import type { components } from "./generated/sidecar.js";

export type Outcome = components["schemas"]["Outcome"];
export type MatchIn = components["schemas"]["MatchIn"];

/** Socket and client codes raised before any byte of the request left. */
const NOT_SENT_CODES = new Set([
  "ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EAI_NONAME", "ENETUNREACH", "EHOSTUNREACH",
  "UND_ERR_CONNECT_TIMEOUT", "ERR_INVALID_URL", "ERR_INVALID_PROTOCOL", "ERR_BAD_OPTION_VALUE",
]);
/** Sent, and no answer came in time. */
const TIMEOUT_CODES = new Set([
  "ETIMEDOUT", "ECONNABORTED", "ESOCKETTIMEDOUT", "UND_ERR_HEADERS_TIMEOUT",
  "UND_ERR_BODY_TIMEOUT",
]);
const TIMEOUT_NAMES = new Set(["TimeoutError", "AbortError", "APIConnectionTimeoutError"]);
const CONNECTION_NAMES = new Set(["StripeConnectionError", "APIConnectionError"]);
const MAX_DEPTH = 8;

function field(value: unknown, name: string): unknown {
  if (value === null || (typeof value !== "object" && typeof value !== "function")) {
    return undefined;
  }
  try {
    return (value as Record<string, unknown>)[name];
  } catch {
    return undefined; // a getter that throws says nothing
  }
}

/** The class names of `error` along its prototype chain, most specific first. */
function classNames(error: object): string[] {
  const names: string[] = [];
  for (let proto = Object.getPrototypeOf(error) as object | null; proto !== null;
    proto = Object.getPrototypeOf(proto) as object | null) {
    const ctor = field(proto, "constructor");
    if (typeof ctor === "function" && ctor.name) names.push(ctor.name);
  }
  return names;
}

function ownOutcome(error: object): Outcome | undefined {
  const code = field(error, "code");
  if (typeof code === "string") {
    if (NOT_SENT_CODES.has(code)) return "not_sent";
    if (TIMEOUT_CODES.has(code)) return "timeout";
  }
  const names = [field(error, "name"), field(error, "type"), ...classNames(error)];
  if (names.some((name) => typeof name === "string" && TIMEOUT_NAMES.has(name))) return "timeout";
  if (names.some((name) => typeof name === "string" && CONNECTION_NAMES.has(name))) {
    return "connection_error";
  }
  return undefined;
}

function wrapped(error: object): object[] {
  const inner = [field(error, "cause"), field(error, "detail")];
  const errors = field(error, "errors");
  if (Array.isArray(errors)) inner.push(...(errors as unknown[]));
  return inner.filter((e): e is object => typeof e === "object" && e !== null);
}

/**
 * The transport outcome `error` means, or undefined when it is not a transport failure known
 * here. A definite answer (`not_sent`, `timeout`) anywhere in what it wraps wins over
 * `connection_error`.
 */
export function outcomeOf(error: unknown): Outcome | undefined {
  if (typeof error !== "object" || error === null) return undefined;
  const seen = new Set<object>();
  const queue: object[] = [error];
  let best: Outcome | undefined;
  while (queue.length > 0 && seen.size < MAX_DEPTH) {
    const current = queue.shift() as object;
    if (seen.has(current)) continue;
    seen.add(current);
    const own = ownOutcome(current);
    if (own !== undefined && own !== "connection_error") return own;
    best ??= own;
    queue.push(...wrapped(current));
  }
  return best;
}

function httpStatus(value: unknown): number | undefined {
  return typeof value === "number" && Number.isInteger(value) && value >= 100 && value <= 599
    ? value
    : undefined;
}

/**
 * The HTTP status a response, an SDK object or an SDK error carries: `status` (fetch's
 * Response, OpenAI's APIError), `statusCode` (Stripe's errors), the same on `.response`
 * (axios) or `.lastResponse` (Stripe's objects).
 */
export function statusOf(value: unknown): number | undefined {
  for (const holder of [value, field(value, "response"), field(value, "lastResponse")]) {
    for (const name of ["status", "statusCode"]) {
      const found = httpStatus(field(holder, name));
      if (found !== undefined) return found;
    }
  }
  return undefined;
}

const HASH = /^sha256:[0-9a-f]{64}$/;

/** What a returned value tells its attempt: the status and the provider's receipt. */
export interface Answer {
  status: number;
  receipt: MatchIn | null;
}

/** A tool's JSON answer (a string holding an object) read as that object. */
function body(value: unknown): unknown {
  if (typeof value !== "string" || !value.startsWith("{")) return value;
  try {
    return JSON.parse(value) as unknown;
  } catch {
    return undefined;
  }
}

/**
 * Read a returned value: its status (200 when it carries none: the callee returned, so it
 * claims success) and a receipt from its `id` (an object's, or a JSON object text's); a
 * `request_hash` it echoes binds the receipt. Never throws: a value it cannot read gives no
 * receipt.
 */
export function answerOf(returned: unknown): Answer {
  const value = body(returned);
  const status = statusOf(value) ?? 200;
  const ref = field(value, "id");
  const ok = (typeof ref === "string" && ref.length > 0 && ref.length <= 255) ||
    (typeof ref === "number" && Number.isSafeInteger(ref));
  if (!ok || status < 200 || status >= 300) return { status, receipt: null };
  const echoed = field(value, "request_hash");
  return {
    status,
    receipt: {
      provider_ref: String(ref),
      request_hash: typeof echoed === "string" && HASH.test(echoed) ? echoed : null,
    },
  };
}
