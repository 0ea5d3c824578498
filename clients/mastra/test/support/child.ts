/**
 * A separate client process for test/restart.test.ts: `node child.js <redis-url> <session-id>
 * first|second [pid]`. Prints one JSON line with what it saw, closes its connections and exits.
 */

import { SandpoolFilesystem, SandpoolSandbox } from "../../src/index.js";

async function main(): Promise<void> {
  const [url, id, phase, pid] = process.argv.slice(2);
  if (!url || !id || !phase) throw new Error("usage: child.js <redis-url> <session-id> first|second [pid]");
  const sandbox = new SandpoolSandbox({ id, redisUrl: url, labels: { test: "restart" } });
  const fs = new SandpoolFilesystem({ sandbox });
  const start = await sandbox._start();
  if (phase === "first") {
    await fs.writeFile("state.txt", "from the first process\n");
    await sandbox.executeCommand!("echo tmp-state > /tmp/state");
    const h = await sandbox.processes.spawn("echo bg-start; sleep 300");
    for (let i = 0; i < 200 && h.stdout === ""; i++) await new Promise((r) => setTimeout(r, 50));
    console.log(JSON.stringify({ outcome: start?.outcome, pid: h.pid, stdout: h.stdout }));
    await sandbox.close(); // the session and its process go on
    return;
  }
  const file = await fs.readFile("state.txt", { encoding: "utf-8" });
  const tmp = (await sandbox.executeCommand!("cat /tmp/state")).stdout;
  const listed = (await sandbox.processes.list()).find((p) => p.pid === pid);
  const h = pid ? await sandbox.processes.get(pid) : undefined;
  const seen = { running: h?.exitCode === undefined, stdout: h?.stdout, command: listed?.command, listedRunning: listed?.running };
  const killed = pid ? await sandbox.processes.kill(pid) : false;
  await sandbox._destroy();
  console.log(JSON.stringify({ outcome: start?.outcome, file, tmp, ...seen, killed }));
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
