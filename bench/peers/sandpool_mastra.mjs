// sandpool through its Mastra provider, measured exactly like mastra.mjs measures LocalSandbox:
// executeCommand('echo', ['hi']) and executeCommand('/usr/bin/python3', ['-c', 'print(1)']) in one
// SandpoolSandbox (a sandpool session), plus the workspace filesystem: writeFile + readFile of
// 1 MiB, and a new sandbox's start. Needs clients/mastra built (npm ci && npm run build there).
//   node sandpool_mastra.mjs --redis URL [--n 300] [--py-n 150] [--warmup 30] [--tp-n 600] [--inflight 8]
import { emit, notMeasured, intArg, strArg, inFlight, now } from './common.mjs';

const N = intArg('n', 300);
const WARMUP = intArg('warmup', 30);
const TP_N = intArg('tp-n', 600);
const K = intArg('inflight', 8);
const PY_N = intArg('py-n', Math.max(20, Math.floor(N / 2)));
const REDIS_URL = strArg('redis', process.env.SANDPOOL_REDIS_URL);
const system = 'sandpool-mastra';
const variant = 'session';

let mod;
try {
  mod = await import(new URL('../../clients/mastra/dist/index.js', import.meta.url).href);
} catch (e) {
  notMeasured(system, variant, 'latency', "executeCommand('echo', ['hi'])", `cannot load @sandpool/mastra (build clients/mastra): ${e.message}`);
  process.exit(0);
}
const { SandpoolSandbox, SandpoolFilesystem } = mod;

async function measure(label, n, call, tp) {
  const probe = await call();
  if (probe !== true) {
    notMeasured(system, variant, 'latency', label, `probe failed: ${probe}`);
    return;
  }
  for (let i = 0; i < Math.min(WARMUP, n); i++) await call();
  const samples = [];
  let errors = 0;
  let firstError;
  for (let i = 0; i < n; i++) {
    const t = now();
    const ok = await call();
    samples.push(now() - t);
    if (ok !== true) { errors += 1; firstError ??= ok; }
  }
  emit({ system, variant, mode: 'latency', command: label, samples, errors, note: firstError });
  if (tp && K > 0 && TP_N > 0) {
    await inFlight(call, K, Math.min(WARMUP * 2, TP_N));
    const r = await inFlight(call, K, TP_N);
    emit({ system, variant, mode: 'throughput', command: label, inflight: K, samples: r.samples, wall_s: r.wall_s, errors: r.errors, note: r.firstError });
  }
}

// A new sandbox's start (create of a session), one after another, each destroyed after.
{
  const samples = [];
  for (let i = 0; i < Math.min(N, 60); i++) {
    const sb = new SandpoolSandbox({ redisUrl: REDIS_URL });
    const t = now();
    await sb._start();
    samples.push(now() - t);
    await sb._destroy();
  }
  emit({ system, variant, mode: 'latency', command: 'new SandpoolSandbox()._start()', samples });
}

const sb = new SandpoolSandbox({ redisUrl: REDIS_URL });
try {
  await sb._start();
  const exec = (cmd, args, expect) => async () => {
    const r = await sb.executeCommand(cmd, args);
    return r.exitCode === 0 && r.stdout === expect ? true : `exit ${r.exitCode} stdout=${JSON.stringify(r.stdout)}`;
  };
  await measure("executeCommand('echo', ['hi'])", N, exec('echo', ['hi'], 'hi\n'), true);
  await measure("executeCommand('/usr/bin/python3', ['-c', 'print(1)'])", PY_N, exec('/usr/bin/python3', ['-c', 'print(1)'], '1\n'), false);
  const fs = new SandpoolFilesystem({ sandbox: sb });
  const mib = Buffer.alloc(1 << 20, 7);
  await measure('filesystem writeFile + readFile, 1 MiB', Math.min(N, 100), async () => {
    await fs.writeFile('/work/bench.bin', mib);
    const back = await fs.readFile('/work/bench.bin');
    return back.length === mib.length ? true : `read ${back.length} bytes`;
  }, false);
} catch (e) {
  notMeasured(system, variant, 'latency', "executeCommand('echo', ['hi'])", `error: ${e?.message ?? e}`);
} finally {
  try { await sb._destroy(); } catch { /* ignore */ }
}
process.exit(0);
