/**
 * The client's modules import one way only (issue 22): no two files of src/ depend on each
 * other, type-only imports included. The checker itself is shown to find a circle.
 */

import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, test } from "node:test";

import { importCycles, importGraph } from "../src/testing.js";

// build-test/test/imports.test.js -> the package's src/ (the TypeScript sources, not the build).
const SRC = fileURLToPath(new URL("../../src/", import.meta.url));

describe("import graph", () => {
  test("src/ has no import circles", () => {
    assert.deepEqual(importCycles(SRC), []);
  });

  test("the session module uses the process module, not the other way round", () => {
    const g = importGraph(SRC);
    assert.ok(g.get("session.ts")?.has("process.ts"));
    assert.equal(g.get("process.ts")?.has("session.ts"), false);
  });

  test("a circle through a type-only import is found; one in a comment is not", () => {
    const dir = mkdtempSync(join(tmpdir(), "sandpool-imports-"));
    try {
      writeFileSync(join(dir, "a.ts"), 'import { b } from "./b.js";\nexport const a = b;\n');
      writeFileSync(join(dir, "b.ts"), 'import type { C } from "./c.js";\nexport const b: C = 1;\n');
      writeFileSync(join(dir, "c.ts"), 'export type C = number;\n// import { a } from "./a.js";\n/* export * from "./b.js" */\n');
      assert.deepEqual(importCycles(dir), []);
      writeFileSync(join(dir, "c.ts"), 'import type { a } from "./a.js";\nexport type C = typeof a;\n');
      assert.deepEqual(importCycles(dir), [["a.ts", "b.ts", "c.ts"]]);
      writeFileSync(join(dir, "d.ts"), 'export * from "./e.js";\n');
      writeFileSync(join(dir, "e.ts"), 'const m = await import("./d.js");\nexport default m;\n');
      assert.deepEqual(importCycles(dir), [["a.ts", "b.ts", "c.ts"], ["d.ts", "e.ts"]]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
