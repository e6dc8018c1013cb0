/**
 * A real sidecar (`reconciler serve`) and sandbox provider (`reconciler sandbox`) on loopback
 * for the npm tests, as tests/service_harness.py and tests/sandbox_harness.py run them for the
 * Python ones: each on a port the OS picks, found in the line it prints; every wait bounded.
 *
 * The `reconciler` command is $RECONCILER_BIN, else the repository's venv (../../.venv).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import Stripe from "stripe";

/** The package's directory (this file runs from dist/test/). */
export const PACKAGE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const RECONCILER = process.env.RECONCILER_BIN ??
  resolve(PACKAGE_DIR, "../../.venv/bin/reconciler");
const START_TIMEOUT_MS = 60_000;

export interface Started {
  url: string;
  process: ChildProcess;
  output: string[];
}

/** Spawn `command`; resolves once a line of its output matches `ready` (group 1: its URL). */
export function start(command: string, args: string[], ready: RegExp,
  env: NodeJS.ProcessEnv = {}): Promise<Started> {
  const child = spawn(command, args, { env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"] });
  const output: string[] = [];
  return new Promise((resolveStarted, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${command} ${args[0]}: not ready in ${START_TIMEOUT_MS} ms:\n${output.join("")}`));
    }, START_TIMEOUT_MS);
    const read = (chunk: Buffer) => {
      const text = chunk.toString("utf8");
      output.push(text);
      const found = ready.exec(output.join(""));
      if (found?.[1]) {
        clearTimeout(timer);
        resolveStarted({ url: found[1], process: child, output });
      }
    };
    child.stdout?.on("data", read);
    child.stderr?.on("data", read);
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${command} ${args[0]} exited (${code}):\n${output.join("")}`));
    });
  });
}

/** SIGTERM, and the exit awaited (SIGKILL after 15 s). */
export async function stop(started: Started): Promise<void> {
  const child = started.process;
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((done) => child.once("exit", () => done()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
  await exited;
  clearTimeout(timer);
}

export interface SandboxObject {
  provider: string;
  ref: string;
  data: { metadata?: Record<string, string> };
}

/** The sandbox provider: its Stripe API at /pay, its test endpoints at /_sandbox. */
export class Sandbox {
  constructor(readonly url: string) {}

  async #post(path: string, body: unknown): Promise<void> {
    const response = await fetch(this.url + path, { method: "POST",
      headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
  }

  /** Arm `fault` for the next Stripe write (docs/sandbox-api.md: an SDK sends no header of
   * ours). */
  arm(fault: string): Promise<void> {
    return this.#post("/_sandbox/faults", { provider: "pay", fault });
  }

  /** The PaymentIntents stored for `operationId` (its `metadata[operation_id]`): the effects
   * counted where they happen. */
  async charges(operationId: string): Promise<SandboxObject[]> {
    const response = await fetch(this.url + "/_sandbox/objects");
    const { objects } = await response.json() as { objects: SandboxObject[] };
    return objects.filter((o) => o.provider === "pay" &&
      o.data.metadata?.operation_id === operationId);
  }
}

/**
 * Stripe's official Node SDK against the sandbox, unchanged but for its base URL: the SDK takes
 * a host and port, not a path, so its fetch is given the sandbox's Stripe root (/pay), as the
 * Python tests give `base_addresses={"api": URL + "/pay"}`. No retries of its own: a retry is
 * the gate's to grant. A test of a lost answer gives a timeout shorter than the sandbox's hold
 * (`lose_response`: 30 s, ended when the sandbox stops).
 */
export function stripeFor(sandboxUrl: string, timeoutMs = 20_000): Stripe {
  const base = new URL(sandboxUrl);
  const toSandbox: typeof fetch = (input, init) => fetch(
    String(input).replace(`${base.origin}/v1/`, `${base.origin}/pay/v1/`), init);
  return new Stripe("sk_test_sandbox", {
    host: base.hostname, port: Number(base.port), protocol: "http", maxNetworkRetries: 0,
    timeout: timeoutMs, httpClient: Stripe.createFetchHttpClient(toSandbox),
  });
}

/** The sidecar's configuration: the Stripe contract and the PaymentIntents probes of
 * examples/reconciler.toml, reading this sandbox with the key in $STRIPE_SECRET_KEY.
 * `inflight_s = 0`: the sandbox commits or fails a request before it answers (never 0 for a
 * real provider). */
function config(sandboxUrl: string): string {
  const probe = (use: string) => `[[providers.stripe.probes]]\nuse = "${use}"\n` +
    `actions = ["payment_intents.create", "charge"]\nbase_url = "${sandboxUrl}/pay"\n`;
  return "[providers.stripe]\nidempotency_keys = true\nkey_retention_s = 86400\n" +
    "max_attempts = 3\nreconcile_deadline_s = 600\ninflight_s = 0\n\n" +
    probe("stripe.payment_intents.search") + "\n" + probe("stripe.payment_intents.list");
}

export interface Stack {
  sidecar: string;
  sandbox: Sandbox;
  close(): Promise<void>;
}

/** A sandbox, and a sidecar on a fresh SQLite store probing it (no background sweep: every
 * probe in these tests is one the client asks for). */
export async function startStack(): Promise<Stack> {
  const dir = mkdtempSync(join(tmpdir(), "reconciler-ts-"));
  const sandbox = await start(RECONCILER, ["sandbox", "--port", "0"],
    /Uvicorn running on (http:\/\/127\.0\.0\.1:\d+)/);
  let sidecar: Started;
  try {
    writeFileSync(join(dir, "reconciler.toml"), config(sandbox.url));
    sidecar = await start(RECONCILER, ["serve", "--port", "0", "--sweep-interval-s", "0",
      "--db", `sqlite:///${join(dir, "reconciler.db")}`, "--config", join(dir, "reconciler.toml"),
      "--no-access-log", "--log-level", "warning"], /serving on (http:\/\/\S+)/,
    // The probes read with the key the sidecar is given (the sandbox takes any).
    { STRIPE_SECRET_KEY: "sk_test_sandbox" });
  } catch (error) {
    await stop(sandbox);
    throw error;
  }
  return {
    sidecar: sidecar.url,
    sandbox: new Sandbox(sandbox.url),
    async close() {
      await Promise.all([stop(sidecar), stop(sandbox)]);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
