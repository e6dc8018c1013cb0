/**
 * How the client reads the sidecar's answers that the end-to-end tests cannot provoke at will:
 * an overloaded sidecar's 503 with Retry-After, and the problem types (RFC 9457) it branches
 * on. A local HTTP server answers as the sidecar does (reconciler/service/admission.py for the
 * 503, reconciler/client/calls.py for what each problem means).
 */
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { it } from "node:test";

import {
  NOT_GRANTED,
  ReconcilerClient,
  retryAfterMs,
  RetryNotGrantedError,
  ServiceError,
  UnknownOperationError,
} from "../src/index.js";

type Answer = [number, Record<string, string>, unknown];

/** A server answering each request with the next of `answers`; the requests it saw. */
async function answering(answers: Answer[]): Promise<{ client: ReconcilerClient;
  seen: string[]; close(): void }> {
  const seen: string[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    seen.push(`${req.method} ${req.url}`);
    const [status, headers, body] = answers.shift() ?? [500, {}, { detail: "no more" }];
    res.writeHead(status, { "Content-Type": "application/json", ...headers })
      .end(JSON.stringify(body));
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const { port } = server.address() as AddressInfo;
  return { client: new ReconcilerClient({ baseUrl: `http://127.0.0.1:${port}`, token: "" }),
    seen, close: () => server.close() };
}

const OPERATION = { intent: {}, attempts: [], evidence: [], verdict: "indeterminate",
  findings: [], next_action: "wait_and_reconcile", retry_allowed: false, escalated: false,
  evaluated_at: "2026-01-01T00:00:00Z" };

it("a 503 with Retry-After is sent again after the pause, a bounded number of times", async () => {
  const server = await answering([[503, { "Retry-After": "0" }, { detail: "overloaded" }],
    [200, {}, OPERATION]]);
  const operation = await server.client.get("op/1");
  server.close();
  assert.equal(operation.verdict, "indeterminate");
  assert.deepEqual(server.seen, ["GET /v1/operations/op%2F1", "GET /v1/operations/op%2F1"]);

  const overloaded = await answering(Array.from({ length: 5 }, (): Answer =>
    [503, { "Retry-After": "0" }, { title: "overloaded" }]));
  await assert.rejects(overloaded.client.get("op"), (error: unknown) =>
    error instanceof ServiceError && error.status === 503);
  overloaded.close();
  assert.equal(overloaded.seen.length, 4, "the first request and 3 more");
});

it("a 503 without Retry-After, or asking too long a pause, is the caller's", async () => {
  const server = await answering([[503, {}, {}], [503, { "Retry-After": "3600" }, {}]]);
  await assert.rejects(server.client.get("op"), ServiceError);
  await assert.rejects(server.client.get("op"), ServiceError);
  server.close();
  assert.equal(server.seen.length, 2);
});

it("Retry-After is delta-seconds or an HTTP date", () => {
  assert.equal(retryAfterMs("2"), 2000);
  assert.equal(retryAfterMs(new Date(10_000).toUTCString(), 4_000), 6000);
  assert.equal(retryAfterMs("soon"), undefined);
  assert.equal(retryAfterMs(null), undefined);
});

it("the problems the client branches on, by type and status", async () => {
  const server = await answering([
    [404, {}, { title: "not found", detail: "no such operation" }],
    [409, {}, { type: NOT_GRANTED, detail: "no grant held by this caller" }],
    [409, {}, { allowed: false, verdict: "indeterminate", reason: "wait", findings: [],
      lease_expires_at: null, holder: "h" }],
    [422, {}, { title: "invalid", detail: "bad hash" }],
  ]);
  const { client } = server;
  await assert.rejects(client.get("op"), UnknownOperationError);
  await assert.rejects(client.recordAttempt("op", { attempt: 2, request_hash: "sha256:x",
    outcome: "dispatching" }), RetryNotGrantedError);
  const refused = await client.askRetry("op", { request_hash: "sha256:x" });
  assert.equal(refused.allowed, false);
  await assert.rejects(client.askRetry("op", { request_hash: "sha256:x" }), (error: unknown) =>
    error instanceof ServiceError && error.status === 422 && error.problem.detail === "bad hash");
  server.close();
});
