#!/usr/bin/env bash
# Network templates: does a job of a template with egress start as fast as a job of one without?
# (The issue's requirement: "a job with network starts within 10% of that".) One daemon serves two
# templates that differ only in `egress`; the same echo jobs go to each, interleaved round by round,
# and only ratios web/plain from this one run are claimed (the machine is shared and noisy).
#
#   sudo bash bench/network.sh            # about 2 minutes; writes bench/RESULTS-network.md
#   BENCH_NET_ROUNDS=6 sudo bash bench/network.sh   # more rounds (default 4, at least 3)
#   BENCH_NET_NO_BUILD=1 ...              # use build/bin as it is (bench/run.sh, which just built it)
#   BENCH_QUICK=1 ...                     # ~30 s smoke run, small samples
#
# Routed egress needs net.ipv4.ip_forward=1. So that the host's own setting and rules are never
# touched, the daemon runs in a private network namespace (`ip netns add`), where it turns
# forwarding on (--net-ip-forward set) and loads its nftables table; the veth host ends live there
# too. Redis listens on a unix socket, which works across network namespaces; the daemon's metrics
# port is inside the namespace, so it is scraped through nsenter. Everything is stopped and the
# namespace deleted on exit, also on failure.
#
# Raw JSON lines: bench/out/network.jsonl (each line tagged with its round and template);
# a one-line summary for bench/RESULTS.md: bench/out/network-summary.json; logs: bench/out/network-*.log.
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
BUILD=$ROOT/build
OUT=$BENCH_DIR/out
PY=/usr/bin/python3
ROUNDS=${BENCH_NET_ROUNDS:-4}
CMDLINE=${BENCH_NET_CMDLINE:-sudo bash bench/network.sh}
# Per round and template: N back-to-back echo jobs (after WARMUP), PACED_N jobs PACE_MS apart (the
# pool is full when each arrives: what an agent thinking between commands sees), and TP_N jobs
# with INFLIGHT in flight.
N=400; WARMUP=40; PACED_N=80; PACE_MS=100; TP_N=2000; INFLIGHT=8
if [[ ${BENCH_QUICK:-0} == 1 ]]; then   # smoke run (bench/run.sh's BENCH_QUICK): not for quoting
  N=100; WARMUP=10; PACED_N=20; TP_N=400; ROUNDS=${BENCH_NET_ROUNDS:-3}
fi
# Both templates: a fixed pool of POOL sandboxes (workers = max-workers), so that neither pool grows
# during the run and the two differ in nothing but their network.
POOL=8
NS=sandpool-bench-net-$$
NSENTER=(nsenter "--net=/run/netns/$NS")
METRICS=127.0.0.1:9464        # inside the private namespace: no clash with anything on the host
UID_BASE=$(( 6100000 + ($$ % 500) * 4000 ))   # away from run.sh's and sessions.sh's ranges
CONSUMER=bench-net-$$
T_START=$(date +%s)

log() { printf '[network.sh %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

mkdir -p "$OUT"
RESULTS=$OUT/network.jsonl
SUMMARY=$OUT/network-summary.json
: > "$RESULTS"
rm -f "$SUMMARY" "$OUT"/network-*.log

# Stops here, leaving a summary that says why nothing (more) was measured; bench/run.sh copies it.
fail() {
  log "FATAL: $*"
  "$PY" -c 'import json, sys; print(json.dumps({"measured": False, "note": "not measured: " + sys.argv[1]}))' "$*" > "$SUMMARY"
  exit 1
}

[[ $(id -u) == 0 ]] || fail "needs root (network namespaces, sandpoold)"
(( ROUNDS >= 3 )) || fail "BENCH_NET_ROUNDS must be at least 3"
for c in ip nsenter redis-server redis-cli curl; do command -v "$c" >/dev/null || fail "$c not found"; done

TMP=$(mktemp -d /tmp/sandpool-bench-net.XXXXXX)
SOCK=$TMP/redis.sock
REDIS_URL=unix://$SOCK
REDIS_PID=""; DAEMON_PID=""; NS_MADE=""
trap 'rm -rf "$TMP"' EXIT   # replaced by cleanup() once something is started
trap 'exit 130' INT TERM    # so that the EXIT trap runs on ^C and kill too

# ---- build, and a private copy of what runs ----------------------------------------------------
# Others build in the same build/ directory: any binary there may be relinked (briefly absent or
# half written) while this runs. So build, copy the binaries into $TMP/bin, check that the copies
# run, and use only those; if the build or the check fails (someone's edit in progress), wait a
# minute and try again, three times at most.
BIN=$TMP/bin
mkdir -p "$BIN"
staged=""
for try in 1 2 3; do
  if [[ ${BENCH_NET_NO_BUILD:-0} != 1 ]]; then
    log "building sandpoold, sandpool_bench and sandpool in $BUILD (try $try)"
    if ! { cmake -S "$ROOT" -B "$BUILD" -DCMAKE_COMPILE_WARNING_AS_ERROR=ON &&
           cmake --build "$BUILD" -j2 --target sandpoold sandpool_bench sandpool; } > "$OUT/network-build.log" 2>&1; then
      tail -15 "$OUT/network-build.log" >&2
      (( try < 3 )) && { log "build failed; trying again in 60 s"; sleep 60; }
      continue
    fi
  fi
  if cp "$BUILD/bin/sandpoold" "$BUILD/bin/sandpool_bench" "$BUILD/bin/sandpool" "$BIN/" 2>/dev/null &&
     [[ $("$BIN/sandpoold" --help 2>&1) == *--net-ip-forward* &&
        $("$BIN/sandpool_bench" --help 2>&1) == *--template* ]]; then
    staged=1; break
  fi
  (( try < 3 )) && { log "the binaries in $BUILD/bin are missing or do not run yet; trying again in 60 s"; sleep 60; }
done
[[ -n $staged ]] || fail "could not build and stage sandpoold, sandpool_bench and sandpool from $BUILD (bench/out/network-build.log)"
DAEMON_BIN=$BIN/sandpoold
BENCH_BIN=$BIN/sandpool_bench
CLI_BIN=$BIN/sandpool

cleanup() {
  set +e
  if [[ -n $DAEMON_PID ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -TERM "$DAEMON_PID"
    for _ in $(seq 60); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$DAEMON_PID" 2>/dev/null; then
      log "sandpoold did not stop within 15 s of SIGTERM; killing it"
      kill -KILL "$DAEMON_PID"
    fi
    wait "$DAEMON_PID" 2>/dev/null
  fi
  if [[ -n $REDIS_PID ]] && kill -0 "$REDIS_PID" 2>/dev/null; then
    kill -TERM "$REDIS_PID"; wait "$REDIS_PID" 2>/dev/null
  fi
  # Deleting the namespace also deletes the veth host ends and the daemon's table in it.
  [[ -n $NS_MADE ]] && ip netns del "$NS"
  rm -rf "$TMP"
}
trap cleanup EXIT

# ---- private network namespace, redis-server, sandpoold -----------------------------------------
ip netns add "$NS" 2> "$OUT/network-netns.log" || fail "ip netns add failed: $(head -c 200 "$OUT/network-netns.log")"
NS_MADE=1
ip -n "$NS" link set lo up

cat > "$TMP/sandpool.conf" <<EOF
# Two templates that differ only in egress (198.51.100.0/24 is TEST-NET-2: nothing answers there,
# and nothing needs to: the jobs only run echo).
[template plain]
runtime = sh
workers = $POOL
max-workers = $POOL
[template web]
runtime = sh
workers = $POOL
max-workers = $POOL
egress = 198.51.100.0/24:80
EOF

log "starting redis-server on $SOCK"
redis-server --port 0 --unixsocket "$SOCK" --unixsocketperm 700 --save '' --appendonly no \
  --dir "$TMP" --daemonize no --logfile "$OUT/network-redis.log" &
REDIS_PID=$!
for _ in $(seq 100); do [[ $(redis-cli -s "$SOCK" ping 2>/dev/null) == PONG ]] && break; sleep 0.05; done
[[ $(redis-cli -s "$SOCK" ping 2>/dev/null) == PONG ]] || fail "redis-server did not come up (bench/out/network-redis.log)"

# The built-in templates are kept minimal (default 1, no python or node): they are not measured.
DAEMON_FLAGS=(--config "$TMP/sandpool.conf" --redis "$REDIS_URL" --net on --net-ip-forward set
  --metrics-addr "$METRICS" --workers 1 --python-workers 0 --node-workers 0 --uid-base "$UID_BASE"
  --state-dir "$TMP/state" --consumer "$CONSUMER" --log-level warn)
log "starting sandpoold in netns $NS: ${DAEMON_FLAGS[*]}"
# nsenter (not `ip netns exec`, which remounts /sys and would hide the cgroup hierarchy) enters only
# the network namespace and then execs sandpoold, so $! is the daemon itself.
"${NSENTER[@]}" "$DAEMON_BIN" "${DAEMON_FLAGS[@]}" > "$OUT/network-daemon.log" 2>&1 &
DAEMON_PID=$!

# "template ready total" lines from the daemon's /metrics.
pool_state() {
  "${NSENTER[@]}" curl -s --max-time 2 "http://$METRICS/metrics" 2>/dev/null | awk '
    /^sandpool_pool_ready_sandboxes\{/ { match($0, /template="[^"]*"/); t = substr($0, RSTART + 10, RLENGTH - 11); r[t] = $2 }
    /^sandpool_pool_sandboxes\{/       { match($0, /template="[^"]*"/); t = substr($0, RSTART + 10, RLENGTH - 11); n[t] = $2 }
    END { for (t in n) print t, r[t] + 0, n[t] + 0 }' | sort
}
pools_full() {  # both measured pools have all POOL sandboxes ready
  local st; st=$(pool_state)
  [[ $(awk -v p="$POOL" '($1 == "plain" || $1 == "web") && $2 >= p { k++ } END { print k + 0 }' <<< "$st") == 2 ]]
}
wait_pools_full() {  # timeout_s
  local end=$(( $(date +%s) + $1 ))
  while (( $(date +%s) < end )); do
    pools_full && return 0
    kill -0 "$DAEMON_PID" 2>/dev/null || return 1
    sleep 0.25
  done
  return 1
}
# sandpool_pool_{hits,misses}_total of the measured templates: a miss is a job that found no ready
# sandbox and waited for one.
pool_counters() {
  "${NSENTER[@]}" curl -s --max-time 2 "http://$METRICS/metrics" 2>/dev/null |
    grep -E '^sandpool_pool_(hits|misses)_total\{template="(plain|web)"\}' | paste -sd' ' || true
}

for _ in $(seq 200); do
  [[ $(redis-cli -s "$SOCK" exists "sandpool:daemon:$CONSUMER" 2>/dev/null) == 1 ]] && break
  kill -0 "$DAEMON_PID" 2>/dev/null || break
  sleep 0.1
done
if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
  cat "$OUT/network-daemon.log" >&2
  fail "sandpoold --net on exited during start-up: $(grep -m1 '"level":"error"' "$OUT/network-daemon.log" | cut -c1-300)"
fi
[[ $(redis-cli -s "$SOCK" exists "sandpool:daemon:$CONSUMER") == 1 ]] || fail "no heartbeat from sandpoold after 20 s"
log "waiting for the pools (plain $POOL, web $POOL)"
wait_pools_full 60 || fail "pools not full within 60 s (template ready total: $(pool_state | paste -sd';'))"
POOLS_START=$(pool_state | paste -sd';')

# ---- sanity: the two templates really differ in their network ------------------------------------
# A web sandbox must see eth0 (its veth), a plain one only lo; otherwise the comparison is void.
ifaces() {  # template -> interface names seen inside one of its sandboxes
  SANDPOOL_REDIS_URL=$REDIS_URL timeout 20 "$CLI_BIN" run --template "$1" \
    --shell "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | paste -sd, -" 2>&1 || true
}
IF_PLAIN=$(ifaces plain); IF_WEB=$(ifaces web)
log "interfaces inside a sandbox: plain: $IF_PLAIN; web: $IF_WEB"
[[ $IF_WEB == *eth0* && $IF_PLAIN != *eth0* ]] \
  || fail "the templates do not differ as expected (interfaces: plain '$IF_PLAIN', web '$IF_WEB')"
NFT_TABLES=$("${NSENTER[@]}" nft list tables 2>/dev/null | paste -sd';' || echo "nft not installed")
NS_LINKS=$(ip -n "$NS" -br link | grep -vc '^lo ' || true)

# ---- measurements: rounds of A/B, the order alternating ------------------------------------------
# Each measurement is run for both templates back to back, and the order flips every round
# (plain-web, web-plain, ...), so neither template always goes first: drift in the machine's load
# (the other engineer's builds) then falls on both alike. Each bench line is tagged with its round.
bench() {  # round template args...
  local round=$1 tpl=$2 rc=0 c0 c1; shift 2
  c0=$(pool_counters)
  timeout 300 "$BENCH_BIN" --redis "$REDIS_URL" --template "$tpl" --daemon-pid "$DAEMON_PID" \
    --redis-pid "$REDIS_PID" --idle-timeout-ms 15000 "$@" \
    > "$TMP/bench.jsonl" 2> >(tee -a "$OUT/network-bench.log" >&2) || rc=$?
  sed "s/^{/{\"round\":$round,/" "$TMP/bench.jsonl" >> "$RESULTS"
  # This run's pool hits and misses, added to its latency/throughput line as pool_hits/pool_misses.
  c1=$(pool_counters)
  "$PY" - "$RESULTS" "$tpl" "$c0" "$c1" <<'PY'
import json, re, sys
path, tpl, c0, c1 = sys.argv[1:5]
def get(text, kind):
    m = re.search(r'sandpool_pool_%s_total\{template="%s"\} ([0-9.e+]+)' % (kind, re.escape(tpl)), text)
    return float(m.group(1)) if m else None
lines = open(path).read().splitlines()
for i in range(len(lines) - 1, -1, -1):  # the last measurement line of this template
    r = json.loads(lines[i])
    if r.get("template") == tpl and r.get("mode") in ("latency", "throughput"):
        for kind in ("hits", "misses"):
            a, b = get(c0, kind), get(c1, kind)
            if a is not None and b is not None:
                r["pool_" + kind] = b - a
        lines[i] = json.dumps(r)
        break
open(path, "w").write("\n".join(lines) + "\n")
PY
  [[ $rc == 0 ]] || fail "sandpool_bench --template $tpl $* exited with $rc (bench/out/network-bench.log)"
}
COUNTERS_START=$(pool_counters)
for round in $(seq "$ROUNDS"); do
  if (( round % 2 )); then order=(plain web); else order=(web plain); fi
  log "round $round/$ROUNDS (${order[*]})"
  for tpl in "${order[@]}"; do
    bench "$round" "$tpl" --modes latency --kinds echo --n "$N" --warmup "$WARMUP"
  done
  for tpl in "${order[@]}"; do
    # The pools refill between the paced jobs anyway; start each series with them full too.
    wait_pools_full 20 || log "pools not full before paced $tpl: $(pool_state | paste -sd';')"
    bench "$round" "$tpl" --modes latency --kinds echo --n "$PACED_N" --warmup 5 --pace-ms "$PACE_MS"
  done
  for tpl in "${order[@]}"; do
    wait_pools_full 20 || log "pools not full before throughput $tpl: $(pool_state | paste -sd';')"
    bench "$round" "$tpl" --modes throughput --tp-kinds echo --tp-n "$TP_N" --warmup "$WARMUP" --inflight "$INFLIGHT"
  done
done
sleep 0.2   # let the tee'd stderr drain
COUNTERS_END=$(pool_counters)
# Both pools must come back full after the last run (a slot that fails to re-arm would show here).
wait_pools_full 20 || log "pools not full 20 s after the last run: $(pool_state | paste -sd';')"
POOLS_END=$(pool_state | paste -sd';')
DAEMON_ALIVE=$(kill -0 "$DAEMON_PID" 2>/dev/null && echo yes || echo no)

# ---- report ------------------------------------------------------------------------------------
log "writing bench/RESULTS-network.md"
"$PY" "$BENCH_DIR/network_report.py" --results "$RESULTS" --out "$BENCH_DIR/RESULTS-network.md" \
  --summary "$SUMMARY" --started "$T_START" --command "$CMDLINE" \
  --meta "quick=${BENCH_QUICK:-0}" --meta "rounds=$ROUNDS" --meta "n=$N" --meta "warmup=$WARMUP" --meta "paced_n=$PACED_N" \
  --meta "pace_ms=$PACE_MS" --meta "tp_n=$TP_N" --meta "inflight=$INFLIGHT" --meta "pool=$POOL" \
  --meta "daemon_flags=$(sed "s|$TMP|<tmp>|g" <<< "${DAEMON_FLAGS[*]}")" --meta "config=$(grep -v '^#' "$TMP/sandpool.conf" | paste -sd'|')" \
  --meta "if_plain=$IF_PLAIN" --meta "if_web=$IF_WEB" --meta "nft_tables=$NFT_TABLES" \
  --meta "ns_links=$NS_LINKS" --meta "pools_start=$POOLS_START" --meta "pools_end=$POOLS_END" \
  --meta "counters_start=$COUNTERS_START" --meta "counters_end=$COUNTERS_END" \
  --meta "daemon_alive=$DAEMON_ALIVE" --meta "redis=$(redis-server --version | cut -d' ' -f3)" \
  --meta "nft=$(nft --version 2>/dev/null || echo none)" \
  --daemon-log "$OUT/network-daemon.log"
log "done: bench/RESULTS-network.md"
