// BullMQ peer of bench/batch_bench.py: N no-op jobs added with Queue.addBulk (1000 per call),
// processed by a Worker in a child process (a no-op processor, concurrency 1000: the stand-in
// for a fleet), and collected by QueueEvents 'completed' events (how a BullMQ client hears of
// completions). Prints one JSON line: submission and collection rates, this process's CPU.
//   node bullmq_bulk.mjs --socket /path/redis.sock --n 100000
import { fork } from 'node:child_process';
import { intArg, strArg } from './common.mjs';

const SOCKET = strArg('socket', '');
const N = intArg('n', 100000);
const QNAME = 'sp-bench-bulk';
const { Queue, Worker, QueueEvents } = await import('bullmq');
const { default: IORedis } = await import('ioredis');
const redis = () => new IORedis({ path: SOCKET, maxRetriesPerRequest: null });
const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };

if (process.argv.includes('--worker')) {
  const worker = new Worker(QNAME, async () => 'ok', { connection: redis(), concurrency: 1000 });
  await worker.waitUntilReady();
  process.send?.('ready');
  process.on('message', async () => { await worker.close().catch(() => {}); process.exit(0); });
} else {
  const queue = new Queue(QNAME, { connection: redis() });
  const events = new QueueEvents(QNAME, { connection: redis() });
  await queue.obliterate({ force: true }).catch(() => {});
  await events.waitUntilReady();
  let completed = 0;
  let allDone;
  const finished = new Promise((r) => { allDone = r; });
  events.on('completed', () => { if (++completed === N) allDone(); });
  const child = fork(new URL(import.meta.url).pathname, [...process.argv.slice(2), '--worker'],
    { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  await new Promise((res) => child.once('message', res));
  const t0 = performance.now(); const c0 = cpu();
  for (let i = 0; i < N; i += 1000) {
    const batch = [];
    for (let k = i; k < Math.min(N, i + 1000); k++) batch.push({ name: 'true', data: {}, opts: { removeOnComplete: true } });
    await queue.addBulk(batch);
  }
  const tSub = (performance.now() - t0) / 1000;
  await finished;
  const wall = (performance.now() - t0) / 1000;
  const c = cpu() - c0;
  console.log(JSON.stringify({ name: 'BullMQ addBulk + QueueEvents (no-op Worker, concurrency 1000, in a child process)',
    n: N, ok: completed, wall_s: wall, client_cpu_s: c, submitted_per_s: N / tSub, collected_per_s: N / wall }));
  child.send('stop');
  await Promise.all([queue.close(), events.close()]);
  process.exit(0);
}
