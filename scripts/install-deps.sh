#!/usr/bin/env bash
# Installs the Debian 12 packages sandpool needs to build, test and run. Idempotent: packages
# already present are skipped, and apt-get update runs only when something is missing.
# Needs root (or sudo). Set SANDPOOL_DEPS_EXTRA="pkg ..." to add more.
set -euo pipefail

# The package names: deploy/container/packages.txt (shared with the container image's builds),
# the "build" and "test" sets. nodejs and npm only where no node is on the machine (>= 20; a
# Node already there, e.g. from NodeSource, is used as it is).
list="$(cd "$(dirname "$0")/.." && pwd)/deploy/container/packages.txt"
packages=()
while read -r name sets; do
  case "$name" in ''|'#'*) continue ;; esac
  case " $sets " in *" build "*|*" test "*) ;; *) continue ;; esac
  if [ "$name" = nodejs ] || [ "$name" = npm ]; then command -v node >/dev/null 2>&1 && continue; fi
  packages+=("$name")
done <"$list"
# shellcheck disable=SC2206
packages+=(${SANDPOOL_DEPS_EXTRA:-})

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# The redis-server package would start a system Redis on 6379; sandpool starts its own.
$SUDO mkdir -p /usr/sbin
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
fi
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
