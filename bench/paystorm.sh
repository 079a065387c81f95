#!/usr/bin/env bash
# paystorm.sh - `make bench-paystorm`, also make bench's last phase: every
# buyer of a sale pays at once. How fast are the payments next to the
# sale they follow?
#
#   bench/paystorm.sh [BUILD_DIR]   (default build)
#
# Set-up: two seckilld instances from BUILD_DIR on 127.0.0.1:BENCH_PAYSTORM_PORT
# (17190) and the next port, at the service's defaults (bench/lib.sh)
# plus a payment provider's key (SECKILL_PAY_SECRET) and a pay timeout of
# an hour (nobody pays late here). Users from `seckilld tokens`
# (4,000,000,000 and up, their own file).
#
# One round: a voucher of BENCH_PAYSTORM_STOCK (20000) units sold out at
# 256 connections over both instances (bench/wrk/buy.lua, stopped at the
# first SOLD_OUT; purchases/s = stock / (first SOLD_OUT - first request),
# as make bench's selling phase); then every order's notification
# (POST /api/payments/notify, signed: bench/wrk/pay.lua) sent at 256
# connections over both instances, each once: payments/s = orders / (last
# payment answered - first sent). Then in MySQL: every order paid, each
# by its own transaction id (storm-<order id>), no refund, and stock +
# unpaid + paid = initial stock.
#
# BENCH_PAYSTORM_BASE=<another seckilld> runs each round with that binary
# too, right before BUILD_DIR's (alternating, on the same machine in the
# same minutes): the figures before and after a change. BENCH_PAYSTORM_ROUNDS
# (1) rounds; the median round of each binary counts.
#
# Writes bench/results/<UTC time>/ (summary.md, paystorm.json, raw/), or
# the report to BENCH_PAYSTORM_REPORT as well, and ends with
#   bench-paystorm pay_storm=<x> [base_pay_storm=<y>]
# pay_storm = payments/s / purchases/s of the same round. Exit 1 when an
# invariant is broken or a payment was not applied.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-build}
BIN=$ROOT/$BUILD/seckilld
NEW_BIN=$BIN
BASE_BIN=${BENCH_PAYSTORM_BASE:-}
LUA=$ROOT/bench/wrk/buy.lua
PAY_LUA=$ROOT/bench/wrk/pay.lua
STOCK=${BENCH_PAYSTORM_STOCK:-20000}
ROUNDS=${BENCH_PAYSTORM_ROUNDS:-1}
PORT=${BENCH_PAYSTORM_PORT:-17190}
PORT_Q=$((PORT + 1))
FIRST_USER=4000000000

for tool in wrk mariadb jq curl; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "bench: error: $tool not found (scripts/deps.sh bench)" >&2
        exit 1
    }
done
[[ -z $BASE_BIN || -x $BASE_BIN ]] || {
    echo "bench: error: BENCH_PAYSTORM_BASE=$BASE_BIN is not an executable" >&2
    exit 1
}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
TOKENS=$WORK/paystorm-users.csv
tokens_have=0
PAY_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
HOSTS=127.0.0.1:$PORT,127.0.0.1:$PORT_Q

# pay_wrk NAME ORDERS_FILE: every order's notification, once; the report
# in $RAW/NAME.json. wrk is stopped once both threads have their answers.
pay_wrk() {
    local name=$1 orders=$2 marker=$WORK/paid.$$ pid rc=0
    rm -f "$marker".*
    PAY_ORDERS=$orders PAY_SECRET=$PAY_SECRET PAY_AMOUNT=100 PAY_THREADS=2 \
        PAY_HOSTS=$HOSTS PAY_DONE_FILE=$marker PAY_REPORT=$RAW/$name.json \
        wrk -t2 -c256 -d600s --timeout 30s --latency -s "$PAY_LUA" \
        "http://127.0.0.1:$PORT/" >"$RAW/$name.txt" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        [[ -e $marker.0 && -e $marker.1 ]] && kill -INT "$pid" 2>/dev/null
        sleep 0.05
    done
    wait "$pid" || rc=$?
    rm -f "$marker".*
    ((rc == 0)) || { cat "$RAW/$name.txt" >&2; die "wrk $name failed"; }
    [[ -s $RAW/$name.json ]] || { cat "$RAW/$name.txt" >&2; die "wrk $name wrote no report"; }
}

# storm LABEL BINARY ROUND: one round with BINARY; appends its figures to
# $RAW/rounds.jsonl.
storm() {
    local label=$1 bin=$2 r=$3 pid_p pid_q v name sold_s sell_rate orders
    local paid txns refunds span_ms pay_rate verdict=ok f
    pid_p=$(BIN=$bin SECKILL_PAY_SECRET=$PAY_SECRET SECKILL_PAY_TIMEOUT_S=3600 \
        start_instance "$label-p-r$r" "$PORT")
    PIDS+=("$pid_p")
    pid_q=$(BIN=$bin SECKILL_PAY_SECRET=$PAY_SECRET SECKILL_PAY_TIMEOUT_S=3600 \
        start_instance "$label-q-r$r" "$PORT_Q")
    PIDS+=("$pid_q")
    v=$(new_voucher "$STOCK")
    name=sell-$label-r$r
    run_wrk "$name" 256 120 "$HOSTS" "/api/vouchers/$v/seckill" 1
    f=$RAW/$name.json
    sold_s=$(jq -r 'if .sold_out_after_s > 0 then .sold_out_after_s else .duration_s end' "$f")
    sell_rate=$(awk -v s="$STOCK" -v d="$sold_s" 'BEGIN { printf "%.0f", s / d }')
    check_voucher "$name" "$v" "$STOCK" "$(j "$f" .ok)"
    orders=$WORK/paystorm-orders.txt
    sql "SELECT id FROM voucher_orders WHERE voucher_id = $v AND status = 1" >"$orders"
    say "pay storm $label round $r: $STOCK sold in $sold_s s = $sell_rate purchases/s; $(wc -l <"$orders") orders to pay"
    name=pay-$label-r$r
    pay_wrk "$name" "$orders"
    f=$RAW/$name.json
    pay_rate=$(jq -r '.rate | floor' "$f")
    read -r paid txns refunds span_ms < <(sql "SELECT SUM(status = 2),
        SUM(txn_id = CONCAT('storm-', id)),
        (SELECT COUNT(*) FROM refunds r JOIN voucher_orders o ON o.id = r.order_id
         WHERE o.voucher_id = $v),
        TIMESTAMPDIFF(MICROSECOND, MIN(pay_time), MAX(pay_time)) DIV 1000
        FROM voucher_orders WHERE voucher_id = $v")
    check_voucher "$name" "$v" "$STOCK" 0
    if ((paid != STOCK || txns != STOCK || refunds != 0)) ||
        (($(j "$f" .paid) != STOCK)); then
        verdict=BROKEN
        BROKEN=1
    fi
    say "pay storm $label round $r: $(j "$f" .paid) orders answered paid (200), $(j "$f" .refused) refused, $(j "$f" .unavailable) unavailable, $(j "$f" .resent) sent again, in $(j "$f" .span_s) s = $pay_rate payments/s (p50 $(j "$f" .p50_ms) ms, p99 $(j "$f" .p99_ms) ms); MySQL: $paid paid, $txns by their own txn id, $refunds refunds, pay times span $span_ms ms -> $verdict"
    jq -nc --arg bin "$label" --argjson round "$r" --argjson voucher "$v" \
        --argjson stock "$STOCK" --argjson sold_s "$sold_s" \
        --argjson sell_rate "$sell_rate" --argjson pay_rate "$pay_rate" \
        --argjson pay_span_s "$(j "$f" .span_s)" --argjson paid_200 "$(j "$f" .paid)" \
        --argjson refused "$(j "$f" .refused)" --argjson unavailable "$(j "$f" .unavailable)" \
        --argjson p50 "$(j "$f" .p50_ms)" --argjson p99 "$(j "$f" .p99_ms)" \
        --argjson mysql_paid "$paid" --argjson mysql_own_txn "$txns" \
        --argjson refunds "$refunds" --argjson pay_time_span_ms "${span_ms:-0}" \
        --arg verdict "$verdict" \
        '{binary: $bin, round: $round, voucher: $voucher, stock: $stock,
          sold_out_s: $sold_s, purchases_per_s: $sell_rate,
          payments_per_s: $pay_rate, pay_span_s: $pay_span_s,
          paid_200: $paid_200, refused: $refused, unavailable: $unavailable,
          pay_p50_ms: $p50, pay_p99_ms: $p99, mysql_paid: $mysql_paid,
          mysql_own_txn: $mysql_own_txn, refunds: $refunds,
          pay_time_span_ms: $pay_time_span_ms,
          ratio: (if $sell_rate > 0 then $pay_rate / $sell_rate else 0 end),
          verdict: $verdict}' >>"$RAW/rounds.jsonl"
    kill -TERM "$pid_p" "$pid_q" 2>/dev/null || true
    for _ in $(seq 100); do
        kill -0 "$pid_p" 2>/dev/null || kill -0 "$pid_q" 2>/dev/null || break
        sleep 0.1
    done
}

say "results in ${OUT#"$ROOT"/}"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
say "pay storm: stock $STOCK, $ROUNDS round(s), binaries: new $NEW_BIN${BASE_BIN:+, base $BASE_BIN}; load average $LOAD_START on $(nproc) cores"
BIN=$NEW_BIN ensure_users $((STOCK * 2))
: >"$RAW/rounds.jsonl"
for ((r = 1; r <= ROUNDS; r++)); do
    [[ -n $BASE_BIN ]] && storm base "$BASE_BIN" "$r"
    storm new "$NEW_BIN" "$r"
done

# The median round of each binary (by its ratio).
median() { # LABEL: that label's median round as JSON
    jq -sc --arg l "$1" '[.[] | select(.binary == $l)] | sort_by(.ratio) |
        if length == 0 then null else .[(length - 1) / 2 | floor] end' "$RAW/rounds.jsonl"
}
NEW=$(median new)
BASE=$(median base)
jq -n --argjson new "$NEW" --argjson base "$BASE" --arg load "$LOAD_START" \
    --slurpfile rounds "$RAW/rounds.jsonl" \
    '{new: $new, base: $base, rounds: $rounds, load_start: $load}' >"$OUT/paystorm.json"
[[ -n ${BENCH_PAYSTORM_REPORT:-} ]] && cp "$OUT/paystorm.json" "$BENCH_PAYSTORM_REPORT"
{
    echo "# Pay storm $RUN_ID"
    echo
    echo "Every buyer of a $STOCK-unit sale pays at once (bench/paystorm.sh), 256 connections over two instances; load average at the start $LOAD_START on $(nproc) cores."
    echo
    echo "| binary | round | purchases/s | payments/s | ratio | pay p50 / p99 ms | verdict |"
    echo "|---|---|---|---|---|---|---|"
    jq -r '"| \(.binary) | \(.round) | \(.purchases_per_s) | \(.payments_per_s) | \(.ratio * 1000 | round / 1000) | \(.pay_p50_ms) / \(.pay_p99_ms) | \(.verdict) |"' \
        "$RAW/rounds.jsonl"
} >"$OUT/summary.md"
cat "$OUT/summary.md" >&2
line="bench-paystorm pay_storm=$(jq -r '.ratio * 1000 | round / 1000' <<<"$NEW")"
[[ $BASE != null ]] && line+=" base_pay_storm=$(jq -r '.ratio * 1000 | round / 1000' <<<"$BASE")"
echo "$line"
((BROKEN == 0)) || die "an invariant is broken or a payment was not applied (see above)"
