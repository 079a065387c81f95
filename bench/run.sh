#!/usr/bin/env bash
# run.sh - `make bench`: the flash sale under wrk, beside the raw limits of
# MariaDB, nginx and Redis measured in the same run on the same machine.
#
#   bench/run.sh [BUILD_DIR]   (default build; make bench first runs
#                               scripts/deps.sh bench, make services, make build)
#
# Set-up: two seckilld instances from BUILD_DIR on 127.0.0.1:BENCH_PORT and
# BENCH_PORT+1 with the settings of .run/env (database seckill, Redis db 0)
# plus SECKILL_RATE_USER=0 (the per-user rate limit would throttle the
# load), a private nginx on BENCH_PORT+9 serving the service's 409 SOLD_OUT
# body as a static file (config under .run/bench/nginx), fresh seckill
# vouchers through the admin API, and user tokens from `seckilld tokens`
# (users 1,000,000,000 and up). wrk runs bench/wrk/buy.lua: every request
# is the next user's token, the two wrk threads take alternate users and
# with two instances send to one instance each.
#
# Phases (connections are wrk's, over both instances unless said):
#   1. scaling: purchases/s and p99 at BENCH_CONNS (16 64 256 1024)
#      connections, 1 and then 2 instances, BENCH_CELL_SECONDS each on a
#      fresh voucher with more stock than the cell can sell; peak memory
#      (VmHWM) of the first instance after 1,024 connections on it alone.
#   2. raw limits: sysbench running the purchase transaction
#      (bench/sysbench/purchase.lua) on one hot row at 16 threads here, and
#      at 64 and 256 threads right before and after the selling phase of
#      the same concurrency (their mean is that phase's raw limit);
#      redis-benchmark on the three Redis scripts of a purchase (lock
#      acquire, order id, lock release) at 256 clients.
#   3. selling: at 64 and 256 connections, one voucher each with stock for
#      about BENCH_SELL_SECONDS (the rate of a BENCH_CALIBRATE_SECONDS run
#      just before x 1.5 x seconds, or BENCH_STOCK) and twice as many
#      users; wrk stops at the first 409 SOLD_OUT, and purchases/s = stock
#      / (first SOLD_OUT received - first request sent). Then the invariants in MySQL:
#      orders == initial - final stock, no user twice, stock >= 0, every
#      201 seen is an order (checked after every cell of phase 1 too).
#   4. sold out: the same crowd on the sold-out 256 voucher, alternating
#      with nginx under the same wrk script and connections (GET of the
#      static file: nginx refuses POST to a file), BENCH_ROUNDS times
#      BENCH_SOLDOUT_SECONDS each; the round with the median ratio counts:
#      rejections/s, p50/p99.
#  4b. CPU per purchase: instance A alone (B idles) at 256 connections
#      for BENCH_PROFILE_SECONDS (10) after a 2 s warm-up, its CPU time
#      and context switches from /proc (make bench-profile's measurement,
#      profile_measure in bench/lib.sh): CPU microseconds per purchase.
#   5. lifecycle: two more instances (ports +2, +3) with
#      SECKILL_PAY_TIMEOUT_S=BENCH_PAY_TIMEOUT_S (5) and a payment key; a
#      voucher of BENCH_LIFE_STOCK (15000: sold out within seconds, so
#      the expiries' units sell again) for BENCH_LIFE_SECONDS (15) at 256
#      connections, where 70% of the buyers pay through the signed
#      provider notification after their 201 and the rest never pay: their
#      orders expire and the crowd buys the units again. Then the last
#      unpaid orders expire and stock + unpaid + paid = initial is checked;
#      reported: orders paid and expired, the expiry lag (deadline to
#      close) p50/p99, and how long returned units stayed unsold.
#
#   6. async: the instances above stop; a private Redis with appendonly
#      yes and appendfsync always (port +6: what async mode requires) and
#      two async instances on it (ports +4, +5, without accepting loss).
#      Raw limit: redis-benchmark running async/scripts.c's purchase script
#      (one purchase per call) at 256 clients on that Redis. Drain: a
#      voucher's stream is filled with BENCH_ASYNC_DRAIN (100000) orders
#      by the same script while no writer runs, then both instances start
#      and their writers put them into MySQL: orders/s from the first to
#      the last order in MySQL (sampled every 20 ms). Accept: a voucher of
#      BENCH_ASYNC_STOCK (200000) sold at 256 connections until the first
#      SOLD_OUT, 202s/s as in the selling phase, then the time from the
#      last 202 to the last order in MySQL, and the invariants (Redis'
#      stock and buyers must equal MySQL's too); BENCH_ROUNDS rounds, each
#      with the raw limit measured again just before it, the round of the
#      median ratio reported (the raw rate on a Redis that fsyncs every
#      write moves with the disk from one minute to the next).
#
#   7. pay storm (bench/paystorm.sh, on two instances of its own at ports
#      +20, +21): a voucher of BENCH_PAYSTORM_STOCK (20000) sold out at 256
#      connections, then every order's signed payment notification sent at
#      once (256 connections, bench/wrk/pay.lua); payments/s = orders /
#      (last payment answered - first sent), next to purchases/s of that
#      sale; every order paid once by its own transaction id, no refund,
#      stock + unpaid + paid = initial. BENCH_PAYSTORM_BASE=<binary>
#      runs the same with another binary first (before and after).
#
#   8. crowd (bench/crowd.sh; BENCH_CROWD=0 skips it): one more instance
#      (port +7) holds BENCH_CROWD_CONNS (50000, or what the descriptor
#      limit allows) idle keep-alive connections of bench/crowd.c, each
#      answered once and then 1% of them asking a second, while wrk buys
#      at 256 connections: its VmRSS (projected to 50,000 when fewer
#      could be opened), GET /healthz p99 and purchases/s against the same
#      256 without the crowd.
#
# Head-of-line: while the 256-connection selling crowd runs, a separate
# client sends 200 GET /healthz to instance A one at a time, each on a
# fresh connection (and the same once before, with no crowd): p50, p99
# and max show whether cheap requests wait behind purchases.
#
# Prints a summary table, writes bench/results/<UTC time>/ (summary.md,
# results.json with every number, scaling.dat and scaling.png, raw/ with
# each tool's output, the instances' logs), and ends with
#   bench-ratios selling=<x> soldout=<y> rss_mib=<z> hol_p99_ms=<w>
#                async_accept=<a> async_drain=<d> pay_storm=<p>
#                crowd_rss_mib=<m> crowd_hol_p99_ms=<h> selling_best=<b>
#                cpu_us=<u>
# selling = purchases/s of the 256 selling phase / sysbench at 256 threads;
# selling_best = the same purchases/s / sysbench's best rate at any of its
# thread counts (16, 64, 256); cpu_us = CPU microseconds per purchase of
# phase 4b;
# soldout = rejections/s at 256 / nginx at 256; rss_mib = VmHWM of one
# instance after 1,024 connections; async_accept = 202s/s / the raw
# script's calls/s; async_drain = orders/s written by the writers / the
# best sysbench rate; pay_storm = payments/s of the pay storm / purchases/s
# of its sale; crowd_rss_mib = VmRSS of the crowd's instance at
# 50,000 idle connections with 256 buying; crowd_hol_p99_ms = /healthz p99
# then. Exit 1 when an invariant is broken.
#
# Environment (defaults; BENCH_QUICK=1 shortens them all for a smoke run of
# about two minutes): BENCH_CELL_SECONDS (6), BENCH_SELL_SECONDS (22),
# BENCH_CALIBRATE_SECONDS (4), BENCH_SOLDOUT_SECONDS (4), BENCH_ROUNDS (3),
# BENCH_PROFILE_SECONDS (10),
# BENCH_RAW_SECONDS (6), BENCH_USERS (200000), BENCH_STOCK (a fixed selling
# stock), BENCH_CONNS (the scaling connections; keep 64, 256 and 1024 in
# it), BENCH_PORT (17180), BENCH_KEEP=1 (keep the bench's vouchers and
# orders in MySQL), BENCH_CROWD=0 (skip the crowd phase, about two
# minutes), BENCH_CROWD_CONNS (50000), BENCH_CROWD_BUY_SECONDS (10). The
# instances run at the service's defaults.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-build}
BIN=$ROOT/$BUILD/seckilld
LUA=$ROOT/bench/wrk/buy.lua
SB_LUA=$ROOT/bench/sysbench/purchase.lua

if [[ ${BENCH_QUICK:-0} == 1 ]]; then
    d_cell=2 d_sell=4 d_soldout=2 d_raw=3 d_users=50000 d_cal=2 d_life=8
    d_async=20000 d_drain=20000 d_profile=4
else
    d_cell=6 d_sell=22 d_soldout=4 d_raw=6 d_users=200000 d_cal=4 d_life=15
    d_async=200000 d_drain=100000 d_profile=10
fi
ASYNC_STOCK=${BENCH_ASYNC_STOCK:-$d_async}
DRAIN_ORDERS=${BENCH_ASYNC_DRAIN:-$d_drain}
LIFE_SECONDS=${BENCH_LIFE_SECONDS:-$d_life}
LIFE_TIMEOUT=${BENCH_PAY_TIMEOUT_S:-5}
LIFE_STOCK=${BENCH_LIFE_STOCK:-15000}
CELL=${BENCH_CELL_SECONDS:-$d_cell}
SELL=${BENCH_SELL_SECONDS:-$d_sell}
CAL=${BENCH_CALIBRATE_SECONDS:-$d_cal}
SOLDOUT=${BENCH_SOLDOUT_SECONDS:-$d_soldout}
PROFILE_SECS=${BENCH_PROFILE_SECONDS:-$d_profile}
RAWS=${BENCH_RAW_SECONDS:-$d_raw}
ROUNDS=${BENCH_ROUNDS:-3}
USERS=${BENCH_USERS:-$d_users}
CONNS=${BENCH_CONNS:-16 64 256 1024}
PORT=${BENCH_PORT:-17180}
PORT_B=$((PORT + 1))
NGINX_PORT=$((PORT + 9))
FIRST_USER=1000000000
MAX_STOCK=2000000

die() { echo "bench: error: $*" >&2; exit 1; }
for tool in wrk sysbench nginx gnuplot redis-benchmark redis-cli mariadb jq curl; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (scripts/deps.sh bench)"
done
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

start_nginx() {
    local d=$WORK/nginx user=""
    mkdir -p "$d/www" "$d/tmp"
    # The service's SOLD_OUT body (handlers/request.c), byte for byte.
    printf '{"error":{"code":"SOLD_OUT","message":"the voucher is sold out"}}' \
        >"$d/www/soldout.json"
    # Workers of a root master run as nobody, who cannot enter .run/ (0700).
    ((EUID == 0)) && user="user root root;"
    cat >"$d/nginx.conf" <<EOF
# Written by bench/run.sh at every run.
$user
worker_processes $(nproc);
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $d/tmp/body;
    proxy_temp_path $d/tmp/proxy;
    fastcgi_temp_path $d/tmp/fastcgi;
    scgi_temp_path $d/tmp/scgi;
    uwsgi_temp_path $d/tmp/uwsgi;
    keepalive_requests 1000000000;
    keepalive_timeout 300s;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        root $d/www;
        default_type application/json;
        location / { try_files /soldout.json =404; }
    }
}
EOF
    port_check "$NGINX_PORT"
    setsid nginx -p "$d" -c "$d/nginx.conf" -e "$d/error.log" -g 'daemon off;' \
        </dev/null >"$d/stdout.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    for _ in $(seq 50); do
        curl -sf "http://127.0.0.1:$NGINX_PORT/x" >/dev/null 2>&1 &&
            listens "$pid" "$NGINX_PORT" && return 0
        sleep 0.1
    done
    cat "$d/error.log" >&2 || true
    die "nginx on :$NGINX_PORT did not start"
}

# ---- set-up ----

say "results in ${OUT#"$ROOT"/}"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
awk -v l="${LOAD_START%% *}" -v c="$(nproc)" 'BEGIN { exit !(l > c / 2) }' &&
    say "warning: load average $LOAD_START on $(nproc) cores before the run: other work competes, figures will be noisy"
ensure_users "$USERS"
PID_A=$(start_instance A "$PORT")
PIDS+=("$PID_A")
PID_B=$(start_instance B "$PORT_B")
PIDS+=("$PID_B")
start_nginx
HOSTS_1=127.0.0.1:$PORT,127.0.0.1:$PORT
HOSTS_2=127.0.0.1:$PORT,127.0.0.1:$PORT_B

# ---- 1. scaling ----

declare -A rate p99 p50
RSS_SAMPLE_KIB=0
OPEN_CONNS=0
for n in 1 2; do
    hosts=$HOSTS_1
    ((n == 2)) && hosts=$HOSTS_2
    for c in $CONNS; do
        v=$(new_voucher "$tokens_have")
        name=scale-i$n-c$c
        sampler=""
        if ((n == 1 && c == 1024)); then
            # Resident memory and open connections of instance A mid-cell.
            (
                sleep "$(awk -v s="$CELL" 'BEGIN { print s * 0.6 + 0.5 }')"
                grep VmRSS "/proc/$PID_A/status" | awk '{ print $2 }' >"$RAW/rss-mid.kib"
                ss -Htn state established "( sport = :$PORT )" | wc -l >"$RAW/conns-mid.count"
            ) &
            sampler=$!
        fi
        run_wrk "$name" "$c" "$CELL" "$hosts" "/api/vouchers/$v/seckill" 1
        [[ -n $sampler ]] && wait "$sampler"
        f=$RAW/$name.json
        rate[$n,$c]=$(awk -v ok="$(j "$f" .ok)" -v d="$(j "$f" .duration_s)" 'BEGIN { printf "%.0f", ok / d }')
        p50[$n,$c]=$(j "$f" .p50_ms)
        p99[$n,$c]=$(j "$f" .p99_ms)
        check_voucher "$name" "$v" "$tokens_have" "$(j "$f" .ok)"
        # A faster service needs more users than a cell sells (a user seen
        # twice answers ALREADY_PURCHASED): keep three times the best cell.
        need=$(($(j "$f" .requests) * 3))
        ((need <= MAX_STOCK)) || need=$MAX_STOCK
        ensure_users "$need"
        say "scaling: $n instance(s), $c connections: ${rate[$n,$c]} purchases/s, p99 ${p99[$n,$c]} ms, other replies $(j "$f" '.unavailable + .other + .busy + .limited + .duplicate')"
        if ((n == 1 && c == 1024)); then
            RSS_SAMPLE_KIB=$(cat "$RAW/rss-mid.kib")
            OPEN_CONNS=$(cat "$RAW/conns-mid.count")
        fi
    done
done
HWM_KIB=$(awk '/VmHWM/ { print $2 }' "/proc/$PID_A/status")
RSS_MIB=$(awk -v k="$HWM_KIB" 'BEGIN { printf "%.1f", k / 1024 }')
say "memory: instance A VmHWM ${RSS_MIB} MiB (VmRSS $((RSS_SAMPLE_KIB / 1024)) MiB with $OPEN_CONNS connections open)"

# ---- 2. raw limits: sysbench and redis-benchmark ----

SB_VOUCHER=$(new_voucher 1000000000)
sb_initial=1000000000
sb_runs=0
# run_sysbench C: the purchase transaction on SB_VOUCHER's row with C
# threads for RAWS seconds; sets SB_RATE, SB_P99 and SB_ERR.
run_sysbench() {
    local c=$1 id_base f
    sb_runs=$((sb_runs + 1))
    # Fresh ids per run (below 2^53, far under the service's).
    id_base=$((1000000000000000 + ($(date +%s) % 80000) * 100000000000 + sb_runs * 10000000000))
    f=$RAW/sysbench-c$c-$sb_runs.txt
    sysbench "$SB_LUA" --db-driver=mysql --mysql-host="$MY_HOST" \
        --mysql-port="$MY_PORT" --mysql-user="$MY_USER" \
        --mysql-password="$MY_PASS" --mysql-db="$MY_DB" \
        --mysql-ignore-errors=1205,1213 --voucher="$SB_VOUCHER" \
        --id-base="$id_base" --threads="$c" --time="$RAWS" --percentile=99 \
        run >"$f" 2>&1 || { tail -20 "$f" >&2; die "sysbench at $c threads failed"; }
    SB_RATE=$(sed -n 's/.*transactions: *[0-9]* *(\([0-9.]*\) per sec.*/\1/p' "$f" | awk '{ printf "%.0f", $1 }')
    SB_P99=$(sed -n 's/.*99th percentile: *\([0-9.]*\).*/\1/p' "$f")
    SB_ERR=$(sed -n 's/.*ignored errors: *\([0-9]*\).*/\1/p' "$f")
    say "sysbench: $c threads: $SB_RATE transactions/s, p99 $SB_P99 ms, ignored errors $SB_ERR"
}

# 16 threads here; 64 and 256 right before and after the selling phase of
# the same concurrency (phase 3), against the noise of a shared machine.
declare -A sb_rate sb_p99 sb_err
run_sysbench 16
sb_rate[16]=$SB_RATE sb_p99[16]=$SB_P99 sb_err[16]=$SB_ERR

# The Redis scripts of a purchase, as the service sends them.
c_string() { # FILE START_PATTERN: the C string literal from START to ';'
    awk -v want="$2" 'started && /;[[:space:]]*$/ { print; exit }
        index($0, want) { started = 1 } started { print }' "$1" |
        grep -o '"\([^"\\]\|\\.\)*"' | sed 's/^"//; s/"$//' | tr -d '\n'
}
lock_script() { # the RCONN_X entry of lock/rconn.c, its FENCE_FN expanded
    awk -v want="[$1] =" '
        /^#define FENCE_FN/ { in_fn = 1 }
        in_fn { fn = fn $0 "\n"; if ($0 !~ /\\$/) in_fn = 0; next }
        index($0, "[RCONN_") && started { exit }
        index($0, want) { started = 1 }
        started && /FENCE_FN/ { printf "%s", fn; next }
        started { print }' "$ROOT/lock/rconn.c" |
        grep -o '"[^"]*"' | sed 's/^"//; s/"$//' | tr -d '\n'
}
declare -A rb_rate
# redis_rate NAME SCRIPT ARGS...: requests/s of EVALSHA of SCRIPT with ARGS
# at 256 clients. Loads the script first, and once more if the run failed
# (a test elsewhere may SCRIPT FLUSH the shared server).
redis_rate() {
    local name=$1 text=$2 sha r=""
    shift 2
    for _ in 1 2; do
        sha=$(rcli SCRIPT LOAD "$text" 2>/dev/null) || continue
        r=$(redis-benchmark -h "$R_HOST" -p "$R_PORT" --dbnum "$R_DB" -c 256 \
            -n "$((RAWS * 25000))" -r 100000000 -q --csv EVALSHA "$sha" "$@" \
            2>"$RAW/redis-$name.err" | tail -1 | cut -d, -f2 | tr -d '"') || r=""
        [[ $r =~ ^[0-9.]+$ && ! -s $RAW/redis-$name.err ]] && break
        r=""
    done
    echo "$name ${r:-0}" >>"$RAW/redis-benchmark.txt"
    rb_rate[$name]=${r:-0}
}
# The acquire a purchase batch sends: RCONN_TAKE (lock_acquire_many(), no
# fencing token).
redis_rate lock_acquire "$(lock_script RCONN_TAKE)" 1 \
    "bench:raw:lock:__rand_int__" 0123456789abcdef0123456789abcdef 10000
redis_rate lock_release "$(lock_script RCONN_RELEASE)" 2 \
    "bench:raw:lock:__rand_int__" lock-ch:bench \
    0123456789abcdef0123456789abcdef
# idgen/idgen.c's script with its keys for prefix "bench": the clock hash,
# the day keys of yesterday, today and tomorrow, the first day, the TTL,
# and the values reserved per call: 1, one id per purchase, the naive cost
# (the service may reserve blocks; a script without ARGV[3] ignores it).
ID_SCRIPT=$(printf '%b' "$(c_string "$ROOT/idgen/idgen.c" 'static const char script[] =')")
day=$(($(date +%s) / 86400))
id_keys=()
for i in 0 1 2; do
    id_keys+=("icr:{bench}:$(date -u -d "@$(((day - 1 + i) * 86400))" +%Y:%m:%d)")
done
id_args=(4 'icr:{bench}:clock' "${id_keys[@]}" "$((day - 1))" 259200 1)
# The first call records this Redis as the id server: ids pause until the
# next second (idgen.h), so wait that out before measuring.
if [[ -n $ID_SCRIPT ]] && rcli EVAL "$ID_SCRIPT" "${id_args[@]}" >/dev/null 2>&1 &&
    sleep 1.1 && [[ $(rcli EVAL "$ID_SCRIPT" "${id_args[@]}" | head -1) -gt 0 ]]; then
    redis_rate order_id "$ID_SCRIPT" "${id_args[@]}"
else
    say "redis-benchmark: idgen/idgen.c's script was not recognised; order_id skipped"
    rb_rate[order_id]=0
fi
rcli --scan --pattern 'bench:raw:*' | xargs -r -n 1000 redis-cli -h "$R_HOST" -p "$R_PORT" -n "$R_DB" DEL >/dev/null
# All three per purchase, one after the other: the purchases/s Redis alone allows.
RB_PURCHASE=$(awk -v a="${rb_rate[lock_acquire]}" -v r="${rb_rate[lock_release]}" \
    -v i="${rb_rate[order_id]}" 'BEGIN { if (a > 0 && r > 0 && i > 0)
        printf "%.0f", 1 / (1 / a + 1 / r + 1 / i); else print 0 }')
say "redis-benchmark (256 clients): acquire ${rb_rate[lock_acquire]}/s, release ${rb_rate[lock_release]}/s, order id ${rb_rate[order_id]}/s; all three: $RB_PURCHASE/s"

# ---- head-of-line: cheap requests while a crowd buys ----

# Without a crowd first: what one request costs the probe by itself.
hol_probe hol-idle
wait "$HOL_PID"
read -r HOL_IDLE_P50 HOL_IDLE_P99 HOL_IDLE_MAX <<<"$(hol_stats hol-idle)"
say "head-of-line, no crowd: GET /healthz p50 $HOL_IDLE_P50 ms, p99 $HOL_IDLE_P99 ms, max $HOL_IDLE_MAX ms"

# ---- 3. selling ----

declare -A sell_rate sell_p50 sell_p99 sell_err sell_stock sell_secs sell_span sell_done
for c in 64 256; do
    if [[ -n ${BENCH_STOCK:-} ]]; then
        stock=$BENCH_STOCK
    else
        # Calibration right before the sale, at the same concurrency (the
        # scaling cells are minutes earlier, and the machine's load moves).
        cv=$(new_voucher "$tokens_have")
        run_wrk "calibrate-c$c" "$c" "$CAL" "$HOSTS_2" "/api/vouchers/$cv/seckill" 1
        check_voucher "calibrate-c$c" "$cv" "$tokens_have" "$(j "$RAW/calibrate-c$c.json" .ok)"
        stock=$(jq -r '.ok / .duration_s' "$RAW/calibrate-c$c.json" |
            awk -v s="$SELL" -v m="$MAX_STOCK" \
                '{ x = int($1 * s * 1.5); if (x < 1000) x = 1000; if (x > m) x = m; print x }')
    fi
    ensure_users $((stock * 2))
    v=$(new_voucher "$stock")
    name=selling-c$c
    run_sysbench "$c"
    before_rate=$SB_RATE before_p99=$SB_P99 before_err=$SB_ERR
    say "selling: $c connections, stock $stock, $((stock * 2)) users"
    # A ceiling of three times the planned length, so a slow service still
    # ends the run in minutes (the figures then say it did not sell out).
    ((c == 256)) && hol_probe hol-crowd
    run_wrk "$name" "$c" $((SELL * 3 + 30)) "$HOSTS_2" "/api/vouchers/$v/seckill" 1
    if ((c == 256)); then
        wait "$HOL_PID"
        read -r HOL_P50 HOL_P99 HOL_MAX <<<"$(hol_stats hol-crowd)"
        say "head-of-line, during the 256 crowd: GET /healthz p50 $HOL_P50 ms, p99 $HOL_P99 ms, max $HOL_MAX ms"
    fi
    run_sysbench "$c"
    # The raw limit of this phase: the mean of the runs before and after.
    sb_rate[$c]=$(((before_rate + SB_RATE) / 2))
    sb_p99[$c]=$(awk -v a="$before_p99" -v b="$SB_P99" 'BEGIN { printf "%.2f", (a + b) / 2 }')
    sb_err[$c]=$((before_err + SB_ERR))
    f=$RAW/$name.json
    sell_stock[$c]=$stock
    if (($(j "$f" .sold_out) > 0)); then
        # From the first request sent to the first SOLD_OUT received.
        sell_secs[$c]=$(jq -r 'if .sold_out_after_s > 0 then .sold_out_after_s else .duration_s end' "$f")
        sell_rate[$c]=$(awk -v s="$stock" -v d="${sell_secs[$c]}" 'BEGIN { printf "%.0f", s / d }')
        sell_done[$c]=yes
        awk -v d="${sell_secs[$c]}" -v s="$SELL" 'BEGIN { exit !(d < s * 0.9) }' &&
            say "warning: $name sold out in ${sell_secs[$c]} s, short of the planned $SELL s (the service ran faster than calibrated)"
    else
        say "warning: $name did not sell out within wrk's $(j "$f" .duration_s) s"
        sell_secs[$c]=$(j "$f" .duration_s)
        sell_rate[$c]=$(awk -v s="$(j "$f" .ok)" -v d="${sell_secs[$c]}" 'BEGIN { printf "%.0f", s / d }')
        sell_done[$c]=no
    fi
    sell_p50[$c]=$(j "$f" .p50_ms)
    sell_p99[$c]=$(j "$f" .p99_ms)
    sell_err[$c]=$(j "$f" '.unavailable + .other + .busy + .limited + .duplicate +
        .socket_errors.connect + .socket_errors.read + .socket_errors.write + .socket_errors.timeout')
    check_voucher "$name" "$v" "$stock" "$(j "$f" .ok)"
    # Cross-check from the orders' own (whole-second) timestamps.
    sell_span[$c]=$(sql "SELECT TIMESTAMPDIFF(SECOND, MIN(created), MAX(created)) + 1
        FROM voucher_orders WHERE voucher_id = $v")
    say "selling: $c connections: $stock sold in ${sell_secs[$c]} s (orders' timestamps span ${sell_span[$c]} s) = ${sell_rate[$c]} purchases/s, p50 ${sell_p50[$c]} ms, p99 ${sell_p99[$c]} ms, errors ${sell_err[$c]}; sysbench $before_rate before, $SB_RATE after"
    SOLD_VOUCHER=$v
    SOLD_STOCK=$stock
done
check_voucher sysbench "$SB_VOUCHER" "$sb_initial" 0

# ---- 4. sold out, against nginx ----

# ROUNDS alternations of the service and nginx, SOLDOUT seconds each; the
# round with the median ratio is kept (the machine is shared and noisy).
ratios=()
for ((r = 1; r <= ROUNDS; r++)); do
    run_wrk soldout-c256-r$r 256 "$SOLDOUT" "$HOSTS_2" "/api/vouchers/$SOLD_VOUCHER/seckill"
    run_wrk nginx-c256-r$r 256 "$SOLDOUT" "127.0.0.1:$NGINX_PORT,127.0.0.1:$NGINX_PORT" /soldout.json 0 GET
    so=$(jq -r '.sold_out / .duration_s' "$RAW/soldout-c256-r$r.json")
    ng=$(jq -r '.requests / .duration_s' "$RAW/nginx-c256-r$r.json")
    ratios+=("$(ratio "$so" "$ng") $r")
    say "sold out, round $r: $(printf '%.0f' "$so") rejections/s, nginx $(printf '%.0f' "$ng") requests/s"
done
mid=$(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(((ROUNDS + 1) / 2))p" | cut -d' ' -f2)
f=$RAW/soldout-c256-r$mid.json
SO_RATE=$(awk -v n="$(j "$f" .sold_out)" -v d="$(j "$f" .duration_s)" 'BEGIN { printf "%.0f", n / d }')
SO_P50=$(j "$f" .p50_ms)
SO_P99=$(j "$f" .p99_ms)
SO_ERR=$(j "$f" '.requests - .sold_out')
check_voucher soldout-c256 "$SOLD_VOUCHER" "$SOLD_STOCK" 0
f=$RAW/nginx-c256-r$mid.json
NG_RATE=$(awk -v n="$(j "$f" .requests)" -v d="$(j "$f" .duration_s)" 'BEGIN { printf "%.0f", n / d }')
NG_P50=$(j "$f" .p50_ms)
NG_P99=$(j "$f" .p99_ms)
say "sold out (median round $mid of $ROUNDS): $SO_RATE rejections/s, p50 $SO_P50 ms, p99 $SO_P99 ms, other replies $SO_ERR; nginx $NG_RATE requests/s, p50 $NG_P50 ms, p99 $NG_P99 ms"

# ---- 4b. CPU per purchase: make bench-profile's measurement ----

# Instance A alone (B idles) at 256 connections for PROFILE_SECS.
ensure_users $((PROFILE_SECS * 60000)) exact
read -r PROF_RATE CPU_US PROF_CS PROF_BUSY _ < <(profile_measure cpu "$PID_A" "$PORT" "$PROFILE_SECS")
check_voucher cpu "$(cat "$RAW/profile-cpu.voucher")" 2000000 "$(j "$RAW/profile-cpu.json" .ok)"
say "cpu per purchase: instance A alone, 256 connections: $PROF_RATE purchases/s, $CPU_US us of CPU and $PROF_CS context switches a purchase ($PROF_BUSY cores busy)"

# ---- 5. lifecycle: buyers who never pay ----

# Two more instances with a short pay timeout (the default of 15 minutes
# would make the phase last as long) and a payment provider's key; 70% of
# the buyers pay through the provider's signed notification right after
# their 201, the rest never pay. Their orders expire, the units go back on
# sale and the crowd buys them again, until the phase ends; then the last
# unpaid orders expire and the invariant is checked.
LIFE_PORT_C=$((PORT + 2))
LIFE_PORT_D=$((PORT + 3))
PAY_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
PID_C=$(SECKILL_PAY_TIMEOUT_S=$LIFE_TIMEOUT SECKILL_PAY_SECRET=$PAY_SECRET \
    start_instance C "$LIFE_PORT_C")
PIDS+=("$PID_C")
PID_D=$(SECKILL_PAY_TIMEOUT_S=$LIFE_TIMEOUT SECKILL_PAY_SECRET=$PAY_SECRET \
    start_instance D "$LIFE_PORT_D")
PIDS+=("$PID_D")
ensure_users $((LIFE_STOCK * 6))
LIFE_V=$(new_voucher "$LIFE_STOCK")
# The stock every 50 ms, for how fast returned units sell again.
(
    end=$((SECONDS + LIFE_SECONDS + 2))
    while ((SECONDS < end)); do
        printf '%s %s\n' "$(date +%s%3N)" "$(sql "SELECT stock FROM seckill_vouchers WHERE voucher_id = $LIFE_V")"
        sleep 0.05
    done
) >"$RAW/lifecycle-stock.txt" 2>/dev/null &
LIFE_SAMPLER=$!
say "lifecycle: stock $LIFE_STOCK, pay timeout $LIFE_TIMEOUT s, 70% of buyers pay, $LIFE_SECONDS s at 256 connections"
BUY_PAY_PERCENT=70 BUY_PAY_SECRET=$PAY_SECRET BUY_PAY_AMOUNT=100 \
    run_wrk lifecycle-c256 256 "$LIFE_SECONDS" \
    "127.0.0.1:$LIFE_PORT_C,127.0.0.1:$LIFE_PORT_D" "/api/vouchers/$LIFE_V/seckill"
wait "$LIFE_SAMPLER" || true
# The last unpaid orders expire (their units come back) before the check.
for _ in $(seq $((LIFE_TIMEOUT * 10 + 40))); do
    [[ $(sql "SELECT COUNT(*) FROM voucher_orders WHERE voucher_id = $LIFE_V AND status = 1") == 0 ]] && break
    sleep 0.1
done
check_voucher lifecycle "$LIFE_V" "$LIFE_STOCK" 0
read -r LIFE_PAID LIFE_UNPAID LIFE_EXPIRED LIFE_ALL < <(sql "SELECT SUM(status = 2),
    SUM(status = 1), SUM(status = 7), COUNT(*) FROM voucher_orders WHERE voucher_id = $LIFE_V")
# Expiry lag: from each expired order's deadline to its close, ms.
sql "SELECT TIMESTAMPDIFF(MICROSECOND, pay_deadline, close_time) / 1000
    FROM voucher_orders WHERE voucher_id = $LIFE_V AND status = 7
    ORDER BY 1" >"$RAW/lifecycle-lag.ms"
read -r LIFE_LAG_P50 LIFE_LAG_P99 LIFE_LAG_MAX < <(awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "0 0 0"; exit }
    printf "%.0f %.0f %.0f\n", v[int(NR * 0.5 + 0.5)], v[int(NR * 0.99 + 0.5)], v[NR] }' \
    "$RAW/lifecycle-lag.ms")
# Resale: after the first sell-out, each stretch in which the stock was
# above 0 (units given back and not yet bought again), ms.
awk '
    $2 == "" { next }
    $2 == 0 { if (open) { print $1 - since; open = 0 } zero = 1; next }
    zero && !open { open = 1; since = $1 }' "$RAW/lifecycle-stock.txt" |
    sort -n >"$RAW/lifecycle-resale.ms"
read -r LIFE_RESALE_N LIFE_RESALE_P50 LIFE_RESALE_P99 < <(awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "0 0 0"; exit }
    printf "%d %.0f %.0f\n", NR, v[int(NR * 0.5 + 0.5)], v[int(NR * 0.99 + 0.5)] }' \
    "$RAW/lifecycle-resale.ms")
f=$RAW/lifecycle-c256.json
say "lifecycle: $(j "$f" .ok) sold (201), $(j "$f" .paid) paid, $(j "$f" .pay_late) payments too late; orders: ${LIFE_PAID:-0} paid, ${LIFE_EXPIRED:-0} expired, ${LIFE_UNPAID:-0} unpaid; expiry lag p50 ${LIFE_LAG_P50} ms, p99 ${LIFE_LAG_P99} ms, max ${LIFE_LAG_MAX} ms; returned stock sold again within p50 ${LIFE_RESALE_P50} ms, p99 ${LIFE_RESALE_P99} ms ($LIFE_RESALE_N stretches)"

# ---- 6. async: Redis decides, a stream carries the orders ----

# The instances above stop first: every instance's writer drains every
# async sale of its database through its own Redis.
for pid in "$PID_A" "$PID_B" "$PID_C" "$PID_D"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "$PID_A" "$PID_B" "$PID_C" "$PID_D"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
done
AR_PORT=$((PORT + 6))
ASYNC_PORT_E=$((PORT + 4))
ASYNC_PORT_F=$((PORT + 5))
start_durable_redis redis-async "$AR_PORT"
arcli() { redis-cli -h 127.0.0.1 -p "$AR_PORT" "$@"; }
AR_URL=redis://127.0.0.1:$AR_PORT/0
async_instance() { # NAME PORT: an async-mode instance on the durable Redis
    SECKILL_REDIS_URL=$AR_URL SECKILL_LOCK_URL= SECKILL_PURCHASE_MODE=async \
        SECKILL_ASYNC_ACCEPT_LOSS=0 start_instance "$1" "$2"
}

# The raw limit: the purchase script, one purchase per call, on a sale of
# a billion units (never sold out), at 256 clients.
PURCHASE_SCRIPT=$(printf '%b' "$(c_string "$ROOT/async/scripts.c" 'static struct redis_script purchase_script')")
[[ -n $PURCHASE_SCRIPT ]] || die "async/scripts.c's purchase script was not recognised"
rk=()
for k in info stock buyers stream pending frozen holders; do rk+=("{v:bench-raw}:$k"); done
sha=$(arcli SCRIPT LOAD "$PURCHASE_SCRIPT")
raw_script() { # NAME: the raw limit now, in AR_RAW
    arcli DEL "${rk[@]}" >/dev/null
    arcli HSET "${rk[0]}" begin 0 end 99999999999 initial 1000000000 >/dev/null
    arcli SET "${rk[1]}" 1000000000 >/dev/null
    AR_RAW=$(redis-benchmark -h 127.0.0.1 -p "$AR_PORT" -c 256 -n "$((RAWS * 25000))" \
        -r 1000000000 -q --csv EVALSHA "$sha" 7 "${rk[@]}" 1000000000 \
        __rand_int__ __rand_int__ 2>"$RAW/redis-async-script.err" | tail -1 | cut -d, -f2 | tr -d '"')
    [[ $AR_RAW =~ ^[0-9.]+$ ]] || { cat "$RAW/redis-async-script.err" >&2; die "redis-benchmark of the purchase script failed"; }
    AR_RAW=${AR_RAW%.*}
    echo "$1 $AR_RAW" >>"$RAW/redis-benchmark.txt"
    arcli DEL "${rk[@]}" >/dev/null
    say "redis-benchmark: the async purchase script on a Redis with appendfsync always, 256 clients: $AR_RAW calls/s"
}
raw_script purchase_script_durable

# Drain: a stream of DRAIN_ORDERS orders waits; then the writers start.
PID_E=$(async_instance E "$ASYNC_PORT_E")
PIDS+=("$PID_E")
DRAIN_V=$(VOUCHER_PORT=$ASYNC_PORT_E new_voucher "$DRAIN_ORDERS" async)
kill -TERM "$PID_E"
for _ in $(seq 50); do kill -0 "$PID_E" 2>/dev/null || break; sleep 0.1; done
dk=()
for k in info stock buyers stream pending frozen holders; do dk+=("{v:$DRAIN_V}:$k"); done
# Order ids below 2^53 (exact in awk's doubles), far below the ID
# worker's (about 6.6e17 now, growing with the clock), and users of their
# own: the script in batches of 200, as redis-cli --pipe sends.
awk -v n="$DRAIN_ORDERS" -v sha="$sha" -v keys="${dk[*]}" -v base=8000000000000000 \
    -v run="$((10#$(date +%s) % 1000 * 1000000000))" -v user="$((FIRST_USER + 500000000))" '
    function bulk(s) { return sprintf("$%d\r\n%s\r\n", length(s), s) }
    BEGIN {
        split(keys, k, " ")
        for (i = 0; i < n; i += 200) {
            m = (n - i < 200) ? n - i : 200
            printf "*%d\r\n%s%s%s", 11 + 2 * m, bulk("EVALSHA"), bulk(sha), bulk("7")
            for (j = 1; j <= 7; j++) printf "%s", bulk(k[j])
            printf "%s", bulk("1000000000")
            for (j = 0; j < m; j++)
                printf "%s%s", bulk(sprintf("%.0f", base + run + i + j)), bulk(user + i + j)
        }
    }' >"$WORK/drain.resp"
arcli --pipe <"$WORK/drain.resp" >"$RAW/drain-fill.txt" 2>&1 || die "filling the stream failed"
[[ $(arcli XLEN "${dk[3]}") == "$DRAIN_ORDERS" ]] ||
    die "the drain stream holds $(arcli XLEN "${dk[3]}") orders, not $DRAIN_ORDERS"
say "async drain: $DRAIN_ORDERS orders wait in the stream of voucher $DRAIN_V; starting the writers"
(
    while :; do
        printf '%s %s\n' "$(date +%s%3N)" "$(sql "SELECT COUNT(*) FROM voucher_orders WHERE voucher_id = $DRAIN_V")"
        sleep 0.02
    done
) >"$RAW/async-drain.txt" 2>/dev/null &
DRAIN_SAMPLER=$!
PID_E=$(async_instance E "$ASYNC_PORT_E")
PIDS+=("$PID_E")
PID_F=$(async_instance F "$ASYNC_PORT_F")
PIDS+=("$PID_F")
for _ in $(seq 600); do
    [[ $(tail -1 "$RAW/async-drain.txt" | cut -d' ' -f2) == "$DRAIN_ORDERS" ]] && break
    sleep 0.1
done
kill "$DRAIN_SAMPLER" 2>/dev/null || true
wait "$DRAIN_SAMPLER" 2>/dev/null || true
read -r DRAIN_MS DRAIN_RATE < <(awk -v n="$DRAIN_ORDERS" '
    $2 == "" { next }
    $2 > 0 && !t0 { t0 = $1; c0 = $2 }
    $2 == n { t1 = $1; exit }
    END { if (t1 > t0 && t0) printf "%d %.0f\n", t1 - t0, (n - c0) * 1000 / (t1 - t0); else print "0 0" }' \
    "$RAW/async-drain.txt")
check_voucher async-drain "$DRAIN_V" "$DRAIN_ORDERS" "$DRAIN_ORDERS"
say "async drain: $DRAIN_ORDERS orders in MySQL in $DRAIN_MS ms after the first: $DRAIN_RATE orders/s"

# Accept: ROUNDS rounds, each the raw limit again (the first round takes
# the one above) and then the crowd on both instances until the first
# SOLD_OUT, on a voucher of its own, its orders drained before the next;
# the round of the median ratio is reported. The raw rate, on a Redis that
# fsyncs every write, moves by half from one minute to the next with the
# disk, so one pair of numbers says little.
ensure_users $((ASYNC_STOCK * 2)) exact
acc_ratios=()
acc_vouchers=()
for ((r = 1; r <= ROUNDS; r++)); do
    ((r == 1)) || raw_script "purchase_script_durable_r$r"
    ACC_V=$(VOUCHER_PORT=$ASYNC_PORT_E new_voucher "$ASYNC_STOCK" async)
    say "async accept, round $r: stock $ASYNC_STOCK at 256 connections on 2 async instances"
    run_wrk "async-c256-r$r" 256 120 "127.0.0.1:$ASYNC_PORT_E,127.0.0.1:$ASYNC_PORT_F" \
        "/api/vouchers/$ACC_V/seckill" 1
    t_end=$(date +%s%3N)
    f=$RAW/async-c256-r$r.json
    ACC_OK=$(j "$f" .ok)
    ACC_SECS=$(j "$f" .sold_out_after_s)
    ACC_RATE=$(awk -v s="$ASYNC_STOCK" -v t="$ACC_SECS" 'BEGIN { if (t > 0) printf "%.0f", s / t; else print 0 }')
    ACC_LAG=-1
    for _ in $(seq 600); do
        if [[ $(sql "SELECT COUNT(*) FROM voucher_orders WHERE voucher_id = $ACC_V") == "$ASYNC_STOCK" ]]; then
            ACC_LAG=$(($(date +%s%3N) - t_end))
            break
        fi
        sleep 0.05
    done
    check_voucher "async-accept-r$r" "$ACC_V" "$ASYNC_STOCK" "$ACC_OK"
    echo "$r $ACC_RATE $AR_RAW $ACC_LAG" >>"$RAW/async-accept-rounds.txt"
    acc_ratios+=("$(ratio "$ACC_RATE" "$AR_RAW") $r")
    acc_vouchers+=("$ACC_V")
    say "async accept, round $r: $ACC_OK accepted (202) in $ACC_SECS s: $ACC_RATE/s against $AR_RAW calls/s, $(j "$f" .busy) refused 429 BUSY; last order in MySQL $ACC_LAG ms after the last 202"
done
for v in "$DRAIN_V" "${acc_vouchers[@]}"; do
    r_stock=$(arcli GET "{v:$v}:stock")
    r_buyers=$(arcli SCARD "{v:$v}:buyers")
    read -r m_stock m_active < <(sql "SELECT stock, (SELECT COUNT(*) FROM voucher_orders WHERE voucher_id = $v AND status IN (1, 2)) FROM seckill_vouchers WHERE voucher_id = $v")
    if [[ $r_stock != "$m_stock" || $r_buyers != "$m_active" ]]; then
        say "async voucher $v: Redis stock $r_stock buyers $r_buyers, MySQL stock $m_stock active $m_active -> BROKEN"
        BROKEN=1
    fi
done
mid=$(printf '%s\n' "${acc_ratios[@]}" | sort -n | sed -n "$(((ROUNDS + 1) / 2))p" | cut -d' ' -f2)
cp "$RAW/async-c256-r$mid.json" "$RAW/async-c256.json"
read -r _ ACC_RATE AR_RAW ACC_LAG < <(awk -v r="$mid" '$1 == r' "$RAW/async-accept-rounds.txt")
f=$RAW/async-c256.json
ACC_OK=$(j "$f" .ok)
ACC_BUSY=$(j "$f" .busy)
ACC_SECS=$(j "$f" .sold_out_after_s)
ASYNC_ACCEPT_RATIO=$(ratio "$ACC_RATE" "$AR_RAW")
say "async accept (median round $mid of $ROUNDS; ratios $(printf '%s\n' "${acc_ratios[@]}" | sort -n -k2 | cut -d' ' -f1 | tr '\n' ' ')): $ACC_OK accepted (202) in $ACC_SECS s: $ACC_RATE/s, p50 $(j "$f" .p50_ms) ms, p99 $(j "$f" .p99_ms) ms, $ACC_BUSY refused 429 BUSY; last order in MySQL $ACC_LAG ms after the last 202"

# ---- 7. pay storm: every buyer pays at once ----

# bench/paystorm.sh on two instances of its own (ports +20, +21): a
# 20,000-unit sale sold out, then every buyer's signed notification at
# once; payments/s over purchases/s of that sale. BENCH_PAYSTORM_BASE
# (another seckilld) runs it with that binary too, alternately.
PAYSTORM_RC=0
BENCH_PAYSTORM_PORT=$((PORT + 20)) BENCH_PAYSTORM_REPORT=$RAW/paystorm.json \
    "$ROOT/bench/paystorm.sh" "$BUILD" >"$RAW/paystorm.out" || PAYSTORM_RC=$?
[[ -s $RAW/paystorm.json ]] || die "the pay storm wrote no report"
((PAYSTORM_RC == 0)) || BROKEN=1
PAY_STORM_RATIO=$(jq -r '.new.ratio * 1000 | round / 1000' "$RAW/paystorm.json")
PAY_STORM_PAY=$(jq -r '.new.payments_per_s' "$RAW/paystorm.json")
PAY_STORM_SELL=$(jq -r '.new.purchases_per_s' "$RAW/paystorm.json")
say "pay storm: $PAY_STORM_PAY payments/s after a sale of $PAY_STORM_SELL purchases/s: $PAY_STORM_RATIO"

# ---- 8. the crowd: idle keep-alive connections while 256 buy ----

if [[ ${BENCH_CROWD:-1} == 1 ]]; then
    # shellcheck source=bench/crowd.sh
    . "$ROOT/bench/crowd.sh"
    crowd_phase
    crowd_json >"$RAW/crowd-phase.json"
    CROWD_JSON=$(cat "$RAW/crowd-phase.json")
else
    say "crowd: skipped (BENCH_CROWD=0)"
    CROWD_RSS_MIB=skipped CROWD_HOL_P99=skipped CROWD_JSON=null
fi

# ---- results ----

SELLING_RATIO=$(ratio "${sell_rate[256]}" "${sb_rate[256]}")
# More threads on one row can be slower than fewer: the best sysbench rate
# at any thread count is the stricter ceiling, reported beside.
SB_BEST=0
SB_BEST_C=0
for c in 16 64 256; do
    if ((sb_rate[$c] > SB_BEST)); then SB_BEST=${sb_rate[$c]} SB_BEST_C=$c; fi
done
SELLING_BEST_RATIO=$(ratio "${sell_rate[256]}" "$SB_BEST")
SOLDOUT_RATIO=$(ratio "$SO_RATE" "$NG_RATE")
ASYNC_DRAIN_RATIO=$(ratio "$DRAIN_RATE" "$SB_BEST")

# scaling.dat: connections, 1 instance rate and p99, 2 instances rate and
# p99, sysbench rate (NaN where not run).
{
    echo "# conns rate_1 p99_1 rate_2 p99_2 sysbench"
    for c in $CONNS; do
        echo "$c ${rate[1,$c]} ${p99[1,$c]} ${rate[2,$c]} ${p99[2,$c]} ${sb_rate[$c]:-NaN}"
    done
} >"$OUT/scaling.dat"
gnuplot <<EOF 2>"$RAW/gnuplot.err" || say "gnuplot failed (see raw/gnuplot.err)"
set terminal png size 900,720 font ",10"
set output "$OUT/scaling.png"
set multiplot layout 2,1 title "seckilld make bench $RUN_ID ($(nproc) cores shared by wrk, instances, MariaDB, Redis)"
set logscale x 2
set xtics ($(for c in $CONNS; do printf '"%s" %s,' "$c" "$c"; done | sed 's/,$//'))
set xlabel "wrk connections"
set grid
set key below horizontal maxrows 1
set bmargin 6
set ylabel "purchases/s"
set yrange [0:*]
plot "$OUT/scaling.dat" using 1:2 with linespoints lw 2 title "1 instance", \
     "" using 1:4 with linespoints lw 2 title "2 instances", \
     "" using 1:6 with linespoints lw 2 dt 2 title "sysbench, same transaction (x = threads)"
set ylabel "p99 latency (ms, log scale)"
set logscale y
set yrange [*:*]
plot "$OUT/scaling.dat" using 1:3 with linespoints lw 2 title "1 instance", \
     "" using 1:5 with linespoints lw 2 title "2 instances"
unset multiplot
EOF

commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git -C "$ROOT" status --porcelain -- cmd common handlers store lock idgen engine async 2>/dev/null) ]] &&
    commit+="+dirty"
scaling_json=$(for n in 1 2; do for c in $CONNS; do
    echo "{\"instances\":$n,\"connections\":$c,\"purchases_per_s\":${rate[$n,$c]},\"p50_ms\":${p50[$n,$c]},\"p99_ms\":${p99[$n,$c]}}"
done; done | jq -s .)
sysbench_json=$(for c in 16 64 256; do
    echo "{\"threads\":$c,\"transactions_per_s\":${sb_rate[$c]},\"p99_ms\":${sb_p99[$c]:-0},\"ignored_errors\":${sb_err[$c]:-0}}"
done | jq -s .)
selling_json=$(for c in 64 256; do
    echo "{\"connections\":$c,\"stock\":${sell_stock[$c]},\"seconds\":${sell_secs[$c]},\"orders_timestamp_span_s\":${sell_span[$c]},\"sold_out\":$([[ ${sell_done[$c]} == yes ]] && echo true || echo false),\"purchases_per_s\":${sell_rate[$c]},\"p50_ms\":${sell_p50[$c]},\"p99_ms\":${sell_p99[$c]},\"errors\":${sell_err[$c]}}"
done | jq -s .)
IFS=$'\t' read -r my_ver my_flush my_sync my_binlog my_iso my_pool < <(sql "SELECT
    @@version, @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin,
    @@tx_isolation, @@innodb_buffer_pool_size")
mysql_settings=$(jq -n --arg v "$my_ver" --arg f "$my_flush" --arg s "$my_sync" \
    --arg b "$my_binlog" --arg i "$my_iso" --arg p "$my_pool" \
    '{version: $v, innodb_flush_log_at_trx_commit: ($f | tonumber),
      sync_binlog: ($s | tonumber), log_bin: ($b == "1"), isolation: $i,
      innodb_buffer_pool_size: ($p | tonumber)}')
jq -n --arg run "$RUN_ID" --arg commit "$commit" \
    --arg cpu "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" \
    --argjson cores "$(nproc)" --arg kernel "$(uname -r)" \
    --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" --arg load0 "$LOAD_START" \
    --argjson quick "${BENCH_QUICK:-0}" \
    --argjson cell "$CELL" \
    --argjson mysql "$mysql_settings" \
    --argjson scaling "$scaling_json" --argjson sysbench "$sysbench_json" \
    --argjson selling "$selling_json" \
    --argjson so_rate "$SO_RATE" --argjson so_p50 "$SO_P50" --argjson so_p99 "$SO_P99" \
    --argjson so_err "$SO_ERR" --argjson so_secs "$SOLDOUT" --argjson rounds "$ROUNDS" \
    --argjson ng_rate "$NG_RATE" --argjson ng_p50 "$NG_P50" --argjson ng_p99 "$NG_P99" \
    --argjson acq "${rb_rate[lock_acquire]}" --argjson rel "${rb_rate[lock_release]}" \
    --argjson oid "${rb_rate[order_id]}" --argjson rbp "$RB_PURCHASE" \
    --argjson hwm "$RSS_MIB" --argjson rss_mid "$((RSS_SAMPLE_KIB / 1024))" \
    --argjson open "$OPEN_CONNS" \
    --argjson sr "$SELLING_RATIO" --argjson sor "$SOLDOUT_RATIO" \
    --argjson srb "$SELLING_BEST_RATIO" --argjson sbb "$SB_BEST" --argjson sbbc "$SB_BEST_C" \
    --argjson cpu_us "$CPU_US" --argjson prof_rate "$PROF_RATE" --argjson prof_cs "$PROF_CS" \
    --argjson prof_busy "$PROF_BUSY" --argjson prof_secs "$PROFILE_SECS" \
    --argjson broken "$BROKEN" \
    --argjson life_timeout "$LIFE_TIMEOUT" --argjson life_secs "$LIFE_SECONDS" \
    --argjson life_stock "$LIFE_STOCK" --argjson life_ok "$(j "$RAW/lifecycle-c256.json" .ok)" \
    --argjson life_paid_200 "$(j "$RAW/lifecycle-c256.json" .paid)" \
    --argjson life_late "$(j "$RAW/lifecycle-c256.json" .pay_late)" \
    --argjson life_paid "${LIFE_PAID:-0}" --argjson life_expired "${LIFE_EXPIRED:-0}" \
    --argjson life_unpaid "${LIFE_UNPAID:-0}" \
    --argjson lag50 "$LIFE_LAG_P50" --argjson lag99 "$LIFE_LAG_P99" --argjson lagmax "$LIFE_LAG_MAX" \
    --argjson rs_n "$LIFE_RESALE_N" --argjson rs50 "$LIFE_RESALE_P50" --argjson rs99 "$LIFE_RESALE_P99" \
    --argjson hol_p50 "$HOL_P50" --argjson hol_p99 "$HOL_P99" --argjson hol_max "$HOL_MAX" \
    --argjson hol_i50 "$HOL_IDLE_P50" --argjson hol_i99 "$HOL_IDLE_P99" --argjson hol_imax "$HOL_IDLE_MAX" \
    --argjson ar_raw "$AR_RAW" --argjson drain_n "$DRAIN_ORDERS" --argjson drain_ms "$DRAIN_MS" \
    --argjson drain_rate "$DRAIN_RATE" --argjson acc_stock "$ASYNC_STOCK" --argjson acc_ok "$ACC_OK" \
    --argjson acc_secs "$ACC_SECS" --argjson acc_rate "$ACC_RATE" --argjson acc_lag "$ACC_LAG" \
    --argjson acc_busy "$ACC_BUSY" \
    --argjson acc_p50 "$(j "$RAW/async-c256.json" .p50_ms)" --argjson acc_p99 "$(j "$RAW/async-c256.json" .p99_ms)" \
    --argjson aar "$ASYNC_ACCEPT_RATIO" --argjson adr "$ASYNC_DRAIN_RATIO" \
    --argjson crowd "$CROWD_JSON" \
    --argjson psr "$PAY_STORM_RATIO" --slurpfile paystorm "$RAW/paystorm.json" \
    --slurpfile inv <(cat "$RAW"/invariants-*.json) \
    '{run: $run, commit: $commit,
      machine: {cpu: $cpu, cores: $cores, kernel: $kernel,
                load_at_start: $load0, load_at_end: $load},
      settings: {quick: ($quick == 1), cell_seconds: $cell,
                 instance_settings: "defaults", wrk_threads: 2,
                 mysql: $mysql},
      scaling: $scaling,
      selling: $selling,
      sold_out: {connections: 256, seconds: $so_secs, rounds: $rounds, rejections_per_s: $so_rate,
                 p50_ms: $so_p50, p99_ms: $so_p99, other_replies: $so_err},
      raw: {sysbench: $sysbench,
            nginx: {connections: 256, requests_per_s: $ng_rate, p50_ms: $ng_p50, p99_ms: $ng_p99},
            redis_benchmark_256_clients: {lock_acquire: $acq, lock_release: $rel,
                 order_id: $oid, all_three_per_purchase: $rbp}},
      memory: {instance_vmhwm_mib: $hwm, vmrss_mib_at_1024: $rss_mid,
               open_connections_seen: $open},
      lifecycle: {pay_timeout_s: $life_timeout, seconds: $life_secs, stock: $life_stock,
                  pay_percent: 70, sold_201: $life_ok, paid_200: $life_paid_200,
                  payments_too_late: $life_late,
                  orders: {paid: $life_paid, expired: $life_expired, unpaid: $life_unpaid},
                  expiry_lag_ms: {p50: $lag50, p99: $lag99, max: $lagmax},
                  resold_after_ms: {stretches: $rs_n, p50: $rs50, p99: $rs99}},
      async: {redis: "appendonly yes, appendfsync always",
              raw_purchase_script_per_s: $ar_raw,
              drain: {orders: $drain_n, ms: $drain_ms, orders_per_s: $drain_rate},
              accept: {connections: 256, stock: $acc_stock, accepted_202: $acc_ok,
                       seconds: $acc_secs, per_s: $acc_rate, p50_ms: $acc_p50,
                       p99_ms: $acc_p99, last_202_to_last_order_ms: $acc_lag,
                       busy_429: $acc_busy}},
      head_of_line: {probe: "200 x GET /healthz, a fresh connection each, one at a time",
                     during_256_crowd: {p50_ms: $hol_p50, p99_ms: $hol_p99, max_ms: $hol_max},
                     no_crowd: {p50_ms: $hol_i50, p99_ms: $hol_i99, max_ms: $hol_imax}},
      cpu_per_purchase: {instances: 1, connections: 256, seconds: $prof_secs,
                         purchases_per_s: $prof_rate, cpu_us: $cpu_us,
                         context_switches: $prof_cs, cores_busy: $prof_busy},
      crowd: $crowd,
      pay_storm: $paystorm[0],
      invariants: $inv, invariants_ok: ($broken == 0),
      ratios: {selling: $sr, soldout: $sor, rss_mib: $hwm, hol_p99_ms: $hol_p99,
               crowd_rss_mib: $crowd.rss_mib_at_50000,
               crowd_hol_p99_ms: $crowd.healthz_ms.with_crowd.p99,
               selling_vs_best_sysbench: $srb, selling_best: $srb,
               cpu_us: $cpu_us, best_sysbench_per_s: $sbb,
               best_sysbench_threads: $sbbc,
               async_accept: $aar, async_drain: $adr, pay_storm: $psr}}' >"$OUT/results.json"

table() {
    echo "| figure | value | raw limit, same run | ratio |"
    echo "|---|---:|---:|---:|"
    for c in 64 256; do
        printf '| selling, %s conns, 2 instances: purchases/s (%s in %s s%s) | %s | sysbench %s threads: %s tx/s | %s |\n' \
            "$c" "${sell_stock[$c]}" "$(printf '%.1f' "${sell_secs[$c]}")" \
            "$([[ ${sell_done[$c]} == yes ]] || echo ', NOT sold out')" \
            "${sell_rate[$c]}" "$c" "${sb_rate[$c]}" "$(ratio "${sell_rate[$c]}" "${sb_rate[$c]}")"
        printf '| selling, %s conns: p50 / p99 ms (errors) | %s / %s (%s) | sysbench p99 %s ms | |\n' \
            "$c" "${sell_p50[$c]}" "${sell_p99[$c]}" "${sell_err[$c]}" "${sb_p99[$c]}"
    done
    printf '| selling, 256 conns, against the best sysbench rate | %s | sysbench %s threads: %s tx/s | %s |\n' \
        "${sell_rate[256]}" "$SB_BEST_C" "$SB_BEST" "$SELLING_BEST_RATIO"
    printf '| sold out, 256 conns: rejections/s | %s | nginx static file: %s req/s | %s |\n' \
        "$SO_RATE" "$NG_RATE" "$SOLDOUT_RATIO"
    printf '| sold out, 256 conns: p50 / p99 ms | %s / %s | nginx %s / %s | |\n' \
        "$SO_P50" "$SO_P99" "$NG_P50" "$NG_P99"
    printf '| Redis per purchase (acquire + id + release), 256 clients | | %s /s (%s, %s, %s) | %s |\n' \
        "$RB_PURCHASE" "${rb_rate[lock_acquire]}" "${rb_rate[order_id]}" "${rb_rate[lock_release]}" \
        "$(ratio "${sell_rate[256]}" "$RB_PURCHASE")"
    printf '| CPU per purchase, 1 instance alone at 256 conns: us (purchases/s, switches a purchase) | %s | %s/s, %s | target <= 20 |\n' \
        "$CPU_US" "$PROF_RATE" "$PROF_CS"
    printf '| memory: VmHWM of one instance after 1,024 conns, MiB | %s | target < 64 | |\n' "$RSS_MIB"
    printf '| GET /healthz during the 256 crowd: p50 / p99 / max ms | %s / %s / %s | no crowd: %s / %s / %s | target p99 <= 10 |\n' \
        "$HOL_P50" "$HOL_P99" "$HOL_MAX" "$HOL_IDLE_P50" "$HOL_IDLE_P99" "$HOL_IDLE_MAX"
    if [[ $CROWD_JSON != null ]]; then
        printf '| crowd: VmRSS of one instance at 50,000 idle conns, MiB (%s open%s) | %s | target <= 256 | |\n' \
            "$CROWD_N" "$( ((CROWD_N < 50000)) && echo ', the rest projected')" "$CROWD_RSS_MIB"
        printf '| crowd: KiB per idle connection / per buying one (purchases included) | %s / %s | | |\n' \
            "$CROWD_IDLE_CONN_KIB" "$CROWD_BUSY_CONN_KIB"
        printf '| crowd: GET /healthz p50 / p99 / max ms with the crowd and 256 buying | %s / %s / %s | without the crowd: %s / %s | target p99 <= 5 |\n' \
            "$CROWD_HOL_P50" "$CROWD_HOL_P99" "$CROWD_HOL_MAX" "$CROWD_HOL_ALONE_P50" "$CROWD_HOL_ALONE_P99"
        printf '| crowd: purchases/s at 256 conns, with / without the crowd | %s / %s | | %s |\n' \
            "$CROWD_BUY_WITH" "$CROWD_BUY_ALONE" "$CROWD_BUY_RATIO"
    fi
    printf '| async accept, 256 conns, 2 instances: 202s/s (%s in %s s) | %s | the purchase script alone, 256 clients: %s calls/s | %s |\n' \
        "$ASYNC_STOCK" "$ACC_SECS" "$ACC_RATE" "$AR_RAW" "$ASYNC_ACCEPT_RATIO"
    printf '| async accept: p50 / p99 ms; 429 BUSY; last 202 to last order in MySQL | %s / %s; %s; %s ms | Redis: appendfsync always | |\n' \
        "$(j "$RAW/async-c256.json" .p50_ms)" "$(j "$RAW/async-c256.json" .p99_ms)" "$ACC_BUSY" "$ACC_LAG"
    printf '| async drain: orders/s into MySQL (%s waiting, %s ms) | %s | best sysbench: %s tx/s | %s |\n' \
        "$DRAIN_ORDERS" "$DRAIN_MS" "$DRAIN_RATE" "$SB_BEST" "$ASYNC_DRAIN_RATIO"
    printf '| pay storm: payments/s, every buyer of %s units at once | %s | the sale before: %s purchases/s | %s |\n' \
        "$(jq -r .new.stock "$RAW/paystorm.json")" "$PAY_STORM_PAY" "$PAY_STORM_SELL" "$PAY_STORM_RATIO"
    printf '| lifecycle (pay timeout %s s, 70%% pay): orders paid / expired | %s / %s | %s sold (201) in %s s | |\n' \
        "$LIFE_TIMEOUT" "${LIFE_PAID:-0}" "${LIFE_EXPIRED:-0}" "$(j "$RAW/lifecycle-c256.json" .ok)" "$LIFE_SECONDS"
    printf '| lifecycle: expiry lag p50 / p99 / max ms (deadline to close) | %s / %s / %s | target < 2000 | |\n' \
        "$LIFE_LAG_P50" "$LIFE_LAG_P99" "$LIFE_LAG_MAX"
    printf '| lifecycle: returned stock sold again within p50 / p99 ms | %s / %s | %s stretches with stock > 0 after sell-out | |\n' \
        "$LIFE_RESALE_P50" "$LIFE_RESALE_P99" "$LIFE_RESALE_N"
    echo
    printf '| scaling: connections |'
    for c in $CONNS; do printf ' %s |' "$c"; done
    printf '\n|---|'
    for c in $CONNS; do printf -- '---:|'; done
    echo
    for n in 1 2; do
        printf '| %s instance(s): purchases/s (p99 ms) |' "$n"
        for c in $CONNS; do printf ' %s (%s) |' "${rate[$n,$c]}" "${p99[$n,$c]}"; done
        echo
    done
    printf '| sysbench purchase transaction: tx/s (p99 ms) |'
    for c in $CONNS; do
        if [[ -n ${sb_rate[$c]:-} ]]; then printf ' %s (%s) |' "${sb_rate[$c]}" "${sb_p99[$c]}"; else printf ' - |'; fi
    done
    echo
    echo
    echo "Invariants: $( ((BROKEN)) && echo BROKEN || echo "all hold") ($(find "$RAW" -name 'invariants-*.json' | wc -l) vouchers checked)."
    echo "Run $RUN_ID, commit $commit, $(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), load $LOAD_START at start, $(cut -d' ' -f1-3 /proc/loadavg) at end."
    echo "Command: make bench$( [[ ${BENCH_QUICK:-0} == 1 ]] && echo " BENCH_QUICK=1")"
}
table | tee "$OUT/summary.md"
echo
echo "bench: results in ${OUT#"$ROOT"/}/ (summary.md, results.json, scaling.png)"
echo "bench-ratios selling=$SELLING_RATIO soldout=$SOLDOUT_RATIO rss_mib=$RSS_MIB hol_p99_ms=$HOL_P99 async_accept=$ASYNC_ACCEPT_RATIO async_drain=$ASYNC_DRAIN_RATIO pay_storm=$PAY_STORM_RATIO crowd_rss_mib=$CROWD_RSS_MIB crowd_hol_p99_ms=$CROWD_HOL_P99 selling_best=$SELLING_BEST_RATIO cpu_us=$CPU_US"
((BROKEN == 0)) || { echo "bench: an invariant is broken (see raw/invariants-*.json)" >&2; exit 1; }
