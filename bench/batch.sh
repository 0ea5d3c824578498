#!/usr/bin/env bash
# Batch clients (bench/batch_bench.py): builds sandpool and sandpoold, dumps the daemon's CLAIM and
# FINISH scripts for the stand-in, installs the BullMQ peer, runs, writes bench/RESULTS-batch.md.
#   bash bench/batch.sh                      # 100k jobs per client (naive loop and real daemon: 3k)
#   BENCH_BATCH_N=20000 bash bench/batch.sh  # smaller
# Not run by the tests (bench/ is not part of CI). Needs root for the real-daemon row.
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
N=${BENCH_BATCH_N:-100000}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
nice -n 10 cmake --build "$ROOT/build" -j2 --target sandpool sandpoold sandpool_dump_scripts >/dev/null
"$ROOT/build/bin/sandpool_dump_scripts" claim > "$OUT/claim.lua"
"$ROOT/build/bin/sandpool_dump_scripts" finish > "$OUT/finish.lua"
# The BullMQ peer gets a directory of its own (bench/out/bullmq-peer): bullmq and ioredis only,
# the versions of bench/peers/package.json, without @mastra/core.
PEER=$BENCH_DIR/out/bullmq-peer
mkdir -p "$PEER"
cp "$BENCH_DIR/peers/bullmq_bulk.mjs" "$BENCH_DIR/peers/common.mjs" "$PEER/"
echo '{"name":"bullmq-bulk-peer","private":true,"type":"module","dependencies":{"bullmq":"6.7.0","ioredis":"^5.11.1"}}' \
  > "$PEER/package.json"
if [[ ! -d $PEER/node_modules/bullmq ]]; then
  (cd "$PEER" && npm install --no-audit --no-fund --loglevel=error) || echo "batch.sh: no BullMQ peer" >&2
fi
CMD="bash bench/batch.sh"; [[ $N != 100000 ]] && CMD="BENCH_BATCH_N=$N $CMD"
/usr/bin/python3 "$BENCH_DIR/batch_bench.py" all --n "$N" --scripts "$OUT" --bullmq-dir "$PEER" --cmdline "$CMD"
