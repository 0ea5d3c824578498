#!/usr/bin/env bash
# The one command to try sandpool on a fresh Debian 12 machine:
#   scripts/quickstart.sh          install what is missing, build, start a private Redis and
#                                  sandpoold (state in .sandpool/), and run a job through them
#   scripts/quickstart.sh stop     stop both
# sandpoold needs root (namespaces, cgroups); job code never runs as root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then exec sudo -E bash "$0" "$@"; fi
state=${SANDPOOL_HOME:-$root/.sandpool}
sock=$state/redis.sock
url=unix://$sock
consumer=quickstart

stop() {
  [ -f "$state/sandpoold.pid" ] && kill "$(cat "$state/sandpoold.pid")" 2>/dev/null || true
  [ -f "$state/redis.pid" ] && kill "$(cat "$state/redis.pid")" 2>/dev/null || true
  rm -f "$state/sandpoold.pid"
  echo "stopped"
}
if [ "${1:-}" = stop ]; then stop; exit 0; fi

bash "$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$root/build" -j"$(nproc)" --target sandpoold sandpool

mkdir -p "$state"
chmod 700 "$state"
if ! redis-cli -s "$sock" PING >/dev/null 2>&1; then
  # Private Redis: unix socket only (no TCP port), owner-only, with an append-only file so a
  # restart loses no job.
  redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 --dir "$state" \
    --appendonly yes --daemonize yes --pidfile "$state/redis.pid" --logfile "$state/redis.log"
  for _ in $(seq 50); do redis-cli -s "$sock" PING >/dev/null 2>&1 && break; sleep 0.1; done
fi
if ! { [ -f "$state/sandpoold.pid" ] && kill -0 "$(cat "$state/sandpoold.pid")" 2>/dev/null; }; then
  nohup "$root/build/bin/sandpoold" --redis "$url" --metrics-addr 127.0.0.1:9464 --workers 4 \
    --consumer "$consumer" >"$state/sandpoold.log" 2>&1 &
  echo $! >"$state/sandpoold.pid"
  for _ in $(seq 100); do
    [ "$(redis-cli -s "$sock" EXISTS "sandpool:daemon:$consumer")" = 1 ] && break
    kill -0 "$(cat "$state/sandpoold.pid")" 2>/dev/null || { cat "$state/sandpoold.log"; exit 1; }
    sleep 0.1
  done
fi

echo
echo "== a job: sandpool run --shell 'echo hello from \$(hostname) as uid \$(id -u); ls /; echo to stderr >&2; exit 3'"
set +e
"$root/build/bin/sandpool" --redis "$url" run --shell 'echo hello from $(hostname) as uid $(id -u); ls /; echo to stderr >&2; exit 3'
code=$?
set -e
echo "== the CLI exited with the job's exit code: $code"
cat <<TXT

sandpoold is running (log: $state/sandpoold.log, metrics: http://127.0.0.1:9464/metrics).
Try:   export SANDPOOL_REDIS_URL=$url
       $root/build/bin/sandpool run -- python3 -c 'print(6*7)'
       $root/build/bin/sandpool status
Stop:  $root/scripts/quickstart.sh stop
TXT
