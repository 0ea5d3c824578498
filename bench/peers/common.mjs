// Shared helpers: percentiles and the JSON-line format of bench/e2e_bench.cc (one line per
// measurement on stdout, a human row on stderr).
import { performance } from 'node:perf_hooks';

export const now = () => performance.now(); // ms, monotonic

export function percentile(samples, p) {
  if (samples.length === 0) return null;
  const v = [...samples].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * v.length));
  return v[Math.min(rank, v.length) - 1];
}

const r4 = (x) => (x === null || !Number.isFinite(x) ? null : Math.round(x * 10000) / 10000);

export function emit(m) {
  const out = {
    system: m.system, variant: m.variant, mode: m.mode, command: m.command,
    measured: m.measured !== false,
  };
  if (out.measured) {
    Object.assign(out, { inflight: m.inflight ?? 1, n: m.samples?.length ?? 0, errors: m.errors ?? 0, lost: 0 });
    const s = m.samples ?? [];
    if (s.length) {
      const mean = s.reduce((a, b) => a + b, 0) / s.length;
      Object.assign(out, {
        p50_ms: r4(percentile(s, 50)), p90_ms: r4(percentile(s, 90)), p99_ms: r4(percentile(s, 99)),
        max_ms: r4(percentile(s, 100)), mean_ms: r4(mean),
      });
    }
    if (m.wall_s) Object.assign(out, { wall_s: r4(m.wall_s), per_s: r4(s.length / m.wall_s) });
  }
  if (m.note) out.note = m.note;
  process.stdout.write(JSON.stringify(out) + '\n');
  const label = `${m.system}/${m.variant} ${m.mode} [${m.command}]${(m.inflight ?? 1) > 1 ? ' x' + m.inflight : ''}`;
  if (!out.measured) {
    process.stderr.write(`${label.padEnd(62)} ${m.note}\n`);
  } else {
    const f = (x) => (x === null || x === undefined ? '-' : x.toFixed(3)).padStart(7);
    let line = `${label.padEnd(62)} n=${String(out.n).padEnd(5)} p50 ${f(out.p50_ms)}  p90 ${f(out.p90_ms)}  p99 ${f(out.p99_ms)}  max ${f(out.max_ms)} ms`;
    if (out.per_s) line += `  ${out.per_s.toFixed(1).padStart(8)} /s`;
    if (out.errors) line += `  errors=${out.errors}`;
    process.stderr.write(line + '\n');
    if (m.note) process.stderr.write(`    note: ${m.note}\n`);
  }
}

export function notMeasured(system, variant, mode, command, reason) {
  emit({ system, variant, mode, command, measured: false, note: `not measured: ${reason}` });
}

export function intArg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0 || i + 1 >= process.argv.length) return dflt;
  const v = Number.parseInt(process.argv[i + 1], 10);
  return Number.isFinite(v) ? v : dflt;
}

export function strArg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 || i + 1 >= process.argv.length ? dflt : process.argv[i + 1];
}

// Runs `total` calls of fn() with `k` in flight; returns {samples, wall_s, errors, firstError}.
export async function inFlight(fn, k, total) {
  const samples = [];
  let errors = 0;
  let firstError;
  let next = 0;
  const t0 = now();
  async function lane() {
    while (next < total) {
      next += 1;
      const t = now();
      try {
        const ok = await fn();
        if (ok !== true) { errors += 1; firstError ??= String(ok); }
      } catch (e) {
        errors += 1;
        firstError ??= String(e?.message ?? e);
      }
      samples.push(now() - t);
    }
  }
  await Promise.all(Array.from({ length: k }, lane));
  return { samples, wall_s: (now() - t0) / 1000, errors, firstError };
}
