# shellcheck shell=bash
# lib.sh - shared by the benchmarks' scripts (bench/run.sh,
# bench/jmeter/run.sh, bench/profile.sh, bench/scale.sh,
# bench/fairness.sh): the settings of .run/env, MySQL and Redis helpers,
# seckilld instances on loopback ports, vouchers through the admin API,
# user tokens, the sale invariants, and clean-up on exit.
#
# The caller sets ROOT, BIN (the seckilld binary), PORT (the first
# instance's; vouchers are created through it), FIRST_USER and, for
# run_wrk, LUA (bench/wrk/buy.lua), then
# sources this file, which sets RUN_ID, OUT (bench/results/<RUN_ID>), RAW
# (OUT/raw) and WORK (.run/bench), and installs the EXIT trap: instances
# started with start_instance (and any pid added to PIDS) are stopped, and
# the vouchers made by new_voucher are deleted with their orders unless
# BENCH_KEEP=1.

: "${ROOT:?}" "${BIN:?}" "${PORT:?}" "${FIRST_USER:?}" # set by the caller

die() { echo "bench: error: $*" >&2; exit 1; }
say() { printf "bench: [%3ss] %s\n" "$SECONDS" "$*" >&2; }

[[ -x $BIN ]] || die "$BIN missing (make build)"
[[ -r $ROOT/.run/env ]] || die ".run/env missing (make services)"
# shellcheck disable=SC1091
. "$ROOT/.run/env"
export SECKILL_RATE_USER=0
# The instances run with the defaults `make run` uses (threads from the
# core count, the purchase engine's batches and queue bound): the
# benchmark measures what a user gets. The per-user rate limit is the one
# exception: a load generator would trip it by design.
unset SECKILL_THREADS SECKILL_ENGINE_THREADS SECKILL_QUEUE_MAX \
    SECKILL_BATCH_MAX SECKILL_BATCH_LINGER_US
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

RUN_ID=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$ROOT/bench/results/$RUN_ID
RAW=$OUT/raw
mkdir -p "$RAW"
WORK=$ROOT/.run/bench
mkdir -p "$WORK"

# ---- MySQL and Redis from .run/env ----

# mysql://user:pass@host:port/db (the bench's URLs have no %-escapes).
url=${SECKILL_MYSQL_URL#mysql://}
MY_USER=${url%%:*}
url=${url#*:}
MY_PASS=${url%%@*}
url=${url#*@}
MY_HOST=${url%%:*}
url=${url#*:}
MY_PORT=${url%%/*}
MY_DB=${url#*/}
sql() {
    mariadb --no-defaults -h "$MY_HOST" -P "$MY_PORT" -u "$MY_USER" \
        -p"$MY_PASS" -N -B "$MY_DB" -e "$1"
}

rest=${SECKILL_REDIS_URL#redis://}
rest=${rest##*@}
R_HOST=${rest%%[:/]*}
R_PORT=$(sed -n 's/^[^:]*:\([0-9]*\).*/\1/p' <<<"$rest")
R_PORT=${R_PORT:-6379}
R_DB=$(sed -n 's|^[^/]*/\([0-9]*\).*|\1|p' <<<"$rest")
R_DB=${R_DB:-0}
rcli() { redis-cli -h "$R_HOST" -p "$R_PORT" -n "$R_DB" "$@"; }

# ---- processes we start, stopped on exit ----

PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    done
    local vouchers=()
    [[ -r $OUT/vouchers.txt ]] && mapfile -t vouchers <"$OUT/vouchers.txt"
    if [[ ${BENCH_KEEP:-0} != 1 && ${#vouchers[@]} -gt 0 ]]; then
        say "deleting the bench's ${#vouchers[@]} vouchers and their orders (BENCH_KEEP=1 keeps them)"
        local v ids
        ids=$(IFS=,; echo "${vouchers[*]}")
        for v in "${vouchers[@]}"; do
            # In slices, so no transaction grows huge.
            while [[ $(sql "DELETE FROM voucher_orders WHERE voucher_id = $v LIMIT 50000; SELECT ROW_COUNT();" 2>/dev/null || echo 0) -gt 0 ]]; do :; done
        done
        sql "DELETE FROM vouchers WHERE id IN ($ids)" || true
    fi
    rcli DEL 'icr:{bench}:clock' >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
trap 'say "failed at line $LINENO: $BASH_COMMAND"' ERR

# port_check PORT: die if something listens on 127.0.0.1:PORT already (its
# answers would be taken for ours).
port_check() {
    [[ -z $(ss -Hltn "( sport = :$1 )" 2>/dev/null) ]] ||
        die "port $1 is in use; pick another BENCH_PORT (uses it, +1 and +9)"
}

# listens PID PORT: PID is the process listening on PORT.
listens() { ss -Hltnp "( sport = :$2 )" 2>/dev/null | grep -q "pid=$1,"; }

# start_instance NAME PORT: seckilld in the background; prints its pid.
start_instance() {
    local name=$1 port=$2 pid
    port_check "$port"
    SECKILL_PORT=$port setsid "$BIN" </dev/null >"$OUT/instance-$name.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        if curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 &&
            listens "$pid" "$port"; then
            echo "$pid"
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
    tail -5 "$OUT/instance-$name.log" >&2
    die "instance $name on :$port did not become ready"
}

# ---- vouchers, tokens, wrk ----

ADMIN=$("$BIN" token --user 1 --admin)

# new_voucher STOCK [MODE]: a seckill voucher on sale from a minute ago for
# a day, sold in MODE (sync or async; default: the instances' default),
# created through the instance on VOUCHER_PORT (default PORT).
new_voucher() {
    local begin end body id mode=""
    [[ -n ${2:-} ]] && mode=",\"purchaseMode\":\"$2\""
    begin=$(date -u -d '-1 min' +%Y-%m-%dT%H:%M:%SZ)
    end=$(date -u -d '+1 day' +%Y-%m-%dT%H:%M:%SZ)
    body="{\"shopId\":1,\"title\":\"make bench $RUN_ID\",\"payValue\":100,"
    body+="\"actualValue\":200,\"type\":\"seckill\",\"stock\":$1,"
    body+="\"beginTime\":\"$begin\",\"endTime\":\"$end\"$mode}"
    id=$(curl -sf -X POST "http://127.0.0.1:${VOUCHER_PORT:-$PORT}/api/vouchers" \
        -H "Authorization: Bearer $ADMIN" --json "$body" | jq -r .id) ||
        die "creating a voucher failed"
    [[ $id =~ ^[0-9]+$ ]] || die "creating a voucher answered '$id'"
    echo "$id" >>"$OUT/vouchers.txt" # new_voucher runs in $(...)
    echo "$id"
}

TOKENS=$WORK/users.csv
tokens_have=0
# ensure_users N [exact]: the tokens file holds at least N users; with
# exact, N users and no more (made again if it holds more). wrk's threads
# each load the whole file: 1.27 million tokens where 400,000 would do
# cost wrk about 25 us of CPU more per request, taken from the service it
# measures on the same cores.
ensure_users() {
    if [[ ${2:-} == exact ]]; then
        ((tokens_have == $1)) && return 0
    else
        ((tokens_have >= $1)) && return 0
    fi
    "$BIN" tokens --first "$FIRST_USER" --count "$1" >"$TOKENS"
    tokens_have=$1
}

# j FILE EXPR: one number from a JSON file.
j() { jq -r "$2" "$1"; }

# ratio A B: A / B with 3 decimals (0 when B is 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "0" }'; }

# ---- wrk and the head-of-line probe ----

LUA=${LUA:-$ROOT/bench/wrk/buy.lua}
# run_wrk NAME CONNS SECONDS HOSTS PATH [STOP_AT_SOLD_OUT] [METHOD]: one wrk
# run, its JSON report in $RAW/NAME.json and its output in $RAW/NAME.txt.
# With STOP_AT_SOLD_OUT=1 wrk is stopped at the first SOLD_OUT reply: the
# script signals itself, and since wrk's main thread sleeps through -d
# unless that signal lands on it, it is also signalled from here until it
# exits (once its workers have stopped, a signal can only reach main).
run_wrk() {
    local name=$1 conns=$2 secs=$3 hosts=$4 path=$5 stop=${6:-0} method=${7:-POST}
    local first=${hosts%%,*} marker=$WORK/sold-out.$$ start=$WORK/start.$$ pid rc=0
    rm -f "$marker"
    rm -rf "$start"
    mkdir -p "$start"
    USERS_CSV=$TOKENS BUY_PATH=$path BUY_THREADS=2 BUY_HOSTS=$hosts BUY_START_DIR=$start \
        BUY_STOP_SOLD_OUT=$stop BUY_SOLD_OUT_FILE=$marker BUY_METHOD=$method \
        BUY_REPORT=$RAW/$name.json \
        wrk -t2 -c"$conns" -d"${secs}s" --timeout 10s --latency -s "$LUA" \
        "http://$first/" >"$RAW/$name.txt" 2>&1 &
    pid=$!
    if ((stop)); then
        while kill -0 "$pid" 2>/dev/null; do
            [[ -e $marker ]] && kill -INT "$pid" 2>/dev/null
            sleep 0.1
        done
    fi
    wait "$pid" || rc=$?
    rm -f "$marker"
    rm -rf "$start"
    ((rc == 0)) || { cat "$RAW/$name.txt" >&2; die "wrk $name failed"; }
    [[ -s $RAW/$name.json ]] || { cat "$RAW/$name.txt" >&2; die "wrk $name wrote no report"; }
}

# cpu_ticks PID: utime + stime of the process (all threads), in ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# ctx_switches PID: voluntary + involuntary, summed over its threads.
ctx_switches() {
    cat /proc/"$1"/task/*/status 2>/dev/null |
        awk '/^(non)?voluntary_ctxt_switches/ { n += $2 } END { print n + 0 }'
}

# start_durable_redis NAME PORT: a private Redis on 127.0.0.1:PORT with
# appendonly yes and appendfsync always (what async mode sells on without
# SECKILL_ASYNC_ACCEPT_LOSS), its data in $WORK/NAME and its log in
# $OUT/NAME.log; waits for it, sets DURABLE_PID and adds it to PIDS.
start_durable_redis() {
    local name=$1 port=$2
    port_check "$port"
    rm -rf "${WORK:?}/$name"
    mkdir -p "$WORK/$name"
    setsid redis-server --bind 127.0.0.1 --port "$port" --dir "$WORK/$name" \
        --appendonly yes --appendfsync always --save '' \
        </dev/null >"$OUT/$name.log" 2>&1 &
    DURABLE_PID=$!
    PIDS+=("$DURABLE_PID")
    for _ in $(seq 50); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.1; done
    redis-cli -p "$port" PING >/dev/null 2>&1 || die "the Redis $name on :$port did not start"
}

# port_pid PORT: the pid of the process listening on 127.0.0.1:PORT (empty
# when none, or when it is not ours to see).
port_pid() { ss -Hltnp "( sport = :$1 )" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\),.*/\1/p' | head -1; }

# profile_measure NAME PID PORT SECONDS [REDIS_PID MARIADB_PID]: what a purchase costs the
# instance PID on PORT while 256 connections buy from it alone: a 2 s
# warm-up on one voucher (connections, id blocks), then SECONDS on a
# fresh one (every buyer new to it), the instance's user + system CPU
# time and its threads' context switches read from /proc before and
# after. Prints "purchases/s cpu_us_per_purchase switches_per_purchase
# cores_busy redis_us mariadb_us", the last two the CPU microseconds per
# purchase of those servers over the same run ("-" without their pids:
# whatever else uses them is counted too); the runs' reports are $RAW/warm-NAME.json and
# $RAW/profile-NAME.json, the measured voucher's id in
# $RAW/profile-NAME.voucher. Needs ensure_users of SECONDS * 60000 or so.
profile_measure() {
    local name=$1 pid=$2 port=$3 secs=$4 rpid=${5:-} mpid=${6:-} v c0 c1 s0 s1
    local r0=0 r1=0 m0=0 m1=0
    v=$(VOUCHER_PORT=$port new_voucher 2000000)
    run_wrk "warm-$name" 256 2 "127.0.0.1:$port,127.0.0.1:$port" "/api/vouchers/$v/seckill"
    v=$(VOUCHER_PORT=$port new_voucher 2000000)
    echo "$v" >"$RAW/profile-$name.voucher"
    c0=$(cpu_ticks "$pid")
    s0=$(ctx_switches "$pid")
    [[ -n $rpid ]] && r0=$(cpu_ticks "$rpid")
    [[ -n $mpid ]] && m0=$(cpu_ticks "$mpid")
    run_wrk "profile-$name" 256 "$secs" "127.0.0.1:$port,127.0.0.1:$port" "/api/vouchers/$v/seckill"
    c1=$(cpu_ticks "$pid")
    s1=$(ctx_switches "$pid")
    [[ -n $rpid ]] && r1=$(cpu_ticks "$rpid")
    [[ -n $mpid ]] && m1=$(cpu_ticks "$mpid")
    awk -v ok="$(j "$RAW/profile-$name.json" .ok)" \
        -v d="$(j "$RAW/profile-$name.json" .duration_s)" -v c="$((c1 - c0))" \
        -v hz="$(getconf CLK_TCK)" -v s="$((s1 - s0))" -v r="$((r1 - r0))" \
        -v m="$((m1 - m0))" -v hr="${rpid:+1}" -v hm="${mpid:+1}" 'BEGIN {
            if (ok < 1) ok = 1
            printf "%.0f %.1f %.2f %.3f %s %s\n", ok / d, c / hz * 1e6 / ok, s / ok,
                c / hz / d, hr ? sprintf("%.1f", r / hz * 1e6 / ok) : "-",
                hm ? sprintf("%.1f", m / hz * 1e6 / ok) : "-" }'
}

# hol_probe NAME [PORT]: 200 GET /healthz to the instance on PORT (default
# PORT, instance A) one at a time, each on a fresh connection, in the
# background; their times (ms) go to $RAW/NAME.ms. Sets HOL_PID.
hol_probe() {
    local name=$1 port=${2:-$PORT}
    (
        sleep 2 # into the crowd's steady state
        for _ in $(seq 200); do
            curl -s -o /dev/null -w '%{time_total}\n' --max-time 10 \
                "http://127.0.0.1:$port/healthz" || echo 10
        done | awk '{ printf "%.3f\n", $1 * 1000 }' >"$RAW/$name.ms"
    ) &
    HOL_PID=$!
}
# hol_stats NAME: "p50 p99 max" of $RAW/NAME.ms.
hol_stats() {
    sort -n "$RAW/$1.ms" | awk '{ v[NR] = $1 } END {
        p50 = v[int(NR * 0.50 + 0.5)]; p99 = v[int(NR * 0.99 + 0.5)];
        printf "%.1f %.1f %.1f", p50, p99, v[NR] }'
}
# ---- invariants ----

BROKEN=0 # set by check_voucher, read by the callers
# shellcheck disable=SC2034
# check_voucher NAME VOUCHER INITIAL OK_SEEN: the invariants of one sale.
check_voucher() {
    local name=$1 v=$2 initial=$3 seen=$4 row final orders dups verdict=ok
    # Active (unpaid or paid) orders hold a unit each: stock + active =
    # initial, and no user holds two.
    row=$(sql "SELECT s.stock, (SELECT COUNT(*) FROM voucher_orders o WHERE o.voucher_id = $v
         AND o.status IN (1, 2)),
        (SELECT COUNT(*) FROM (SELECT user_id FROM voucher_orders WHERE voucher_id = $v
         AND status IN (1, 2) GROUP BY user_id HAVING COUNT(*) > 1) d)
        FROM seckill_vouchers s WHERE s.voucher_id = $v")
    read -r final orders dups <<<"$row"
    if ((orders != initial - final || dups != 0 || final < 0 || seen > orders)); then
        verdict=BROKEN
        BROKEN=1
    fi
    jq -n --arg name "$name" --argjson v "$v" --argjson initial "$initial" \
        --argjson final "$final" --argjson orders "$orders" --argjson dups "$dups" \
        --argjson seen "$seen" --arg verdict "$verdict" \
        '{name: $name, voucher: $v, initial_stock: $initial, final_stock: $final,
          orders: $orders, users_twice: $dups, created_201_seen: $seen,
          verdict: $verdict}' >"$RAW/invariants-$name.json"
    say "invariants $name: voucher $v initial=$initial final=$final orders=$orders users_twice=$dups 201s=$seen -> $verdict"
}

