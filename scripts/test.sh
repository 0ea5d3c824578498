#!/usr/bin/env bash
# The one command that runs every test: C++ unit tests, sandbox tests, integration tests of the
# daemon against a real redis-server, the hostile suite, and the Python, TypeScript and Mastra
# clients' tests. Installs what is missing first. Needs root (sandboxes). ctest prints the
# closing summary. Warnings are errors here (not in a user's build).
#   SANDPOOL_SANITIZE=address,undefined scripts/test.sh   also builds build-asan and runs the
#                                                          C++ tests under the sanitizers
#   SANDPOOL_ALL_BUILDS=1 scripts/test.sh                  also builds Release with GCC and the
#                                                          whole tree with clang (with the fuzzers,
#                                                          which run briefly)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" -ne 0 ]; then exec sudo -E bash "$0" "$@"; fi
extra_deps=""
# CI (SANDPOOL_ALL_BUILDS) also installs systemd's tools for the unit file's checks (tests skip
# them where systemd-analyze is missing), and turns the container test on
# (tests/integration/test_podman.py; opt-in otherwise: SANDPOOL_CONTAINER_TESTS=1), which needs
# podman, runc and mmdebstrap and the image (built before the tests, once: scripts/build-image.sh).
if [ -n "${SANDPOOL_ALL_BUILDS:-}" ]; then
  extra_deps="clang libclang-rt-14-dev systemd"
  export SANDPOOL_CONTAINER_TESTS=${SANDPOOL_CONTAINER_TESTS:-1}
fi
if [ "${SANDPOOL_CONTAINER_TESTS:-}" = 1 ]; then extra_deps="$extra_deps podman runc mmdebstrap"; fi
SANDPOOL_DEPS_EXTRA="${SANDPOOL_DEPS_EXTRA:-} $extra_deps" bash "$root/scripts/install-deps.sh"
jobs=$(nproc)
werror=-DCMAKE_COMPILE_WARNING_AS_ERROR=ON

step() { printf '\n=== %s ===\n' "$*"; }

if [ -n "${SANDPOOL_ALL_BUILDS:-}" ]; then
  step "Release build with GCC (build-release)"
  cmake -S "$root" -B "$root/build-release" -DCMAKE_BUILD_TYPE=Release -DSANDPOOL_BUILD_TESTS=OFF $werror >/dev/null
  cmake --build "$root/build-release" -j"$jobs"
  step "clang build with the fuzzers (build-clang)"
  CXX=clang++ cmake -S "$root" -B "$root/build-clang" -DCMAKE_BUILD_TYPE=Debug -DSANDPOOL_FUZZ=ON $werror >/dev/null
  cmake --build "$root/build-clang" -j"$jobs"
  ctest --test-dir "$root/build-clang" --output-on-failure -L fuzz
fi

if [ "${SANDPOOL_CONTAINER_TESTS:-}" = 1 ]; then
  # From build-release's binaries (made above under SANDPOOL_ALL_BUILDS, else here); the
  # container test's own call then finds the image cached.
  step "container image (scripts/build-image.sh)"
  bash "$root/scripts/build-image.sh"
fi

step "main build (build)"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo $werror >/dev/null
cmake --build "$root/build" -j"$jobs"
if [ -n "${SANDPOOL_SANITIZE:-}" ]; then
  step "C++ tests under $SANDPOOL_SANITIZE (build-asan)"
  cmake -S "$root" -B "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug -DSANDPOOL_SANITIZE="$SANDPOOL_SANITIZE" $werror >/dev/null
  cmake --build "$root/build-asan" -j"$jobs"
  ctest --test-dir "$root/build-asan" --output-on-failure -LE e2e
fi
step "every test (build)"
ctest --test-dir "$root/build" --output-on-failure --timeout 1800
