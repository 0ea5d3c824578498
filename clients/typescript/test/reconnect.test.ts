/**
 * Losing live events, against the real daemon and a real redis-server (append-only file, so a
 * restart loses nothing): Redis restarts while jobs run, the subscriber connection is killed,
 * a sequence gap, an undecodable message, and Redis staying away longer than the retry window.
 * In every case each job must resolve with its durable result, and the output chunks delivered
 * must add up to the result's output exactly.
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import type { Redis } from "ioredis";

import type { Connections } from "../src/connection.js";
import { Client, newJobId, OutputEvent, RedisUnavailableError, type JobEvent, type Result } from "../src/index.js";
import { Deployment, sleep, waitFor } from "../src/testing.js";

const WAIT = 60000;

let dep: Deployment;
let admin: Redis;

before(async () => {
  dep = await new Deployment({ aof: true, workers: 2 }).start();
  admin = dep.redis.admin();
});

after(async () => {
  admin?.disconnect();
  const alive = dep?.daemon.alive;
  await dep?.stop();
  assert.ok(alive !== false, "the daemon died during the tests");
});

/** A job printing `lines` lines, `gap` seconds apart. */
function ticker(tag: string, lines: number, gap: number): string {
  return `for i in $(seq 1 ${lines}); do echo ${tag}-$i; sleep ${gap}; done`;
}

function expected(tag: string, lines: number): string {
  return Array.from({ length: lines }, (_, i) => `${tag}-${i + 1}\n`).join("");
}

async function runCollecting(
  c: Client,
  job: Parameters<Client["run"]>[0],
): Promise<{ result: Result; chunks: Buffer[] }> {
  const chunks: Buffer[] = [];
  const result = await c.run(job, { onStdout: (b) => chunks.push(b), waitTimeoutMs: WAIT });
  return { result, chunks };
}

async function connectionId(name: string): Promise<string> {
  const list = (await admin.client("LIST")) as string;
  const line = list.split("\n").find((l) => l.includes(` name=${name} `));
  const m = line === undefined ? null : /^id=(\d+) /.exec(line);
  assert.ok(m?.[1], `no connection named ${name}`);
  return m[1];
}

describe("reconnection", () => {
  test("redis-server restarts while jobs run: every job resolves with its whole result", async () => {
    const c = new Client(dep.url, { pollIntervalMs: 500 });
    try {
      const n = 6;
      const lines = 8;
      const runs = Array.from({ length: n }, (_, k) => runCollecting(c, { shell: ticker(`job${k}`, lines, 0.4) }));
      const events: JobEvent[] = [];
      const followed = (async () => {
        for await (const ev of c.events({ shell: ticker("ev", lines, 0.4) })) events.push(ev);
        return events;
      })();
      // Some output was delivered live (waited for, not slept for: a loaded machine starts late).
      await waitFor(() => events.some((e) => e instanceof OutputEvent), WAIT, "live output of the followed job");
      // The client's command connection (a private field: the test watches its reconnect attempts).
      const cmd = (c as unknown as { conns: Connections }).conns.command;
      let failedConnects = 0;
      cmd.on("error", () => failedConnects++);
      await dep.redis.stopServer();
      // Commands issued while Redis is away wait and are retried when it is back.
      const late = c.submit({ shell: "echo submitted-while-down" });
      const status = c.status(newJobId());
      let settled = 0;
      for (const p of [late, status]) p.then(() => settled++, () => settled++);
      // Restart once the client has tried to reconnect and failed (waited for, not slept for).
      await waitFor(() => failedConnects >= 2, WAIT, "two failed reconnect attempts of the client");
      assert.equal(settled, 0, "the commands wait while Redis is away");
      await dep.redis.start();
      const results = await Promise.all(runs);
      results.forEach(({ result, chunks }, k) => {
        assert.equal(result.outcome, "exit", `job ${k}: ${result.outcome} ${result.error?.message ?? ""}`);
        assert.equal(result.stdoutText, expected(`job${k}`, lines));
        assert.deepEqual(Buffer.concat(chunks), result.stdout, `job ${k}: chunks do not add up`);
      });
      // One job followed with events(): its output after the outage was rebuilt from the result.
      await followed;
      const last = events.at(-1);
      assert.ok(last?.type === "exited" && last.result.ok);
      const out = events.filter((e): e is OutputEvent => e instanceof OutputEvent);
      assert.equal(Buffer.concat(out.map((e) => e.data)).toString(), expected("ev", lines));
      assert.ok(out.some((e) => e.seq !== null), "no output was delivered live");
      assert.ok(out.some((e) => e.seq === null), "no output was rebuilt from the stored result");
      const lateId = await late;
      assert.equal((await status).hasResult, false);
      const r = await c.result(lateId, { wait: true, timeoutMs: WAIT });
      assert.equal(r?.stdoutText, "submitted-while-down\n");
      // The client goes on working on its (reconnected) connections.
      const again = await runCollecting(c, { shell: "echo again" });
      assert.equal(again.result.stdoutText, "again\n");
      assert.deepEqual(Buffer.concat(again.chunks), again.result.stdout);
    } finally {
      await c.close();
    }
  });

  test("the subscriber connection is killed: jobs fall back to the result key", async () => {
    const c = new Client(dep.url, { pollIntervalMs: 300, connectionName: "ts-kill" });
    try {
      const chunks: Buffer[] = [];
      let killed = false;
      const run = c.run(
        { shell: ticker("k", 6, 0.3) },
        {
          onStdout: (b) => {
            chunks.push(b);
            if (!killed) {
              killed = true;
              void connectionId("ts-kill:sub").then((id) => admin.client("KILL", "ID", id));
            }
          },
          waitTimeoutMs: WAIT,
        },
      );
      const r = await run;
      assert.ok(killed);
      assert.ok(r.ok);
      assert.equal(r.stdoutText, expected("k", 6));
      assert.deepEqual(Buffer.concat(chunks), r.stdout);
      // the subscriber came back: a new job is followed live again
      const events = [];
      for await (const ev of c.events({ shell: "echo live" })) events.push(ev);
      assert.deepEqual(
        events.map((e) => [e.type, e.seq]),
        [
          ["started", 0],
          ["stdout", 1],
          ["exited", 2],
        ],
      );
    } finally {
      await c.close();
    }
  });

  for (const [what, junk] of [
    ["a sequence gap", (id: string) => ({ v: 1, type: "stdout", seq: 1000, data: Buffer.from(`fake ${id}`) })],
    ["an undecodable message", () => null],
  ] as const) {
    test(`${what} stops live output; the missing tail comes from the result`, async () => {
      const { encode } = await import("@msgpack/msgpack");
      const c = new Client(dep.url, { pollIntervalMs: 300 });
      try {
        const stream = c.events({ shell: "echo a; sleep 0.5; echo b; sleep 0.5; echo c" }, { waitTimeoutMs: WAIT });
        const events: JobEvent[] = [];
        for await (const ev of stream) {
          events.push(ev);
          if (ev.type === "stdout" && ev.seq !== null && events.filter((e) => e.type === "stdout").length === 1) {
            const m = junk(stream.id);
            await admin.publish(`sandpool:out:${stream.id}`, m === null ? Buffer.from([0xc1]) : Buffer.from(encode(m)));
          }
        }
        const last = events.at(-1);
        assert.ok(last?.type === "exited");
        assert.equal(last.result.stdoutText, "a\nb\nc\n");
        const out = events.filter((e): e is OutputEvent => e instanceof OutputEvent && e.type === "stdout");
        // "a" live; after the loss nothing live; the rest ("b\nc\n") rebuilt from the result
        assert.deepEqual(
          out.map((e) => [e.seq === null ? "rebuilt" : "live", e.data.toString()]),
          [
            ["live", "a\n"],
            ["rebuilt", "b\nc\n"],
          ],
        );
      } finally {
        await c.close();
      }
    });
  }

  test("Redis away longer than retryWindowMs: calls fail with RedisUnavailableError, none hangs", async () => {
    const c = new Client(dep.url, { pollIntervalMs: 300, retryWindowMs: 1500 });
    let id = "";
    try {
      const stream = c.events({ shell: "echo going; sleep 4; echo done" });
      id = stream.id;
      const running = assert.rejects(async () => {
        for await (const ev of stream) if (ev.type === "exited") return ev.result;
        return null;
      }, RedisUnavailableError);
      await waitFor(async () => (await c.status(id)).state === "running", WAIT, "the job to run");
      await dep.redis.stopServer();
      const t0 = Date.now();
      await assert.rejects(c.submit({ shell: "true" }), RedisUnavailableError);
      await assert.rejects(c.result(newJobId()), RedisUnavailableError);
      await running;
      assert.ok(Date.now() - t0 < 15000, `took ${Date.now() - t0} ms to report`);
    } finally {
      if (!(await pingable())) await dep.redis.start();
      await c.close();
    }
    // Nothing durable was lost: the job's result is there once Redis is back.
    const c2 = new Client(dep.url);
    try {
      const r = await c2.result(id, { wait: true, timeoutMs: WAIT });
      assert.equal(r?.stdoutText, "going\ndone\n");
    } finally {
      await c2.close();
    }
  });
});

async function pingable(): Promise<boolean> {
  try {
    const r = dep.redis.admin();
    try {
      const pong = await Promise.race([r.ping(), sleep(500).then(() => "no")]);
      return pong === "PONG";
    } finally {
      r.disconnect();
    }
  } catch {
    return false;
  }
}
