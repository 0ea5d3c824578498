/**
 * map, submitMany with a completion stream and completions (PROTOCOL.md section 21), against
 * the real daemon. Waits are for events; WAIT only bounds them.
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";

import type { Redis } from "ioredis";

import { Client, decodeCompletion, InvalidArgumentError, type MapProgress, type Result } from "../src/index.js";
import { Deployment, waitFor } from "../src/testing.js";

const WAIT = 60000;

let dep: Deployment;
let client: Client;
let admin: Redis;

before(async () => {
  dep = await new Deployment({ workers: 2 }).start();
  client = new Client(dep.url, { pollIntervalMs: 500, connectionName: "ts-map" });
  admin = dep.redis.admin();
});

after(async () => {
  await client?.close();
  admin?.disconnect();
  const alive = dep?.daemon.alive;
  await dep?.stop();
  assert.ok(alive !== false, "the daemon died during the tests");
});

async function mapStreams(): Promise<string[]> {
  return (await admin.keys("sandpool:notify:map-*")).sort();
}

async function storedOutcome(id: string): Promise<string> {
  let raw: Buffer | null = null;
  await waitFor(async () => (raw = await admin.getBuffer(`sandpool:result:${id}`)) !== null, WAIT, `result of ${id}`);
  const { decodeResult } = await import("../src/protocol.js");
  return decodeResult(raw as unknown as Buffer).outcome;
}

describe("map", () => {
  test("yields every result as it finishes, at most `concurrency` in flight", async () => {
    const before = await mapStreams();
    const progress: MapProgress[] = [];
    const jobs = Array.from({ length: 60 }, (_, i) => ({ shell: `echo ${i}; exit ${i % 3}` }));
    const out: Result[] = [];
    for await (const r of client.map(jobs, { concurrency: 8, onProgress: (p) => progress.push(p) })) out.push(r);
    assert.equal(out.length, 60);
    assert.deepEqual(
      out.map((r) => Number(r.stdoutText)).sort((a, b) => a - b),
      Array.from({ length: 60 }, (_, i) => i),
    );
    for (const r of out) assert.equal(r.exitCode, Number(r.stdoutText) % 3);
    assert.deepEqual(progress.map((p) => p.done), Array.from({ length: 60 }, (_, i) => i + 1));
    assert.ok(progress.every((p) => p.submitted - p.done <= 8 && p.total === 60));
    assert.deepEqual(progress.at(-1)?.failures, { exit: 40 });
    assert.deepEqual(await mapStreams(), before);
  });

  test("ordered yields in input order; large results are fetched", async () => {
    const jobs = [{ shell: "sleep 1; echo 0" }, { shell: "echo 1" }, { shell: "head -c 70000 /dev/zero" }];
    const out: Result[] = [];
    for await (const r of client.map(jobs, { ordered: true })) out.push(r);
    assert.equal(out[0]?.stdoutText, "0\n");
    assert.equal(out[1]?.stdoutText, "1\n");
    assert.equal(out[2]?.stdout.length, 70000);
  });

  test("job options are defaults; shell lines are jobs; a result over 64 KiB is fetched", async () => {
    const jobs = [{ shell: "head -c 70000 /dev/zero" }, { shell: "echo $X", env: { X: "own" } }, "echo $X"];
    const out = new Map<string, Result>();
    for await (const r of client.map(jobs, { env: { X: "default" }, maxOutputBytes: 100000 })) out.set(r.stdout.subarray(0, 5).toString("latin1"), r);
    assert.deepEqual([...out.keys()].sort(), ["\0\0\0\0\0", "default\n".slice(0, 5), "own\n"].sort());
    assert.equal(out.get("\0\0\0\0\0")?.stdout.length, 70000);
  });

  test("errors are values: a missing program, a signal, an unknown template", async () => {
    const jobs = [{ argv: ["/nonexistent"] }, { shell: "kill -9 $$" }, { shell: "true", template: "no-such-template" }];
    const kinds: string[] = [];
    for await (const r of client.map(jobs)) kinds.push(`${r.outcome} ${r.error?.code ?? "-"}`);
    assert.deepEqual(kinds.sort(), ["error bad_field", "error exec_failed", "signal -"]);
  });

  test("a misspelt option is refused before anything is sent", async () => {
    const before = await admin.xlen("sandpool:q:default");
    await assert.rejects(async () => {
      for await (const _ of client.map(["true"], { timeout_ms: 5 } as never)) assert.fail();
    }, /unknown option "timeout_ms"/);
    assert.equal(await admin.xlen("sandpool:q:default"), before);
  });

  test("stopping early cancels the jobs in flight", async () => {
    const tag = `tsstop-${process.pid}`;
    const jobs = Array.from({ length: 8 }, (_, i) => ({ id: `${tag}-${i}`, shell: i === 0 ? "true" : "sleep 600" }));
    for await (const r of client.map(jobs, { concurrency: 3 })) {
      assert.equal(r.id, `${tag}-0`);
      break;
    }
    for (const i of [1, 2]) assert.equal(await storedOutcome(`${tag}-${i}`), "cancelled");
    const queued = (await admin.xrange("sandpool:q:default", "-", "+")).map(([, f]) => f[1]);
    for (let i = 3; i < 8; i++) {
      assert.equal(await admin.get(`sandpool:result:${tag}-${i}`), null);
      assert.ok(!queued.includes(`${tag}-${i}`), "a job after the first `concurrency` was never submitted");
    }
  });

  test("an aborted signal stops it the same way", async () => {
    const tag = `tsabort-${process.pid}`;
    const ac = new AbortController();
    const jobs = Array.from({ length: 4 }, (_, i) => ({ id: `${tag}-${i}`, shell: "sleep 600" }));
    const run = (async () => {
      for await (const _ of client.map(jobs, { concurrency: 2, signal: ac.signal })) assert.fail("no result expected");
    })();
    await waitFor(async () => (await admin.hget(`sandpool:job:${tag}-1`, "state")) === "running", WAIT, "running");
    ac.abort(new Error("stop"));
    await assert.rejects(run, /stop/);
    for (const i of [0, 1]) assert.equal(await storedOutcome(`${tag}-${i}`), "cancelled");
  });

  test("Ctrl-C in a program that aborts the map's signal on SIGINT cancels the jobs in flight", async () => {
    const tag = `tssigint-${process.pid}`;
    const script = fileURLToPath(new URL("./support/map_child.js", import.meta.url));
    const child = spawn(process.execPath, [script, dep.url, tag], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (b: Buffer) => (out += b.toString()));
    child.stderr.on("data", (b: Buffer) => (out += b.toString()));
    const exited = once(child, "exit");
    try {
      const running = async (i: number): Promise<boolean> => (await admin.hget(`sandpool:job:${tag}-${i}`, "state")) === "running";
      await waitFor(async () => (await Promise.all([0, 1, 2].map(running))).every(Boolean), WAIT, `three running jobs (${out})`);
      child.kill("SIGINT");
      const [code] = await exited;
      assert.equal(code, 130, out);
      assert.equal(out, "stopped\n");
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
    }
    for (const i of [0, 1, 2]) assert.equal(await storedOutcome(`${tag}-${i}`), "cancelled");
    for (const i of [3, 4, 5]) assert.equal(await admin.get(`sandpool:result:${tag}-${i}`), null);
  });

  test("bad jobs throw InvalidArgumentError before anything is sent", async () => {
    await assert.rejects(async () => {
      for await (const _ of client.map([{ shell: "true", timout_ms: 5 } as never])) assert.fail();
    }, InvalidArgumentError);
  });
});

describe("submitMany with a completion stream", () => {
  test("every job's end is one record; completions follows them", async () => {
    const name = `tssm-${process.pid}`;
    const ids = await client.submitMany([{ shell: "exit 7", id: `${name}-a` }, { shell: "echo hi" }], {
      notify: name,
      notifyResult: true,
    });
    const got = new Map<string, ReturnType<typeof decodeCompletion>>();
    for await (const { completion } of client.completions(name)) {
      got.set(completion.id, completion);
      if (got.size === 2) break;
    }
    assert.equal(got.get(`${name}-a`)?.exitCode, 7);
    assert.equal(got.get(ids[1] as string)?.result?.stdoutText, "hi\n");
    await admin.del(`sandpool:notify:${name}`);
  });

  test("shell lines; without notifyResult the records carry no result; completions goes on from a stream id", async () => {
    const name = `tssm2-${process.pid}`;
    const ids = await client.submitMany(["true", "exit 3"], { notify: name });
    const seen: { streamId: string; id: string; exitCode: number | null; result: unknown }[] = [];
    for await (const { streamId, completion } of client.completions(name)) {
      seen.push({ streamId, id: completion.id, exitCode: completion.exitCode, result: completion.result });
      if (seen.length === 2) break;
    }
    assert.deepEqual(new Map(seen.map((c) => [c.id, [c.exitCode, c.result]])), new Map([[ids[0], [0, null]], [ids[1], [3, null]]]));
    // A follower that resumes after the first record's stream id gets the second, and only it.
    for await (const { completion } of client.completions(name, { after: seen[0]?.streamId })) {
      assert.equal(completion.id, seen[1]?.id);
      break;
    }
    await admin.del(`sandpool:notify:${name}`);
  });
});
