/**
 * Transport outcomes read by shape from the errors the real libraries throw, none imported by
 * the client: fetch (undici), axios, Stripe's and OpenAI's Node SDKs, each made to fail against
 * a port nothing listens on (not_sent) and a server that never answers (timeout).
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";

import axios from "axios";
import OpenAI from "openai";
import Stripe from "stripe";

import { answerOf, outcomeOf, statusOf } from "../src/index.js";

let silent: Server;
let silentUrl: string;
let closedUrl: string;

async function listening(server: Server): Promise<string> {
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function thrown(call: () => Promise<unknown>): Promise<unknown> {
  try {
    await call();
  } catch (error) {
    return error;
  }
  throw new Error("the call did not fail");
}

before(async () => {
  // Reads the request, never answers: the client times out after sending.
  silent = createServer(() => undefined);
  silentUrl = await listening(silent);
  const closed = createServer();
  closedUrl = await listening(closed);
  await new Promise((done) => closed.close(done));
});
after(() => {
  silent.closeAllConnections();
  silent.close();
});

function stripeAt(url: string, timeout: number): Stripe {
  const base = new URL(url);
  return new Stripe("sk_test_x", { host: base.hostname, port: Number(base.port),
    protocol: "http", maxNetworkRetries: 0, timeout });
}

describe("fetch (undici)", () => {
  it("a refused connection is not_sent", async () => {
    assert.equal(outcomeOf(await thrown(() => fetch(closedUrl))), "not_sent");
  });
  it("AbortSignal.timeout after the send is a timeout", async () => {
    const error = await thrown(() => fetch(silentUrl, { method: "POST", body: "{}",
      signal: AbortSignal.timeout(200) }));
    assert.equal(outcomeOf(error), "timeout");
  });
});

describe("axios", () => {
  it("a refused connection is not_sent", async () => {
    assert.equal(outcomeOf(await thrown(() => axios.post(closedUrl, {}))), "not_sent");
  });
  it("a timeout is a timeout", async () => {
    assert.equal(outcomeOf(await thrown(() => axios.post(silentUrl, {}, { timeout: 200 }))),
      "timeout");
  });
  it("an answered error carries its status", async () => {
    const server = createServer((_, res) => res.writeHead(503).end("{}"));
    const url = await listening(server);
    const error = await thrown(() => axios.post(url, {}));
    server.close();
    assert.equal(outcomeOf(error), undefined);
    assert.equal(statusOf(error), 503);
  });
});

describe("stripe", () => {
  it("a refused connection (StripeConnectionError wrapping ECONNREFUSED) is not_sent", async () => {
    const error = await thrown(() => stripeAt(closedUrl, 2000).paymentIntents.create(
      { amount: 1, currency: "eur" }));
    assert.equal((error as Error).constructor.name, "StripeConnectionError");
    assert.equal(outcomeOf(error), "not_sent");
  });
  it("a timeout (StripeConnectionError wrapping ETIMEDOUT) is a timeout", async () => {
    const error = await thrown(() => stripeAt(silentUrl, 200).paymentIntents.create(
      { amount: 1, currency: "eur" }));
    assert.equal(outcomeOf(error), "timeout");
  });
  it("an API error carries its statusCode", async () => {
    const server = createServer((_, res) => res.writeHead(402, { "Content-Type": "application/json" })
      .end(JSON.stringify({ error: { type: "card_error", code: "card_declined" } })));
    const url = await listening(server);
    const error = await thrown(() => stripeAt(url, 2000).paymentIntents.create(
      { amount: 1, currency: "eur" }));
    server.close();
    assert.equal(outcomeOf(error), undefined);
    assert.equal(statusOf(error), 402);
  });
});

describe("openai", () => {
  const client = (url: string) => new OpenAI({ apiKey: "sk-x", baseURL: url, maxRetries: 0,
    timeout: 200 });
  it("a refused connection (APIConnectionError wrapping fetch's) is not_sent", async () => {
    const error = await thrown(() => client(closedUrl).models.list());
    assert.equal(outcomeOf(error), "not_sent");
  });
  it("APIConnectionTimeoutError is a timeout", async () => {
    const error = await thrown(() => client(silentUrl).chat.completions.create(
      { model: "m", messages: [] }));
    assert.equal((error as Error).constructor.name, "APIConnectionTimeoutError");
    assert.equal(outcomeOf(error), "timeout");
  });
});

describe("errors nothing here knows", () => {
  it("are left to the caller (effect() records them as connection_error, never not_sent)", () => {
    assert.equal(outcomeOf(new Error("boom")), undefined);
    assert.equal(outcomeOf("a string"), undefined);
  });
  it("a definite outcome in what an error wraps wins over a wrapper's connection_error", () => {
    const wrapper = Object.assign(new Error("x"), { type: "StripeConnectionError" });
    assert.equal(outcomeOf(wrapper), "connection_error");
    const refined = new Error("x", { cause: Object.assign(new Error("y"), { code: "ECONNREFUSED" }) });
    Object.assign(refined, { type: "StripeConnectionError" });
    assert.equal(outcomeOf(refined), "not_sent");
  });
});

describe("a returned value", () => {
  it("claims success, with its id as the receipt and an echoed hash binding it", () => {
    const hash = `sha256:${"a".repeat(64)}`;
    assert.deepEqual(answerOf({ id: "pi_1", request_hash: hash }),
      { status: 200, receipt: { provider_ref: "pi_1", request_hash: hash } });
    assert.deepEqual(answerOf({ id: "pi_1", lastResponse: { statusCode: 200 } }),
      { status: 200, receipt: { provider_ref: "pi_1", request_hash: null } });
  });
  it("a non-2xx response gives no receipt", () => {
    assert.deepEqual(answerOf({ id: "x", status: 500 }), { status: 500, receipt: null });
  });
});

describe("a tool's answer", () => {
  it("a JSON object text gives its id, as the Python client reads a tool's JSON answer", () => {
    assert.deepEqual(answerOf('{"id": "pi_2"}'),
      { status: 200, receipt: { provider_ref: "pi_2", request_hash: null } });
    assert.deepEqual(answerOf("charged"), { status: 200, receipt: null });
  });
});
