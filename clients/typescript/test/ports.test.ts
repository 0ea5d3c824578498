/**
 * Exposed ports (PROTOCOL.md section 15, "Ports"): `expose`, `unexpose`, `ports` against a real
 * sandpoold that runs inside a private network namespace (loopback only: nothing leaves this
 * machine), its preview proxy on 127.0.0.1 there. Preview URLs are fetched from inside the
 * namespace (`nsenter`), the way a browser on the daemon's host would.
 */

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, test } from "node:test";

import { Client, InvalidArgumentError, UnsupportedError, type Session } from "../src/index.js";
import { Deployment, NETNS_PREVIEW_ARGS, requireSessions, waitFor } from "../src/testing.js";

const CONFIG = `[template web]
runtime = sh
expose = on

[template closed]
runtime = sh
`;

let dep: Deployment;
let client: Client;

function sid(tag: string): string {
  return `ts-${tag}-${randomBytes(4).toString("hex")}`;
}

before(async () => {
  requireSessions();
  dep = await new Deployment({ workers: 1, netns: true, config: CONFIG, extra: [...NETNS_PREVIEW_ARGS] }).start();
  client = new Client({ url: dep.url, pollIntervalMs: 500, opTimeoutMs: 90000 });
});

after(async () => {
  if (client) {
    for (const r of await client.listSessions().catch(() => [])) {
      await client.session(r.id).destroy().catch(() => undefined);
    }
    await client.close();
  }
  await dep?.stop();
});

async function serve(s: Session, port: number): Promise<void> {
  await s.writeFile("/work/site/index.html", "hello from typescript\n");
  await s.spawn({ argv: ["python3", "-m", "http.server", String(port), "--bind", "127.0.0.1"] }, { cwd: "/work/site" });
  await waitFor(
    async () =>
      (await s.exec({ argv: ["python3", "-c", `import socket; socket.create_connection(("127.0.0.1", ${port}), 5)`] })).exitCode === 0,
    30000,
    "the session's server",
    200,
  );
}

test("a server is reached through its preview URL until it is unexposed", async () => {
  const netns = dep.netns!;
  const s = client.session(sid("ports"));
  await s.create({ template: "web" });
  try {
    await serve(s, 8000);
    assert.deepEqual(await s.ports(), []);

    const entry = await s.expose(8000);
    assert.equal(entry.port, 8000);
    assert.equal(entry.protocol, "http");
    assert.equal(entry.hostPort, null);
    assert.ok(entry.createdMs > Date.now() - 120000 && entry.createdMs <= Date.now() + 5000, `createdMs ${entry.createdMs}`);
    assert.match(entry.url, /^http:\/\/127\.0\.0\.1:\d+\/[a-z2-7]{26}\/$/);
    assert.deepEqual(await s.expose(8000, { protocol: "http" }), entry, "idempotent: the same entry");
    assert.deepEqual(await s.ports(), [entry]);

    assert.deepEqual(await netns.fetch(`${entry.url}index.html`), { status: 200, body: "hello from typescript\n" });
    // A port nothing listens on: 502. Entries come by port.
    const other = await s.expose(8001);
    assert.equal((await netns.fetch(other.url)).status, 502);
    assert.deepEqual((await s.ports()).map((p) => p.port), [8000, 8001]);

    await s.unexpose(8000);
    assert.equal((await netns.fetch(`${entry.url}index.html`)).status, 404);
    assert.deepEqual((await s.ports()).map((p) => p.port), [8001]);
    await s.unexpose(8000); // idempotent
    const again = await s.expose(8000);
    assert.notEqual(again.url, entry.url, "a new token");
    assert.equal((await netns.fetch(`${again.url}index.html`)).status, 200);

    // A stopped session's exposures end; a resumed one exposes anew.
    await s.stop();
    assert.equal((await netns.fetch(`${again.url}index.html`)).status, 404);
    await s.create({ template: "web" });
    assert.deepEqual(await s.ports(), []);
  } finally {
    await s.destroy();
  }
});

test("a template without expose answers UnsupportedError", async () => {
  const s = client.session(sid("closed"));
  await s.create({ template: "closed" });
  try {
    const err = await s.expose(8000).then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(err instanceof UnsupportedError, String(err));
    assert.equal(err.code, "unsupported");
    assert.equal(err.op, "expose");
    assert.equal(err.retryable, false);
    await assert.rejects(s.ports(), UnsupportedError);
  } finally {
    await s.destroy();
  }
});

test("ports are checked before anything is sent", async () => {
  const s = client.session(sid("bad")); // no such session: a bad port fails first
  for (const bad of [0, 65536, -1, 80.5, Number.NaN, "80", null]) {
    await assert.rejects(s.expose(bad as number), InvalidArgumentError);
    await assert.rejects(s.unexpose(bad as number), InvalidArgumentError);
  }
  await assert.rejects(s.expose(8000, { protocol: "tcp" as "http" }), InvalidArgumentError);
});
