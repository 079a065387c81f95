#!/usr/bin/env bash
# crowd.sh - the crowd phase of the benchmark: a sale's audience waiting
# on keep-alive connections while its buyers buy. `make bench` runs it as
# its last phase (bench/run.sh sources this file and calls crowd_phase;
# BENCH_CROWD=0 skips it); `make bench-crowd` runs it alone:
#
#   bench/crowd.sh [BUILD_DIR]   (default build)
#
# One instance on BENCH_PORT+7, at the service's defaults except
# SECKILL_CONN_TIMEOUT_S=120 (each idle connection asks once in 100 s on
# average, and the default 30 s idle timeout would close it before). Then:
#   1. alone: wrk buys at 256 connections for BENCH_CROWD_BUY_SECONDS (10)
#      on a fresh voucher with more stock than that sells, while the
#      head-of-line probe (GET /healthz, a fresh connection each) runs:
#      purchases/s, /healthz p99, and the resident memory (VmRSS) before
#      and during (its growth / 256: what a buying connection costs, the
#      purchases' own memory included);
#   2. the crowd (bench/crowd.c): BENCH_CROWD_CONNS (50000) keep-alive
#      connections from 127.0.0.2-20, or as many as the descriptor limit
#      allows (the hard RLIMIT_NOFILE less 512), each answered once, then
#      1% of them asking a second (a voucher read or a queue poll);
#      VmRSS once it stands (per idle connection: the growth / connections);
#   3. the same purchase and probe as in 1 with the crowd standing.
# Reported: crowd_rss_mib, VmRSS with the crowd and the buyers (at
# 50,000 connections: measured when that many were open, else the base
# plus 50,000 times the measured cost of one), crowd_hol_p99_ms (the
# probe's p99 during 3) and crowd_buy_ratio (purchases/s of 3 / of 1).
# BENCH_CROWD_BIN measures another seckilld binary (an older build).
# Run alone it ends with
#   bench-crowd crowd_rss_mib=<m> crowd_hol_p99_ms=<p> crowd_buy_ratio=<r>

# crowd_phase: the phase above; sets the CROWD_* variables.
crowd_phase() {
    local port=$((PORT + 7)) bin=${BENCH_CROWD_BIN:-$BIN} pid want hard
    local secs=${BENCH_CROWD_BUY_SECONDS:-10} v f crowd_pid t0 kib
    local crowd=$ROOT/${BUILD:-build}/bench/crowd
    CROWD_BIN=$bin
    [[ -x $crowd ]] || die "$crowd missing (make ${BUILD:-build}/bench/crowd)"
    want=${BENCH_CROWD_CONNS:-50000}
    hard=$(ulimit -Hn)
    CROWD_N=$want
    ((CROWD_N <= hard - 512)) || CROWD_N=$((hard - 512))
    ((CROWD_N < want)) &&
        say "crowd: the descriptor limit ($hard) allows $CROWD_N of the $want connections; the memory at $want is projected"
    pid=$(BIN=$bin SECKILL_CONN_TIMEOUT_S=120 start_instance crowd "$port")
    PIDS+=("$pid")
    rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$pid/status"; }
    sleep 1
    CROWD_BASE_KIB=$(rss_kib)

    # 1. The buyers alone.
    ensure_users 200000
    v=$(VOUCHER_PORT=$port new_voucher "$tokens_have")
    hol_probe crowd-hol-alone "$port"
    (sleep "$(awk -v s="$secs" 'BEGIN { print s * 0.6 }')"; rss_kib >"$RAW/crowd-busy.kib") &
    f=$!
    run_wrk crowd-buy-alone 256 "$secs" "127.0.0.1:$port,127.0.0.1:$port" "/api/vouchers/$v/seckill"
    wait "$f"
    wait "$HOL_PID"
    check_voucher crowd-buy-alone "$v" "$tokens_have" "$(j "$RAW/crowd-buy-alone.json" .ok)"
    CROWD_BUSY_KIB=$(cat "$RAW/crowd-busy.kib")
    CROWD_BUY_ALONE=$(jq -r '.ok / .duration_s | floor' "$RAW/crowd-buy-alone.json")
    read -r CROWD_HOL_ALONE_P50 CROWD_HOL_ALONE_P99 CROWD_HOL_ALONE_MAX <<<"$(hol_stats crowd-hol-alone)"
    say "crowd: alone: $CROWD_BUY_ALONE purchases/s at 256 connections, /healthz p99 $CROWD_HOL_ALONE_P99 ms, VmRSS $((CROWD_BASE_KIB / 1024)) MiB idle, $((CROWD_BUSY_KIB / 1024)) MiB buying"

    # 2. The crowd stands up.
    rm -f "$WORK/crowd.ready"
    say "crowd: opening $CROWD_N keep-alive connections"
    "$crowd" --port "$port" --conns "$CROWD_N" --voucher "$v" \
        --token "$(sed -n 2p "$TOKENS" | cut -d, -f2)" --seconds 600 \
        --ready "$WORK/crowd.ready" --json "$RAW/crowd.json" \
        >"$RAW/crowd.txt" 2>&1 &
    crowd_pid=$!
    t0=$SECONDS
    until [[ -e $WORK/crowd.ready ]]; do
        kill -0 "$crowd_pid" 2>/dev/null || { cat "$RAW/crowd.txt" >&2; die "the crowd stopped before it stood"; }
        ((SECONDS - t0 < 300)) || die "the crowd did not stand within 300 s"
        sleep 0.5
    done
    sleep 2
    CROWD_IDLE_KIB=$(rss_kib)
    CROWD_OPEN=$(ss -Htn state established "( sport = :$port )" | wc -l)
    say "crowd: $CROWD_OPEN connections open on :$port after $(cat "$WORK/crowd.ready") ms; VmRSS $((CROWD_IDLE_KIB / 1024)) MiB"

    # 3. The buyers again, with the crowd.
    v=$(VOUCHER_PORT=$port new_voucher "$tokens_have")
    hol_probe crowd-hol "$port"
    run_wrk crowd-buy 256 "$secs" "127.0.0.1:$port,127.0.0.1:$port" "/api/vouchers/$v/seckill"
    wait "$HOL_PID"
    CROWD_END_KIB=$(rss_kib)
    CROWD_HWM_KIB=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")
    kill -TERM "$crowd_pid" 2>/dev/null || true
    wait "$crowd_pid" || true
    check_voucher crowd-buy "$v" "$tokens_have" "$(j "$RAW/crowd-buy.json" .ok)"
    CROWD_BUY_WITH=$(jq -r '.ok / .duration_s | floor' "$RAW/crowd-buy.json")
    read -r CROWD_HOL_P50 CROWD_HOL_P99 CROWD_HOL_MAX <<<"$(hol_stats crowd-hol)"
    CROWD_BUY_RATIO=$(ratio "$CROWD_BUY_WITH" "$CROWD_BUY_ALONE")
    # Per connection: idle (the crowd's growth) and buying (wrk's growth
    # mid-run, with what the purchases allocate).
    CROWD_IDLE_CONN_KIB=$(awk -v a="$CROWD_IDLE_KIB" -v b="$CROWD_BASE_KIB" -v n="$CROWD_N" 'BEGIN { printf "%.2f", (a - b) / n }')
    CROWD_BUSY_CONN_KIB=$(awk -v a="$CROWD_BUSY_KIB" -v b="$CROWD_BASE_KIB" 'BEGIN { printf "%.1f", (a - b) / 256 }')
    kib=$CROWD_END_KIB
    ((CROWD_N >= 50000)) ||
        kib=$(awk -v e="$CROWD_END_KIB" -v per="$CROWD_IDLE_CONN_KIB" -v n="$CROWD_N" 'BEGIN { printf "%.0f", e + per * (50000 - n) }')
    CROWD_RSS_MIB=$(awk -v k="$kib" 'BEGIN { printf "%.1f", k / 1024 }')
    say "crowd: with $CROWD_N idle connections: $CROWD_BUY_WITH purchases/s (alone $CROWD_BUY_ALONE: ratio $CROWD_BUY_RATIO), /healthz p50 $CROWD_HOL_P50 ms p99 $CROWD_HOL_P99 ms max $CROWD_HOL_MAX ms; VmRSS $((CROWD_END_KIB / 1024)) MiB (VmHWM $((CROWD_HWM_KIB / 1024))), $CROWD_IDLE_CONN_KIB KiB per idle connection, $CROWD_BUSY_CONN_KIB KiB per buying one (purchases included); at 50,000: $CROWD_RSS_MIB MiB"
    say "crowd: the crowd's own requests: $(jq -c '{requests, answers, ok_2xx, client_4xx, server_5xx, p50_ms, p99_ms, connect_errors, closed_by_server}' "$RAW/crowd.json")"
    kill -TERM "$pid" 2>/dev/null || true
}

# crowd_json: the phase's figures as one JSON object.
crowd_json() {
    jq -n --arg bin "${CROWD_BIN#"$ROOT"/}" --argjson want "${BENCH_CROWD_CONNS:-50000}" --argjson n "$CROWD_N" \
        --argjson open "$CROWD_OPEN" --argjson base "$CROWD_BASE_KIB" \
        --argjson busy "$CROWD_BUSY_KIB" --argjson idle "$CROWD_IDLE_KIB" \
        --argjson final "$CROWD_END_KIB" --argjson hwm "$CROWD_HWM_KIB" \
        --argjson per_idle "$CROWD_IDLE_CONN_KIB" --argjson per_busy "$CROWD_BUSY_CONN_KIB" \
        --argjson rss "$CROWD_RSS_MIB" --argjson alone "$CROWD_BUY_ALONE" \
        --argjson with "$CROWD_BUY_WITH" --argjson r "$CROWD_BUY_RATIO" \
        --argjson h50 "$CROWD_HOL_P50" --argjson h99 "$CROWD_HOL_P99" --argjson hmax "$CROWD_HOL_MAX" \
        --argjson a50 "$CROWD_HOL_ALONE_P50" --argjson a99 "$CROWD_HOL_ALONE_P99" \
        --slurpfile crowd "$RAW/crowd.json" \
        '{binary: $bin, connections_wanted: $want, connections: $n, established_seen: $open,
          vmrss_kib: {before: $base, buying_alone: $busy, crowd_standing: $idle,
                      crowd_and_buying: $final, vmhwm: $hwm},
          kib_per_idle_connection: $per_idle, kib_per_buying_connection: $per_busy,
          rss_mib_at_50000: $rss,
          purchases_per_s: {alone: $alone, with_crowd: $with, ratio: $r},
          healthz_ms: {alone: {p50: $a50, p99: $a99},
                       with_crowd: {p50: $h50, p99: $h99, max: $hmax}},
          crowd_client: $crowd[0]}'
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -euo pipefail
    ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    BUILD=${1:-build}
    BIN=$ROOT/$BUILD/seckilld
    PORT=${BENCH_PORT:-17180}
    FIRST_USER=1000000000
    die() { echo "bench: error: $*" >&2; exit 1; }
    for tool in wrk mariadb jq curl ss; do
        command -v "$tool" >/dev/null 2>&1 || die "$tool not found (scripts/deps.sh bench)"
    done
    # shellcheck source=bench/lib.sh
    . "$ROOT/bench/lib.sh"
    say "results in ${OUT#"$ROOT"/}"
    crowd_phase
    crowd_json >"$OUT/crowd.json"
    echo "bench-crowd crowd_rss_mib=$CROWD_RSS_MIB crowd_hol_p99_ms=$CROWD_HOL_P99 crowd_buy_ratio=$CROWD_BUY_RATIO"
    ((BROKEN == 0)) || { echo "bench: an invariant is broken (see raw/invariants-*.json)" >&2; exit 1; }
fi
