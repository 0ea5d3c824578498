#!/usr/bin/env bash
# Sessions, side by side with the peer an agent would otherwise use (Mastra's LocalSandbox, with
# and without bwrap), in one run on one machine: a private redis-server and sandpoold, then
#   bench/peers/mastra.mjs            LocalSandbox executeCommand (the peer)
#   bench/peers/sandpool_mastra.mjs   the same calls through @sandpool/mastra (a sandpool session)
#   bench/sessions_bench.py           session operations through the Python client
# and writes bench/RESULTS-sessions.md. Needs root, a build (build/bin), Node >= 20.
#   sudo bash bench/sessions.sh           # about 2 minutes
set -euo pipefail
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH/.." && pwd)
OUT=$BENCH/out
mkdir -p "$OUT"
N=${BENCH_N:-300}
work=$(mktemp -d /tmp/sandpool-bench-sessions-XXXXXX)
cleanup() {
  [ -n "${daemon:-}" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
  [ -n "${redis:-}" ] && kill "$redis" 2>/dev/null && wait "$redis" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
started=$(date +%s)
# As bench/run.sh: npm ci, or npm install where this npm reads the peers' lock file differently.
(cd "$BENCH/peers" && { npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1 ||
  npm install --no-audit --no-fund --loglevel=error >/dev/null; })
(cd "$ROOT/clients/mastra" && npm ci --no-audit --no-fund --loglevel=error >/dev/null && npm run build >/dev/null)
redis-server --port 0 --unixsocket "$work/redis.sock" --unixsocketperm 700 --save '' --appendonly no \
  --dir "$work" >/dev/null 2>&1 &
redis=$!
url=unix://$work/redis.sock
for _ in $(seq 100); do redis-cli -s "$work/redis.sock" ping >/dev/null 2>&1 && break; sleep 0.05; done
"$ROOT/build/bin/sandpoold" --redis "$url" --metrics-addr off --workers 4 --python-workers 0 --node-workers 0 \
  --uid-base $(( 3000000 + ($$ % 500) * 4000 )) --state-dir "$work/state" --consumer "bench-sessions-$$" \
  --log-level warn 2>"$OUT/sessions-daemon.log" &
daemon=$!
for _ in $(seq 200); do redis-cli -s "$work/redis.sock" exists "sandpool:daemon:bench-sessions-$$" | grep -q 1 && break; sleep 0.05; done
: >"$OUT/sessions.jsonl"
node "$BENCH/peers/mastra.mjs" --n "$N" --py-n 100 --tp-n 600 >>"$OUT/sessions.jsonl"
SANDPOOL_REDIS_URL=$url node "$BENCH/peers/sandpool_mastra.mjs" --redis "$url" --n "$N" --py-n 100 --tp-n 600 >>"$OUT/sessions.jsonl"
/usr/bin/python3 "$BENCH/sessions_bench.py" --redis "$url" --n 200 >>"$OUT/sessions.jsonl"
/usr/bin/python3 - "$OUT/sessions.jsonl" "$BENCH/RESULTS-sessions.md" "$started" <<'PY'
import json, subprocess, sys, time, os
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def get(system, variant, mode, command):
    for r in rows:
        if r["system"] == system and r["variant"] == variant and r["mode"] == mode and r["command"] == command:
            return r
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[2])))
from runinfo import header
L = header("sandpool sessions: benchmark results", "sudo bash bench/sessions.sh", float(sys.argv[3])) + [
     "Raw JSON lines: `bench/out/sessions.jsonl`.", "",
     "- **Daemon:** `sandpoold --workers 4 --python-workers 0 --node-workers 0` on a private redis-server (unix socket); one session per measurement; calls one after another unless `xK`.", "",
     "## An agent's command, side by side (ms)", "",
     "| what | p50 | p90 | p99 | per s (x8) |", "|---|---|---|---|---|"]
cmd = "executeCommand('echo', ['hi'])"
for system, variant, label in [("mastra-localsandbox", "none", "Mastra LocalSandbox, no isolation"),
                                ("mastra-localsandbox", "bwrap", "Mastra LocalSandbox, bwrap"),
                                ("sandpool-mastra", "session", "@sandpool/mastra SandpoolSandbox (isolated session)")]:
    r = get(system, variant, "latency", cmd); t = get(system, variant, "throughput", cmd)
    if r and r.get("measured"):
        L.append(f"| {label}: `{cmd}` | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} | {t['per_s']:.0f} |" if t and t.get('per_s') else f"| {label} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} | - |")
    else:
        L.append(f"| {label} | not measured: {r.get('note') if r else 'missing'} | | | |")
ls = get("mastra-localsandbox", "bwrap", "latency", cmd); sp = get("sandpool-mastra", "session", "latency", cmd)
ln = get("mastra-localsandbox", "none", "latency", cmd)
if ls and sp and ls.get("p50_ms") and sp.get("p50_ms"):
    L += ["", f"Ratio (p50): SandpoolSandbox / LocalSandbox+bwrap = {sp['p50_ms'] / ls['p50_ms']:.2f}x; / LocalSandbox without isolation = {sp['p50_ms'] / ln['p50_ms']:.2f}x."]
def session_row(prefix):
    for r in rows:
        if r["system"] == "sandpool-session" and r["command"].startswith(prefix):
            return r
lt = get("mastra-localsandbox", "none", "throughput", cmd); st = get("sandpool-mastra", "session", "throughput", cmd)
res = session_row("resume")
L += ["", "## Targets (issue 8)", "", "| target | measured | met? |", "|---|---|---|"]
if sp and ln and sp.get("p50_ms") and ln.get("p50_ms"):
    x = sp["p50_ms"] / ln["p50_ms"]
    L.append(f"| `echo hi` exec p50 <= 0.5 x LocalSandbox (no isolation) | {sp['p50_ms']:.2f} / {ln['p50_ms']:.2f} ms = {x:.2f}x | {'yes' if x <= 0.5 else '**NO**'} |")
if st and lt and st.get("per_s") and lt.get("per_s"):
    x = st["per_s"] / lt["per_s"]
    L.append(f"| execs/s (8 in flight) >= 2 x LocalSandbox (no isolation) | {st['per_s']:.1f} / {lt['per_s']:.1f} = {x:.3f}x | {'yes' if x >= 2 else '**NO**'} |")
if res:
    L.append(f"| resume p50 < 25 ms (100 MiB of files) | {res['p50_ms']:.2f} ms | {'yes' if res['p50_ms'] < 25 else '**NO**'} |")
for size in (1, 16):
    f = session_row(f"write_file + read_file, {size} MiB")
    one = session_row(f"redis SET + GET, {size} MiB, one key")
    kept = session_row(f"redis SET + GET, {size} MiB, a new key kept")
    if f and one and kept:
        x, y = f["p50_ms"] / one["p50_ms"], f["p50_ms"] / kept["p50_ms"]
        L.append(f"| file write + read back, {size} MiB, <= 2 x Redis SET + GET of the same bytes (issue 18) | "
                 f"{f['p50_ms']:.2f} ms: {x:.1f}x SET + GET under one key ({one['p50_ms']:.2f} ms), {y:.1f}x under a new key kept "
                 f"({kept['p50_ms']:.2f} ms) | {'yes' if x <= 2 else '**NO**'} (one key); {'yes' if y <= 2 else '**NO**'} (new key) |")
py = "executeCommand('/usr/bin/python3', ['-c', 'print(1)'])"
L += ["", "| what | p50 | p90 | p99 |", "|---|---|---|---|"]
for system, variant, label in [("mastra-localsandbox", "none", "LocalSandbox, no isolation"), ("mastra-localsandbox", "bwrap", "LocalSandbox, bwrap"),
                                ("sandpool-mastra", "session", "SandpoolSandbox")]:
    r = get(system, variant, "latency", py)
    if r and r.get("measured"):
        L.append(f"| {label}: `{py}` | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} |")
for command in ["new SandpoolSandbox()._start()", "filesystem writeFile + readFile, 1 MiB"]:
    r = get("sandpool-mastra", "session", "latency", command)
    if r and r.get("measured"):
        L.append(f"| SandpoolSandbox: `{command}` | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} |")
L += ["", "## Session operations (Python client, ms)", "", "| operation | n | p50 | p90 | p99 |", "|---|---|---|---|---|"]
for r in rows:
    if r["system"] == "sandpool-session":
        L.append(f"| {r['command']} | {r['n']} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} |")
open(sys.argv[2], "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
