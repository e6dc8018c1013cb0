/**
 * effect()'s rules, one test each, with a recorder that answers as the sidecar would and logs
 * what the worker asked and sent (the end-to-end tests show them against the real sidecar).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  Applied,
  effect,
  RetryNotGrantedError,
  RetryRefusedError,
  type AttemptIn,
  type IntentIn,
  type OperationOut,
  type Recorder,
  type Reply,
  type RetryIn,
  type RetryOut,
} from "../src/index.js";

const GRANT: RetryOut = { allowed: true, verdict: "verified_not_applied", reason: "zero",
  findings: [], lease_expires_at: new Date(Date.now() + 60_000).toISOString(), holder: "h",
  attempt: 2, grant: "tok" };

function operation(attempts: number[], refs: string[] = []): OperationOut {
  return {
    intent: {} as OperationOut["intent"],
    attempts: attempts.map((attempt) => ({ attempt, at: "", idempotency_key: null,
      outcome: "timeout", receipt: null, request_hash: "", status: null })),
    evidence: refs.map((ref) => ({ kind: "observation", at: "", matches: [
      { provider_ref: ref }] })),
    verdict: refs.length ? "verified_applied" : "indeterminate", findings: [],
    next_action: "", retry_allowed: false, escalated: false, evaluated_at: "",
  };
}

/** Answers as the sidecar would for an operation already in `standing`. */
class Sidecar implements Recorder {
  log: string[] = [];
  sent: AttemptIn[] = [];
  constructor(readonly standing: OperationOut | null, readonly retry?: RetryOut,
    readonly refuseOpening = false) {}

  async recordIntent(intent: IntentIn): Promise<Reply<OperationOut>> {
    this.log.push(`intent ${intent.operation_id}`);
    return { value: this.standing ?? operation([]), created: this.standing === null };
  }

  async recordAttempt(_: string, attempt: AttemptIn): Promise<Reply<OperationOut>> {
    this.log.push(`attempt ${attempt.attempt} ${attempt.outcome} grant=${attempt.grant}`);
    if (this.refuseOpening && attempt.outcome === "dispatching") {
      throw new RetryNotGrantedError("no grant held by this caller");
    }
    this.sent.push(attempt);
    return { value: operation([attempt.attempt]), created: true };
  }

  async reconcile(): Promise<OperationOut> {
    this.log.push("reconcile");
    return this.standing ?? operation([]);
  }

  async askRetry(_: string, retry: RetryIn): Promise<RetryOut> {
    this.log.push(`retry key=${retry.idempotency_key}`);
    assert.ok(this.retry, "the gate was asked");
    return this.retry;
  }
}

function charge(backend: Recorder, sends: string[], fail?: unknown) {
  return effect({ provider: "stripe", action: "charge", key: (order: string) => `k-${order}`,
    tagged: true, backend, holder: "h" }, async (order: string) => {
    sends.push(order);
    if (fail !== undefined) throw fail;
    return { id: "pi_1" };
  });
}

describe("effect()", () => {
  it("a first call records its intent, opens attempt 1, sends, and completes it", async () => {
    const sidecar = new Sidecar(null);
    const sends: string[] = [];
    assert.deepEqual(await charge(sidecar, sends)("A"), { id: "pi_1" });
    assert.deepEqual(sidecar.log, ["intent k-A", "attempt 1 dispatching grant=null",
      "attempt 1 response grant=null"]);
    assert.deepEqual(sidecar.sent[1]?.receipt, { provider_ref: "pi_1", request_hash: null });
    assert.deepEqual(sends, ["A"]);
  });

  it("a lost answer is recorded as what the error says, and the error is thrown", async () => {
    const sidecar = new Sidecar(null);
    const timeout = new DOMException("timed out", "TimeoutError");
    await assert.rejects(charge(sidecar, [], timeout)("A"), DOMException);
    assert.equal(sidecar.sent[1]?.outcome, "timeout");
  });

  it("an error nothing recognises is a connection_error: it may have been sent", async () => {
    const sidecar = new Sidecar(null);
    await assert.rejects(charge(sidecar, [], new Error("boom"))("A"));
    assert.equal(sidecar.sent[1]?.outcome, "connection_error");
  });

  it("an SDK error carrying an HTTP status is the provider's response", async () => {
    const sidecar = new Sidecar(null);
    await assert.rejects(charge(sidecar, [], Object.assign(new Error("declined"),
      { statusCode: 402 }))("A"));
    assert.deepEqual([sidecar.sent[1]?.outcome, sidecar.sent[1]?.status], ["response", 402]);
  });

  it("a repeat asks the gate first, and sends under the grant's token and number", async () => {
    const sidecar = new Sidecar(operation([1]), GRANT);
    const sends: string[] = [];
    await charge(sidecar, sends)("A");
    assert.deepEqual(sidecar.log, ["intent k-A", "reconcile", "retry key=k-A",
      "attempt 2 dispatching grant=tok", "attempt 2 response grant=tok"]);
    assert.deepEqual(sends, ["A"]);
  });

  it("a restarted worker's first call is a repeat: the intent was recorded before", async () => {
    const sidecar = new Sidecar(operation([]), { ...GRANT, attempt: 1 });
    await charge(sidecar, [])("A");
    assert.deepEqual(sidecar.log.slice(1, 4), ["reconcile", "retry key=k-A",
      "attempt 1 dispatching grant=tok"]);
  });

  it("a repeat the provider shows done is answered from the record, nothing sent", async () => {
    const sidecar = new Sidecar(operation([1], ["pi_9"]), { ...GRANT, allowed: false,
      verdict: "verified_applied", grant: null });
    const sends: string[] = [];
    const answer = await charge(sidecar, sends)("A");
    assert.ok(answer instanceof Applied);
    assert.equal(answer.providerRef, "pi_9");
    assert.deepEqual(sends, []);
    assert.equal(sidecar.sent.length, 0);
  });

  it("a refused repeat sends nothing and says the verdict and the next step", async () => {
    const sidecar = new Sidecar(operation([1]), { ...GRANT, allowed: false,
      verdict: "indeterminate", reason: "no conclusive zero", grant: null });
    const sends: string[] = [];
    await assert.rejects(charge(sidecar, sends)("A"), (error: unknown) =>
      error instanceof RetryRefusedError && error.verdict === "indeterminate" &&
      /no conclusive zero\. Next: the provider may or may not have done it/.test(error.reason));
    assert.deepEqual(sends, []);
  });

  it("a grant whose lease expired before the send sends nothing", async () => {
    const sidecar = new Sidecar(operation([1]), { ...GRANT,
      lease_expires_at: new Date(Date.now() - 1000).toISOString() });
    const sends: string[] = [];
    await assert.rejects(charge(sidecar, sends)("A"), /lease expired/);
    assert.deepEqual(sends, []);
  });

  it("an attempt the sidecar will not open (retry-not-granted) sends nothing", async () => {
    const sidecar = new Sidecar(operation([1]), GRANT, true);
    const sends: string[] = [];
    await assert.rejects(charge(sidecar, sends)("A"), RetryRefusedError);
    assert.deepEqual(sends, []);
  });

  it("the intent says what the request carries, and holds no parameter", async () => {
    let intent: IntentIn | undefined;
    const sidecar = new Sidecar(null);
    const original = sidecar.recordIntent.bind(sidecar);
    sidecar.recordIntent = async (given) => {
      intent = given;
      return original(given);
    };
    await charge(sidecar, [])("secret-order");
    assert.deepEqual(intent?.carries, ["idempotency_key", "operation_id"]);
    assert.ok(!JSON.stringify({ ...intent, idempotency_key: null, operation_id: null })
      .includes("secret-order"));
  });

  it("a call that carries neither a key nor its operation id is warned about once",
    async () => {
      const warnings: string[] = [];
      const listen = (warning: Error & { code?: string }) => {
        if (warning.code === "RECONCILER_UNVERIFIABLE") warnings.push(warning.message);
      };
      process.on("warning", listen);
      const blind = effect({ provider: "mail", action: "send", operationId: "op-1",
        backend: new Sidecar(null) }, async () => "sent");
      await blind();
      await blind();
      await new Promise((done) => setImmediate(done));
      process.off("warning", listen);
      assert.equal(warnings.length, 1);
      assert.match(warnings[0] ?? "", /mail\.send sends the provider neither/);
    });

  it("a read_only call passes straight through", async () => {
    const sidecar = new Sidecar(null);
    const read = effect({ provider: "stripe", action: "retrieve", effect: "read_only",
      operationId: "x", backend: sidecar }, async () => "read");
    assert.equal(await read(), "read");
    assert.deepEqual(sidecar.log, []);
  });
});
