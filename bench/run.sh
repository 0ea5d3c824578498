#!/usr/bin/env bash
# One command for the whole benchmark: builds sandpoold + sandpool_bench, installs the Node peers,
# starts a private redis-server (unix socket) and sandpoold, runs every measurement, stops
# everything and writes bench/RESULTS.md. Raw JSON lines and logs go to bench/out/.
#
#   sudo bash bench/run.sh              # full run, about 4-6 minutes on 2 cores
#   BENCH_QUICK=1 bash bench/run.sh     # ~40 s smoke run
#   BENCH_WORKERS=8 BENCH_MAX_WORKERS=64 BENCH_PY_WORKERS=4 BENCH_PY_MAX_WORKERS=16 BENCH_NODE_WORKERS=1
#                                       # the daemon's pool flags (defaults shown)
#   BENCH_UID_BASE=N                    # sandpoold --uid-base (default: derived from the pid, so that
#                                       # other daemons on a shared machine are not counted)
# Last, bench/network.sh (network templates, its own daemon in a private network namespace) writes
# bench/RESULTS-network.md; RESULTS.md gets its web/plain ratio, or "not measured: <why>".
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
BUILD=$ROOT/build
OUT=$BENCH_DIR/out
QUICK=${BENCH_QUICK:-0}
WORKERS=${BENCH_WORKERS:-8}
MAX_WORKERS=${BENCH_MAX_WORKERS:-64}
PY_WORKERS=${BENCH_PY_WORKERS:-4}
PY_MAX_WORKERS=${BENCH_PY_MAX_WORKERS:-16}
NODE_WORKERS=${BENCH_NODE_WORKERS:-1}
NODE_MAX_WORKERS=${BENCH_NODE_MAX_WORKERS:-8}
UID_BASE=${BENCH_UID_BASE:-$(( 2000000 + ($$ % 1000) * 4000 ))}
PACE_MS=100     # paced latency: idle time between sequential jobs, so that the pools refill
PY=/usr/bin/python3
CMDLINE="bash bench/run.sh"; [[ $QUICK == 1 ]] && CMDLINE="BENCH_QUICK=1 $CMDLINE"

# N: sequential shell/argv jobs; PY_N: sequential python code jobs; PACED_N: paced jobs per kind;
# TP_N / PY_TP_N: jobs per throughput run (echo / python); PROF_*: jobs in the profiled runs;
# PAIR_ROUNDS: rounds of sandpool and its floors alternated (4b).
if [[ $QUICK == 1 ]]; then
  N=150; WARMUP=20; PY_N=30; PY_WARMUP=8; PACED_N=15; TP_N=600; PY_TP_N=50; PY_FLOOR_N=100; NODE_TP_JOBS=40
  PEER_N=50; PEER_TP_N=120; NODE_N=60; NODE_WARMUP=10; NODE_TP_N=150; PROF_N=300; PROF_PY_N=30; PAIR_ROUNDS=2
else
  N=1000; WARMUP=100; PY_N=300; PY_WARMUP=30; PACED_N=150; TP_N=1500; PY_TP_N=300; PY_FLOOR_N=600; NODE_TP_JOBS=200
  PEER_N=300; PEER_TP_N=600; NODE_N=500; NODE_WARMUP=50; NODE_TP_N=1000; PROF_N=1500; PROF_PY_N=150; PAIR_ROUNDS=4
fi
IDLE_MS=15000   # no event for this long while jobs are pending: the bench reports them as lost

log() { printf '[run.sh %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

[[ $(id -u) == 0 ]] || die "sandpoold needs root: run as root"
command -v redis-server >/dev/null || die "redis-server not found"
command -v redis-cli >/dev/null || die "redis-cli not found"

mkdir -p "$OUT"
rm -f "$OUT"/*.jsonl "$OUT"/*.log "$OUT"/*.txt
RESULTS=$OUT/results.jsonl
: > "$RESULTS"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
# Other sandbox daemons and Redis servers on this (shared) machine at the start: noise we cannot stop.
# pgrep exits 1 when it finds nothing: counted without it, so pipefail and set -e do not end the run.
count_procs() { local n=0 c; for c in /proc/[0-9]*/comm; do [[ $(cat "$c" 2>/dev/null) == "$1" ]] && n=$((n + 1)); done; echo "$n"; }
OTHERS_START="$(count_procs sandpoold) sandpoold processes (daemons + spawners) and $(count_procs redis-server) redis-server processes of other users"
START_TS=$(date -u +%Y-%m-%dT%H:%M:%SZ)
T_START=$(date +%s)

# ---- build -------------------------------------------------------------------------------------
log "building sandpoold and sandpool_bench in $BUILD"
if [[ ! -f $BUILD/CMakeCache.txt ]]; then
  cmake -S "$ROOT" -B "$BUILD" -DSANDPOOL_BUILD_TESTS=OFF > "$OUT/build.log" 2>&1 || { cat "$OUT/build.log" >&2; die "cmake configure failed"; }
else
  cmake -S "$ROOT" -B "$BUILD" > "$OUT/build.log" 2>&1 || { cat "$OUT/build.log" >&2; die "cmake configure failed"; }
fi
cmake --build "$BUILD" -j2 --target sandpoold sandpool_bench >> "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log" >&2; die "build failed"; }
DAEMON_BIN=$BUILD/bin/sandpoold
BENCH_BIN=$BUILD/bin/sandpool_bench
# The peers run with the environment a sandboxed job gets by default, not this shell's (the host's
# variables change what a cold interpreter does at start: see PeerEnvironment in e2e_bench.cc).
mapfile -t PEER_ENV < <("$BENCH_BIN" --job-env)
[[ ${#PEER_ENV[@]} -gt 0 ]] || die "sandpool_bench --job-env printed nothing"

# ---- node peers --------------------------------------------------------------------------------
NODE_SKIP=""
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  NODE_SKIP="node/npm not installed"
elif [[ ! -d $BENCH_DIR/peers/node_modules/@mastra/core || ! -d $BENCH_DIR/peers/node_modules/bullmq || ! -d $BENCH_DIR/peers/node_modules/ioredis ]]; then
  log "installing the Node peers (npm)"
  if [[ -f $BENCH_DIR/peers/package-lock.json ]]; then NPM_CMD=(npm ci --no-audit --no-fund); else NPM_CMD=(npm install --no-audit --no-fund); fi
  # npm ci refuses a lock file another npm version wrote differently (newer npm wants every
  # platform's optional packages listed); the peers' versions are pinned in package.json anyway.
  if ! (cd "$BENCH_DIR/peers" && { timeout 300 "${NPM_CMD[@]}" || timeout 300 npm install --no-audit --no-fund; }) > "$OUT/npm.log" 2>&1; then
    NODE_SKIP="'${NPM_CMD[*]}' failed (see bench/out/npm.log): $(grep -m1 -i 'err' "$OUT/npm.log" | cut -c1-160)"
  fi
fi

# ---- private redis + sandpoold -----------------------------------------------------------------
TMP=$(mktemp -d /tmp/sandpool-bench.XXXXXX)
SOCK=$TMP/redis.sock
REDIS_URL=unix://$SOCK
CONSUMER=bench-$$
REDIS_PID=""; DAEMON_PID=""
RCLI=(redis-cli -s "$SOCK")

cleanup() {
  set +e
  if [[ -n $DAEMON_PID ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -TERM "$DAEMON_PID"
    for _ in $(seq 60); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$DAEMON_PID" 2>/dev/null; then
      log "sandpoold did not stop within 15 s of SIGTERM; killing it"
      echo "run.sh: sandpoold did not stop within 15 s of SIGTERM (killed)" >> "$OUT/daemon.log"
      kill -KILL "$DAEMON_PID"
    fi
    wait "$DAEMON_PID" 2>/dev/null
  fi
  if [[ -n $REDIS_PID ]] && kill -0 "$REDIS_PID" 2>/dev/null; then
    kill -TERM "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "starting redis-server on $SOCK"
redis-server --port 0 --unixsocket "$SOCK" --unixsocketperm 700 --save '' --appendonly no \
  --daemonize no --logfile "$OUT/redis.log" &
REDIS_PID=$!
for _ in $(seq 100); do [[ $("${RCLI[@]}" ping 2>/dev/null) == PONG ]] && break; sleep 0.05; done
[[ $("${RCLI[@]}" ping 2>/dev/null) == PONG ]] || die "redis-server did not come up (bench/out/redis.log)"

METRICS_ADDR=127.0.0.1:$(( 20000 + $$ % 20000 ))
POOL_FLAGS="--workers $WORKERS --max-workers $MAX_WORKERS --python-workers $PY_WORKERS --python-max-workers $PY_MAX_WORKERS --node-workers $NODE_WORKERS --node-max-workers $NODE_MAX_WORKERS"
DAEMON_FLAGS="$POOL_FLAGS --uid-base $UID_BASE --metrics-addr $METRICS_ADDR --log-level warn"
log "starting sandpoold $DAEMON_FLAGS --consumer $CONSUMER"
# shellcheck disable=SC2086  # word splitting of the flag strings is intended
"$DAEMON_BIN" --redis "$REDIS_URL" $DAEMON_FLAGS --consumer "$CONSUMER" > "$OUT/daemon.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 200); do
  [[ $("${RCLI[@]}" exists "sandpool:daemon:$CONSUMER" 2>/dev/null) == 1 ]] && break
  kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$OUT/daemon.log" >&2; die "sandpoold exited during start-up"; }
  sleep 0.1
done
[[ $("${RCLI[@]}" exists "sandpool:daemon:$CONSUMER") == 1 ]] || die "no heartbeat key sandpool:daemon:$CONSUMER after 20 s"

# The daemon's instance cgroup (cpuacct on v1, the unified one on v2): every sandbox's CPU, dead
# or alive, for the CPU per job (sandpool_bench --sandbox-cgroup).
SANDBOX_CG=""
for d in $(find /sys/fs/cgroup -maxdepth 4 -type d -name "sandpool-$CONSUMER" 2>/dev/null || true); do
  if [[ -e $d/cpuacct.usage || -e $d/cpu.stat ]]; then SANDBOX_CG=$d; break; fi
done
[[ -n $SANDBOX_CG ]] || log "no instance cgroup found for sandpool-$CONSUMER: CPU per job from the process tree only"

# Pool gauges from the daemon's /metrics, one "template ready total" line each.
pool_state() {
  curl -s --max-time 2 "http://$METRICS_ADDR/metrics" 2>/dev/null | awk '
    /^sandpool_pool_ready_sandboxes\{/ { match($0, /template="[^"]*"/); t = substr($0, RSTART + 10, RLENGTH - 11); r[t] = $2 }
    /^sandpool_pool_sandboxes\{/       { match($0, /template="[^"]*"/); t = substr($0, RSTART + 10, RLENGTH - 11); n[t] = $2 }
    END { for (t in n) print t, r[t] + 0, n[t] + 0 }' | sort
}
# True once every template's pool is at least at its configured minimum and all of it is ready.
pools_full() {
  local st; st=$(pool_state)
  [[ -n $st ]] || return 1
  awk -v d="$WORKERS" -v p="$PY_WORKERS" -v n="$NODE_WORKERS" '
    { want = ($1 == "default") ? d : ($1 == "python") ? p : ($1 == "node") ? n : 0
      if ($2 < want || $2 < $3) bad = 1; seen[$1] = 1 }
    END { if (!seen["default"] || (p > 0 && !seen["python"]) || (n > 0 && !seen["node"])) bad = 1; exit bad }' <<< "$st"
}
wait_pools_full() {  # timeout_s
  local end=$(( $(date +%s) + $1 ))
  while (( $(date +%s) < end )); do pools_full && return 0; sleep 0.5; done
  return 1
}

# ---- 0. memory of the warm pools, while the daemon idles with its pools full --------------------
MEM_NOTE=""
log "memory: waiting for the pools to fill (default $WORKERS, python $PY_WORKERS, node $NODE_WORKERS)"
if wait_pools_full 60; then
  sleep 2   # let the last zygotes settle (their imports are done once they report ready)
  POOLS_AT_MEM=$(pool_state | paste -sd';')
  "$PY" "$BENCH_DIR/memory.py" --uid-base "$UID_BASE" --daemon-pid "$DAEMON_PID" --phase idle >> "$RESULTS" 2>> "$OUT/bench.log" \
    || MEM_NOTE="memory.py failed (bench/out/bench.log)"
else
  POOLS_AT_MEM=$(pool_state | paste -sd';')
  MEM_NOTE="the pools were not full within 60 s of start-up (template ready total: $POOLS_AT_MEM)"
  log "$MEM_NOTE"
fi

# Appends a "not measured" JSON line.
not_measured() {  # system variant mode command reason
  printf '{"system":"%s","variant":"%s","mode":"%s","command":"%s","measured":false,"note":"not measured: %s"}\n' \
    "$1" "$2" "$3" "$4" "$(printf '%s' "$5" | tr '"\\\n' "''  ")" >> "$RESULTS"
}

daemon_alive() { kill -0 "$DAEMON_PID" 2>/dev/null; }

WEDGED=""   # set once sandpool_bench reports lost jobs (exit 3): the daemon stopped finishing jobs

# Runs the C++ bench; stdout (JSON) to results, stderr (table) to the terminal and bench.log.
run_bench() {
  local rc=0
  # shellcheck disable=SC2086  # BENCH_BIN may carry a taskset prefix
  timeout 400 $BENCH_BIN --redis "$REDIS_URL" --daemon-pid "$DAEMON_PID" --redis-pid "$REDIS_PID" ${SANDBOX_CG:+--sandbox-cgroup "$SANDBOX_CG"} \
    --metrics-url "http://$METRICS_ADDR/metrics" \
    --idle-timeout-ms "$IDLE_MS" "$@" >> "$RESULTS" 2> >(tee -a "$OUT/bench.log" >&2) || rc=$?
  if [[ $rc == 3 ]]; then
    WEDGED="jobs were lost during: sandpool_bench $*"
    log "sandpool_bench reports LOST jobs (daemon stopped finishing jobs); later sandpool phases are skipped"
  elif [[ $rc != 0 ]]; then
    log "sandpool_bench $* exited with $rc"; echo "sandpool_bench $* exited with $rc" >> "$OUT/bench.log"
  fi
  if ! daemon_alive; then
    WEDGED="sandpoold died during: sandpool_bench $*"
    log "sandpoold is no longer running!"; echo "sandpoold died during: sandpool_bench $*" >> "$OUT/bench.log"
  fi
}

# ---- 1. sandpool latency, back to back (the next job is sent when the previous result arrives) --
log "sandpool: latency back to back: echo, /bin/true (N=$N), python print(1) and imports (N=$PY_N)"
run_bench --modes latency --kinds echo,true --n "$N" --warmup "$WARMUP"
[[ -z $WEDGED ]] && run_bench --modes latency --kinds py,pyimport --n "$PY_N" --warmup "$PY_WARMUP"

# ---- 2. sandpool latency, paced (PACE_MS idle between jobs: the pools are full when a job comes) --
if [[ -z $WEDGED ]]; then
  wait_pools_full 30 || log "pools not full before the paced runs: $(pool_state | paste -sd';')"
  log "sandpool: latency paced (${PACE_MS} ms between jobs): echo, python print(1), imports (N=$PACED_N)"
  run_bench --modes latency --kinds echo,py,pyimport --n "$PACED_N" --warmup 5 --pace-ms "$PACE_MS"
fi

# ---- 3. sandpool throughput: the curve 1..64 in flight for echo and python print(1), node x8 --
if [[ -z $WEDGED ]]; then
  log "sandpool: throughput echo x1,2,4,8,16,64 (M=$TP_N each)"
  run_bench --modes throughput --tp-kinds echo --tp-n "$TP_N" --warmup "$WARMUP" --inflight 1,2,4,8,16,64
fi
if [[ -z $WEDGED ]]; then
  log "sandpool: throughput python print(1) x1,2,4,8,16,64 (M=$PY_TP_N each)"
  run_bench --modes throughput --tp-kinds py --tp-n "$PY_TP_N" --warmup "$PY_WARMUP" --inflight 1,2,4,8,16,64
fi
if [[ -z $WEDGED && $NODE_WORKERS -gt 0 ]]; then
  log "sandpool: throughput node console.log(1) x8 (M=$NODE_TP_JOBS)"
  run_bench --modes throughput --tp-kinds node --tp-n "$NODE_TP_JOBS" --warmup 10 --inflight 8
fi
POOLS_AFTER_TP=$(pool_state | paste -sd';')

# ---- 3b. the same on one core: the daemon's whole tree, Redis and the client pinned to CPU 0 ----
# (every process of the tree now, and what they fork later inherits it), then unpinned.
tree_pids() {  # root pid: it and every descendant
  local root=$1
  ps -e -o pid=,ppid= | awk -v r="$root" '{ p[$1] = $2 } END { for (x in p) { y = x; while (y != "" && y != 1 && y != 0) { if (y == r) { print x; break } y = p[y] } } }'
}
# run_bench with sandpool_bench (and what it spawns) pinned to CPU 0.
run_bench_cpu0() {
  local saved=$BENCH_BIN
  BENCH_BIN="taskset -c 0 $saved"
  run_bench "$@"
  BENCH_BIN=$saved
}
pin_all() {  # cpu list
  local pid
  for pid in $(tree_pids "$DAEMON_PID") "$REDIS_PID"; do taskset -a -p -c "$1" "$pid" > /dev/null 2>&1 || true; done
}
if [[ -z $WEDGED ]]; then
  log "sandpool: throughput on one core (taskset -c 0): echo x8, python x8"
  pin_all 0
  run_bench_cpu0 --modes throughput --tp-kinds echo --tp-n "$TP_N" --warmup "$WARMUP" --inflight 8 --variant isolated-1core
  [[ -z $WEDGED ]] && run_bench_cpu0 --modes throughput --tp-kinds py --tp-n "$PY_TP_N" --warmup "$PY_WARMUP" --inflight 8 --variant isolated-1core
  pin_all "0-$(( $(nproc) - 1 ))"
fi

# ---- 3c. the floor of a warm Python job: a warm python3 forking a child per snippet ------------
# warm_fork VARIANT ARGS...: bench/peers/warm_fork.py with ARGS (its lines carry VARIANT, or say
# "not measured" under it if the script fails).
warm_fork() {
  local variant=$1; shift
  env -i "${PEER_ENV[@]}" "$PY" "$BENCH_DIR/peers/warm_fork.py" --n "$PY_FLOOR_N" "$@" >> "$RESULTS" 2> >(tee -a "$OUT/bench.log" >&2) \
    || not_measured python3-warm-fork "$variant" throughput "print(1)" "bench/peers/warm_fork.py $* failed (bench/out/bench.log)"
}
log "floor: warm python3 forking a child per print(1), x8 and x64 (N=$PY_FLOOR_N)"
warm_fork none --inflight 8,64
# The same fork server with its children's path settled in the parent first, as sandpool's python
# mother settles a job's (worker/runners/zygote.cc): reported beside the issue's floor, not instead.
log "floor, settled: the same, its parent having run the snippet's path 30 times first, x8"
warm_fork settled --inflight 8 --settle 30

# ---- 4. CPU profiles (perf, software clock, whole machine, call graphs) --------------------------
# Two profiled runs: echo x8 throughput, and python print(1) x8 throughput.
PERF_NOTE=""
profile() {  # name kind jobs
  local name=$1 kind=$2 jobs=$3 prc=0
  timeout 200 perf record -q -a -g -e cpu-clock -F 499 -o "$TMP/perf-$name.data" -- \
      "$BENCH_BIN" --redis "$REDIS_URL" --modes throughput --tp-kinds "$kind" --inflight 8 --tp-n "$jobs" \
      --warmup 10 --daemon-pid "$DAEMON_PID" --redis-pid "$REDIS_PID" --idle-timeout-ms "$IDLE_MS" \
      > "$OUT/profile-$name.jsonl" 2> "$OUT/profile-$name.log" || prc=$?
  if [[ $prc == 3 ]]; then WEDGED="jobs were lost during the perf-profiled $name run"; log "LOST jobs during the profiled $name run"; fi
  if [[ -s $TMP/perf-$name.data ]]; then
    # -a sees the whole (shared) machine: all commands first, then symbols (self time, no children).
    perf report -i "$TMP/perf-$name.data" --stdio --no-children -g none --sort comm --percent-limit 0.7 2>/dev/null \
      | grep -v '^#' | grep -v '^$' | head -25 > "$OUT/perf-$name-comm.txt" || true
    perf report -i "$TMP/perf-$name.data" --stdio --no-children -g none --sort comm,sym --percent-limit 0.5 2>/dev/null \
      | grep -v '^#' | grep -v '^$' | head -45 > "$OUT/perf-$name-sym.txt" || true
    # Callers of the top kernel symbols, for the write-up (not parsed).
    perf report -i "$TMP/perf-$name.data" --stdio --no-children -G --sort comm,sym --percent-limit 2 2>/dev/null \
      | grep -v '^$' | head -400 > "$OUT/perf-$name-callers.txt" || true
  else
    PERF_NOTE+="perf record failed for $name (bench/out/profile-$name.log). "
  fi
}
if [[ -n $WEDGED ]]; then
  PERF_NOTE="not run: $WEDGED"
elif command -v perf >/dev/null && perf stat -e task-clock true > /dev/null 2>&1; then
  log "profiling: perf record -a -g -e cpu-clock during $PROF_N echo jobs x8, then $PROF_PY_N python jobs x8"
  profile echo echo "$PROF_N"
  [[ -z $WEDGED ]] && profile py py "$PROF_PY_N"
else
  PERF_NOTE="perf unavailable here (perf stat -e task-clock failed)"
fi
DAEMON_STATE=$("${RCLI[@]}" xinfo groups sandpool:q:default 2>&1 | paste -sd' ' || true)
DAEMON_ALIVE_AFTER=$(daemon_alive && echo yes || echo no)
HEARTBEAT=$("${RCLI[@]}" exists "sandpool:daemon:$CONSUMER" 2>&1 || true)
DEAD_LEN=$("${RCLI[@]}" xlen sandpool:dead 2>&1 || true)

# ---- 4. process peers (same binary) ------------------------------------------------------------
log "peers: bwrap, posix_spawn, python3 print(1) / imports (N=$PEER_N, and x8 M=$PEER_TP_N)"
run_bench --modes peers --peer-n "$PEER_N" --peer-inflight 8 --peer-tp-n "$PEER_TP_N"
# The machine's own scaling, for 3b's: the same posix_spawn('/bin/echo') x8 with the bench and its
# children pinned to CPU 0 (variant 1core). Two vCPUs need not give twice one's work: on some of
# these machines two processes at once each take about twice the CPU time one alone does.
log "peers: posix_spawn /bin/echo x8 on one core (taskset -c 0), the machine's own 2-core scaling"
run_bench_cpu0 --modes peers --peers echo --peer-variant 1core --peer-n 20 --peer-inflight 8 --peer-tp-n "$PEER_TP_N"

# ---- 4b. the floors of issue 18's throughput ratios again, alternated with sandpool ------------
# The phases above are minutes apart, and this machine is shared: a ratio of two phases moves with
# whatever else ran in between (python against the warm fork read 0.51x and 0.77x at 64 in flight
# in two runs of one code). Here sandpool and its floor follow each other PAIR_ROUNDS times, each
# first in turn; report.py gives the median of the rounds' ratios beside the sequential figures.
if [[ -z $WEDGED ]]; then
  log "alternated rounds ($PAIR_ROUNDS): python x8,x64 vs the warm fork, echo x8 vs posix_spawn"
  # Each of the four runs of round $r, variant $v.
  py_sp() { run_bench --modes throughput --tp-kinds py --tp-n "$PY_TP_N" --warmup "$PY_WARMUP" --inflight 8,64 --variant "$v"; }
  py_floor() { warm_fork "$v" --inflight 8,64 --variant "$v"; }
  echo_sp() { run_bench --modes throughput --tp-kinds echo --tp-n "$TP_N" --warmup "$WARMUP" --inflight 8 --variant "$v"; }
  echo_floor() { run_bench --modes peers --peers echo --peer-variant "$v" --peer-n 20 --peer-inflight 8 --peer-tp-n "$PEER_TP_N"; }
  for r in $(seq "$PAIR_ROUNDS"); do
    [[ -n $WEDGED ]] && break
    v=paired-$r
    if (( r % 2 )); then py_sp; py_floor; echo_sp; echo_floor; else py_floor; py_sp; echo_floor; echo_sp; fi
  done
fi

# ---- 5. node peers -----------------------------------------------------------------------------
MASTRA_CMD="executeCommand('echo', ['hi'])"
BULL_CMD="execFile('/bin/echo', ['hi'])"
if [[ -n $NODE_SKIP ]]; then
  for v in none bwrap; do not_measured mastra-localsandbox "$v" latency "$MASTRA_CMD" "$NODE_SKIP"; done
  not_measured bullmq none latency "$BULL_CMD" "$NODE_SKIP"
else
  log "peers: Mastra LocalSandbox none / bwrap (N=$NODE_N, x8 M=$NODE_TP_N; python N=$PY_N)"
  if ! (cd "$BENCH_DIR/peers" && env -i "${PEER_ENV[@]}" timeout 300 node mastra.mjs --n "$NODE_N" --py-n "$PY_N" --warmup "$NODE_WARMUP" --tp-n "$NODE_TP_N" --inflight 8) \
      >> "$RESULTS" 2> >(grep -v -e ExperimentalWarning -e 'node --trace-warnings' | tee -a "$OUT/bench.log" >&2); then
    not_measured mastra-localsandbox any latency "$MASTRA_CMD" "node mastra.mjs failed (bench/out/bench.log)"
  fi
  log "peers: BullMQ + execFile (N=$NODE_N, x8 M=$NODE_TP_N)"
  if ! (cd "$BENCH_DIR/peers" && timeout 300 node bullmq.mjs --socket "$SOCK" --n "$NODE_N" --warmup "$NODE_WARMUP" --tp-n "$NODE_TP_N" --inflight 8) \
      >> "$RESULTS" 2> >(tee -a "$OUT/bench.log" >&2); then
    not_measured bullmq none latency "$BULL_CMD" "node bullmq.mjs failed (bench/out/bench.log)"
  fi
fi

# ---- 6. sessions, side by side with the same peers (bench/RESULTS-sessions.md) ------------------
if [[ -n $NODE_SKIP ]]; then
  log "sessions: skipped ($NODE_SKIP)"
else
  log "sessions: @sandpool/mastra and the Python client vs Mastra LocalSandbox (bench/sessions.sh)"
  BENCH_N=$NODE_N bash "$BENCH_DIR/sessions.sh" >> "$OUT/bench.log" 2>&1 \
    || log "sessions: bench/sessions.sh failed (bench/out/bench.log)"
fi

# ---- 7. network templates: a template with egress vs one without (bench/network.sh) --------------
# Its own redis-server and sandpoold in a private network namespace (so the host's ip_forward and
# rules stay untouched), the two templates measured interleaved; RESULTS.md gets its web/plain
# ratio. Optional: if it cannot run here (no netns, nft, ...), the section says why, the run goes on.
NET_NOTE=""
NET_SUMMARY=$OUT/network-summary.json
rm -f "$NET_SUMMARY"
log "network templates: bench/network.sh (private netns; template web with egress vs plain, interleaved)"
if ! BENCH_NET_NO_BUILD=1 BENCH_QUICK=$QUICK BENCH_NET_CMDLINE="$CMDLINE (its last step, bench/network.sh)" \
    timeout 600 bash "$BENCH_DIR/network.sh" > "$OUT/network.log" 2>&1; then
  NET_NOTE="bench/network.sh failed (bench/out/network.log): $(grep -m1 FATAL "$OUT/network.log" | cut -c1-200)"
  log "network templates: $NET_NOTE"
fi

# ---- report ------------------------------------------------------------------------------------
sleep 0.2  # let the tee'd stderr drain
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
ELAPSED=$(( $(date +%s) - T_START ))
log "writing bench/RESULTS.md (run took ${ELAPSED}s)"
"$PY" "$BENCH_DIR/report.py" \
  --results "$RESULTS" --out "$BENCH_DIR/RESULTS.md" \
  --meta "date=$START_TS" --meta "command=$CMDLINE" --meta "quick=$QUICK" --meta "daemon_flags=$DAEMON_FLAGS" \
  --meta "others_start=$OTHERS_START" --meta "pools_at_mem=$POOLS_AT_MEM" --meta "pools_after_tp=$POOLS_AFTER_TP" \
  --meta "mem_note=$MEM_NOTE" --meta "pace_ms=$PACE_MS" \
  --meta "nproc=$(nproc)" --meta "kernel=$(uname -r)" \
  --meta "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')" \
  --meta "load_start=$LOAD_START" --meta "load_end=$LOAD_END" --meta "elapsed_s=$ELAPSED" \
  --meta "sizes=N=$N (python $PY_N, paced $PACED_N) warmup=$WARMUP M=$TP_N (python $PY_TP_N) peer_N=$PEER_N peer_M=$PEER_TP_N node_N=$NODE_N node_M=$NODE_TP_N profiled=$PROF_N+$PROF_PY_N alternated_rounds=$PAIR_ROUNDS" \
  --meta "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  --meta "dirty=$(git -C "$ROOT" status --porcelain 2>/dev/null | awk '{print $2}' |
                  grep -Ev '^bench/(RESULTS|out/|soak\.svg$|fuzz-results\.md$)' | paste -sd' ')" \
  --meta "redis=$(redis-server --version | cut -d' ' -f3)" --meta "node=$(node --version 2>/dev/null || echo none)" \
  --meta "bwrap=$(bwrap --version 2>/dev/null || echo none)" \
  --meta "daemon_alive_after=$DAEMON_ALIVE_AFTER" --meta "heartbeat_after=$HEARTBEAT" \
  --meta "wedged=$WEDGED" --meta "group_after=$DAEMON_STATE" --meta "dead_len=$DEAD_LEN" --meta "perf_note=$PERF_NOTE" \
  --meta "network_note=$NET_NOTE" --network-summary "$NET_SUMMARY" \
  --daemon-log "$OUT/daemon.log" --out-dir "$OUT" --analysis "$BENCH_DIR/analysis.md"
log "done: bench/RESULTS.md"
