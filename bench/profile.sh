#!/usr/bin/env bash
# profile.sh - `make bench-profile`: what one purchase costs an instance,
# in CPU time and context switches, while a 256-connection crowd buys.
#
#   bench/profile.sh [LABEL=BINARY[:ENV=VALUE,...] ...]
#
# Each binary (default: build/seckilld as "current") runs alone on
# 127.0.0.1:BENCH_PORT with the settings of .run/env plus
# SECKILL_RATE_USER=0 and the ENV=VALUE pairs given, and sells a fresh
# voucher with more stock than it can sell to BENCH_PROFILE_SECONDS (10)
# of wrk at 256 connections (bench/wrk/buy.lua, one user per request).
# From /proc, before and after: the instance's user + system CPU time and
# the voluntary and involuntary context switches of all its threads. It
# prints, per binary, purchases/s, CPU microseconds per purchase and
# context switches per purchase, and writes the table to
# bench/results/<time>/profile.md. Compare binaries in one run: the
# figures move with whatever else the machine does.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BIN:-$ROOT/build/seckilld}
PORT=${BENCH_PORT:-17180}
FIRST_USER=1000000000
SECS=${BENCH_PROFILE_SECONDS:-10}
LUA=$ROOT/bench/wrk/buy.lua
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

specs=("$@")
((${#specs[@]})) || specs=("current=$BIN")
ensure_users $((SECS * 60000))
HZ=$(getconf CLK_TCK)

# cpu_ticks PID: utime + stime of the process (all threads), in ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# ctx_switches PID: voluntary + involuntary, summed over its threads.
ctx_switches() {
    cat /proc/"$1"/task/*/status 2>/dev/null |
        awk '/^(non)?voluntary_ctxt_switches/ { n += $2 } END { print n + 0 }'
}

rows=()
for spec in "${specs[@]}"; do
    label=${spec%%=*}
    rest=${spec#*=}
    bin=${rest%%:*}
    extra=""
    [[ $rest == *:* ]] && extra=${rest#*:}
    [[ -x $bin ]] || die "$bin is not executable"
    (
        IFS=, read -ra kv <<<"$extra"
        for p in "${kv[@]}"; do [[ -n $p ]] && export "${p?}"; done
        BIN=$bin start_instance "$label" "$PORT" >"$WORK/profile.pid"
    )
    pid=$(cat "$WORK/profile.pid")
    PIDS+=("$pid")
    v=$(new_voucher 2000000)
    # A short warm-up (connections, id blocks), then the measured run.
    USERS_CSV=$TOKENS BUY_PATH=/api/vouchers/$v/seckill BUY_THREADS=2 \
        BUY_HOSTS=127.0.0.1:$PORT,127.0.0.1:$PORT BUY_REPORT=$RAW/warm-$label.json \
        wrk -t2 -c256 -d2s --timeout 10s -s "$LUA" "http://127.0.0.1:$PORT/" >/dev/null 2>&1
    c0=$(cpu_ticks "$pid")
    s0=$(ctx_switches "$pid")
    USERS_CSV=$TOKENS BUY_PATH=/api/vouchers/$v/seckill BUY_THREADS=2 \
        BUY_HOSTS=127.0.0.1:$PORT,127.0.0.1:$PORT BUY_REPORT=$RAW/profile-$label.json \
        wrk -t2 -c256 -d"${SECS}s" --timeout 10s --latency -s "$LUA" \
        "http://127.0.0.1:$PORT/" >"$RAW/profile-$label.txt" 2>&1
    c1=$(cpu_ticks "$pid")
    s1=$(ctx_switches "$pid")
    ok=$(j "$RAW/profile-$label.json" .ok)
    dur=$(j "$RAW/profile-$label.json" .duration_s)
    row=$(awk -v ok="$ok" -v d="$dur" -v c="$((c1 - c0))" -v hz="$HZ" \
        -v s="$((s1 - s0))" -v l="$label" -v e="${extra:-defaults}" 'BEGIN {
            printf "| %s | %s | %.0f | %.1f | %.2f | %.3f |", l, e, ok / d,
                c / hz * 1e6 / ok, s / ok, c / hz / d }')
    rows+=("$row")
    say "profile $label: $row"
    kill -TERM "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
done
{
    echo "| binary | settings | purchases/s | CPU us per purchase | context switches per purchase | CPU cores busy |"
    echo "|---|---|---:|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "One instance, wrk 256 connections for $SECS s, $(nproc) cores shared by wrk, MariaDB and Redis; run $RUN_ID."
} | tee "$OUT/profile.md"
