/**
 * A separate process for test/map.test.ts: `node map_child.js <redis-url> <tag>` maps six
 * `sleep 600` jobs (ids `<tag>-0` ... `<tag>-5`, three at a time) and stops the map on SIGINT
 * (Ctrl-C) by aborting its signal: the way a program makes Ctrl-C cancel what is in flight.
 * Exits 130 once the map has stopped (and cancelled its jobs).
 */

import { Client } from "../../src/index.js";

async function main(): Promise<void> {
  const [url, tag] = process.argv.slice(2);
  if (!url || !tag) throw new Error("usage: map_child.js <redis-url> <tag>");
  const client = new Client(url);
  const ac = new AbortController();
  process.once("SIGINT", () => ac.abort(new Error("interrupted")));
  const jobs = Array.from({ length: 6 }, (_, i) => ({ id: `${tag}-${i}`, shell: "sleep 600" }));
  try {
    for await (const r of client.map(jobs, { concurrency: 3, signal: ac.signal })) console.log(r.id);
  } catch (e) {
    if (!ac.signal.aborted) throw e;
    console.log("stopped");
    process.exitCode = 130;
  } finally {
    await client.close();
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
