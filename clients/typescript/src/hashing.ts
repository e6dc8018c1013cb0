/**
 * Request fingerprints and derived identities (SPEC section 2, canonical hashing), byte for byte
 * what `reconciler.core.hashing` computes in Python: test/vectors/hashing.json holds the cases both
 * the npm tests and tests/test_hashing_vectors.py check.
 *
 * request_hash = "sha256:" + hex(sha256(JCS(params))), JCS being RFC 8785
 * (https://www.rfc-editor.org/rfc/rfc8785): keys sorted by UTF-16 code units, ECMAScript number
 * and string serialisation (RFC 8785 section 3.2.2 defines both as JSON.stringify's), UTF-8.
 */
import { createHash } from "node:crypto";

export const HASH_PREFIX = "sha256:";

/** A value that cannot be hashed: only plain JSON can (the Python client refuses the same). */
export class HashInputError extends TypeError {
  override name = "HashInputError";
}

function refuse(path: string, what: string): never {
  throw new HashInputError(
    `cannot hash parameters: ${what} at ${path || "the top"}; pass only plain objects, arrays, ` +
      "strings, finite numbers (integers within ±(2**53-1)), booleans or null",
  );
}

function canonical(value: unknown, path: string): string {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value)) refuse(path, `the number ${value}`);
      // Python's rfc8785 refuses an int past 2**53-1 (a double cannot hold it exactly); a JS
      // number cannot say whether it was an int, so an integral one that large is refused too.
      if (Number.isInteger(value) && !Number.isSafeInteger(value)) {
        refuse(path, `the integer ${value} (beyond ±(2**53-1))`);
      }
      return JSON.stringify(value);
    case "string":
      // A lone surrogate has no UTF-8 encoding: Python refuses it ("non-UTF-8 codepoints").
      if (!value.isWellFormed()) refuse(path, "a string with a lone surrogate");
      return JSON.stringify(value);
    case "object": {
      if (Array.isArray(value)) {
        return `[${value.map((item, i) => canonical(item, `${path}[${i}]`)).join(",")}]`;
      }
      const proto = Object.getPrototypeOf(value) as unknown;
      if (proto !== Object.prototype && proto !== null) {
        refuse(path, `a ${(value as object).constructor?.name ?? "non-plain"} object`);
      }
      const record = value as Record<string, unknown>;
      // The default sort compares UTF-16 code units, as RFC 8785 section 3.2.3 orders keys.
      const keys = Object.keys(record).sort();
      return `{${keys
        .map((key) => `${JSON.stringify(key)}:${canonical(record[key], `${path}.${key}`)}`)
        .join(",")}}`;
    }
    default:
      return refuse(path, `a ${typeof value}`);
  }
}

/** The RFC 8785 canonical JSON text of `value` (its UTF-8 bytes are what is hashed). */
export function canonicalJson(value: unknown): string {
  return canonical(value, "");
}

function sha256Hex(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/** The fingerprint of an operation's canonical parameters: `sha256:<64 hex>`. */
export function requestHash(params: unknown): string {
  return HASH_PREFIX + sha256Hex(canonicalJson(params));
}

/**
 * An idempotency key for one tool call of one run, unambiguous by construction: the pair is
 * hashed as a canonical JSON array, so ("ab", "c") and ("a", "bc") differ.
 */
export function deriveIdempotencyKey(runId: string, toolCallId: string): string {
  for (const [name, value] of [["runId", runId], ["toolCallId", toolCallId]] as const) {
    if (typeof value !== "string" || value === "") {
      throw new HashInputError(`${name} must be a non-empty string, got ${JSON.stringify(value)}`);
    }
  }
  return "rk_" + sha256Hex(canonicalJson([runId, toolCallId]));
}

/**
 * The operation id (and idempotency key, for a tool that sends one) of a tool call, as the
 * Python adapters derive it (`reconciler.integrations.tool_calls.tool_operation`): the run, the
 * tool's name and its canonical arguments hashed as one JSON document, so unambiguous and stable
 * across restarts. A model that retries a tool makes a new tool call id with the same arguments:
 * the same operation, which the gate then answers.
 */
export function toolOperation(scope: string, tool: string, args: Record<string, unknown>): string {
  const digest = requestHash({ scope, tool, arguments: args }).slice(HASH_PREFIX.length);
  // Python slices code points (`tool[:60]`); Array.from does too, where .slice would cut a
  // surrogate pair.
  return `tool.${Array.from(tool).slice(0, 60).join("")}.${digest.slice(0, 40)}`;
}
