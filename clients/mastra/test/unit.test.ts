/**
 * The parts that need no daemon: result mapping, quoting, construction of the sandbox and the
 * filesystem, and what they do before touching Redis.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import { MastraFilesystem, MastraSandbox, SandboxProcessManager } from "@mastra/core/workspace";
import { Client, Result } from "sandpool";

import { commandLine, exitCodeOf, processExitCode, SandpoolFilesystem, SandpoolSandbox, shellQuote } from "../src/index.js";
import { commandResultOf, mergeEnv, retainNewest, templateNameFrom } from "../src/results.js";

const NOWHERE = "redis://127.0.0.1:1";

describe("results", () => {
  const cases: [string, Partial<ConstructorParameters<typeof Result>[0]>, number][] = [
    ["exit 0", { outcome: "exit", exitCode: 0 }, 0],
    ["exit 42", { outcome: "exit", exitCode: 42 }, 42],
    ["timeout", { outcome: "timeout", signal: 9, timedOut: true, killed: true }, 124],
    ["cancelled", { outcome: "cancelled", signal: 9, killed: true }, 130],
    ["signal 15", { outcome: "signal", signal: 15 }, 143],
    ["memory", { outcome: "memory_limit", signal: 9 }, 137],
    ["output", { outcome: "output_limit", signal: 9 }, 137],
    ["cpu", { outcome: "cpu_limit", signal: 9 }, 137],
    ["pids with a code", { outcome: "pids_limit", exitCode: 2 }, 2],
    ["pids killed", { outcome: "pids_limit", signal: 9 }, 137],
    ["seccomp", { outcome: "seccomp", signal: 31 }, 159],
    ["disk with a code", { outcome: "disk_limit", exitCode: 1 }, 1],
    ["disk by SIGXFSZ", { outcome: "disk_limit", signal: 25 }, 153],
    ["exec_failed", { outcome: "error", exitCode: 127 }, 127],
    ["rejected", { outcome: "error" }, 125],
    ["worker lost", { outcome: "worker_lost" }, 125],
  ];
  for (const [name, fields, code] of cases) {
    test(`exit code of ${name} is ${code}`, () => {
      assert.equal(exitCodeOf(new Result({ id: "x", ...fields } as ConstructorParameters<typeof Result>[0])), code);
    });
  }

  test("a command result: success, flags, the error message where stderr is empty", () => {
    const ok = commandResultOf(new Result({ id: "x", outcome: "exit", exitCode: 0, stdout: Buffer.from("hi\n"), execTimeUs: 2500 }), {
      command: "echo hi",
      args: [],
      startedAt: Date.now(),
    });
    assert.deepEqual(ok, { success: true, exitCode: 0, stdout: "hi\n", stderr: "", executionTimeMs: 3, command: "echo hi", args: [] });
    const t = commandResultOf(new Result({ id: "x", outcome: "timeout", timedOut: true, killed: true, signal: 9 }), {
      command: "sleep 9",
      args: [],
      startedAt: Date.now(),
    });
    assert.deepEqual([t.exitCode, t.success, t.timedOut, t.killed], [124, false, true, true]);
    const e = commandResultOf(
      new Result({ id: "x", outcome: "error", exitCode: 126, error: { code: "exec_failed", message: "cwd: no such directory", retryable: false } }),
      { command: "pwd", args: [], startedAt: Date.now() },
    );
    assert.equal(e.stderr, "exec_failed: cwd: no such directory\n");
    const trunc = commandResultOf(
      new Result({ id: "x", outcome: "output_limit", stdout: Buffer.from("abc"), stdoutTruncated: true, stdoutDroppedBytes: 100 }),
      { command: "yes", args: [], startedAt: Date.now(), maxRetainedBytes: 2 },
    );
    assert.deepEqual([trunc.stdout, trunc.stdoutTruncated, trunc.stdoutDroppedBytes], ["bc", true, 101]);
  });

  test("retainNewest cuts at a character boundary", () => {
    assert.deepEqual(retainNewest(Buffer.from("abcdef"), 3), { text: "def", dropped: 3 });
    assert.deepEqual(retainNewest(Buffer.from("abc"), undefined), { text: "abc", dropped: 0 });
    assert.deepEqual(retainNewest(Buffer.from("aéb"), 2), { text: "b", dropped: 3 });
    assert.deepEqual(retainNewest(Buffer.from("x"), 0), { text: "", dropped: 1 });
  });

  test("processExitCode", () => {
    assert.equal(processExitCode(3, null), 3);
    assert.equal(processExitCode(null, 9), 137);
  });
});

describe("quoting and helpers", () => {
  test("shellQuote and commandLine", () => {
    assert.equal(shellQuote("simple-arg_1.txt"), "simple-arg_1.txt");
    assert.equal(shellQuote("hello world"), "'hello world'");
    assert.equal(shellQuote("it's"), "'it'\\''s'");
    assert.equal(shellQuote(""), "''");
    assert.equal(shellQuote("$HOME;rm -rf /"), "'$HOME;rm -rf /'");
    assert.equal(commandLine("echo", ["a b", "c"]), "echo 'a b' c");
    assert.equal(commandLine("ls -la | wc -l"), "ls -la | wc -l");
  });

  test("mergeEnv: later layers win, undefined removes", () => {
    assert.deepEqual(mergeEnv({ A: "1", B: "2" }, { B: "3", C: undefined }, { A: undefined }), { B: "3" });
  });

  test("templateNameFrom", () => {
    assert.equal(templateNameFrom("agent:1/x"), "agent-1-x");
    assert.equal(templateNameFrom("a".repeat(80)).length, 64);
  });
});

describe("construction (no I/O)", () => {
  test("a sandbox is a MastraSandbox with a SandboxProcessManager", async () => {
    const s = new SandpoolSandbox({ redisUrl: NOWHERE });
    assert.ok(s instanceof MastraSandbox);
    assert.ok(s.processes instanceof SandboxProcessManager);
    assert.equal(s.processes.sandbox, s);
    assert.equal(s.status, "pending");
    assert.equal(s.provider, "sandpool");
    assert.equal(s.name, "SandpoolSandbox");
    assert.equal(s.workingDirectory, "/work");
    assert.equal(s.supportsCheckpoints, true);
    assert.match(s.id, /^mastra-/);
    assert.equal(s.session.id, s.id);
    assert.notEqual(new SandpoolSandbox({ redisUrl: NOWHERE }).id, s.id);
    assert.equal(s.checkpointName, `mastra-${s.id}`.slice(0, 64));
    await s.close();
  });

  test("an already-aborted command returns at once without connecting", async () => {
    const s = new SandpoolSandbox({ redisUrl: NOWHERE, clientOptions: { retryWindowMs: 100 } });
    const ac = new AbortController();
    ac.abort();
    const r = await s.executeCommand("echo", ["x"], { abortSignal: ac.signal });
    assert.deepEqual([r.success, r.killed, r.exitCode, r.command], [false, true, 130, "echo x"]);
    assert.equal(s.status, "pending");
    await s.close();
  });

  test("a shared client is not closed by the sandbox", async () => {
    const c = new Client({ url: NOWHERE });
    const s = new SandpoolSandbox({ client: c, id: "shared-1" });
    assert.equal(s.client, c);
    await s.close();
    assert.doesNotThrow(() => c.session("still-open"));
    const clone = s.clone({ id: "shared-2", idleTimeoutMinutes: 5, env: { A: "1" } });
    assert.equal(clone.client, c);
    assert.equal(clone.id, "shared-2");
    assert.deepEqual(clone.getEnv(), { A: "1" });
    await c.close();
  });

  test("a filesystem is a MastraFilesystem on the sandbox's session", () => {
    const s = new SandpoolSandbox({ redisUrl: NOWHERE, id: "fs-1", workingDirectory: "/work/app" });
    const fs = new SandpoolFilesystem({ sandbox: s });
    assert.ok(fs instanceof MastraFilesystem);
    assert.equal(fs.provider, "sandpool");
    assert.equal(fs.root, "/work/app");
    assert.equal(fs.resolve("a/b.txt"), "/work/app/a/b.txt");
    assert.equal(fs.resolve("../x"), "/work/x");
    assert.equal(fs.resolve("/etc/hosts"), "/etc/hosts");
    assert.equal(new SandpoolFilesystem({ sandbox: s, basePath: "/data" }).resolve("f"), "/data/f");
    assert.equal(s.resolveCwd(undefined), "/work/app");
    assert.equal(s.resolveCwd("sub"), "/work/app/sub");
    assert.equal(s.resolveCwd("/tmp"), "/tmp");
    void s.close();
  });
});

describe("package", () => {
  // build-test/test/unit.test.js -> the package's root.
  const root = new URL("../../", import.meta.url);
  const json = (path: string): { engines?: { node?: string }; packages?: Record<string, { engines?: { node?: string } }> } =>
    JSON.parse(readFileSync(new URL(path, root), "utf8"));

  test("the Node engine is the one @mastra/core declares, in package.json and its lock file", () => {
    const core = json("node_modules/@mastra/core/package.json").engines?.node;
    assert.ok(core, "@mastra/core declares a Node engine");
    assert.equal(json("package.json").engines?.node, core);
    assert.equal(json("package-lock.json").packages?.[""]?.engines?.node, core);
  });
});
