/**
 * The protocol side of map (batch.ts), without Redis: what MapState submits and yields for the
 * records it is given, and the map's job defaults. The same cases as the Python client's
 * MapState tests (clients/python/tests/test_batch.py), so that both follow a batch the same way.
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { decode as msgpackDecode, encode as msgpackEncode } from "@msgpack/msgpack";

import { asJob, MapState, mapDefaultsOf, withDefaults, type MapProgress } from "../src/batch.js";
import { InvalidArgumentError, NOTIFY_PROTOCOL_VERSION, type Result } from "../src/index.js";
import { decodeResult } from "../src/protocol.js";

/** A completion record's fields as XREAD gives them; with `result`, the record carries it. */
function record(id: string, exitCode: number, result: boolean): Buffer[] {
  const f = ["id", id, "outcome", "exit", "exit_code", String(exitCode)].map((x) => Buffer.from(x));
  if (result) f.push(Buffer.from("result"), Buffer.from(msgpackEncode({ v: 1, id, outcome: "exit", exit_code: exitCode })));
  else f.push(Buffer.from("result_bytes"), Buffer.from("70000"));
  return f;
}

/** The job map (wire names) of a queue entry's fields (`[id, <id>, job, <payload>, notify, ...]`). */
function jobOf(fields: (string | Buffer)[]): Record<string, unknown> {
  return msgpackDecode(fields[3] as Buffer) as Record<string, unknown>;
}

function result(id: string, exitCode: number): Result {
  return decodeResult(msgpackEncode({ v: 1, id, outcome: "exit", exit_code: exitCode }));
}

describe("MapState", () => {
  test("at most `concurrency` in flight; ordered waits for the first; duplicates ignored; big results fetched", () => {
    const progress: MapProgress[] = [];
    const s = new MapState(
      Array.from({ length: 10 }, (_, i) => `echo ${i}`),
      3,
      true,
      10,
      (p) => progress.push(p),
    );
    const first = s.toSubmit();
    assert.equal(first.length, 3);
    assert.deepEqual(s.toSubmit(), [], "no room until a result arrives");
    const ids = first.map(([id]) => id);
    assert.deepEqual(ids, [0, 1, 2].map((i) => `${s.name}-${i}`), "jobs without an id get <stream>-<index>");
    const m = jobOf(first[0]?.[1] ?? []);
    assert.equal(m.shell, "echo 0", "a string is a shell line");
    assert.equal(m.v, NOTIFY_PROTOCOL_VERSION);
    assert.deepEqual(first[0]?.[1].slice(4).map(String), ["notify", s.name, "notify_result", "1"]);

    // ordered: the second job's result waits for the first
    assert.deepEqual(s.onRecord("1-0", record(ids[1] as string, 0, true)), [[], []]);
    assert.equal(s.toSubmit().length, 1, "its slot is free");
    assert.equal(s.outstanding().length, 3);
    // records are at least once: a second one of the same job changes nothing
    assert.deepEqual(s.onRecord("1-1", record(ids[1] as string, 0, true)), [[], []]);
    // a record without the result asks for a GET; the fetched result then comes out, in order
    assert.deepEqual(s.onRecord("2-0", record(ids[0] as string, 1, false)), [[], [ids[0]]]);
    assert.equal(s.lastId, "2-0");
    assert.deepEqual(s.onFetched(ids[0] as string, null), [], "an expired result: nothing to yield");
    assert.deepEqual(
      s.onFetched(ids[0] as string, result(ids[0] as string, 1)).map((r) => [r.id, r.exitCode]),
      [
        [ids[0], 1],
        [ids[1], 0],
      ],
    );
    assert.deepEqual(s.outstanding(), [ids[2], `${s.name}-3`]);
    assert.deepEqual(
      progress.map((p) => [p.done, p.submitted, p.total, p.failures]),
      [
        [1, 3, 10, {}],
        [2, 4, 10, { exit: 1 }],
      ],
    );
  });

  test("unordered yields each result as its record comes; failures counted by outcome", () => {
    const progress: MapProgress[] = [];
    const s = new MapState(["a", "b"], 8, false, 2, (p) => progress.push(p));
    const ids = s.toSubmit().map(([id]) => id);
    assert.deepEqual(s.toSubmit(), [], "input exhausted");
    const [second] = s.onRecord("1-0", record(ids[1] as string, 3, true))[0];
    assert.equal(second?.id, ids[1]);
    assert.equal(s.finished, false);
    const big = result(ids[0] as string, 0);
    assert.deepEqual(s.onRecord("2-0", record(ids[0] as string, 0, false)), [[], [ids[0]]]);
    assert.deepEqual(s.onFetched(ids[0] as string, big), [big]);
    assert.equal(s.finished, true);
    assert.deepEqual(progress.at(-1), { done: 2, submitted: 2, total: 2, failures: { exit: 1 } });
  });

  test("a job id given twice in one map, and a bad concurrency, are refused", () => {
    const s = new MapState([{ id: "x", shell: "true" }, { id: "x", shell: "true" }], 4, false, 2);
    assert.throws(() => s.toSubmit(), /appears twice/);
    assert.throws(() => new MapState([], 0, false, 0), RangeError);
  });
});

describe("map options", () => {
  test("job options are defaults for jobs that leave them unset", () => {
    const d = mapDefaultsOf({ concurrency: 4, env: { X: "default" }, timeoutMs: 5000, ordered: true });
    assert.deepEqual(d, { env: { X: "default" }, timeoutMs: 5000 });
    assert.deepEqual(withDefaults({ shell: "echo $X" }, d), { shell: "echo $X", env: { X: "default" }, timeoutMs: 5000 });
    assert.deepEqual(withDefaults({ shell: "echo $X", env: { X: "own" } }, d), { shell: "echo $X", env: { X: "own" }, timeoutMs: 5000 });
    const s = new MapState([{ shell: "true", timeoutMs: 10 }, "true"], 2, false, 2, undefined, d);
    const [a, b] = s.toSubmit().map(([, f]) => jobOf(f));
    assert.equal(a?.timeout_ms, 10);
    assert.equal(b?.timeout_ms, 5000);
  });

  test("a misspelt option is an InvalidArgumentError naming the valid ones", () => {
    assert.throws(
      () => mapDefaultsOf({ timeout_ms: 5 }),
      (e: unknown) => e instanceof InvalidArgumentError && /unknown option "timeout_ms"/.test(e.message) && /timeoutMs/.test(e.message),
    );
    assert.deepEqual(mapDefaultsOf({ template: undefined }), {}, "an option given as undefined is unset");
  });

  test("asJob: a string is a shell line; other non-objects are refused", () => {
    assert.deepEqual(asJob("echo hi"), { shell: "echo hi" });
    const j = { argv: ["true"] };
    assert.equal(asJob(j), j);
    for (const bad of [null, 3, ["echo"]]) assert.throws(() => asJob(bad as never), InvalidArgumentError);
  });
});
