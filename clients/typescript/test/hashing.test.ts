/** The shared vectors (test/vectors/hashing.json; tests/test_hashing_vectors.py checks Python
 * on the same file): the TypeScript client records the same intent as the Python one. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";

import {
  canonicalJson,
  deriveIdempotencyKey,
  HashInputError,
  requestHash,
  toolOperation,
} from "../src/index.js";
import { PACKAGE_DIR } from "./harness.js";

interface Vectors {
  request_hash: { name: string; params: unknown; canonical: string; request_hash: string }[];
  refused: { name: string; params: unknown }[];
  idempotency_key: { run_id: string; tool_call_id: string; key: string }[];
  tool_operation: { scope: string; tool: string; arguments: Record<string, unknown>;
    operation_id: string }[];
}

const vectors = JSON.parse(readFileSync(join(PACKAGE_DIR, "test/vectors/hashing.json"),
  "utf8")) as Vectors;

describe("request_hash is RFC 8785 canonical JSON, as the Python client computes it", () => {
  for (const vector of vectors.request_hash) {
    it(vector.name, () => {
      assert.equal(canonicalJson(vector.params), vector.canonical);
      assert.equal(requestHash(vector.params), vector.request_hash);
    });
  }
});

describe("parameters that are not plain JSON are refused, as in Python", () => {
  for (const vector of vectors.refused) {
    it(vector.name, () => assert.throws(() => requestHash(vector.params), HashInputError));
  }
  it("what JSON cannot say: undefined, NaN, a Date, a Map, a bigint", () => {
    for (const value of [undefined, Number.NaN, Infinity, new Date(0), new Map(), 1n, () => 1]) {
      assert.throws(() => requestHash({ value }), HashInputError);
    }
  });
});

describe("derived identities are unambiguous and shared", () => {
  for (const vector of vectors.idempotency_key) {
    it(`idempotency key of (${vector.run_id}, ${vector.tool_call_id})`, () => {
      assert.equal(deriveIdempotencyKey(vector.run_id, vector.tool_call_id), vector.key);
    });
  }
  for (const vector of vectors.tool_operation) {
    it(`tool operation of ${vector.scope}/${vector.tool.slice(0, 10)}`, () => {
      assert.equal(toolOperation(vector.scope, vector.tool, vector.arguments),
        vector.operation_id);
    });
  }
  it("an empty run or tool call id is refused", () => {
    assert.throws(() => deriveIdempotencyKey("", "call"), HashInputError);
    assert.throws(() => deriveIdempotencyKey("run", ""), HashInputError);
  });
});
