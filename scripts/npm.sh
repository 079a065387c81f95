#!/usr/bin/env bash
# npm.sh - install the npm packages of the browser and OpenAPI tests into
# tests/node_modules, exactly as tests/package-lock.json pins them (npm
# ci), unless that lock file is installed already.
#
# Needs node and npm (scripts/deps.sh web). Talks only to the npm registry.
set -euo pipefail

die() { echo "npm.sh: error: $*" >&2; exit 1; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT/tests"
command -v npm >/dev/null 2>&1 || die "npm not found; run scripts/deps.sh web"

stamp=node_modules/.seckill-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
    exit 0
fi
echo "npm.sh: installing the test packages (npm ci in tests/)"
npm ci --no-audit --no-fund --loglevel=error || die "npm ci failed"
echo "$want" >"$stamp"
