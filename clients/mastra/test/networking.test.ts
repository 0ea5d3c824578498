/**
 * `networking.getPortUrl(port)` of SandpoolSandbox with the real @mastra/core, against a real
 * sandpoold inside a private network namespace (sandpool/testing: loopback only, nothing leaves
 * this machine). A server the sandbox runs is fetched through the URL from inside the namespace;
 * a template without `expose = on` gives `null`.
 */

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { supportsNetworking, Workspace } from "@mastra/core/workspace";
import { Client } from "sandpool";
import { Deployment, NETNS_PREVIEW_ARGS, requireSessions } from "sandpool/testing";

import { SandpoolSandbox } from "../src/index.js";
import { destroyAll, sessionId, waitFor } from "./support/env.js";

const CONFIG = `[template web]
runtime = sh
expose = on

[template closed]
runtime = sh
`;

let dep: Deployment;
let admin: Client;
const made: SandpoolSandbox[] = [];

function newSandbox(template: string): SandpoolSandbox {
  const s = new SandpoolSandbox({ id: sessionId("net"), redisUrl: dep.url, template });
  made.push(s);
  return s;
}

before(async () => {
  requireSessions();
  dep = await new Deployment({ workers: 1, netns: true, config: CONFIG, extra: [...NETNS_PREVIEW_ARGS] }).start();
  admin = new Client({ url: dep.url });
});

after(async () => {
  for (const s of made) await s.close().catch(() => undefined);
  if (admin) await destroyAll(admin);
  await dep?.stop();
});

test("getPortUrl exposes a server of the sandbox: its URL serves it until the port is closed", async () => {
  const netns = dep.netns!;
  const sandbox = newSandbox("web");
  const workspace = new Workspace({ sandbox });
  assert.equal(workspace.sandbox, sandbox);
  assert.ok(supportsNetworking(sandbox), "the sandbox has the networking capability");
  await sandbox._start();

  await sandbox.writeFiles([{ path: "/work/site/index.html", content: "hello from mastra\n" }]);
  const server = await sandbox.processes.spawn("exec python3 -m http.server 8000 --bind 127.0.0.1", { cwd: "/work/site" });
  await waitFor(
    async () =>
      (await sandbox.executeCommand!("python3", ["-c", "import socket; socket.create_connection(('127.0.0.1', 8000), 5)"])).exitCode === 0,
    30000,
    "the sandbox's server",
    200,
  );

  const url = await sandbox.networking.getPortUrl(8000);
  assert.ok(url !== null);
  assert.match(url, /^http:\/\/127\.0\.0\.1:\d+\/[a-z2-7]{26}\/$/);
  assert.equal(await sandbox.networking.getPortUrl(8000), url, "the same URL each time");
  assert.deepEqual(await netns.fetch(`${url}index.html`), { status: 200, body: "hello from mastra\n" });
  assert.deepEqual(
    (await sandbox.session.ports()).map((p) => [p.port, p.url]),
    [[8000, url]],
  );

  await sandbox.closePort(8000);
  assert.equal((await netns.fetch(`${url}index.html`)).status, 404);
  await server.kill();

  // Stopped: no URL, and asking for one does not start the sandbox.
  await sandbox._stop();
  assert.equal(sandbox.status, "stopped");
  assert.equal(await sandbox.networking.getPortUrl(8000), null);
  assert.equal(sandbox.status, "stopped");
  await sandbox._destroy();
});

test("getPortUrl is null for a template without expose, and for a sandbox not started", async () => {
  const closed = newSandbox("closed");
  await closed._start();
  assert.equal(await closed.networking.getPortUrl(8000), null);
  await closed._destroy();

  const fresh = newSandbox("web");
  assert.equal(await fresh.networking.getPortUrl(8000), null);
  assert.equal(fresh.status, "pending", "getPortUrl starts nothing");
  assert.equal(await fresh.session.record(), null);
});
