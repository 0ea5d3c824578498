/**
 * The provider's modules import one way only (issue 22): no two files of src/ depend on each
 * other, type-only imports included (the checker is sandpool/testing's importCycles, itself
 * tested in the client's test/imports.test.ts).
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import { importCycles, importGraph } from "sandpool/testing";

// build-test/test/imports.test.js -> the package's src/ (the TypeScript sources, not the build).
const SRC = fileURLToPath(new URL("../../src/", import.meta.url));

test("src/ has no import circles", () => {
  assert.deepEqual(importCycles(SRC), []);
});

test("the sandbox module uses the process manager, not the other way round", () => {
  const g = importGraph(SRC);
  assert.ok(g.get("sandbox.ts")?.has("processes.ts"));
  assert.equal(g.get("processes.ts")?.has("sandbox.ts"), false);
});
