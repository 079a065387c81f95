#!/usr/bin/env bash
# run.sh - a real Prometheus scraping a real seckilld: the service's
# /metrics as Prometheus and promtool read it.
#
#   tests/prometheus/run.sh BUILD_DIR
#
# Starts BUILD_DIR/seckilld on a free loopback port with the settings of
# .run/env.test (/metrics answers loopback by default, through
# SECKILL_METRICS_ALLOW), sends it some traffic (a voucher created and
# bought, an unknown path) so that the labelled series have values, then
#   - promtool check metrics has nothing to say about its /metrics text
#     (HELP and TYPE for every family, counters ending in _total, base
#     units), and does complain about a counter without _total (so the
#     check is seen to notice);
#   - Debian's prometheus, with a generated configuration scraping that
#     instance every second as job "seckilld" and loading
#     deploy/prometheus/alerts.yml, reports up == 1 for it through its HTTP
#     API (/api/v1/query?query=up) within 30 s, the target healthy with no
#     scrape error, the service's series stored, and every alerting rule
#     loaded and healthy.
# Everything listens on 127.0.0.1 and lives in a temporary folder; both
# processes are stopped and the folder removed on exit. Prints one line
# per check and "prometheus: ok", or the first failure and exits 1.
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

fail() {
    echo "prometheus: FAIL: $*" >&2
    exit 1
}
ok() { echo "prometheus: ok: $*"; }

(($# == 1)) || {
    echo "usage: tests/prometheus/run.sh BUILD_DIR" >&2
    exit 2
}
BIN=$ROOT/${1%/}/seckilld
[[ -x $BIN ]] || fail "$BIN not found (make build)"
for tool in prometheus promtool curl jq ss; do
    command -v "$tool" >/dev/null 2>&1 ||
        fail "$tool not found (scripts/deps.sh installs it)"
done
[[ -f $ROOT/.run/env.test ]] || fail ".run/env.test not found (make services)"
# shellcheck source=tests/lib/ports.sh
. "$ROOT/tests/lib/ports.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/seckill-prometheus.XXXXXX")
pids=()
cleanup() {
    local rc=$? pid
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if ((rc != 0)); then
        for log in "$work"/*.log; do
            echo "---- last lines of $(basename "$log") ----" >&2
            tail -10 "$log" >&2
        done
    fi
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT

# ---- the service, with some traffic ----

port=$(free_port)
api=http://127.0.0.1:$port
(
    set -a
    # shellcheck disable=SC1091
    . "$ROOT/.run/env.test"
    set +a
    unset SECKILL_METRICS_ALLOW # the default: loopback
    exec "$BIN" serve --port "$port"
) >"$work/seckilld.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 1 \
        "$api/readyz" || true) == 200 ]] && break
    sleep 0.1
done
[[ $(curl -s -o /dev/null -w '%{http_code}' "$api/readyz") == 200 ]] ||
    fail "seckilld did not become ready on $api"

secret=$(. "$ROOT/.run/env.test" && echo "$SECKILL_SECRET")
admin=$(SECKILL_SECRET=$secret "$BIN" token --user 1 --admin)
buyer=$(SECKILL_SECRET=$secret "$BIN" token --user 424242)
begin=$(date -u -d '-1 min' +%Y-%m-%dT%H:%M:%SZ)
end=$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)
voucher=$(curl -s -X POST "$api/api/vouchers" \
    -H "Authorization: Bearer $admin" \
    --json "{\"shopId\":7,\"title\":\"scrape\",\"payValue\":100,
             \"actualValue\":200,\"type\":\"seckill\",\"stock\":5,
             \"beginTime\":\"$begin\",\"endTime\":\"$end\"}" | jq -r .id)
[[ $voucher =~ ^[0-9]+$ ]] || fail "creating a voucher: $voucher"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST \
    "$api/api/vouchers/$voucher/seckill" -H "Authorization: Bearer $buyer")
[[ $code == 201 ]] || fail "a purchase answered $code"
curl -s -o /dev/null "$api/no/such/path"
ok "seckilld on $api: a voucher sold, an unknown path asked for"

# ---- promtool check metrics ----

curl -sf "$api/metrics" >"$work/metrics.txt" || fail "GET /metrics"
grep -q '^seckill_purchases_total{outcome="ok"} 1$' "$work/metrics.txt" ||
    fail "/metrics does not count the purchase"
msg=$(promtool check metrics <"$work/metrics.txt" 2>&1) ||
    fail "promtool check metrics:"$'\n'"$msg"
[[ -z $msg ]] || fail "promtool check metrics says:"$'\n'"$msg"
families=$(grep -c '^# TYPE ' "$work/metrics.txt")
ok "promtool check metrics: nothing to say about $families families"
printf '# HELP seckill_x A counter.\n# TYPE seckill_x counter\nseckill_x 1\n' \
    >"$work/bad.txt"
msg=$(promtool check metrics <"$work/bad.txt" 2>&1) || true
[[ $msg == *_total* ]] ||
    fail "promtool check metrics passed a counter without _total: '$msg'"
ok "promtool check metrics does complain about a counter without _total"

# ---- a real Prometheus scraping it ----

prom_port=$(free_port)
prom=http://127.0.0.1:$prom_port
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $ROOT/deploy/prometheus/alerts.yml
scrape_configs:
  - job_name: seckilld
    static_configs:
      - targets: ['127.0.0.1:$port']
EOF
promtool check config "$work/prometheus.yml" >"$work/check-config.log" 2>&1 ||
    fail "promtool check config: $(cat "$work/check-config.log")"
prometheus --config.file="$work/prometheus.yml" \
    --storage.tsdb.path="$work/data" \
    --web.listen-address="127.0.0.1:$prom_port" \
    --log.level=warn >"$work/prometheus.log" 2>&1 &
pids+=($!)

query() { # promql
    curl -s --max-time 2 -G "$prom/api/v1/query" --data-urlencode "query=$1"
}
up=
t=$SECONDS
for _ in $(seq 300); do
    up=$(query "up{job=\"seckilld\",instance=\"127.0.0.1:$port\"}" 2>/dev/null |
        jq -r '.data.result[0].value[1] // empty' 2>/dev/null || true)
    [[ $up == 1 ]] && break
    sleep 0.1
done
[[ $up == 1 ]] || fail "Prometheus did not report up == 1 within 30 s (up: '$up')"
ok "Prometheus ($prom) reports up == 1 for 127.0.0.1:$port after $((SECONDS - t)) s"

target=$(curl -s "$prom/api/v1/targets" |
    jq -c '.data.activeTargets[] | select(.labels.job == "seckilld")
           | {health, lastError}')
[[ $target == '{"health":"up","lastError":""}' ]] ||
    fail "the target: $target"
sold=$(query 'seckill_purchases_total{job="seckilld",outcome="ok"}' |
    jq -r '.data.result[0].value[1] // empty')
[[ $sold == 1 ]] || fail "Prometheus stored seckill_purchases_total{outcome=\"ok\"} as '$sold'"
ok "the target is healthy with no scrape error; seckill_purchases_total{outcome=\"ok\"} = 1 stored"

rules=$(curl -s "$prom/api/v1/rules?type=alert" |
    jq -r '[.data.groups[].rules[]] | "\(length) \(map(select(.health != "ok" and .health != "unknown")) | length)"')
read -r n_rules n_bad <<<"$rules"
expected=$(promtool check rules "$ROOT/deploy/prometheus/alerts.yml" 2>&1 |
    grep -o '[0-9]* rules found' | grep -o '^[0-9]*')
((n_rules == expected && n_bad == 0)) ||
    fail "Prometheus loaded $n_rules alerting rules ($n_bad unhealthy), alerts.yml has $expected"
ok "Prometheus loaded the $n_rules alerting rules of alerts.yml, none unhealthy"

echo "prometheus: ok"
