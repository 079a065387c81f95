#!/usr/bin/env bash
# run.sh - the Prometheus alerts of deploy/prometheus: promtool checks
# alerts.yml and runs its unit tests (alerts_test.yml), in which each alert
# fires for an unhealthy instance and not for a healthy one. Then the same
# tests on a copy of alerts.yml whose instance-down alert can never fire
# must fail, so that the tests are seen to notice a dead alert.
#
#   tests/alerts/run.sh
#
# Prints one line per check and "alerts: ok", or the first failure and
# exits 1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIR=$ROOT/deploy/prometheus

fail() {
    echo "alerts: FAIL: $*" >&2
    exit 1
}
ok() { echo "alerts: ok: $*"; }

command -v promtool >/dev/null 2>&1 ||
    fail "promtool not found (scripts/deps.sh installs prometheus)"

work=$(mktemp -d "${TMPDIR:-/tmp}/seckill-alerts.XXXXXX")
trap 'rm -rf "$work"' EXIT

msg=$(promtool check rules "$DIR/alerts.yml" 2>&1) ||
    fail "promtool check rules:"$'\n'"$msg"
ok "promtool check rules: $(grep -o '[0-9]* rules found' <<<"$msg")"

msg=$(cd "$DIR" && promtool test rules alerts_test.yml 2>&1) ||
    fail "promtool test rules:"$'\n'"$msg"
ok "promtool test rules: every alert fires and stays quiet as expected"

cp "$DIR/alerts_test.yml" "$work/"
sed 's/expr: up{job="seckilld"} == 0/expr: up{job="seckilld"} < 0/' \
    "$DIR/alerts.yml" >"$work/alerts.yml"
! cmp -s "$DIR/alerts.yml" "$work/alerts.yml" ||
    fail "could not break SeckilldDown in a copy of alerts.yml"
if (cd "$work" && promtool test rules alerts_test.yml >/dev/null 2>&1); then
    fail "the unit tests passed with SeckilldDown unable to fire"
fi
ok "the unit tests fail when an alert cannot fire"

echo "alerts: ok"
