#!/usr/bin/env bash
# Writes the mixin's files into generated/ from the jsonnet sources (Debian: apt install jsonnet).
#   deploy/monitoring/generate.sh           regenerate generated/
#   deploy/monitoring/generate.sh --check   fail if generated/ is not what the sources make
#   deploy/monitoring/generate.sh --out DIR [--config JSONNET]   write elsewhere, with _config
#                                            overrides (the integration test's short `for`s)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="$here/generated"
config="{}"
check=""
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1 ;;
    --out) out="$2"; shift ;;
    --config) config="$2"; shift ;;
    *) echo "usage: $0 [--check] [--out DIR] [--config JSONNET]" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$check" ]; then
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/sandpool-mixin-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  jsonnet -S -m "$tmp" --tla-code "config=$config" "$here/build.jsonnet" >/dev/null
  if ! diff -ru "$here/generated" "$tmp"; then
    echo "generated/ is stale: run deploy/monitoring/generate.sh and commit the result" >&2
    exit 1
  fi
  exit 0
fi
mkdir -p "$out"
jsonnet -S -m "$out" --tla-code "config=$config" "$here/build.jsonnet" >/dev/null
