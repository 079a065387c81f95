#!/usr/bin/env bash
# lock.sh - `make bench-lock`: acquire+release pairs per second of every lock
# backend at 1, 16 and 64 concurrent clients, beside the raw rate of the
# same two Redis scripts measured with redis-benchmark in the same run.
#
#   bench/lock.sh [BUILD_DIR]       (default build; needs `make services`)
#
# Environment: BENCH_SECONDS (per cell, default 5), BENCH_CLIENTS (default
# "1 16 64"), BENCH_BACKENDS (default "redis redlock mysql zookeeper"),
# BENCH_ROUNDS (redis against its raw limit, default 3: the median round),
# BENCH_KINDS (default "fair read write semaphore") on BENCH_KIND_BACKENDS
# (default "redis zookeeper", the backends that offer them).
#
# Each cell is bench/lock_bench.c: CLIENTS threads, each with its own lock
# name, fail-fast acquire (wait 0, lease 30 s) then release, in a loop. The
# kind rows are the same loop over the other kinds: fair and write locks on
# a name per thread; read locks all on one name (readers share it); one
# semaphore with CLIENTS permits, waiting up to 5 s for a permit. The raw
# Redis figure runs the backend's own acquire script and its release
# script (EVALSHA, same keys and arguments, fresh random keys so the
# acquire succeeds) with redis-benchmark at the same client count, and
# combines them as one pair: 1 / (1/acquire_rate + 1/release_rate). The
# release benchmark's keys are mostly absent (it reads the receipt instead
# of deleting the lock and writing one), so it is a little cheaper than a
# real release: the ratio errs against us.
#
# Prints a table, writes it under bench/results/, and ends with
#   lock-ratio redis=<pairs/s of the redis backend / raw pairs/s, 64 clients>
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-build}
BIN="$ROOT/$BUILD/bench/lock_bench"
SECONDS_PER=${BENCH_SECONDS:-5}
CLIENTS=${BENCH_CLIENTS:-1 16 64}
BACKENDS=${BENCH_BACKENDS:-redis redlock mysql zookeeper}
KINDS=${BENCH_KINDS:-fair read write semaphore}
KIND_BACKENDS=${BENCH_KIND_BACKENDS:-redis zookeeper}

[[ -x $BIN ]] || { echo "lock.sh: $BIN missing (make bench-lock builds it)" >&2; exit 1; }
# shellcheck disable=SC1091
. "$ROOT/.run/env"

url_of() {
    case $1 in
    redis) echo "$SECKILL_REDIS_URL" ;;
    redlock) echo "$SECKILL_LOCK_REDLOCK_URL" ;;
    mysql) echo "$SECKILL_MYSQL_URL" ;;
    zookeeper) echo "$SECKILL_LOCK_ZK_URL" ;;
    esac
}

# host, port and db of SECKILL_REDIS_URL (redis://[..@]host:port/db).
rest=${SECKILL_REDIS_URL#redis://}
rest=${rest##*@}
RHOST=${rest%%[:/]*}
RPORT=$(sed -n 's/^[^:]*:\([0-9]*\).*/\1/p' <<<"$rest")
RPORT=${RPORT:-6379}
RDB=$(sed -n 's|^[^/]*/\([0-9]*\).*|\1|p' <<<"$rest")
RDB=${RDB:-0}
rcli() { redis-cli -h "$RHOST" -p "$RPORT" -n "$RDB" "$@"; }

# The scripts exactly as lock/rconn.c sends them: the C string literals
# from the "[RCONN_X] =" line up to the next "[RCONN_" line.
script_text() {
    awk -v want="[$1] =" '
        index($0, "[RCONN_") && started { exit }
        index($0, want) { started = 1 }
        started { print }' "$ROOT/lock/rconn.c" |
        grep -o '"[^"]*"' | sed 's/^"//; s/"$//' | tr -d '\n'
}
ACQ=$(script_text RCONN_ACQUIRE)
REL=$(script_text RCONN_RELEASE_ONCE)
ACQ_SHA=$(rcli SCRIPT LOAD "$ACQ")
REL_SHA=$(rcli SCRIPT LOAD "$REL")

# requests/s of one redis-benchmark command at $1 clients.
raw_rate() {
    local c=$1
    shift
    redis-benchmark -h "$RHOST" -p "$RPORT" --dbnum "$RDB" -c "$c" \
        -n $((c == 1 ? 30000 : 150000)) -r 100000000 -q --csv "$@" |
        tail -1 | cut -d, -f2 | tr -d '"'
}

declare -A rate p50 p99 errs raw

# One cell of lock_bench for backend $1 at $2 clients into the arrays; $3,
# if given, is a lock kind, and the row is called "$1 $3".
run_cell() {
    local b=$1 c=$2 kind=${3:-} row=$1 line
    local args=("$(url_of "$b")" "$c" "$SECONDS_PER")
    if [[ -n $kind ]]; then
        args+=("kind=$kind")
        row="$b $kind"
    fi
    line=$("$BIN" "${args[@]}") || true
    echo "$row clients=$c $line" >&2
    rate[$row,$c]=$(sed -n 's/.*rate=\([0-9]*\).*/\1/p' <<<"$line")
    p50[$row,$c]=$(sed -n 's/.*p50_us=\([0-9]*\).*/\1/p' <<<"$line")
    p99[$row,$c]=$(sed -n 's/.*p99_us=\([0-9]*\).*/\1/p' <<<"$line")
    errs[$row,$c]=$(sed -n 's/.*errors=\([0-9]*\).*/\1/p' <<<"$line")
}

for b in $BACKENDS; do
    [[ -n $(url_of "$b") ]] || { echo "lock.sh: no URL for $b (make services)" >&2; exit 1; }
done

# The shared machine is noisy: the Redis backend and its raw limit are
# measured in alternation, ROUNDS times, and the round with the median
# ratio is kept.
ROUNDS=${BENCH_ROUNDS:-3}
for c in $CLIENTS; do
    ratios=()
    declare -A round_rate round_raw round_p50 round_p99 round_err
    for ((i = 0; i < ROUNDS; i++)); do
        a=$(raw_rate "$c" EVALSHA "$ACQ_SHA" 2 "bench:raw:__rand_int__" \
            lock:fence 0123456789abcdef0123456789abcdef 30000)
        r=$(raw_rate "$c" EVALSHA "$REL_SHA" 3 "bench:raw:__rand_int__" \
            lock-ch:bench lock-rel:0123456789abcdef0123456789abcdef \
            0123456789abcdef0123456789abcdef 42 5000)
        round_raw[$i]=$(awk -v a="$a" -v r="$r" 'BEGIN { printf "%.0f", 1 / (1 / a + 1 / r) }')
        echo "raw redis-benchmark clients=$c acquire=$a/s release=$r/s pair=${round_raw[$i]}/s" >&2
        run_cell redis "$c"
        round_rate[$i]=${rate[redis,$c]:-0}
        round_p50[$i]=${p50[redis,$c]}
        round_p99[$i]=${p99[redis,$c]}
        round_err[$i]=${errs[redis,$c]}
        ratios+=("$(awk -v x="${round_rate[$i]}" -v y="${round_raw[$i]}" 'BEGIN { printf "%.4f", x / y }') $i")
    done
    mid=$(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(((ROUNDS + 1) / 2))p" | cut -d' ' -f2)
    raw[$c]=${round_raw[$mid]}
    rate[redis,$c]=${round_rate[$mid]}
    p50[redis,$c]=${round_p50[$mid]}
    p99[redis,$c]=${round_p99[$mid]}
    errs[redis,$c]=${round_err[$mid]}
    unset round_rate round_raw round_p50 round_p99 round_err
done
rcli --scan --pattern 'bench:raw:*' | xargs -r -n 1000 redis-cli -h "$RHOST" -p "$RPORT" -n "$RDB" DEL >/dev/null

for b in $BACKENDS; do
    [[ $b == redis ]] && continue
    for c in $CLIENTS; do
        run_cell "$b" "$c"
    done
done
read -ra rows <<<"$BACKENDS"
for b in $KIND_BACKENDS; do
    for k in $KINDS; do
        for c in $CLIENTS; do
            run_cell "$b" "$c" "$k"
        done
        rows+=("$b $k")
    done
done

mkdir -p "$ROOT/bench/results"
out="$ROOT/bench/results/lock-$(date -u +%Y%m%dT%H%M%SZ).md"
{
    echo "| backend | clients | pairs/s | p50 ms | p99 ms | errors | vs raw Redis |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    for c in $CLIENTS; do
        printf '| raw redis-benchmark (2 scripts) | %s | %s | | | | 1.00 |\n' "$c" "${raw[$c]}"
    done
    for b in "${rows[@]}"; do
        for c in $CLIENTS; do
            awk -v b="$b" -v c="$c" -v r="${rate[$b,$c]:-0}" -v p5="${p50[$b,$c]:-0}" \
                -v p9="${p99[$b,$c]:-0}" -v e="${errs[$b,$c]:-?}" -v raw="${raw[$c]}" \
                'BEGIN { printf "| %s | %s | %d | %.2f | %.2f | %s | %.2f |\n", b, c, r, p5 / 1000, p9 / 1000, e, r / raw }'
        done
    done
    echo
    echo "Machine: $(nproc) cores, $(uname -r); ${SECONDS_PER}s per cell; $(date -u +%FT%TZ)."
    echo "Command: make bench-lock"
} | tee "$out"
last=$(awk -v r="${rate[redis,64]:-0}" -v raw="${raw[64]:-1}" 'BEGIN { printf "%.2f", r / raw }')
echo "lock-ratio redis=$last"
