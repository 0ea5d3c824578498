/**
 * The client against the real sandpoold and a private redis-server (no mocks): run, events,
 * result, cancel, status, submitMany, limits, invalid input, and connection sharing.
 * Wall-clock checks are generous sanity bounds only.
 */

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";

import type { Redis } from "ioredis";

import {
  Client,
  ClientClosedError,
  InvalidArgumentError,
  newJobId,
  OutputEvent,
  WaitTimeoutError,
  type JobEvent,
  type Result,
} from "../src/index.js";
import { REJECTION_VECTORS, VECTOR_T1, VECTOR_T2 } from "./support/vectors.js";
import { Deployment, sleep, waitFor } from "../src/testing.js";

const WAIT = 60000; // generous bound for any single job

let dep: Deployment;
let client: Client;
let admin: Redis;

before(async () => {
  // --max-workers 3: the default pool cannot grow past 3 slots, so a job can be made to queue.
  dep = await new Deployment({ workers: 2, extra: ["--max-workers", "3"] }).start();
  client = new Client(dep.url, { pollIntervalMs: 500, connectionName: "ts-test" });
  admin = dep.redis.admin();
});

after(async () => {
  await client?.close();
  admin?.disconnect();
  const alive = dep?.daemon.alive;
  await dep?.stop();
  assert.ok(alive !== false, "the daemon died during the tests");
});

function checkCommon(r: Result, id: string | null): void {
  if (id !== null) assert.equal(r.id, id);
  assert.equal(r.v, 1);
  assert.equal(r.worker, dep.daemon.consumer);
  assert.equal(r.attempt, 1);
}

async function collect(stream: AsyncIterable<JobEvent>): Promise<JobEvent[]> {
  const out: JobEvent[] = [];
  for await (const ev of stream) out.push(ev);
  return out;
}

/**
 * Entries ever added to the job queue stream (XINFO STREAM's entries-added, Redis 7): counts the
 * client's XADDs there and nothing else (daemons XADD to their forward queues too, section 1).
 */
/**
 * Whether the entry of job `id` is in the job queue or a forward queue of it (a daemon may move
 * an entry there, section 1): submitted and not yet taken by a daemon.
 */
async function queued(id: string): Promise<boolean> {
  for (const key of ["sandpool:q:default", ...(await admin.keys("sandpool:fwd:default:*"))]) {
    const entries = await admin.xrange(key, "-", "+");
    if (entries.some(([, fields]) => fields[0] === "id" && fields[1] === id)) return true;
  }
  return false;
}

async function xaddCalls(): Promise<number> {
  const info = (await admin.call("XINFO", "STREAM", "sandpool:q:default").catch(() => [])) as unknown[];
  const i = info.indexOf("entries-added");
  return i >= 0 ? Number(info[i + 1]) : 0;
}

/** Connections of the test client (named ts-test:cmd / ts-test:sub) and all connections. */
async function connections(name = "ts-test"): Promise<{ mine: number; all: number }> {
  const list = (await admin.client("LIST")) as string;
  const lines = list.split("\n").filter((l) => l.trim() !== "");
  return { mine: lines.filter((l) => new RegExp(`name=${name}:`).test(l)).length, all: lines.length };
}

describe("running jobs", () => {
  test("exit code, stdout, stderr and live callbacks in order", async () => {
    const got: [string, string][] = [];
    const id = newJobId();
    const r = await client.run(
      { id, shell: "echo out; sleep 0.3; echo err >&2; sleep 0.3; echo out2; exit 3" },
      {
        onStdout: (b) => got.push(["out", b.toString()]),
        onStderr: (b) => got.push(["err", b.toString()]),
        waitTimeoutMs: WAIT,
      },
    );
    assert.deepEqual([r.outcome, r.exitCode, r.signal], ["exit", 3, null]);
    assert.equal(r.stdoutText, "out\nout2\n");
    assert.equal(r.stderrText, "err\n");
    assert.ok(!r.ok && !r.timedOut && !r.killed && r.error === null);
    assert.ok(!r.stdoutTruncated && !r.stderrTruncated);
    assert.equal(r.stdoutDroppedBytes + r.stderrDroppedBytes, 0);
    checkCommon(r, id);
    assert.deepEqual(got, [
      ["out", "out\n"],
      ["err", "err\n"],
      ["out", "out2\n"],
    ]);
    assert.ok(r.execTimeUs >= 500_000 && r.execTimeUs < 60_000_000, String(r.execTimeUs));
    assert.ok(r.peakMemoryBytes > 0);
    assert.ok(r.queueWaitUs >= 0 && r.queueWaitUs < 60_000_000);
  });

  test("callbacks are live", async () => {
    const stamps: [number, Buffer][] = [];
    const r = await client.run(
      { shell: "echo first; sleep 2; echo second" },
      { onStdout: (b) => stamps.push([Date.now(), b]) },
    );
    const done = Date.now();
    assert.ok(r.ok);
    assert.equal(r.stdoutText, "first\nsecond\n");
    assert.deepEqual(Buffer.concat(stamps.map(([, b]) => b)), r.stdout);
    const first = stamps.find(([, b]) => b.toString().startsWith("first"));
    assert.ok(first !== undefined && done - first[0] > 1000, "the first chunk was not delivered while the job ran");
  });

  test("argv jobs: no shell, PATH lookup", async () => {
    let r = await client.run({ argv: ["/bin/echo", "a b", "c"] });
    assert.ok(r.ok);
    assert.equal(r.stdoutText, "a b c\n");
    r = await client.run({ argv: ["printf", "%s|", "x y", "$HOME", "*"] });
    assert.equal(r.stdoutText, "x y|$HOME|*|");
  });

  test("killed by a signal, exec failures", async () => {
    let r = await client.run({ shell: "echo x; kill -TERM $$" });
    assert.deepEqual([r.outcome, r.signal, r.exitCode, r.stdoutText], ["signal", 15, null, "x\n"]);
    for (const argv of [["/nonexistent/prog"], ["no-such-command-sandpool-test"]]) {
      r = await client.run({ argv });
      assert.equal(r.outcome, "error");
      assert.equal(r.error?.code, "exec_failed");
      assert.equal(r.error?.retryable, false);
      assert.ok(r.exitCode === 126 || r.exitCode === 127, String(r.exitCode));
    }
  });

  test("binary output", async () => {
    const r = await client.run({ shell: "printf '\\377\\000\\001'" });
    assert.deepEqual(r.stdout, Buffer.from([0xff, 0, 1]));
  });

  test("stdin: bytes, strings, none, and large input in bounded events", async () => {
    let r = await client.run({ shell: "cat", stdin: Buffer.from("hello\0world\n") });
    assert.deepEqual(r.stdout, Buffer.from("hello\0world\n"));
    r = await client.run({ shell: "wc -c", stdin: "héllo" });
    assert.equal(r.stdoutText.trim(), "6");
    r = await client.run({ shell: "cat; echo end" });
    assert.equal(r.stdoutText, "end\n");
    const data = randomBytes(300_000);
    const chunks: Buffer[] = [];
    r = await client.run({ argv: ["cat"], stdin: data }, { onStdout: (b) => chunks.push(b) });
    assert.ok(r.ok);
    assert.deepEqual(r.stdout, data);
    assert.deepEqual(Buffer.concat(chunks), data);
    assert.ok(chunks.every((c) => c.length > 0 && c.length <= 65536));
  });

  test("env is exactly the job's env", async () => {
    const r = await client.run({ argv: ["env"], env: { FOO: "bar baz", EMPTY: "", Z_1: "é" } });
    assert.ok(r.ok);
    assert.deepEqual(
      new Set(r.stdoutText.split("\n").filter((l) => l !== "")),
      new Set(["FOO=bar baz", "EMPTY=", "Z_1=é", "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/work", "LANG=C.UTF-8"]),
    );
  });

  test("cwd", async () => {
    assert.equal((await client.run({ shell: "pwd" })).stdoutText, "/work\n");
    assert.equal((await client.run({ shell: "pwd", cwd: "/tmp" })).stdoutText, "/tmp\n");
    assert.equal((await client.run({ shell: "echo data > f && cat f" })).stdoutText, "data\n");
  });

  test("timeout", async () => {
    const t0 = Date.now();
    const id = newJobId();
    const r = await client.run({ id, shell: "echo before; sleep 10", timeoutMs: 300 });
    assert.equal(r.outcome, "timeout");
    assert.ok(r.timedOut && r.killed);
    assert.equal(r.exitCode, null);
    assert.equal(r.stdoutText, "before\n"); // output so far is kept
    checkCommon(r, id);
    assert.ok(Date.now() - t0 < 8000, `a 300 ms timeout took ${Date.now() - t0} ms`);
  });

  test("output cap", async () => {
    const chunks: Buffer[] = [];
    const r = await client.run({ shell: "yes", maxOutputBytes: 1000 }, { onStdout: (b) => chunks.push(b) });
    assert.equal(r.outcome, "output_limit");
    assert.ok(r.killed && r.stdoutTruncated && !r.stderrTruncated);
    assert.equal(r.stdoutText, "y\n".repeat(500));
    assert.deepEqual(Buffer.concat(chunks), r.stdout); // nothing past the cap is published
  });

  test("large limits are clamped by the server", async () => {
    const r = await client.run({ shell: "echo clamped", timeoutMs: 1e12, maxOutputBytes: 1e12 });
    assert.ok(r.ok);
    assert.equal(r.stdoutText, "clamped\n");
  });

  test("code jobs run in warm interpreters", async () => {
    const chunks: Buffer[] = [];
    let r = await client.run(
      { code: "import json, sys\nprint(json.dumps({'n': 42}))\nsys.exit(4)", runtime: "python" },
      { onStdout: (b) => chunks.push(b) },
    );
    assert.deepEqual([r.outcome, r.exitCode, r.stdoutText], ["exit", 4, '{"n": 42}\n']);
    assert.deepEqual(Buffer.concat(chunks), r.stdout);
    r = await client.run({ code: "echo ${BASH_VERSION:+bash} $((6*7))", runtime: "bash" });
    assert.equal(r.stdoutText, "bash 42\n");
    r = await client.run({ code: "raise ValueError('boom')", runtime: "python", template: "default" });
    assert.equal(r.exitCode, 1);
    assert.match(r.stderrText, /ValueError: boom/);
    r = await client.run({ shell: "true", template: "no-such-template" });
    assert.equal(r.outcome, "error");
    assert.equal(r.error?.code, "bad_field");
  });
});

describe("events", () => {
  test("events(job): started, output, exited; seqs without a gap", async () => {
    const stream = client.events({ shell: "sleep 0.3; echo hi; echo e >&2" });
    const events = await collect(stream);
    const last = events.at(-1);
    assert.ok(last?.type === "exited");
    const r = last.result;
    assert.equal(r.id, stream.id);
    assert.ok(r.ok);
    const first = events[0];
    assert.ok(first?.type === "started");
    assert.equal(first.seq, 0);
    assert.equal(first.worker, dep.daemon.consumer);
    assert.equal(first.attempt, 1);
    assert.deepEqual(
      events.map((e) => e.seq),
      events.map((_, i) => i),
    );
    const out = events.filter((e): e is OutputEvent => e instanceof OutputEvent);
    assert.equal(Buffer.concat(out.filter((e) => e.type === "stdout").map((e) => e.data)).toString(), "hi\n");
    assert.equal(out.filter((e) => e.type === "stderr").map((e) => e.text).join(""), "e\n");
  });

  test("events(id) of a running job, then of a finished one", async () => {
    const id = await client.submit({ shell: "sleep 1; echo hi" });
    const events = await collect(client.events(id, { waitTimeoutMs: WAIT }));
    const last = events.at(-1);
    assert.ok(last?.type === "exited" && last.result.ok);
    assert.equal(last.result.stdoutText, "hi\n");
    const live = events.filter((e) => e.seq !== null).map((e) => e.seq as number);
    assert.deepEqual(live, live.map((_, i) => (live[0] ?? 0) + i)); // no gap
    const again = await collect(client.events(id));
    assert.equal(again.length, 1);
    assert.ok(again[0]?.type === "exited" && again[0].seq === null);
    assert.deepEqual({ ...again[0].result }, { ...last.result });
  });

  test("breaking out of the loop stops following, not the job", async () => {
    const stream = client.events({ shell: "echo one; sleep 1; echo two" });
    for await (const ev of stream) {
      if (ev.type === "stdout") break;
    }
    const r = await client.result(stream.id, { wait: true, timeoutMs: WAIT });
    assert.ok(r?.ok);
    assert.equal(r.stdoutText, "one\ntwo\n");
  });

  test("an invalid id throws at once", () => {
    assert.throws(() => client.events("not valid!"), InvalidArgumentError);
    assert.throws(() => client.events({ shell: "x", cwd: "rel" }), InvalidArgumentError);
  });
});

describe("results and status", () => {
  test("result() after the fact, from another client too", async () => {
    const r = await client.run({ shell: "echo fin" });
    const other = new Client(dep.url);
    try {
      const again = await other.result(r.id);
      assert.ok(again !== null);
      assert.deepEqual({ ...again }, { ...r });
      const waited = await other.result(r.id, { wait: true, timeoutMs: 5000 });
      assert.deepEqual({ ...waited }, { ...r });
    } finally {
      await other.close();
    }
  });

  test("result() of an unknown job", async () => {
    const id = newJobId();
    assert.equal(await client.result(id), null);
    const t0 = Date.now();
    assert.equal(await client.result(id, { wait: true, timeoutMs: 300 }), null);
    assert.ok(Date.now() - t0 >= 250);
  });

  test("result({wait}) of a job submitted earlier", async () => {
    const id = await client.submit({ shell: "sleep 0.5; echo later" });
    assert.equal(await client.result(id), null);
    const r = await client.result(id, { wait: true, timeoutMs: WAIT });
    assert.equal(r?.stdoutText, "later\n");
  });

  test("status() while queued... running, and done", async () => {
    const unknown = await client.status(newJobId());
    assert.deepEqual([unknown.state, unknown.hasResult, unknown.terminal, unknown.attempt], [null, false, false, null]);
    const id = await client.submit({ shell: "sleep 1.5" });
    await waitFor(async () => (await client.status(id)).state === "running", WAIT, "state running");
    const s = await client.status(id);
    assert.equal(s.hasResult, false);
    assert.equal(s.consumer, dep.daemon.consumer);
    assert.equal(s.attempt, 1);
    assert.ok(s.entry);
    const r = await client.result(id, { wait: true, timeoutMs: WAIT });
    assert.ok(r?.ok);
    const d = await client.status(id);
    assert.deepEqual([d.state, d.hasResult, d.terminal, d.cancelRequested], ["done", true, true, false]);
    assert.equal(d.fields.state, "done");
  });

  test("waitTimeoutMs: the wait ends, the job goes on", async () => {
    const id = newJobId();
    await assert.rejects(
      client.run({ id, shell: "sleep 1.5; echo ok" }, { waitTimeoutMs: 300 }),
      (e: unknown) => e instanceof WaitTimeoutError && e.jobId === id,
    );
    const r = await client.result(id, { wait: true, timeoutMs: WAIT });
    assert.equal(r?.stdoutText, "ok\n");
  });

  test("a callback that throws rejects run(), the job goes on", async () => {
    const id = newJobId();
    await assert.rejects(
      client.run(
        { id, shell: "echo a; sleep 0.5; echo b" },
        {
          onStdout: () => {
            throw new Error("callback failed");
          },
        },
      ),
      /callback failed/,
    );
    const r = await client.result(id, { wait: true, timeoutMs: WAIT });
    assert.equal(r?.stdoutText, "a\nb\n");
  });

  test("the same id runs once; run() of a finished id gets the original result", async () => {
    const id = newJobId();
    await client.submit({ id, shell: "sleep 0.3; echo once" });
    await client.submit({ id, shell: "sleep 0.3; echo once" });
    const r = await client.result(id, { wait: true, timeoutMs: WAIT });
    assert.equal(r?.stdoutText, "once\n");
    const r2 = await client.run({ id, shell: "echo again" }, { waitTimeoutMs: WAIT });
    assert.deepEqual({ ...r2 }, { ...r });
  });
});

describe("cancel", () => {
  test("AbortSignal cancels a running job; run() resolves with the cancelled result", async () => {
    const ac = new AbortController();
    const id = newJobId();
    const t0 = Date.now();
    const r = await client.run(
      { id, shell: "echo partial; sleep 30; echo never" },
      {
        signal: ac.signal,
        onStdout: (b) => {
          if (b.toString().includes("partial")) ac.abort();
        },
      },
    );
    assert.equal(r.outcome, "cancelled");
    assert.equal(r.stdoutText, "partial\n");
    assert.ok(r.killed);
    assert.equal(r.error?.code, "cancelled");
    assert.equal(r.error?.retryable, false);
    assert.ok(Date.now() - t0 < 25000, "cancel did not end the job early");
    assert.ok((await client.status(id)).cancelRequested);
  });

  test("AbortSignal on events(): the stream ends with the cancelled result", async () => {
    const ac = new AbortController();
    const types: string[] = [];
    let result: Result | null = null;
    for await (const ev of client.events({ shell: "echo x; sleep 30" }, { signal: ac.signal })) {
      types.push(ev.type);
      if (ev.type === "stdout") ac.abort();
      if (ev.type === "exited") result = ev.result;
    }
    assert.equal(result?.outcome, "cancelled");
    assert.equal(types.at(-1), "exited");
  });

  test("cancel() of a running job", async () => {
    const id = await client.submit({ shell: "echo started; sleep 30" });
    await waitFor(async () => (await client.status(id)).state === "running", WAIT, "state running");
    const before = Date.now();
    await client.cancel(id);
    // PROTOCOL.md section 7: the cancel block also writes cancel_ms (version 2).
    const cancelMs = Number((await client.status(id)).fields.cancel_ms);
    assert.ok(cancelMs >= before && cancelMs <= Date.now(), `cancel_ms ${cancelMs}`);
    const r = await client.result(id, { wait: true, timeoutMs: WAIT });
    assert.equal(r?.outcome, "cancelled");
    assert.equal(r.error?.code, "cancelled");
  });

  test("an already aborted signal: the job never starts", async () => {
    const ac = new AbortController();
    ac.abort();
    const events = await collect(client.events({ shell: "echo should-not-run" }, { signal: ac.signal }));
    assert.deepEqual(
      events.map((e) => e.type),
      ["exited"],
    );
    const r = (events[0] as { result: Result }).result;
    assert.equal(r.outcome, "cancelled");
    assert.equal(r.stdout.length, 0);
  });

  /** Three sleepers fill the three slots (--max-workers 3), so the next job queues. */
  async function fillSlots(): Promise<string[]> {
    const sleepers = await client.submitMany([1, 2, 3].map(() => ({ shell: "sleep 30", timeoutMs: 60000 })));
    await waitFor(
      async () => (await Promise.all(sleepers.map((id) => client.status(id)))).every((s) => s.state === "running"),
      WAIT,
      "three running sleepers",
    );
    return sleepers;
  }

  async function freeSlots(sleepers: string[]): Promise<void> {
    await Promise.all(sleepers.map((id) => client.cancel(id)));
    for (const id of sleepers) {
      const r = await client.result(id, { wait: true, timeoutMs: WAIT });
      assert.equal(r?.outcome, "cancelled");
    }
  }

  test("a queued job that is cancelled never starts", async () => {
    const sleepers = await fillSlots();
    try {
      const seen: string[] = [];
      const stream = client.events({ shell: "echo should-not-run" });
      const done = (async () => {
        for await (const ev of stream) seen.push(ev.type);
      })();
      // events() submits once subscribed: wait for the entry, then see that nothing started it.
      await waitFor(() => queued(stream.id), WAIT, "the fourth job's queue entry");
      const s = await client.status(stream.id);
      assert.equal(s.state, null, "the fourth job was not left queued");
      assert.equal(s.hasResult, false);
      await client.cancel(stream.id);
      assert.ok((await client.status(stream.id)).cancelRequested);
      await freeSlots(sleepers);
      await done;
      const r = await client.result(stream.id);
      assert.equal(r?.outcome, "cancelled");
      assert.equal(r.error?.code, "cancelled");
      assert.equal(r.stdout.length, 0);
      assert.deepEqual(seen, ["exited"]);
    } finally {
      await Promise.all(sleepers.map((id) => client.cancel(id)));
    }
  });

  // PROTOCOL.md section 7: the cancelled result of a queued job "is stored as soon as any daemon
  // hears the message", attempt 0 (sandpoold builds before that rule failed this test).
  test("a cancelled queued job gets its result while every slot is still busy", async () => {
    const sleepers = await fillSlots();
    try {
      const id = await client.submit({ shell: "echo should-not-run" });
      assert.ok(await queued(id), "the job waits in the queue");
      await client.cancel(id);
      const r = await client.result(id, { wait: true, timeoutMs: 3000 });
      assert.equal(r?.outcome, "cancelled", "no result 3 s after cancelling a queued job");
      assert.equal(r.attempt, 0);
      assert.equal(r.error?.code, "cancelled");
    } finally {
      await freeSlots(sleepers);
    }
  });

  test("cancel() of a finished job changes nothing", async () => {
    const r = await client.run({ shell: "echo fin" });
    const running = await client.submit({ shell: "sleep 30", timeoutMs: 60000 });
    await waitFor(async () => (await client.status(running).then((s) => s.state)) === "running", WAIT, "a running job");
    await client.cancel(r.id);
    // A daemon handles cancel messages in order, and stores what a cancel changes before it
    // stores the result of a job it killed later: once the running job's cancelled result is
    // there, the finished job's cancel has been handled.
    await client.cancel(running);
    assert.equal((await client.result(running, { wait: true, timeoutMs: WAIT }))?.outcome, "cancelled");
    assert.deepEqual({ ...(await client.result(r.id)) }, { ...r });
  });
});

describe("many jobs", () => {
  test("submitMany: 200 jobs in one pipeline, all results collected", async () => {
    const before = await xaddCalls();
    const ids = await client.submitMany(Array.from({ length: 200 }, (_, i) => ({ shell: `echo job-${i}` })));
    assert.equal(ids.length, 200);
    assert.equal(new Set(ids).size, 200);
    assert.equal((await xaddCalls()) - before, 200);
    const results = await Promise.all(ids.map((id) => client.result(id, { wait: true, timeoutMs: 120000 })));
    results.forEach((r, i) => {
      assert.ok(r?.ok, `job ${i}: ${r?.outcome}`);
      assert.equal(r.stdoutText, `job-${i}\n`);
    });
  });

  test("many concurrent run() calls share the client's two connections", async () => {
    await client.run({ shell: "true" }); // both connections exist
    const base = await connections();
    assert.equal(base.mine, 2);
    const n = 60;
    let maxAll = 0;
    let maxMine = 0;
    let running = true;
    const sampler = (async () => {
      while (running) {
        const c = await connections();
        maxAll = Math.max(maxAll, c.all);
        maxMine = Math.max(maxMine, c.mine);
        await sleep(50);
      }
    })();
    const results = await Promise.all(
      Array.from({ length: n }, (_, i) => {
        const chunks: Buffer[] = [];
        return client
          .run({ shell: `echo start-${i}; sleep 0.2; echo end-${i}` }, { onStdout: (b) => chunks.push(b) })
          .then((r) => [r, Buffer.concat(chunks)] as const);
      }),
    );
    running = false;
    await sampler;
    results.forEach(([r, chunks], i) => {
      assert.ok(r.ok);
      assert.equal(r.stdoutText, `start-${i}\nend-${i}\n`);
      assert.deepEqual(chunks, r.stdout);
    });
    assert.equal(maxMine, 2, "the client opened more than its two connections");
    assert.ok(maxAll <= base.all, `connections grew from ${base.all} to ${maxAll} with ${n} jobs`);
    assert.equal((await connections()).mine, 2);
  });

  test("the jobs a client names itself are followed through one pattern, not a SUBSCRIBE each", async () => {
    const c = new Client(dep.url, { connectionName: "ts-pattern" });
    try {
      const subscribes = async (): Promise<number> => {
        const stats = (await admin.info("commandstats")) as string;
        const m = /cmdstat_subscribe:calls=(\d+)/.exec(stats);
        return m ? Number(m[1]) : 0;
      };
      const before = await subscribes();
      const results = await Promise.all(Array.from({ length: 20 }, (_, i) => c.run({ shell: `echo p-${i}` })));
      results.forEach((r, i) => assert.equal(r.stdoutText, `p-${i}\n`));
      assert.equal((await subscribes()) - before, 0, "a job of the client's own id was SUBSCRIBEd");
      const list = (await admin.client("LIST")) as string;
      const sub = list.split("\n").find((l) => l.includes("name=ts-pattern:sub"));
      assert.match(sub ?? "", / sub=0 psub=1 /);
      // An id given by the caller is followed as before, on its own channel.
      const own = newJobId();
      assert.equal((await c.run({ id: own, shell: "echo given" })).stdoutText, "given\n");
      assert.equal((await subscribes()) - before, 1);
    } finally {
      await c.close();
    }
  });

  test("a Redis user that may not PSUBSCRIBE the client's pattern still gets every event", async () => {
    // docs/SECURITY.md's client user (channels &sandpool:out:*: SUBSCRIBE of any such channel,
    // PSUBSCRIBE of that literal pattern only), with what ioredis needs to connect.
    await admin.call(
      "ACL", "SETUSER", "ts-narrow", "on", ">narrow-pw", "resetkeys", "resetchannels", "-@all",
      "+ping", "+hello", "+auth", "+info", "+select", "+client|setname", "+xadd", "~sandpool:q:*",
      "+get", "~sandpool:result:*", "+hset", "+expire", "~sandpool:job:*", "+subscribe", "+unsubscribe",
      "+psubscribe", "&sandpool:out:*", "+publish", "&sandpool:cancel",
    );
    const c = new Client(`${dep.url}?user=ts-narrow&password=narrow-pw`, { connectionName: "ts-narrow" });
    try {
      const chunks: Buffer[] = [];
      const r = await c.run({ shell: "echo narrow" }, { onStdout: (b) => chunks.push(b) });
      assert.equal(r.stdoutText, "narrow\n");
      assert.equal(Buffer.concat(chunks).toString(), "narrow\n", "no live output: the event channel was not subscribed");
      const again = await Promise.all([1, 2, 3].map((i) => c.run({ shell: `echo n-${i}` })));
      again.forEach((x, i) => assert.equal(x.stdoutText, `n-${i + 1}\n`));
    } finally {
      await c.close();
      await admin.call("ACL", "DELUSER", "ts-narrow");
    }
  });
});

describe("invalid input", () => {
  test("obviously bad jobs are rejected before anything is sent", async () => {
    const before = await xaddCalls();
    const bad: unknown[] = [
      {},
      { shell: "a", argv: ["a"] },
      { shell: "a\0b" },
      { argv: [] },
      { shell: "x", env: { "1A": "x" } },
      { shell: "x", cwd: "relative" },
      { shell: "x", timeoutMs: -1 },
      { shell: "x", id: "bad id" },
      { code: "print(1)" },
      { shell: "x", timeout: 5 },
      null,
      "echo hi",
    ];
    for (const job of bad) {
      await assert.rejects(client.submit(job as never), InvalidArgumentError, JSON.stringify(job));
      await assert.rejects(client.run(job as never), InvalidArgumentError, JSON.stringify(job));
    }
    await assert.rejects(client.submitMany([{ shell: "true" }, { shell: "x", cwd: "rel" }]), /jobs\[1\]/);
    for (const id of ["", "a b", "x".repeat(129)]) {
      await assert.rejects(client.result(id), InvalidArgumentError);
      await assert.rejects(client.status(id), InvalidArgumentError);
      await assert.rejects(client.cancel(id), InvalidArgumentError);
    }
    assert.equal(await xaddCalls(), before);
  });

  for (const [name, bytes, code] of REJECTION_VECTORS) {
    test(`the daemon rejects section 11 vector ${name} with ${code}`, async () => {
      const id = `vec-${name}-${newJobId().slice(0, 8)}`;
      await admin.xadd("sandpool:q:default", "*", "id", id, "job", bytes);
      const r = await client.result(id, { wait: true, timeoutMs: WAIT });
      assert.equal(r?.outcome, "error");
      assert.equal(r.error?.code, code);
      assert.equal(r.error?.retryable, false);
      assert.equal(r.id, id);
    });
  }

  test("the daemon runs the section 11 job vectors as they are", async () => {
    for (const [id, bytes, out] of [
      ["t1", VECTOR_T1, "hi\n"],
      ["t2", VECTOR_T2, "a b\n"],
    ] as const) {
      await admin.del(`sandpool:result:${id}`, `sandpool:job:${id}`);
      await admin.xadd("sandpool:q:default", "*", "id", id, "job", bytes);
      const r = await client.result(id, { wait: true, timeoutMs: WAIT });
      assert.ok(r?.ok, `${id}: ${r?.outcome} ${r?.error?.message}`);
      assert.equal(r.stdoutText, out);
    }
  });
});

describe("closing", () => {
  test("close() ends waiting calls with ClientClosedError; later calls fail", async () => {
    const c = new Client(dep.url);
    const id = newJobId();
    const pending = assert.rejects(c.run({ id, shell: "sleep 2; echo still-ran" }), ClientClosedError);
    // Close while run() waits for the job it submitted, which then goes on without it.
    await waitFor(async () => (await client.status(id)).state === "running", WAIT, "the job running");
    await c.close();
    await pending;
    await assert.rejects(c.submit({ shell: "true" }), ClientClosedError);
    assert.throws(() => c.events(id), ClientClosedError);
    const r = await client.result(id, { wait: true, timeoutMs: WAIT });
    assert.equal(r?.stdoutText, "still-ran\n");
  });
});

describe("prefix and queue", () => {
  test("a client with the daemon's --prefix and --queue", async () => {
    const other = await new Deployment({ prefix: "tsp", queue: "tsq" }).start();
    const c = new Client(other.url, { prefix: "tsp", queue: "tsq" });
    const raw = other.redis.admin();
    try {
      const chunks: Buffer[] = [];
      const r = await c.run({ shell: "echo prefixed" }, { onStdout: (b) => chunks.push(b), waitTimeoutMs: WAIT });
      assert.equal(r.stdoutText, "prefixed\n");
      assert.deepEqual(Buffer.concat(chunks), r.stdout);
      assert.equal(await raw.exists(`tsp:result:${r.id}`), 1);
      assert.equal(await raw.exists(`sandpool:result:${r.id}`), 0);
      assert.equal((await c.status(r.id)).state, "done");
      // a client with the default prefix does not see it
      const d = new Client(other.url);
      try {
        assert.equal(await d.result(r.id), null);
      } finally {
        await d.close();
      }
    } finally {
      raw.disconnect();
      await c.close();
      await other.stop();
    }
  });
});
