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
# context switches per purchase, and the CPU microseconds per purchase of
# the Redis and the MariaDB it uses, and writes the table to
# bench/results/<time>/profile.md. Compare binaries in one run: the
# figures move with whatever else the machine does.
#
# BENCH_PROFILE_ASYNC=1 profiles the async mode instead: a private Redis
# with appendonly yes and appendfsync always (port BENCH_PORT+6, as make
# bench's async phase) and every instance selling async on it, its
# writer running; profile.md then also lists the Redis commands that took
# the most of Redis' time in each run (INFO commandstats).
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
MPID=$(port_pid "$MY_PORT")
RPID=$(port_pid "$R_PORT")
ASYNC=${BENCH_PROFILE_ASYNC:-0}
if ((ASYNC)); then
    AR_PORT=$((PORT + 6))
    start_durable_redis redis-profile "$AR_PORT"
    RPID=$DURABLE_PID
    export SECKILL_REDIS_URL=redis://127.0.0.1:$AR_PORT/0 SECKILL_LOCK_URL= \
        SECKILL_PURCHASE_MODE=async SECKILL_ASYNC_ACCEPT_LOSS=0
fi
stats=()

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
    ((ASYNC)) && redis-cli -p "$AR_PORT" CONFIG RESETSTAT >/dev/null
    read -r rate cpu_us cs busy r_us m_us < <(profile_measure "$label" "$pid" "$PORT" "$SECS" "$RPID" "$MPID")
    row="| $label | ${extra:-defaults} | $rate | $cpu_us | $cs | $busy | $r_us | $m_us |"
    if ((ASYNC)); then
        stats+=("$label: $(redis-cli -p "$AR_PORT" INFO commandstats | tr -d '\r' |
            awk -F'[:,=]' '/^cmdstat_/ { printf "%s %d %d\n", substr($1, 9), $3, $5 }' |
            sort -k3 -nr | head -8 | awk '{ printf "%s%s %d calls %.0f ms", (NR > 1 ? "; " : ""), $1, $2, $3 / 1000 }')")
    fi
    rows+=("$row")
    say "profile $label: $row"
    kill -TERM "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
done
{
    echo "| binary | settings | purchases/s | CPU us per purchase | context switches per purchase | CPU cores busy | Redis CPU us per purchase | MariaDB CPU us per purchase |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
    echo
    if ((ASYNC)); then
        echo "Async mode on a Redis with appendfsync always; Redis' time by command (scripts include the commands they run):"
        echo
        printf -- '- %s\n' "${stats[@]}"
        echo
    fi
    echo "One instance, wrk 256 connections for $SECS s, $(nproc) cores shared by wrk, MariaDB and Redis; run $RUN_ID."
} | tee "$OUT/profile.md"
