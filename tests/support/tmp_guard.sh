#!/usr/bin/env bash
# The test run's own temporary directory, and the check that a run leaves nothing in /tmp.
#   tmp_guard.sh setup DIR   (first test): makes DIR, the TMPDIR of every test, and a marker
#   tmp_guard.sh check DIR   (last test): fails if anything of ours appeared in /tmp outside DIR
#                            since setup; then removes DIR (daemon logs and all)
set -euo pipefail
mode=$1 dir=$2
marker="$dir/.started"
case $mode in
  setup)
    rm -rf "$dir"
    mkdir -p "$dir"
    chmod 755 "$dir"
    touch "$marker"
    ;;
  check)
    [[ -e $marker ]] || { echo "tmp_guard: no marker in $dir (was setup run?)"; exit 1; }
    left=$(find /tmp -mindepth 1 -maxdepth 1 -newer "$marker" \
             \( -name 'sandpool*' -o -name 'sp_*' -o -name 'pytest-of-*' -o -name '*.sock' \) \
             ! -path "$dir" 2>/dev/null || true)
    rm -rf "$dir"
    if [[ -n $left ]]; then
      echo "tmp_guard: the test run left these in /tmp:"
      echo "$left"
      exit 1
    fi
    echo "tmp_guard: nothing left in /tmp"
    ;;
  *) echo "usage: $0 setup|check DIR" >&2; exit 2 ;;
esac
