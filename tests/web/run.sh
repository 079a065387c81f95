#!/usr/bin/env bash
# run.sh - the browser and OpenAPI tests (make test-web, part of make test).
#
#   tests/web/run.sh [BUILD_DIR]     (default build)
#
# Against BUILD_DIR/seckilld and the test servers of .run/env.test:
#   1. lint docs/openapi.yaml (@redocly/cli, the recommended-strict rules:
#      a warning fails too);
#   2. check that docs/openapi.json, which the binary serves, is the YAML
#      as JSON (`make openapi` writes it);
#   3. tests/web/openapi.mjs: live traffic through Prism's validating
#      proxy;
#   4. tests/web/browser.mjs: both pages in headless Chromium, with
#      screenshots in build/screenshots/;
#   5. tests/web/a11y.mjs: axe-core's accessibility rules on both pages
#      in each state, at a phone's width and a desktop's (no serious or
#      critical violation).
# The packages come from tests/package-lock.json (scripts/npm.sh). Prints
# one line per step and ends with "web: N passed, N failed".
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-build}
cd "$ROOT" || exit 1
[[ -x $BUILD/seckilld ]] || { echo "run.sh: $BUILD/seckilld not built" >&2; exit 1; }
[[ -f .run/env.test ]] || { echo "run.sh: .run/env.test missing; run make services" >&2; exit 1; }
# An empty test database: the suites before this one leave over a
# thousand live sales in it, and the home page lists the 50 ending
# soonest, so a sale of the browser test's could miss the first page.
scripts/services.sh reset-test >/dev/null || { echo "run.sh: reset-test failed" >&2; exit 1; }
set -a
# shellcheck source=/dev/null
. .run/env.test
set +a
export SECKILL_BIN=$ROOT/$BUILD/seckilld
# Redocly's CLI would report usage and look for updates over the network.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
BIN=$ROOT/tests/node_modules/.bin
LOGS=$ROOT/build/web
mkdir -p "$LOGS"

passed=0
failed=0
step() { # name command...
    local name=$1 start=$SECONDS
    shift
    if "$@"; then
        passed=$((passed + 1))
        echo "=== web/$name: ok ($((SECONDS - start)) s)"
    else
        failed=$((failed + 1))
        echo "=== web/$name: FAILED ($((SECONDS - start)) s)"
    fi
}

lint() {
    "$BIN/redocly" lint docs/openapi.yaml --extends recommended-strict \
        --format stylish >"$LOGS/redocly-lint.log" 2>&1
    local rc=$?
    grep -vE '^$|No configurations|Unknown user config' "$LOGS/redocly-lint.log"
    return $rc
}

in_sync() {
    "$BIN/redocly" bundle docs/openapi.yaml --ext json \
        -o "$LOGS/openapi.json" >"$LOGS/redocly-bundle.log" 2>&1 ||
        { cat "$LOGS/redocly-bundle.log"; return 1; }
    cmp -s "$LOGS/openapi.json" docs/openapi.json && return 0
    echo "docs/openapi.json is not docs/openapi.yaml as JSON: run make openapi"
    return 1
}

step openapi-lint lint
step openapi-json in_sync
step openapi-traffic node tests/web/openapi.mjs
step browser node tests/web/browser.mjs
step a11y node tests/web/a11y.mjs

echo
echo "web: $passed passed, $failed failed"
((failed == 0))
