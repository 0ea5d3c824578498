/**
 * The sessions API against a real sandpoold with sessions (PROTOCOL.md sections 12-19) and a
 * private redis-server: life cycle, commands, code contexts, background processes, files,
 * errors, listing, snapshots, reconnection. Fails at once, with a message saying so, when the
 * daemon binary has no sessions.
 */

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, test } from "node:test";

import {
  Client,
  ConflictError,
  ExistsError,
  IsADirectoryError,
  NotADirectoryError,
  NotEmptyError,
  NotFoundError,
  PermissionError,
  ProcessExitedError,
  SessionError,
  SessionNotFoundError,
  SessionStoppedError,
  TemplateMismatchError,
  type Session,
} from "../src/index.js";
import { Daemon, Deployment, requireSessions, waitFor } from "../src/testing.js";

const WAIT = 30000;
let dep: Deployment;
let client: Client;

function sid(tag: string): string {
  return `ts-${tag}-${randomBytes(4).toString("hex")}`;
}

before(async () => {
  requireSessions();
  dep = await new Deployment({ workers: 2, aof: true }).start();
  client = new Client({ url: dep.url, pollIntervalMs: 500, opTimeoutMs: 90000 });
});

after(async () => {
  if (client) {
    // Leave no session behind in the daemon's state directory.
    for (const r of await client.listSessions().catch(() => [])) {
      await client.session(r.id).destroy().catch(() => undefined);
    }
    await client.close();
  }
  await dep?.stop();
});

describe("life cycle", () => {
  test("create, create again (connect), info, stop, resume, destroy", async () => {
    const id = sid("life");
    const s = client.session(id);
    const info = await s.create({ labels: { suite: "ts", case: "life" }, idleTimeoutMs: 600000 });
    assert.equal(info.session, id);
    assert.equal(info.state, "running");
    assert.equal(info.template, "default");
    assert.equal(info.host, dep.daemon.consumer);
    assert.deepEqual(info.labels, { suite: "ts", case: "life" });
    assert.ok(info.createdMs > Date.now() - 120000 && info.createdMs <= Date.now() + 5000);

    // The record (section 14) says the same.
    const rec = await s.record();
    assert.equal(rec?.state, "running");
    assert.equal(rec?.consumer, dep.daemon.consumer);
    assert.equal(rec?.idleTimeoutMs, 600000);
    assert.deepEqual(rec?.labels, { suite: "ts", case: "life" });

    // create of a running session returns it as it is, options unchanged.
    const again = await s.create({ labels: { other: "x" } });
    assert.equal(again.state, "running");
    assert.deepEqual(again.labels, { suite: "ts", case: "life" });
    assert.equal(again.createdMs, info.createdMs);

    const live = await s.info();
    assert.equal(live.state, "running");
    assert.ok((live.memoryLimitBytes ?? 0) > 0, "memory_limit_bytes");
    assert.ok((live.diskLimitBytes ?? 0) > 0, "disk_limit_bytes");
    assert.equal(typeof live.cpuTimeUs, "number");

    await s.writeFile("/work/kept.txt", "kept\n");
    const stopped = await s.stop();
    assert.equal(stopped.state, "stopped");
    assert.equal((await s.stop()).state, "stopped", "stop is idempotent");
    await assert.rejects(s.exec({ shell: "true" }), SessionStoppedError);

    const resumed = await s.create();
    assert.equal(resumed.state, "running");
    assert.equal(await s.readText("/work/kept.txt"), "kept\n");

    await s.destroy();
    assert.equal((await s.record())?.state ?? "destroyed", "destroyed");
    await s.destroy(); // idempotent
    await assert.rejects(s.info(), SessionNotFoundError);
  });

  test("connect() to an existing session; to a missing one fails without sending", async () => {
    const id = sid("conn");
    await client.createSession(id);
    const info = await client.session(id).connect();
    assert.equal(info.state, "running");
    await client.session(id).stop();
    const resumed = await client.session(id).connect();
    assert.equal(resumed.state, "running");
    await client.session(id).destroy();

    const missing = client.session(sid("missing"));
    const admin = dep.redis.admin();
    try {
      const before = await admin.xlen("sandpool:sreq:default");
      await assert.rejects(missing.connect(), SessionNotFoundError);
      await assert.rejects(missing.exec({ shell: "true" }), SessionNotFoundError);
      await assert.rejects(missing.read("/work/x"), SessionNotFoundError);
      assert.equal(await admin.xlen("sandpool:sreq:default"), before, "nothing was sent");
    } finally {
      admin.disconnect();
    }
  });

  test("template_mismatch when resuming with another template", async () => {
    const id = sid("tmpl");
    const s = await client.createSession(id);
    await s.stop();
    await assert.rejects(s.create({ template: "python" }), TemplateMismatchError);
    await s.destroy();
  });

  test("an unknown template fails create", async () => {
    await assert.rejects(client.session(sid("badtmpl")).create({ template: "no-such-template" }), SessionError);
  });

  test("listSessions filters by state and labels", async () => {
    const tag = randomBytes(3).toString("hex");
    const a = await client.createSession(sid("lsa"), { labels: { list: tag, n: "1" } });
    const b = await client.createSession(sid("lsb"), { labels: { list: tag, n: "2" } });
    await b.stop();
    const mine = await client.listSessions({ labels: { list: tag } });
    assert.deepEqual(mine.map((r) => r.id).sort(), [a.id, b.id].sort());
    const running = await client.listSessions({ labels: { list: tag }, state: "running" });
    assert.deepEqual(running.map((r) => r.id), [a.id]);
    const stopped = await client.listSessions({ labels: { list: tag, n: "2" }, state: ["stopped", "error"] });
    assert.deepEqual(stopped.map((r) => r.id), [b.id]);
    await a.destroy();
    await b.destroy();
  });
});

describe("commands", () => {
  let s: Session;
  before(async () => {
    s = await client.createSession(sid("cmd"), { env: { SESSION_VAR: "from-session" } });
  });
  after(async () => {
    await s?.destroy();
  });

  test("exec: output, exit code, env over the session's, cwd, stdin, as root", async () => {
    const r = await s.exec({ shell: "echo out; echo err >&2; exit 3" });
    assert.equal(r.outcome, "exit");
    assert.equal(r.exitCode, 3);
    assert.equal(r.stdoutText, "out\n");
    assert.equal(r.stderrText, "err\n");
    const env = await s.exec({ shell: 'echo "$SESSION_VAR $MINE"' }, { env: { MINE: "a b'c\"$d" } });
    assert.equal(env.stdoutText, "from-session a b'c\"$d\n");
    const over = await s.exec({ argv: ["printenv", "SESSION_VAR"] }, { env: { SESSION_VAR: "over" } });
    assert.equal(over.stdoutText, "over\n");
    assert.equal((await s.exec({ argv: ["pwd"] })).stdoutText, "/work\n");
    assert.equal((await s.exec({ argv: ["pwd"] }, { cwd: "/tmp" })).stdoutText, "/tmp\n");
    assert.equal((await s.exec({ argv: ["sort"] }, { stdin: "b\na\n" })).stdoutText, "a\nb\n");
    assert.equal((await s.exec({ argv: ["id", "-u"] })).stdoutText, "1000\n");
    assert.equal((await s.exec({ argv: ["id", "-u"] }, { asRoot: true })).stdoutText, "0\n");
  });

  test("processes and files persist between commands", async () => {
    await s.exec({ shell: "echo state > /tmp/state; (sleep 300 &) ; true" });
    assert.equal((await s.exec({ shell: "cat /tmp/state" })).stdoutText, "state\n");
  });

  test("exec: live callbacks add up to the result; the stream yields started, output, exited", async () => {
    const chunks: Buffer[] = [];
    const r = await s.exec({ shell: "for i in 1 2 3; do echo line $i; sleep 0.1; done" }, { onStdout: (b) => chunks.push(b) });
    assert.equal(Buffer.concat(chunks).toString(), r.stdoutText);
    assert.equal(r.stdoutText, "line 1\nline 2\nline 3\n");
    const types: string[] = [];
    const stream = s.execStream({ shell: "echo a; echo b >&2" });
    assert.match(stream.id, /^[0-9a-f]{36}$/);
    for await (const ev of stream) types.push(ev.type);
    assert.equal(types[0], "started");
    assert.equal(types.at(-1), "exited");
    assert.ok(types.includes("stdout") && types.includes("stderr"));
  });

  test("exec: timeout and cancel keep the output so far", async () => {
    const t0 = Date.now();
    const r = await s.exec({ shell: "echo before; sleep 30" }, { timeoutMs: 500 });
    assert.equal(r.outcome, "timeout");
    assert.equal(r.timedOut, true);
    assert.equal(r.killed, true);
    assert.equal(r.stdoutText, "before\n");
    assert.ok(Date.now() - t0 < 10000);

    const ac = new AbortController();
    const seen: Buffer[] = [];
    const p = s.exec(
      { shell: "echo first; sleep 30" },
      {
        signal: ac.signal,
        onStdout: (b) => {
          seen.push(b);
          ac.abort();
        },
      },
    );
    const c = await p;
    assert.equal(c.outcome, "cancelled");
    assert.equal(c.stdoutText, "first\n");
    assert.equal(c.error?.code, "cancelled");
  });

  test("concurrent execs run at once and never see each other's env", async () => {
    const t0 = Date.now();
    const rs = await Promise.all(
      [1, 2, 3, 4].map((i) => s.exec({ shell: 'sleep 1; echo "$N"' }, { env: { N: String(i) } })),
    );
    assert.deepEqual(
      rs.map((r) => r.stdoutText),
      ["1\n", "2\n", "3\n", "4\n"],
    );
    assert.ok(Date.now() - t0 < 3500, `four 1 s commands took ${Date.now() - t0} ms`);
  });

  test("exec of a missing program and a missing cwd", async () => {
    const r = await s.exec({ argv: ["no-such-program"] });
    assert.equal(r.outcome, "error");
    assert.equal(r.error?.code, "exec_failed");
    assert.equal(r.exitCode, 127);
    const c = await s.exec({ argv: ["true"] }, { cwd: "/no/such/dir" });
    assert.equal(c.error?.code, "exec_failed");
    assert.equal(c.exitCode, 126);
  });

  test("code contexts keep state; context_restart clears it", async () => {
    const a = await s.code("x = 41", "python");
    assert.equal(a.exitCode, 0);
    const b = await s.code("print(x + 1)", "python");
    assert.equal(b.stdoutText, "42\n");
    const other = await s.code("print(globals().get('x'))", "python", { context: "other" });
    assert.equal(other.stdoutText, "None\n");
    const raised = await s.code("raise ValueError('boom')", "python");
    assert.equal(raised.exitCode, 1);
    assert.match(raised.stderrText, /ValueError: boom/);
    await s.contextRestart("default", "python");
    const after = await s.code("print(globals().get('x'))", "python");
    assert.equal(after.stdoutText, "None\n");
    const js = await s.code("globalThis.n = 2; console.log(n * 21)", "node");
    assert.equal(js.stdoutText, "42\n");
    // A call that times out kills the context's interpreter: its state is gone.
    await s.code("kept = 1", "python", { context: "slow" });
    const slow = await s.code("import time; time.sleep(30)", "python", { context: "slow", timeoutMs: 300 });
    assert.equal(slow.outcome, "timeout");
    assert.equal((await s.code("print(globals().get('kept'))", "python", { context: "slow" })).stdoutText, "None\n");
  });
});

describe("background processes", () => {
  let s: Session;
  before(async () => {
    s = await client.createSession(sid("proc"));
  });
  after(async () => {
    await s?.destroy();
  });

  test("spawn: live output from the first byte, wait, exit code", async () => {
    const chunks: string[] = [];
    const p = await s.spawn("echo early; sleep 0.3; echo late >&2; exit 7", {
      onOutput: (stream, data) => chunks.push(`${stream}:${data.toString()}`),
    });
    assert.match(p.pid, /^p\d+$/);
    assert.equal(p.running, true);
    const out = await p.wait({ timeoutMs: WAIT });
    assert.equal(out.running, false);
    assert.equal(out.exitCode, 7);
    assert.equal(p.exitCode, 7);
    assert.equal(out.stdout.toString(), "early\n");
    assert.equal(out.stderr.toString(), "late\n");
    assert.deepEqual(chunks.join(""), "stdout:early\nstderr:late\n");
    assert.deepEqual(await p.wait(), out, "wait() is repeatable");

    // A listener added after spawn() returned still gets the output from the first byte.
    const late = await s.spawn("echo at-once; sleep 0.2; echo later");
    const got: string[] = [];
    late.onOutput((_stream, data) => got.push(data.toString()));
    await late.wait({ timeoutMs: WAIT });
    assert.equal(got.join(""), "at-once\nlater\n");
  });

  test("stdin: write into head -1; close ends cat", async () => {
    const head = await s.spawn({ argv: ["head", "-1"] });
    await head.write("hello from stdin\nsecond\n");
    const h = await head.wait({ timeoutMs: WAIT });
    assert.equal(h.stdout.toString(), "hello from stdin\n");
    await assert.rejects(head.write("late\n"), ProcessExitedError);

    const cat = await s.spawn("cat");
    await cat.write("abc");
    await cat.closeStdin();
    const c = await cat.wait({ timeoutMs: WAIT });
    assert.equal(c.exitCode, 0);
    assert.equal(c.stdout.toString(), "abc");
  });

  test("kill: true while running, false after; ps shows both; output with tailLines", async () => {
    const p = await s.spawn("for i in 1 2 3 4 5; do echo $i; done; sleep 300");
    await waitFor(async () => (await p.output()).stdout.toString() === "1\n2\n3\n4\n5\n", WAIT, "output");
    const tail = await p.output({ tailLines: 2 });
    assert.equal(tail.stdout.toString(), "4\n5\n");
    const ps = await s.ps();
    const mine = ps.find((x) => x.pid === p.pid);
    assert.equal(mine?.state, "running");
    assert.match(mine?.command ?? "", /sleep 300/);
    assert.equal(await p.kill(9), true);
    const out = await p.wait({ timeoutMs: WAIT });
    assert.equal(out.signal, 9);
    assert.equal(out.exitCode, null);
    assert.equal(await p.kill(), false);
    const after = (await s.ps()).find((x) => x.pid === p.pid);
    assert.equal(after?.state, "exited");
    assert.equal(after?.signal, 9);
  });

  test("a server started with spawn answers the next exec over loopback", async () => {
    const server = await s.spawn(
      "python3 -c \"import http.server as h; h.HTTPServer(('127.0.0.1', 8765), h.SimpleHTTPRequestHandler).serve_forever()\"",
      { cwd: "/tmp" },
    );
    await s.writeFile("/tmp/hello.txt", "served\n");
    await waitFor(
      async () => (await s.exec({ shell: "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8765/hello.txt').read().decode(), end='')\"" })).stdoutText === "served\n",
      WAIT,
      "the server to answer",
      200,
    );
    await server.kill();
    await server.wait({ timeoutMs: WAIT });
  });

  test("another client attaches to a running process by pid", async () => {
    const p = await s.spawn("echo one; sleep 0.5; echo two; sleep 300");
    await waitFor(async () => (await p.output()).stdout.toString() === "one\ntwo\n", WAIT, "output");
    const other = new Client({ url: dep.url });
    try {
      const seen: Buffer[] = [];
      const q = await other.session(s.id).process(p.pid);
      q.onOutput((_stream, d) => seen.push(d));
      assert.equal(q.running, true);
      assert.match(q.command ?? "", /sleep 300/);
      await q.kill(9);
      const out = await q.wait({ timeoutMs: WAIT });
      assert.equal(out.signal, 9);
      await assert.rejects(other.session(s.id).process("p999999"), NotFoundError);
    } finally {
      await other.close();
    }
    await p.wait({ timeoutMs: WAIT });
  });

  test("stop ends every process", async () => {
    const t = await client.createSession(sid("stop"));
    const p = await t.spawn("sleep 300");
    await t.stop();
    const out = await p.wait({ timeoutMs: WAIT });
    assert.equal(out.running, false);
    await t.destroy();
  });
});

describe("files", () => {
  let s: Session;
  before(async () => {
    s = await client.createSession(sid("files"));
  });
  after(async () => {
    await s?.destroy();
  });

  test("write many, read, append, stat, exists; commands see the same files", async () => {
    const written = await s.write([
      { path: "/work/a.txt", data: "alpha\n" },
      { path: "/work/sub/dir/b.bin", data: Buffer.from([0, 1, 2, 255]), mode: 0o600 },
    ]);
    assert.deepEqual(
      written.map((f) => [f.path, f.size]),
      [
        ["/work/a.txt", 6],
        ["/work/sub/dir/b.bin", 4],
      ],
    );
    assert.equal(typeof written[0]?.mtimeNs, "bigint");
    assert.equal((await s.exec({ shell: "cat a.txt; stat -c %a sub/dir/b.bin" })).stdoutText, "alpha\n600\n");
    await s.exec({ shell: "echo from-command > /work/c.txt" });
    assert.equal(await s.readText("/work/c.txt"), "from-command\n");
    assert.deepEqual(await s.readFile("/work/sub/dir/b.bin"), Buffer.from([0, 1, 2, 255]));
    const part = await s.read("/work/a.txt", { offset: 1, length: 3 });
    assert.deepEqual([part.data.toString(), part.size], ["lph", 6]);
    const app = await s.append("/work/a.txt", "beta\n");
    assert.equal(app.size, 11);
    assert.equal(await s.readText("/work/a.txt"), "alpha\nbeta\n");
    const st = await s.stat("/work/a.txt");
    assert.deepEqual([st.type, st.size, st.uid, st.mtimeNs], ["file", 11, 1000, app.mtimeNs]);
    assert.deepEqual(await s.exists("/work/sub"), { exists: true, type: "dir" });
    assert.deepEqual(await s.exists("/work/nope"), { exists: false, type: null });
  });

  test("list, mkdir, copy, rename, remove", async () => {
    await s.mkdir("/work/tree/x/y");
    await s.mkdir("/work/tree/x/y"); // an existing directory is fine
    await s.writeFile("/work/tree/x/f1", "1");
    await s.writeFile("/work/tree/f2", "22");
    const flat = await s.list("/work/tree");
    assert.deepEqual(flat.entries.map((e) => [e.name, e.type]).sort(), [
      ["f2", "file"],
      ["x", "dir"],
    ]);
    const all = await s.list("/work/tree", { recursive: true });
    assert.deepEqual(all.entries.map((e) => e.path).sort(), ["/work/tree/f2", "/work/tree/x", "/work/tree/x/f1", "/work/tree/x/y"]);
    assert.equal(all.truncated, false);
    const limited = await s.list("/work/tree", { recursive: true, limit: 1 });
    assert.equal(limited.entries.length, 1);
    assert.equal(limited.truncated, true);

    await s.copy("/work/tree/f2", "/work/tree/f3");
    await assert.rejects(s.copy("/work/tree/f2", "/work/tree/f3"), ExistsError);
    await s.copy("/work/tree/f2", "/work/tree/f3", { overwrite: true });
    await s.copy("/work/tree/x", "/work/tree-copy", { recursive: true });
    assert.equal(await s.readText("/work/tree-copy/f1"), "1");
    await s.rename("/work/tree/f3", "/work/tree/x/f3");
    assert.equal(await s.readText("/work/tree/x/f3"), "22");
    await assert.rejects(s.rename("/work/tree/f2", "/work/tree/x/f3"), ExistsError);
    assert.equal(await s.remove("/work/tree/f2"), 1);
    await assert.rejects(s.remove("/work/tree"), NotEmptyError);
    assert.ok((await s.remove("/work/tree", { recursive: true })) >= 4);
    assert.equal(await s.remove("/work/tree", { force: true }), 0);
    await assert.rejects(s.remove("/work/tree"), NotFoundError);
  });

  test("typed errors", async () => {
    await assert.rejects(s.read("/work/missing"), NotFoundError);
    await s.mkdir("/work/adir");
    await assert.rejects(s.read("/work/adir"), IsADirectoryError);
    await s.writeFile("/work/afile", "x");
    await assert.rejects(s.list("/work/afile"), NotADirectoryError);
    await assert.rejects(s.write([{ path: "/work/afile", data: "y", overwrite: false }]), ExistsError);
    await assert.rejects(s.writeFile("/etc/sandpool-ts-test", "x"), PermissionError);
    await s.writeFile("/etc/sandpool-ts-test", "root\n", { asRoot: true });
    assert.equal((await s.exec({ argv: ["cat", "/etc/sandpool-ts-test"] })).stdoutText, "root\n");
    await assert.rejects(s.writeFile("/work/nodir/x", "x", { parents: false }), NotFoundError);
  });

  test("expectedMtimeNs: a write against a stale mtime is a conflict", async () => {
    const w = await s.writeFile("/work/cas.txt", "v1");
    const w2 = await s.writeFile("/work/cas.txt", "v2", { expectedMtimeNs: w.mtimeNs });
    await assert.rejects(s.writeFile("/work/cas.txt", "v3", { expectedMtimeNs: w.mtimeNs }), ConflictError);
    assert.equal(await s.readText("/work/cas.txt"), "v2");
    assert.notEqual(w2.mtimeNs, 0n);
  });

  test("a file over 16 MiB goes in pieces both ways", async () => {
    const big = Buffer.alloc((16 << 20) + 12345, 7);
    big.write("head", 0);
    big.write("tail", big.length - 4);
    const w = await s.writeFile("/work/big.bin", big);
    assert.equal(w.size, big.length);
    const admin = dep.redis.admin();
    try {
      const getdels = async (): Promise<number> =>
        Number(/cmdstat_getdel:calls=(\d+)/.exec((await admin.info("commandstats")) as string)?.[1] ?? 0);
      const taken = await getdels();
      const back = await s.readFile("/work/big.bin");
      assert.equal(back.length, big.length);
      assert.ok(back.equals(big));
      // The first piece's result (16 MiB) was large: named by its event and taken (GETDEL,
      // PROTOCOL.md section 16), so none is left in Redis; the second's (12345 bytes) came on its event.
      assert.equal((await getdels()) - taken, 1);
      for (const k of await admin.keys("sandpool:result:*")) assert.ok((await admin.strlen(k)) <= 65536, k);
    } finally {
      admin.disconnect();
    }
    await s.remove("/work/big.bin");
  });
});

describe("snapshots", () => {
  test("snapshot a session; a new session from it sees its files; delete it", async (t) => {
    const src = await client.createSession(sid("snapsrc"));
    await src.writeFile("/work/from-snapshot.txt", "snap\n");
    await src.exec({ shell: "mkdir -p /opt/tool && echo tool > /opt/tool/v" }, { asRoot: true });
    const name = `ts-snap-${randomBytes(3).toString("hex")}`;
    let info;
    try {
      info = await src.snapshot(name);
    } catch (e) {
      // A daemon may not implement snapshots yet: it says so with an error code section 19 does
      // not list. Reported as a skip with the daemon's own words, not passed.
      if (e instanceof SessionError && e.code === "unsupported") {
        await src.destroy();
        t.skip(`sandpoold answered ${e.code}: ${e.detail}`);
        return;
      }
      throw e;
    }
    assert.equal(info.name, name);
    assert.equal(info.template, "default");
    assert.ok(info.bytes > 0);
    const listed = await client.listSnapshots();
    const rec = listed.find((x) => x.name === name);
    assert.ok(rec, "listed");
    assert.equal(rec.base, "default");
    assert.equal(rec.host, dep.daemon.consumer);

    const child = await client.createSession(sid("snapchild"), { template: name });
    assert.equal(await child.readText("/work/from-snapshot.txt"), "snap\n");
    assert.equal((await child.exec({ argv: ["cat", "/opt/tool/v"] })).stdoutText, "tool\n");
    await child.destroy();
    await src.destroy();

    await client.deleteSnapshot(name);
    assert.equal((await client.listSnapshots()).some((x) => x.name === name), false);
  });
});

describe("routing", () => {
  const hgets = async (): Promise<number> => {
    const admin = dep.redis.admin();
    try {
      const m = /cmdstat_hget:calls=(\d+)/.exec((await admin.info("commandstats")) as string);
      return m ? Number(m[1]) : 0;
    } finally {
      admin.disconnect();
    }
  };

  test("after its first operation a session's record is not read again for each one", async () => {
    const s = await client.createSession(sid("route"));
    // The client's reads of the record, counted where it sends them (every Redis call goes
    // through its Connections, named): Redis's own HGET count also counts the daemon's (its
    // reconcile after a reconnect, a running job's cancel check), which made this test flaky.
    type Conns = { call: (what: string, op: unknown) => Promise<unknown> };
    const backend = (s as unknown as { backend: { conns: Conns; keys: { session(id: string): string } } }).backend;
    const record = backend.keys.session(s.id);
    const call = backend.conns.call;
    let reads = 0;
    backend.conns.call = function (this: Conns, what: string, op: unknown) {
      if (what === `HGET ${record}` || what === `HGETALL ${record}`) reads++;
      return call.call(this, what, op);
    };
    try {
      await s.exec({ shell: "true" });
      const before = reads;
      const hgetsBefore = await hgets();
      for (let i = 0; i < 5; i++) {
        assert.equal((await s.exec({ shell: `echo ${i}` })).stdoutText, `${i}\n`);
        await s.writeFile("/work/r", String(i));
      }
      assert.equal(await s.readText("/work/r"), "4");
      assert.equal(reads - before, 0);
      // And Redis saw fewer HGETs than the 11 operations would have sent (the daemon's own may add a few).
      assert.ok((await hgets()) - hgetsBefore < 11);
    } finally {
      backend.conns.call = call;
      await s.destroy();
    }
  });

  test("an operation sent to a daemon that no longer holds the session is sent again to its holder", async () => {
    // A second daemon stands for the session's old host: alive, not holding it. A holder that
    // changed (the host died and the session was made again elsewhere) looks like this to a
    // client that read the record before.
    const other = new Daemon(dep.redis, { workers: 1 });
    await other.start();
    const s = await client.createSession(sid("moved"));
    try {
      await s.exec({ shell: "true" });
      const stale = (): void => {
        (s as unknown as { holderCache: string }).holderCache = other.consumer;
      };
      stale();
      const r = await s.exec({ shell: "echo once >> /work/log; cat /work/log" });
      assert.equal(r.stdoutText, "once\n");
      assert.equal(r.worker, dep.daemon.consumer);
      stale();
      await s.writeFile("/work/w", "moved");
      stale();
      assert.equal(await s.readText("/work/w"), "moved");
      stale();
      assert.equal((await s.code("print(6 * 7)", "python")).stdoutText, "42\n");
      // Nothing ran twice; the four operations did go to the other daemon first.
      assert.equal(await s.readText("/work/log"), "once\n");
      const admin = dep.redis.admin();
      try {
        const info = (await admin.call("XINFO", "STREAM", `sandpool:sreq:default:${other.consumer}`)) as unknown[];
        assert.equal(Number(info[info.indexOf("entries-added") + 1]), 4);
      } finally {
        admin.disconnect();
      }
      // A session that is really gone is still session_not_found, after one look at its record.
      await client.session(s.id).destroy();
      stale();
      await assert.rejects(s.exec({ shell: "true" }), SessionNotFoundError);
    } finally {
      await s.destroy().catch(() => undefined);
      await other.remove();
    }
  });
});

describe("connections and reconnection", () => {
  test("many concurrent operations share the client's two connections", async () => {
    const s = await client.createSession(sid("conns"));
    try {
      await Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          i % 2 === 0 ? s.exec({ shell: `echo ${i}` }) : s.writeFile(`/work/f${i}`, String(i)),
        ),
      );
      const admin = dep.redis.admin();
      try {
        const list = (await admin.client("LIST")) as string;
        const mine = list.split("\n").filter((l) => / name=sandpool-ts:(cmd|sub) /.test(l));
        assert.equal(mine.length, 2, list);
      } finally {
        admin.disconnect();
      }
    } finally {
      await s.destroy();
    }
  });

  test("Redis restarts while a background process runs: its output is caught up", async () => {
    const s = await client.createSession(sid("redis"));
    try {
      const p = await s.spawn("for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.5; done");
      const chunks: Buffer[] = [];
      p.onOutput((_stream, d) => chunks.push(d));
      // Restart once the process has written live (waited for, not slept for).
      await waitFor(() => chunks.length > 0, WAIT, "the process's first output");
      await dep.redis.restart(1000);
      const out = await p.wait({ timeoutMs: WAIT });
      assert.equal(out.exitCode, 0);
      const want = [1, 2, 3, 4, 5, 6].map((i) => `tick ${i}\n`).join("");
      assert.equal(out.stdout.toString(), want);
      assert.equal(Buffer.concat(chunks).toString(), want, "output lost live was caught up from the durable view");
      const r = await s.exec({ shell: "echo after" });
      assert.equal(r.stdoutText, "after\n");
    } finally {
      await s.destroy();
    }
  });

  // Until issue 22 this test slept 700 ms and then restarted Redis for 1 s while a `sleep 2`
  // command ran: the command had ended before the daemon reconnected, so the case of the title
  // was not tested. Waiting for the command's first output, the command outlasts the outage;
  // that showed sandpoold answering it worker_lost while it still ran (its own scan after the
  // reconnect claimed the entry it was serving again), fixed in scheduler/sessions/op_dispatch.cc.
  test(
    "Redis restarts while a command runs: the result is the command's",
    async () => {
      const s = await client.createSession(sid("redis-exec"));
      try {
        let started = false;
        const e = s.exec({ shell: "echo exec-start; sleep 3; echo exec-done" }, { onStdout: () => (started = true) });
        await waitFor(() => started, WAIT, "the command's first output");
        await dep.redis.restart(1000);
        const r = await e;
        assert.equal(r.stdoutText, "exec-start\nexec-done\n", `${r.outcome}: ${r.error?.code ?? ""} ${r.error?.message ?? ""}`);
      } finally {
        await s.destroy();
      }
    },
  );

  test("an operation whose live event is lost resolves from the result key", async () => {
    const s = await client.createSession(sid("lost"));
    try {
      const admin = dep.redis.admin();
      try {
        let started = false;
        const p = s.exec({ shell: "echo started; sleep 2; echo done" }, { onStdout: () => (started = true) });
        // Once the command runs (its first output came live), drop the subscriber connection.
        await waitFor(() => started, WAIT, "the command's first output");
        await admin.call("CLIENT", "KILL", "TYPE", "pubsub");
        const r = await p;
        assert.equal(r.stdoutText, "started\ndone\n");
        await admin.call("CLIENT", "KILL", "TYPE", "pubsub");
        assert.equal((await s.exists("/work")).exists, true);
      } finally {
        admin.disconnect();
      }
    } finally {
      await s.destroy();
    }
  });
});
