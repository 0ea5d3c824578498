/**
 * SandpoolSandbox against a real sandpoold with the real @mastra/core: every behaviour of
 * Mastra's provider suite ("How Mastra tests providers" in shared/reference/mastra-contract.md),
 * in our words: commands, lifecycle, processes, reconnection.
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client, SessionError } from "sandpool";
import type { Deployment } from "sandpool/testing";

import { SandpoolProcessHandle, SandpoolSandbox } from "../src/index.js";
import { destroyAll, sessionId, startDeployment, waitFor } from "./support/env.js";

const T = 60_000;
let dep: Deployment;
let admin: Client;
let sandbox: SandpoolSandbox;
const made: SandpoolSandbox[] = [];

function newSandbox(opts: ConstructorParameters<typeof SandpoolSandbox>[0] = {}): SandpoolSandbox {
  const s = new SandpoolSandbox({ id: sessionId("sb"), redisUrl: dep.url, ...opts });
  made.push(s);
  return s;
}

before(async () => {
  dep = await startDeployment();
  admin = new Client({ url: dep.url });
  sandbox = newSandbox({ env: { SANDBOX_VAR: "from-sandbox" } });
  await sandbox._start();
});

after(async () => {
  for (const s of made) await s.close().catch(() => undefined);
  if (admin) await destroyAll(admin);
  await dep?.stop();
});

describe("commands", () => {
  test("echo", async () => {
    const r = await sandbox.executeCommand!("echo", ["hello"]);
    assert.equal(r.exitCode, 0);
    assert.equal(r.success, true);
    assert.equal(r.stdout.trim(), "hello");
    assert.equal(r.command, "echo hello");
    assert.deepEqual(r.args, ["hello"]);
  });

  test("arguments with spaces and quotes are quoted", async () => {
    const r = await sandbox.executeCommand!("echo", ["hello world", "it's", "$HOME", "a;b"]);
    assert.equal(r.stdout, "hello world it's $HOME a;b\n");
  });

  test("stderr through sh -c", async () => {
    const r = await sandbox.executeCommand!("sh", ["-c", 'echo "error message" >&2']);
    assert.equal(r.stderr, "error message\n");
    assert.equal(r.stdout, "");
  });

  test("exit 1 and exit 42", async () => {
    const one = await sandbox.executeCommand!("sh", ["-c", "exit 1"]);
    assert.deepEqual([one.exitCode, one.success], [1, false]);
    const r = await sandbox.executeCommand!("exit 42");
    assert.deepEqual([r.exitCode, r.success], [42, false]);
  });

  test("a model-written line runs through a shell: pipes, heredocs, &&, variables", async () => {
    const pipe = await sandbox.executeCommand!("printf 'b\\na\\nc\\n' | sort | head -2 | tr a-z A-Z");
    assert.equal(pipe.stdout, "A\nB\n");
    const heredoc = await sandbox.executeCommand!("cat <<'EOF' > /tmp/h.txt && wc -l < /tmp/h.txt\nline one\nline two\nEOF");
    assert.equal(heredoc.stdout.trim(), "2");
    const notFound = await sandbox.executeCommand!("no-such-command-xyz");
    assert.equal(notFound.exitCode, 127);
  });

  test("environment values with special characters", async () => {
    const value = `a b 'c' "d" $e \`f\` \\g\nh=é`;
    const r = await sandbox.executeCommand!("printenv", ["SPECIAL"], { env: { SPECIAL: value } });
    assert.equal(r.stdout, `${value}\n`);
  });

  test("cwd /tmp, relative cwd, default /work", async () => {
    assert.equal((await sandbox.executeCommand!("pwd", [], { cwd: "/tmp" })).stdout.trim(), "/tmp");
    assert.equal((await sandbox.executeCommand!("pwd")).stdout.trim(), "/work");
    await sandbox.executeCommand!("mkdir -p /work/sub");
    assert.equal((await sandbox.executeCommand!("pwd", [], { cwd: "sub" })).stdout.trim(), "/work/sub");
  });

  test("sleep 10 with a 100 ms timeout ends fast: exit 124, timedOut, killed, no throw", async () => {
    const t0 = Date.now();
    const r = await sandbox.executeCommand!("sleep", ["10"], { timeout: 100 });
    assert.notEqual(r.exitCode, 0);
    assert.equal(r.exitCode, 124);
    assert.equal(r.timedOut, true);
    assert.equal(r.killed, true);
    assert.equal(r.success, false);
    assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);
  });

  test("the timeout also ends a streaming command, keeping its output", async () => {
    const chunks: string[] = [];
    const t0 = Date.now();
    const r = await sandbox.executeCommand!("echo start; sleep 10", [], { timeout: 300, onStdout: (d) => chunks.push(d) });
    assert.equal(r.exitCode, 124);
    assert.equal(r.stdout, "start\n");
    assert.equal(chunks.join(""), "start\n");
    assert.ok(Date.now() - t0 < 5000);
  });

  test("abort of a running command: fast, earlier output kept, killed", async () => {
    const ac = new AbortController();
    const t0 = Date.now();
    const p = sandbox.executeCommand!("echo before-abort; sleep 30", [], {
      abortSignal: ac.signal,
      onStdout: () => setTimeout(() => ac.abort(), 50),
    });
    const r = await p;
    const took = Date.now() - t0;
    assert.ok(took < 5000, `abort took ${took} ms`);
    assert.equal(r.stdout, "before-abort\n");
    assert.equal(r.killed, true);
    assert.notEqual(r.exitCode, 0);
    assert.equal(r.success, false);
  });

  test("an already-aborted signal: nothing runs, a killed result at once", async () => {
    const ac = new AbortController();
    ac.abort();
    const t0 = Date.now();
    const r = await sandbox.executeCommand!("touch /tmp/should-not-exist", [], { abortSignal: ac.signal });
    assert.ok(Date.now() - t0 < 1000);
    assert.equal(r.killed, true);
    assert.notEqual(r.exitCode, 0);
    assert.equal((await sandbox.executeCommand!("test -e /tmp/should-not-exist")).exitCode, 1);
  });

  test("5000 lines of seq, streamed in chunks that add up", async () => {
    const chunks: string[] = [];
    const r = await sandbox.executeCommand!("seq", ["1", "5000"], { onStdout: (d) => chunks.push(d) });
    const want = Array.from({ length: 5000 }, (_, i) => `${i + 1}\n`).join("");
    assert.equal(r.stdout, want);
    assert.equal(chunks.join(""), want);
  });

  test("maxRetainedBytes keeps the newest output", async () => {
    const r = await sandbox.executeCommand!("seq", ["1", "1000"], { maxRetainedBytes: 10 });
    assert.equal(r.stdout, "\n999\n1000\n".slice(-10));
    assert.equal(r.stdoutTruncated, true);
    assert.equal(r.stdoutDroppedBytes, 3893 - 10);
  });

  test("streaming callbacks: stdout and stderr separately, as they come", async () => {
    const out: string[] = [];
    const err: string[] = [];
    const times: number[] = [];
    const r = await sandbox.executeCommand!("for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.2; done", [], {
      onStdout: (d) => {
        out.push(d);
        times.push(Date.now());
      },
      onStderr: (d) => err.push(d),
    });
    assert.equal(out.join(""), "out1\nout2\nout3\n");
    assert.equal(err.join(""), "err1\nerr2\nerr3\n");
    assert.equal(r.stdout, out.join(""));
    assert.ok(times.length >= 2 && (times.at(-1) ?? 0) - (times[0] ?? 0) >= 200, "output arrived while it ran");
  });

  test("the sandbox env, overridden per command; setEnv", async () => {
    assert.equal((await sandbox.executeCommand!("printenv", ["SANDBOX_VAR"])).stdout, "from-sandbox\n");
    const over = await sandbox.executeCommand!("sh", ["-c", 'echo "$SANDBOX_VAR $OTHER"'], { env: { SANDBOX_VAR: "per-command", OTHER: "x" } });
    assert.equal(over.stdout, "per-command x\n");
    sandbox.setEnv((env) => ({ ...env, ADDED: "later" }));
    assert.equal((await sandbox.executeCommand!("printenv", ["ADDED"])).stdout, "later\n");
    sandbox.setEnv(({ ADDED: _gone, ...env }) => env);
    assert.equal((await sandbox.executeCommand!("printenv", ["ADDED"])).exitCode, 1);
  });

  test("concurrent commands with different env do not interfere", async () => {
    const t0 = Date.now();
    const rs = await Promise.all(
      ["value1", "value2", "value3", "value4"].map((v) => sandbox.executeCommand!("sh", ["-c", "sleep 0.5; echo $VAR"], { env: { VAR: v } })),
    );
    assert.deepEqual(
      rs.map((r) => r.stdout.trim()),
      ["value1", "value2", "value3", "value4"],
    );
    assert.ok(Date.now() - t0 < 4000, `ran one after another (${Date.now() - t0} ms)`);
  });
});

describe("lifecycle", () => {
  test("unique ids; pending before start, running after; start twice and concurrently", async () => {
    const a = newSandbox({ id: undefined });
    const b = newSandbox({ id: undefined });
    assert.notEqual(a.id, b.id);
    assert.equal(a.status, "pending");
    const results = await Promise.all([a._start(), a._start(), a.start()]);
    assert.equal(a.status, "running");
    assert.deepEqual(results[0], { outcome: "created" });
    assert.deepEqual(await a._start(), { outcome: "connected" });
    assert.equal((await admin.listSessions()).filter((r) => r.id === a.id).length, 1);
    await a._destroy();
    assert.equal(a.status, "destroyed");
    await assert.rejects(a._start(), /destroyed/);
  });

  test("stop gives stopped; start resumes the same session", async () => {
    const s = newSandbox();
    await s._start();
    await s._stop();
    assert.equal(s.status, "stopped");
    assert.equal((await admin.session(s.id).record())?.state, "stopped");
    assert.deepEqual(await s._start(), { outcome: "connected" });
    assert.equal(s.status, "running");
    await s._destroy();
  });

  test("getInfo: consistent, with resource figures", async () => {
    const info = await sandbox.getInfo();
    assert.equal(info.id, sandbox.id);
    assert.equal(info.name, "SandpoolSandbox");
    assert.equal(info.provider, "sandpool");
    assert.equal(info.status, "running");
    assert.ok(info.createdAt instanceof Date && info.createdAt.getTime() > Date.now() - 600_000);
    const res = info.resources ?? {};
    assert.ok((res.memoryMB ?? 0) > 0, "memoryMB");
    assert.ok((res.memoryUsedMB ?? -1) >= 0, "memoryUsedMB");
    assert.ok((res.cpuCores ?? 0) > 0, "cpuCores");
    assert.ok((res.diskMB ?? 0) > 0, "diskMB");
    assert.ok((res.diskUsedMB ?? -1) >= 0, "diskUsedMB");
    assert.equal(info.metadata?.host, dep.daemon.consumer);
    await sandbox.executeCommand!("sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'");
    const again = await sandbox.getInfo();
    assert.equal(again.id, info.id);
    assert.equal(again.createdAt.getTime(), info.createdAt.getTime());
    assert.equal(typeof again.resources?.cpuPercent, "number");
    assert.ok((again.resources?.cpuPercent ?? -1) >= 0);
  });

  test("getInstructions and snapshot support", () => {
    const text = sandbox.getInstructions();
    assert.match(text, /sandpool session/);
    assert.match(text, /\/work/);
    assert.equal(sandbox.supportsCheckpoints, true);
    const custom = newSandbox({ instructions: ({ defaultInstructions }) => `${defaultInstructions} Extra.` });
    assert.match(custom.getInstructions(), /Extra\.$/);
  });

  test("an invalid configuration fails start, without breaking a good sandbox", async () => {
    const bad = newSandbox({ template: "no-such-template" });
    await assert.rejects(bad._start());
    assert.equal(bad.status, "error");
    assert.equal((await sandbox.executeCommand!("echo", ["still fine"])).stdout, "still fine\n");
  });

  test("options: labels, ephemeral, limits reach the session", async () => {
    const s = newSandbox({ labels: { team: "mastra" }, ephemeral: true, limits: { memoryBytes: 256 << 20, cpus: 1 } });
    await s._start();
    const rec = await admin.session(s.id).record();
    assert.deepEqual(rec?.labels, { team: "mastra" });
    assert.equal(rec?.ephemeral, true);
    const info = await s.getInfo();
    assert.equal(info.resources?.memoryMB, 256);
    assert.ok((info.resources?.cpuCores ?? 0) > 0 && (info.resources?.cpuCores ?? 9) <= 1);
    await s._stop(); // ephemeral: destroyed instead of stopped
    assert.equal((await admin.session(s.id).record())?.state ?? "destroyed", "destroyed");
  });

  test("snapshot() writes a checkpoint a clone starts from", async (t) => {
    const s = newSandbox({ checkpointName: `ckpt-${sessionId("c").slice(-8)}` });
    await s._start();
    await s.executeCommand!("echo checkpointed > /work/ckpt.txt");
    try {
      await s.snapshot();
    } catch (e) {
      // A daemon may not implement snapshots yet (an error code PROTOCOL.md does not list):
      // reported as a skip with the daemon's own words, not passed.
      if (e instanceof SessionError && e.code === "unsupported") {
        await s._destroy();
        t.skip(`sandpoold answered ${e.code}: ${e.detail}`);
        return;
      }
      throw e;
    }
    await s.snapshot(); // writing the same checkpoint again replaces it
    assert.ok((await admin.listSnapshots()).some((x) => x.name === s.checkpointName));
    const c = s.clone({ id: sessionId("clone"), checkpointName: s.checkpointName });
    made.push(c);
    await c._start();
    assert.equal((await c.executeCommand!("cat /work/ckpt.txt")).stdout, "checkpointed\n");
    await c._destroy();
    await s._destroy();
    await admin.deleteSnapshot(s.checkpointName);
  });

  test("writeFiles puts files into the session, with modes", async () => {
    await sandbox.writeFiles!([
      { path: "/work/wf/a.txt", content: "A" },
      { path: "wf/b.sh", content: Buffer.from("echo B\n"), mode: 0o755 },
    ]);
    assert.equal((await sandbox.executeCommand!("cat wf/a.txt; ./wf/b.sh; stat -c %a wf/b.sh")).stdout, "AB\n755\n");
    const ac = new AbortController();
    ac.abort();
    await assert.rejects(sandbox.writeFiles!([{ path: "/work/x", content: "x" }], { abortSignal: ac.signal }), /abort/i);
  });
});

describe("processes", () => {
  const pm = () => sandbox.processes;

  test("spawn, wait, exit code; stdout and stderr accumulate; callbacks; getters", async () => {
    const outs: string[] = [];
    const errs: string[] = [];
    const h = await pm().spawn("echo hello; echo 'error msg' >&2; exit 42", { onStdout: (d) => outs.push(d), onStderr: (d) => errs.push(d) });
    assert.equal(typeof h.pid, "string");
    const r = await h.wait();
    assert.deepEqual([r.exitCode, r.success], [42, false]);
    assert.equal(r.stdout, "hello\n");
    assert.equal(r.stderr, "error msg\n");
    assert.equal(h.stdout, "hello\n");
    assert.equal(h.stderr, "error msg\n");
    assert.equal(outs.join(""), "hello\n");
    assert.equal(errs.join(""), "error msg\n");
    assert.equal(h.exitCode, 42);
    const again = await h.wait();
    assert.deepEqual([again.exitCode, again.stdout], [42, "hello\n"]);
  });

  test("exitCode is undefined while running; kill resolves true, then false", async () => {
    const h = await pm().spawn("sleep 60");
    assert.equal(h.exitCode, undefined);
    assert.equal(await h.kill(), true);
    const r = await h.wait();
    assert.equal(r.success, false);
    assert.equal(r.killed, true);
    assert.notEqual(h.exitCode, undefined);
    assert.equal(await h.kill(), false);
  });

  test("sendStdin into head -1; after exit it throws; closeStdin sends EOF", async () => {
    const h = await pm().spawn("head -1");
    await h.sendStdin("hello from stdin\n");
    const r = await h.wait();
    assert.equal(r.stdout, "hello from stdin\n");
    await assert.rejects(h.sendStdin("late"));
    const cat = await pm().spawn("cat");
    await cat.sendStdin("abc");
    await cat.closeStdin();
    const c = await cat.wait();
    assert.deepEqual([c.exitCode, c.stdout], [0, "abc"]);
    await assert.rejects(cat.closeStdin());
    const ignored = await pm().spawn("sleep 5", { stdinMode: "ignore" });
    await assert.rejects(ignored.sendStdin("x"), /stdin/);
    await ignored.kill();
  });

  test("list shows running and exited processes with their command", async () => {
    const run = await pm().spawn("sleep 60");
    const done = await pm().spawn("echo done");
    await done.wait();
    const list = await pm().list();
    const r = list.find((p) => p.pid === run.pid);
    const d = list.find((p) => p.pid === done.pid);
    assert.equal(r?.running, true);
    assert.match(r?.command ?? "", /sleep 60/);
    assert.equal(d?.running, false);
    assert.equal(d?.exitCode, 0);
    await run.kill();
    await run.wait();
  });

  test("get by pid; an exited process is returned once, then pruned; unknown pids", async () => {
    const h = await pm().spawn("sleep 60");
    const got = await pm().get(h.pid);
    assert.equal(got, h);
    const quick = await pm().spawn("echo quick");
    await quick.wait();
    const first = await pm().get(quick.pid);
    assert.equal(first?.pid, quick.pid);
    assert.equal(first?.exitCode, 0);
    assert.equal(await pm().get(quick.pid), undefined);
    assert.equal(await pm().get("p999999"), undefined);
    assert.equal(await pm().get(99999 as unknown as string), undefined);
    assert.equal(await pm().kill("p999999"), false);
    assert.equal(await pm().kill(h.pid), true, "kill through the manager");
    const r = await h.wait();
    assert.equal(r.success, false);
  });

  test("a process exits without anyone waiting: get() sees it", async () => {
    const h = await pm().spawn("sleep 0.2; exit 3");
    await waitFor(async () => (await pm().get(h.pid))?.exitCode === 3, T, "exit 3");
  });

  test("env: the sandbox's, overridden per spawn", async () => {
    const h = await pm().spawn("printenv SANDBOX_VAR");
    assert.equal((await h.wait()).stdout, "from-sandbox\n");
    const o = await pm().spawn("sh -c 'echo $SANDBOX_VAR $SPAWN_VAR'", { env: { SANDBOX_VAR: "overridden", SPAWN_VAR: "added" } });
    assert.equal((await o.wait()).stdout, "overridden added\n");
  });

  test("reader and writer streams", async () => {
    const h = await pm().spawn("echo stream-test");
    const chunks: string[] = [];
    h.reader.on("data", (c: Buffer) => chunks.push(c.toString()));
    const ended = new Promise<void>((r) => h.reader.on("end", () => r()));
    await h.wait();
    await ended;
    assert.equal(chunks.join(""), "stream-test\n");
    const w = await pm().spawn("head -1");
    await new Promise<void>((resolve, reject) => w.writer.write("writer-test\n", (e) => (e ? reject(e) : resolve())));
    assert.equal((await w.wait()).stdout, "writer-test\n");
    const cat = await pm().spawn("cat");
    cat.writer.end("piped");
    assert.equal((await cat.wait()).stdout, "piped");
  });

  test("abort before and after spawn kills it", async () => {
    const pre = new AbortController();
    pre.abort();
    const a = await pm().spawn("sleep 60", { abortSignal: pre.signal });
    const ra = await a.wait();
    assert.equal(ra.success, false);
    const post = new AbortController();
    const b = await pm().spawn("echo started; sleep 60", { abortSignal: post.signal });
    await waitFor(() => b.stdout === "started\n", T, "output");
    post.abort();
    const t0 = Date.now();
    const rb = await b.wait();
    assert.equal(rb.success, false);
    assert.equal(rb.stdout, "started\n");
    assert.ok(Date.now() - t0 < 5000);
  });

  test("spawn timeout: exit 124, timedOut", async () => {
    const h = await pm().spawn("sleep 60", { timeout: 200 });
    const r = await h.wait();
    assert.equal(r.exitCode, 124);
    assert.equal(r.timedOut, true);
    assert.equal(r.killed, true);
  });

  test("many processes tracked independently", async () => {
    const hs = await Promise.all(["first", "second", "third"].map((w) => pm().spawn(`echo ${w}`)));
    const long = await pm().spawn("sleep 60");
    assert.equal(new Set([...hs, long].map((h) => h.pid)).size, 4);
    const rs = await Promise.all(hs.map((h) => h.wait()));
    assert.deepEqual(
      rs.map((r) => r.stdout.trim()),
      ["first", "second", "third"],
    );
    assert.equal(long.exitCode, undefined);
    await long.kill();
  });
});

describe("reconnection", () => {
  test("same id across stop/start; /tmp survives; three cycles", async () => {
    const s = newSandbox();
    await s._start();
    const id = s.id;
    await s.executeCommand!("echo kept > /tmp/reconnect.txt");
    for (let i = 0; i < 3; i++) {
      await s._stop();
      assert.equal(s.status, "stopped");
      await s._start();
      assert.equal(s.id, id);
      assert.equal((await s.executeCommand!("cat /tmp/reconnect.txt")).stdout, "kept\n");
    }
    await s._destroy();
  });

  test("concurrent stops and starts settle", async () => {
    const s = newSandbox();
    await s._start();
    await Promise.all([s._stop(), s._stop(), s._stop()]);
    assert.equal(s.status, "stopped");
    await Promise.all([s._start(), s._start(), s.ensureRunning()]);
    assert.equal(s.status, "running");
    assert.equal((await s.executeCommand!("echo ok")).stdout, "ok\n");
    await s._destroy();
  });

  test("executeCommand on a stopped sandbox starts it", async () => {
    const s = newSandbox();
    await s._start();
    await s.executeCommand!("echo x > /work/x");
    await s._stop();
    const r = await s.executeCommand!("cat /work/x");
    assert.equal(r.stdout, "x\n");
    assert.equal(s.status, "running");
    await s._destroy();
  });

  test("a new sandbox object with the same id connects to the same session", async () => {
    const s = newSandbox();
    await s._start();
    await s.executeCommand!("echo shared > shared.txt");
    const h = await s.processes.spawn("echo bg; sleep 60");
    await waitFor(() => h.stdout === "bg\n", T, "output");
    const again = newSandbox({ id: s.id });
    assert.deepEqual(await again._start(), { outcome: "connected" });
    assert.equal((await again.executeCommand!("cat shared.txt")).stdout, "shared\n");
    const seen = await again.processes.get(h.pid);
    assert.ok(seen instanceof SandpoolProcessHandle);
    assert.equal(seen.stdout, "bg\n");
    assert.equal(await again.processes.kill(h.pid), true);
    await s._destroy();
  });

  test("recovery after the session was stopped or destroyed from outside", async () => {
    const s = newSandbox();
    await s._start();
    await s.executeCommand!("echo before > /work/f");
    await admin.session(s.id).stop();
    const r1 = await s.executeCommand!("cat /work/f");
    assert.equal(r1.stdout, "before\n", "resumed with its files");
    await admin.session(s.id).destroy();
    const r2 = await s.executeCommand!("echo after-destroy");
    assert.equal(r2.stdout, "after-destroy\n");
    assert.equal(s.status, "running");
    await s._destroy();
  });

  test("the daemon restarts: the session comes back with its files", async () => {
    const s = newSandbox();
    await s._start();
    await s.executeCommand!("echo survives > /work/d.txt");
    await dep.daemon.stop();
    await dep.daemon.start();
    await waitFor(async () => ["running", "stopped"].includes((await admin.session(s.id).record())?.state ?? ""), T, "the session's record after the restart");
    const r = await s.executeCommand!("cat /work/d.txt");
    assert.equal(r.stdout, "survives\n");
    await s._destroy();
  });
});
