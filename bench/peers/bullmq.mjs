// BullMQ peer: a Queue and a Worker (in a child process, concurrency 8) on the benchmark's
// private Redis; the worker runs child_process.execFile('/bin/echo', ['hi']) and returns stdout.
// Latency = queue.add() -> job.waitUntilFinished(queueEvents) resolves (the way a BullMQ user
// waits for a result).
//   node bullmq.mjs --socket /path/redis.sock [--n 300] [--warmup 30] [--tp-n 1000] [--inflight 8]
import { fork } from 'node:child_process';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { emit, notMeasured, intArg, strArg, inFlight, now } from './common.mjs';

const SOCKET = strArg('socket', '');
const PORT = intArg('port', 0);
const connection = SOCKET ? { path: SOCKET, maxRetriesPerRequest: null } : { host: '127.0.0.1', port: PORT, maxRetriesPerRequest: null };
const QNAME = 'sp-bench-bullmq';
const COMMAND = "execFile('/bin/echo', ['hi'])";
const SYSTEM = 'bullmq';

let bullmq;
try {
  bullmq = await import('bullmq');
} catch (e) {
  notMeasured(SYSTEM, 'none', 'latency', COMMAND, `cannot load bullmq: ${e.message}`);
  process.exit(0);
}
const { Queue, Worker, QueueEvents } = bullmq;
// BullMQ 6 no longer loads ioredis itself from ESM: hand it constructed clients, one each.
const { default: IORedis } = await import('ioredis');
const redis = () => new IORedis(connection);

if (process.argv.includes('--worker')) {
  const run = promisify(execFile);
  const worker = new Worker(QNAME, async () => (await run('/bin/echo', ['hi'])).stdout,
    { connection: redis(), concurrency: intArg('concurrency', 8) });
  await worker.waitUntilReady();
  process.send?.('ready');
  process.on('message', async (m) => {
    if (m === 'stop') { setTimeout(() => process.exit(0), 3000).unref(); await worker.close().catch(() => {}); process.exit(0); }
  });
} else {
  if (!SOCKET && !PORT) {
    notMeasured(SYSTEM, 'none', 'latency', COMMAND, 'no --socket or --port given');
    process.exit(0);
  }
  const N = intArg('n', 300);
  const WARMUP = intArg('warmup', 30);
  const TP_N = intArg('tp-n', 1000);
  const K = intArg('inflight', 8);
  let child;
  const queue = new Queue(QNAME, { connection: redis() });
  const events = new QueueEvents(QNAME, { connection: redis() });
  try {
    await queue.obliterate({ force: true }).catch(() => {});
    await events.waitUntilReady();
    child = fork(new URL(import.meta.url).pathname, [...process.argv.slice(2), '--worker', '--concurrency', String(Math.max(K, 1))], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
    await new Promise((res, rej) => { child.once('message', res); child.once('exit', (c) => rej(new Error(`worker exited ${c}`))); });
    const opts = { removeOnComplete: true, removeOnFail: true };
    const call = async () => {
      const job = await queue.add('echo', {}, opts);
      const out = await job.waitUntilFinished(events, 30000);
      return out === 'hi\n' ? true : `result ${JSON.stringify(out)}`;
    };
    for (let i = 0; i < WARMUP; i++) await call();
    const samples = [];
    let errors = 0;
    let firstError;
    for (let i = 0; i < N; i++) {
      const t = now();
      let ok;
      try { ok = await call(); } catch (e) { ok = String(e?.message ?? e); }
      samples.push(now() - t);
      if (ok !== true) { errors += 1; firstError ??= ok; }
    }
    emit({ system: SYSTEM, variant: 'none', mode: 'latency', command: COMMAND, samples, errors, note: firstError });
    if (K > 0 && TP_N > 0) {
      await inFlight(call, K, Math.min(WARMUP * 2, TP_N));
      const r = await inFlight(call, K, TP_N);
      emit({ system: SYSTEM, variant: 'none', mode: 'throughput', command: COMMAND, inflight: K, samples: r.samples, wall_s: r.wall_s, errors: r.errors, note: r.firstError });
    }
  } catch (e) {
    notMeasured(SYSTEM, 'none', 'latency', COMMAND, `error: ${e?.message ?? e}`);
  } finally {
    if (child && child.exitCode === null) {
      child.send('stop');
      await new Promise((res) => { const t = setTimeout(() => { child.kill(); res(); }, 5000); child.once('exit', () => { clearTimeout(t); res(); }); });
    }
    const bounded = (p) => Promise.race([p.catch(() => {}), new Promise((res) => setTimeout(res, 3000))]);
    await bounded(queue.obliterate({ force: true }));
    await bounded(events.close());
    await bounded(queue.close());
    // The ioredis clients we handed in are ours to end; exit rather than wait for idle handles.
    process.exit(0);
  }
}
