// Mastra LocalSandbox peer: executeCommand('echo', ['hi']) and executeCommand('/usr/bin/python3',
// ['-c', 'print(1)']) with isolation 'none' and 'bwrap'.
//   node mastra.mjs [--n 300] [--py-n 150] [--warmup 30] [--tp-n 600] [--inflight 8]
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { emit, notMeasured, intArg, inFlight, now } from './common.mjs';

const N = intArg('n', 300);
const WARMUP = intArg('warmup', 30);
const TP_N = intArg('tp-n', 600);
const K = intArg('inflight', 8);
const COMMAND = "executeCommand('echo', ['hi'])";

let LocalSandbox;
try {
  ({ LocalSandbox } = await import('@mastra/core/workspace'));
} catch (e) {
  for (const v of ['none', 'bwrap']) {
    notMeasured('mastra-localsandbox', v, 'latency', COMMAND, `cannot load @mastra/core: ${e.message}`);
  }
  process.exit(0);
}

// Commands run through executeCommand: echo (latency + throughput) and a cold python3 (latency).
const PY_N = intArg('py-n', Math.max(20, Math.floor(N / 2)));
const CMDS = [
  { label: COMMAND, cmd: 'echo', args: ['hi'], expect: 'hi\n', n: N, tp: true },
  { label: "executeCommand('/usr/bin/python3', ['-c', 'print(1)'])", cmd: '/usr/bin/python3', args: ['-c', 'print(1)'], expect: '1\n', n: PY_N, tp: false },
];

for (const isolation of ['none', 'bwrap']) {
  const dir = mkdtempSync(join(tmpdir(), 'sp-bench-mastra-'));
  const sb = new LocalSandbox({ workingDirectory: dir, isolation });
  const system = 'mastra-localsandbox';
  try {
    await sb._start();
    for (const c of CMDS) {
      const call = async () => {
        const r = await sb.executeCommand(c.cmd, c.args);
        return r.exitCode === 0 && r.stdout === c.expect ? true : `exit ${r.exitCode} stdout=${JSON.stringify(r.stdout)} stderr=${JSON.stringify(r.stderr).slice(0, 200)}`;
      };
      const probe = await call();
      if (probe !== true) {
        notMeasured(system, isolation, 'latency', c.label, `probe failed: ${probe}`);
        continue;
      }
      for (let i = 0; i < Math.min(WARMUP, c.n); i++) await call();
      const samples = [];
      let errors = 0;
      let firstError;
      for (let i = 0; i < c.n; i++) {
        const t = now();
        const ok = await call();
        samples.push(now() - t);
        if (ok !== true) { errors += 1; firstError ??= ok; }
      }
      emit({ system, variant: isolation, mode: 'latency', command: c.label, samples, errors, note: firstError });
      if (c.tp && K > 0 && TP_N > 0) {
        await inFlight(call, K, Math.min(WARMUP * 2, TP_N)); // warm-up at this concurrency
        const r = await inFlight(call, K, TP_N);
        emit({ system, variant: isolation, mode: 'throughput', command: c.label, inflight: K, samples: r.samples, wall_s: r.wall_s, errors: r.errors, note: r.firstError });
      }
    }
  } catch (e) {
    notMeasured(system, isolation, 'latency', COMMAND, `error: ${e?.message ?? e}`);
  } finally {
    try { await sb._destroy(); } catch { /* ignore */ }
    rmSync(dir, { recursive: true, force: true });
  }
}
