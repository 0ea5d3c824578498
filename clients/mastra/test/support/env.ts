/**
 * The deployment the Mastra tests run against: a private redis-server and a real sandpoold with
 * sessions (sandpool/testing). Fails at once, saying why, when the daemon has no sessions.
 */

import { randomBytes } from "node:crypto";

import { Client } from "sandpool";
import { Deployment, requireSessions } from "sandpool/testing";

export { sleep, waitFor } from "sandpool/testing";

export async function startDeployment(): Promise<Deployment> {
  requireSessions();
  return new Deployment({ workers: 2 }).start();
}

/** A fresh session id for a test. */
export function sessionId(tag: string): string {
  return `mastra-${tag}-${randomBytes(4).toString("hex")}`;
}

/** Destroy every session left in the deployment, then close `client`. */
export async function destroyAll(client: Client): Promise<void> {
  for (const r of await client.listSessions().catch(() => [])) {
    await client.session(r.id).destroy().catch(() => undefined);
  }
  await client.close();
}
