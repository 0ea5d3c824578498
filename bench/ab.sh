#!/usr/bin/env bash
# Two builds of sandpoold side by side: the way bench/analysis.md measures a change against the
# code before it. Each run starts a private redis-server (unix socket) and a sandpoold of one
# build with run.sh's pool flags, runs sandpool_bench's throughput mode, and stops both; runs of
# A and B alternate, round after round, so that a drift of the shared machine reaches both alike.
# One line per run: jobs/s, host CPU per job (the whole machine's busy time, /proc/stat), p50
# and p99, Redis round trips per job. A single run proves little here (rounds differ 15-25% on
# these machines): read the pairs.
#
#   bash bench/ab.sh A B [--rounds 3] [--kinds py] [--inflight 8] [--n 1500] [--warmup 100]
#                        [--prefix-a CMD] [--prefix-b CMD] [-- extra sandpoold flags]
#
# A, B: build directories (each with bin/sandpoold, and bin/libsandpool_nursery.so beside it) or
# copies of their bin/ directory's parent. The same build twice with different --prefix-a/-b
# compares ways of starting it (e.g. --prefix-b 'chrt -b 0'). sandpool_bench is A's. Needs root.
# Example, a change against the commit before it:
#   git worktree add /tmp/base HEAD~1 && cmake -S /tmp/base -B /tmp/base/build -DSANDPOOL_BUILD_TESTS=OFF \
#     && cmake --build /tmp/base/build -j2 --target sandpoold sandpool_nursery
#   bash bench/ab.sh /tmp/base/build build --rounds 4 --kinds echo,py
set -euo pipefail

usage() { sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 2 ]] || usage
A=$(cd "$1" && pwd); B=$(cd "$2" && pwd); shift 2
ROUNDS=3 KINDS=py INFLIGHT=8 N=1500 WARMUP=100 PREFIX_A="" PREFIX_B=""
EXTRA=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --kinds) KINDS=$2; shift 2 ;;
    --inflight) INFLIGHT=$2; shift 2 ;;
    --n) N=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --prefix-a) PREFIX_A=$2; shift 2 ;;
    --prefix-b) PREFIX_B=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) usage ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "ab.sh: sandpoold needs root" >&2; exit 1; }
for d in "$A" "$B"; do [[ -x $d/bin/sandpoold ]] || { echo "ab.sh: no $d/bin/sandpoold" >&2; exit 1; }; done
BENCH=$A/bin/sandpool_bench
[[ -x $BENCH ]] || { echo "ab.sh: no $BENCH (build the sandpool_bench target in A)" >&2; exit 1; }

# run.sh's pool flags, so that a figure here is comparable with RESULTS.md's.
POOL_FLAGS=(--workers "${BENCH_WORKERS:-8}" --max-workers "${BENCH_MAX_WORKERS:-64}"
            --python-workers "${BENCH_PY_WORKERS:-4}" --python-max-workers "${BENCH_PY_MAX_WORKERS:-16}"
            --node-workers "${BENCH_NODE_WORKERS:-1}" --node-max-workers "${BENCH_NODE_MAX_WORKERS:-8}")
TMP=$(mktemp -d /tmp/sandpool-ab.XXXXXX)
REDIS_PID="" DAEMON_PID=""
stop() {
  [[ -n $DAEMON_PID ]] && { kill -TERM "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID" 2>/dev/null || true; }
  [[ -n $REDIS_PID ]] && { kill "$REDIS_PID" 2>/dev/null; wait "$REDIS_PID" 2>/dev/null || true; }
  DAEMON_PID="" REDIS_PID=""
}
trap 'stop; rm -rf "$TMP"' EXIT

# One run: label, build dir, prefix. Prints the run's line.
run() {
  local label=$1 dir=$2 prefix=$3 sock=$TMP/r.sock consumer=ab-$$-$RANDOM
  # Its /metrics: the bench takes the reads that rode along in a FINISH call from there, which
  # Redis counts as calls of their own but which cost no round trip.
  local metrics=127.0.0.1:$(( 30000 + ($$ + RANDOM) % 20000 ))
  rm -f "$sock"
  redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 --save '' --appendonly no \
    --daemonize no --logfile "$TMP/redis.log" &
  REDIS_PID=$!
  for _ in $(seq 100); do [[ $(redis-cli -s "$sock" ping 2>/dev/null) == PONG ]] && break; sleep 0.05; done
  # shellcheck disable=SC2086  # the prefix is a command line
  $prefix "$dir/bin/sandpoold" --redis "unix://$sock" --uid-base $(( 3000000 + ($$ % 500) * 2000 )) \
    --metrics-addr "$metrics" --log-level warn --consumer "$consumer" "${POOL_FLAGS[@]}" "${EXTRA[@]}" > "$TMP/daemon.log" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 300); do
    [[ $(redis-cli -s "$sock" exists "sandpool:daemon:$consumer") == 1 ]] && break
    kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$TMP/daemon.log" >&2; echo "ab.sh: sandpoold ($label) exited" >&2; exit 1; }
    sleep 0.1
  done
  local out
  out=$("$BENCH" --redis "unix://$sock" --modes throughput --tp-kinds "$KINDS" --inflight "$INFLIGHT" \
    --tp-n "$N" --warmup "$WARMUP" --redis-pid "$REDIS_PID" --daemon-pid "$DAEMON_PID" \
    --metrics-url "http://$metrics/metrics" 2>/dev/null | grep '^{' || true)
  stop
  printf '%s' "$out" | /usr/bin/python3 -c '
import json, sys
label = sys.argv[1]
for line in sys.stdin:
    d = json.loads(line)
    if not d.get("measured"):
        print(label, d.get("command", "?"), "not measured")
        continue
    print("%s  %-22s x%-3d %7.1f jobs/s  cpu %5.2f ms/job  p50 %7.2f  p99 %7.2f ms  round trips %.2f" % (
        label, d["command"][:22], d["inflight"], d["per_s"], d.get("cpu_ms_per_job_host_total", 0),
        d["p50_ms"], d["p99_ms"], d.get("redis_daemon_round_trips_per_job", 0)))
' "$label"
}

echo "# bench/ab.sh: A=$A${PREFIX_A:+ (under $PREFIX_A)}  B=$B${PREFIX_B:+ (under $PREFIX_B)}"
echo "# kinds $KINDS, in flight $INFLIGHT, $N jobs a run after $WARMUP, $ROUNDS rounds; $(nproc) cores, $(uname -r)"
for r in $(seq "$ROUNDS"); do
  run "A r$r" "$A" "$PREFIX_A"
  run "B r$r" "$B" "$PREFIX_B"
done
