/**
 * Reconnection after the client process restarts: one process creates a sandbox, writes files
 * and starts a background process, then exits; a second process constructs a sandbox with the
 * same id and finds the files, /tmp, and the process (its output, its command), then kills it.
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, test } from "node:test";

import { Client } from "sandpool";
import type { Deployment } from "sandpool/testing";

import { destroyAll, sessionId, startDeployment } from "./support/env.js";

const run = promisify(execFile);
const CHILD = fileURLToPath(new URL("./support/child.js", import.meta.url));

let dep: Deployment;
let admin: Client;

before(async () => {
  dep = await startDeployment();
  admin = new Client({ url: dep.url });
});

after(async () => {
  if (admin) await destroyAll(admin);
  await dep?.stop();
});

async function child(...args: string[]): Promise<Record<string, unknown>> {
  const { stdout } = await run(process.execPath, [CHILD, dep.url, ...args], { timeout: 120_000 });
  const line = stdout.trim().split("\n").at(-1) ?? "";
  return JSON.parse(line) as Record<string, unknown>;
}

test("a second process reconnects by id and finds files, /tmp and the background process", async () => {
  const id = sessionId("restart");
  const first = await child(id, "first");
  assert.equal(first.outcome, "created");
  assert.match(String(first.pid), /^p\d+$/);
  assert.equal(first.stdout, "bg-start\n");
  // Between the two processes, nothing of the first one is left but the session.
  assert.equal((await admin.session(id).record())?.state, "running");

  const second = await child(id, "second", String(first.pid));
  assert.equal(second.outcome, "connected");
  assert.equal(second.file, "from the first process\n");
  assert.equal(second.tmp, "tmp-state\n");
  assert.equal(second.running, true);
  assert.equal(second.listedRunning, true);
  assert.equal(second.stdout, "bg-start\n");
  assert.match(String(second.command), /sleep 300/);
  assert.equal(second.killed, true);
  assert.equal((await admin.session(id).record())?.state ?? "destroyed", "destroyed");
});
