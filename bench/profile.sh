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
    read -r rate cpu_us cs busy < <(profile_measure "$label" "$pid" "$PORT" "$SECS")
    row="| $label | ${extra:-defaults} | $rate | $cpu_us | $cs | $busy |"
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
