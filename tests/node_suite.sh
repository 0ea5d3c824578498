#!/usr/bin/env bash
# One Node package's test suite (clients/typescript, clients/mastra or tests/deploy) against the daemon built
# here: installs its dependencies from its lock file (npm ci), builds it, runs `npm test`.
# Needs Node >= 20: the TypeScript client's engine; the Mastra package states @mastra/core's (>= 22.13.0),
# and its tests run on 20 with an engine warning.
set -euo pipefail
dir=$1
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 20 ]; then
  echo "node_suite: Node >= 20 is needed for $dir (found: $(node --version 2>/dev/null || echo none))" >&2
  exit 1
fi
cd "$dir"
export npm_config_cache="${TMPDIR:-/tmp}/npm-cache" npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
npm ci --no-audit --no-fund --loglevel=error
npm test
