#!/usr/bin/env bash
# The one command that runs every test: C++ unit tests, sandbox tests, integration tests of the
# daemon against a real redis-server, the hostile suite, and the Python client's tests.
# Installs what is missing first. Needs root (sandboxes). ctest prints the closing summary.
#   SANDPOOL_SANITIZE=address,undefined scripts/test.sh   also builds build-asan and runs the
#                                                          C++ tests under the sanitizers
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then exec sudo -E bash "$0" "$@"; fi
bash "$root/scripts/install-deps.sh"
jobs=$(nproc)
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$root/build" -j"$jobs"
if [ -n "${SANDPOOL_SANITIZE:-}" ]; then
  cmake -S "$root" -B "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug -DSANDPOOL_SANITIZE="$SANDPOOL_SANITIZE"
  cmake --build "$root/build-asan" -j"$jobs"
  ctest --test-dir "$root/build-asan" --output-on-failure -LE e2e
fi
ctest --test-dir "$root/build" --output-on-failure --timeout 1800
