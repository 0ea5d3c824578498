/**
 * map, submitMany with a completion stream and completions (PROTOCOL.md section 21), against
 * the real daemon. Waits are for events; WAIT only bounds them.
 */

import assert from "node:assert/strict";
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

  test("stopping early cancels the jobs in flight", async () => {
    const tag = `tsstop-${process.pid}`;
    const jobs = Array.from({ length: 8 }, (_, i) => ({ id: `${tag}-${i}`, shell: i === 0 ? "true" : "sleep 600" }));
    for await (const r of client.map(jobs, { concurrency: 3 })) {
      assert.equal(r.id, `${tag}-0`);
      break;
    }
    for (const i of [1, 2]) assert.equal(await storedOutcome(`${tag}-${i}`), "cancelled");
    for (let i = 3; i < 8; i++) assert.equal(await admin.get(`sandpool:result:${tag}-${i}`), null);
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
});
