/** src/generated/sidecar.ts is what openapi-typescript makes of openapi.json now (and
 * tests/test_openapi_drift.py holds openapi.json to the Python app): the client's types cannot
 * drift from the sidecar's API. */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it } from "node:test";

import { PACKAGE_DIR } from "./harness.js";

it("the generated types are openapi-typescript's output for openapi.json", () => {
  const dir = mkdtempSync(join(tmpdir(), "reconciler-ts-types-"));
  try {
    const fresh = join(dir, "sidecar.ts");
    execFileSync(join(PACKAGE_DIR, "node_modules/.bin/openapi-typescript"),
      [join(PACKAGE_DIR, "openapi.json"), "-o", fresh], { stdio: "pipe", timeout: 60_000 });
    assert.ok(readFileSync(fresh, "utf8") ===
      readFileSync(join(PACKAGE_DIR, "src/generated/sidecar.ts"), "utf8"),
      "src/generated/sidecar.ts is stale: run `npm run generate`");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
