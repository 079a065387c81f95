#!/usr/bin/env bash
# scale.sh - make bench-scale: the flash sale through haproxy
# (deploy/haproxy.cfg) in front of 1, 2 and 4 seckilld instances on this
# machine, and one instance without haproxy for the proxy's own cost.
#
#   bench/scale.sh [BUILD_DIR]
#
# For each setup: a selling phase (a fresh voucher with more stock than
# the phase can sell, wrk with BENCH_SCALE_CONNS connections for
# BENCH_SCALE_SECONDS; purchases a second = orders in MySQL / duration)
# and a sold-out phase (a voucher with stock 0: requests a second). During
# each phase the CPU time of every process involved is read from /proc
# (the instances, haproxy, mariadbd, redis-server) and the whole
# machine's, so the table says where the cores went (the rest is wrk and
# the kernel). Each selling phase also gives the costs per purchase (CPU
# microseconds of each process, the transactions and their mean size,
# costs-<setup>.env); costs.env, which docs/scaling.md's shard simulation
# (bench/shardsim.sh) starts from, is the one-instance-behind-haproxy
# setup's.
#
# Then the stores beside one Redis and one MariaDB primary: one instance,
# BENCH_SCALE_VOUCHERS (16) vouchers on sale at once (each wrk thread
# sends its successive users to each voucher in turn, so every sale slot
# and shard is busy), on one Redis and one primary ("one"), on a Redis
# Cluster of three primaries and three replicas (scripts/redis-cluster.sh;
# "cluster"), on two MariaDB primaries ("shards"), and on both ("both").
# The primaries are scripts/mysql-shards.sh's two, started alike (the
# first alone is the one primary), not make services' MariaDB. Each
# reports purchases a second and the CPU microseconds a purchase costs
# the instance, every mariadbd and the Redis primaries (the cluster's
# replicas apart). On two cores the point is that the cost per purchase
# does not grow; the throughput cannot. BENCH_SCALE_MANY ("one cluster
# shards both", or empty) picks them.
#
# Ports: instances BENCH_PORT (17280) + 0..3, haproxy + 8, its stats + 7.
# Results: bench/results/scale-<time>/ (summary.md, costs*.env; wrk's
# reports in bench/results/<time>/raw/).
# Settings: BENCH_SCALE_CONNS (256), BENCH_SCALE_SECONDS (10),
# BENCH_SCALE_SETUPS ("direct1 nobatch1 1 2 4", empty for none: one instance without
# haproxy, one behind it with SECKILL_BATCH_MAX=1, then 1, 2 and 4 behind
# it at the defaults; the unbatched one gives the simulation the cost of
# a transaction of one purchase).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
BUILD=${1:-build}
BIN=$ROOT/$BUILD/seckilld
LUA=$ROOT/bench/wrk/buy.lua
PORT=${BENCH_PORT:-17280}
FIRST_USER=3000000000
CONNS=${BENCH_SCALE_CONNS:-256}
SECS=${BENCH_SCALE_SECONDS:-10}
SETUPS=${BENCH_SCALE_SETUPS-direct1 nobatch1 1 2 4}
LB_PORT=$((PORT + 8))
STATS_PORT=$((PORT + 7))
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
OUT_SCALE=$ROOT/bench/results/scale-$RUN_ID
mkdir -p "$OUT_SCALE"
command -v haproxy >/dev/null || die "haproxy not found (scripts/deps.sh)"
command -v wrk >/dev/null || die "wrk not found (scripts/deps.sh bench)"

# Users: more than the fastest phase can buy, so no user buys twice.
USERS=${BENCH_USERS:-600000}
ensure_users "$USERS"

# busy_ticks: clock ticks all cores spent not idle (from /proc/stat).
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }

# cpu_ticks PID...: user+system clock ticks of the processes (and their
# threads), summed.
cpu_ticks() {
    local t=0 pid f
    for pid in "$@"; do
        f=$(cut -d' ' -f14,15 "/proc/$pid/stat" 2>/dev/null) || continue
        t=$((t + ${f% *} + ${f#* }))
    done
    echo "$t"
}
HZ=$(getconf CLK_TCK)
# The servers of .run/env: whoever listens on their ports.
listener() { ss -Hltnp "( sport = :$1 )" | sed -n 's/.*pid=\([0-9]*\),.*/\1/p' | head -1; }
MYSQLD=$(listener "$MY_PORT")
REDIS=$(listener "$R_PORT")
# Every command's calls and microseconds on the Redis servers at ports
# (INFO commandstats), summed over them: "command calls usec" lines.
cmdstats() {
    local p
    for p in "$@"; do redis-cli -p "$p" INFO commandstats; done | tr -d '\r' |
        awk -F'[:,=]' '/^cmdstat_/ { c[$1] += $3; u[$1] += $5 }
            END { for (k in c) print substr(k, 9), c[k], u[k] }' | sort
}
# What each command cost a purchase between two cmdstats (files a, b),
# over orders purchases: "command calls/purchase µs/purchase".
cmdstats_per() { # a b orders
    join -a2 -e0 -o 2.1,1.2,1.3,2.2,2.3 "$1" "$2" |
        awk -v o="$3" '{ dc = $4 - $2; du = $5 - $3
            if (dc > 0) printf "%s %.3f %.2f\n", $1, dc / o, du / o }'
}
[[ -n $MYSQLD && -n $REDIS ]] || die "cannot find the pids of MariaDB (:$MY_PORT) and Redis (:$R_PORT)"

HAPROXY_PID=
start_haproxy() { # N
    local i
    (
        export SECKILL_LB_BIND=127.0.0.1:$LB_PORT
        export SECKILL_LB_STATS=127.0.0.1:$STATS_PORT
        for ((i = 1; i <= $1; i++)); do
            export "SECKILL_LB_SERVER_$i=127.0.0.1:$((PORT + i - 1))"
        done
        exec haproxy -db -f "$ROOT/deploy/haproxy.cfg" >"$OUT_SCALE/haproxy-$1.log" 2>&1
    ) &
    HAPROXY_PID=$!
    PIDS+=("$HAPROXY_PID")
    for _ in $(seq 100); do
        local up
        up=$({ curl -s "http://127.0.0.1:$STATS_PORT/;csv" 2>/dev/null || true; } |
            awk -F, '$1 == "seckilld" && $2 ~ /^app/ && $18 ~ /^UP/' | wc -l)
        ((up == $1)) && return 0
        sleep 0.1
    done
    die "haproxy did not see $1 instances UP"
}

stop_pids() {
    local pid
    for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "$@"; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    done
}

# metric_sum NAME PORTS...: a metric summed over the instances' /metrics.
metric_sum() {
    local name=$1 p
    shift
    for p in "$@"; do
        curl -s "http://127.0.0.1:$p/metrics" | awk -v n="$name" '$1 == n { print $2 }'
    done | awk '{ s += $1 } END { printf "%.0f", s }'
}

{
    echo "| setup | selling purchases/s | p50 ms | p99 ms | sold-out req/s | cores used: seckilld | haproxy | mariadbd | redis-server | whole machine |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
} >"$OUT_SCALE/summary.md"

for setup in $SETUPS; do
    n=${setup#direct}
    n=${n#nobatch}
    batch=
    [[ $setup == nobatch* ]] && batch=1
    ports=()
    pids=()
    for ((i = 0; i < n; i++)); do
        ports+=("$((PORT + i))")
        pid=$(SECKILL_BATCH_MAX=${batch:-64} start_instance "$setup-$i" "$((PORT + i))")
        pids+=("$pid")
        PIDS+=("$pid")
    done
    if [[ $setup == direct* ]]; then
        hosts=127.0.0.1:$PORT
        procs_lb=()
    else
        start_haproxy "$n"
        hosts=127.0.0.1:$LB_PORT
        procs_lb=("$HAPROXY_PID")
    fi

    # Selling.
    v=$(new_voucher 100000000)
    tx0=$(metric_sum seckill_purchase_batch_size_count "${ports[@]}")
    c0=$(cpu_ticks "${pids[@]}")
    h0=$(cpu_ticks "${procs_lb[@]}")
    m0=$(cpu_ticks "$MYSQLD")
    r0=$(cpu_ticks "$REDIS")
    b0=$(busy_ticks)
    t0=$(date +%s%N)
    USERS_CSV=$TOKENS BUY_PATH=/api/vouchers/$v/seckill BUY_THREADS=2 \
        BUY_REPORT=$RAW/sell-$setup.json \
        wrk -t2 -c"$CONNS" -d"${SECS}s" --timeout 10s --latency -s "$LUA" \
        "http://$hosts/" >"$RAW/sell-$setup.txt" 2>&1 &
    wait $! || die "wrk failed: $(cat "$RAW/sell-$setup.txt")"
    t1=$(date +%s%N)
    b1=$(busy_ticks)
    c1=$(cpu_ticks "${pids[@]}")
    h1=$(cpu_ticks "${procs_lb[@]}")
    m1=$(cpu_ticks "$MYSQLD")
    r1=$(cpu_ticks "$REDIS")
    tx1=$(metric_sum seckill_purchase_batch_size_count "${ports[@]}")
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
    seen=$(j "$RAW/sell-$setup.json" .ok)
    check_voucher "sell-$setup" "$v" 100000000 "$seen"
    orders=$(sql "SELECT COUNT(*) FROM voucher_orders WHERE voucher_id = $v")
    rate=$(awk -v o="$orders" -v w="$wall" 'BEGIN { printf "%.0f", o / w }')
    p50=$(j "$RAW/sell-$setup.json" .p50_ms)
    p99=$(j "$RAW/sell-$setup.json" .p99_ms)
    cores() { awk -v a="$1" -v b="$2" -v w="$wall" -v hz="$HZ" 'BEGIN { printf "%.2f", (b - a) / hz / w }'; }
    cs=$(cores "$c0" "$c1")
    ch=$(cores "$h0" "$h1")
    cm=$(cores "$m0" "$m1")
    cr=$(cores "$r0" "$r1")
    cb=$(cores "$b0" "$b1")
    # Costs per purchase of this setup, for the simulation.
    us() { awk -v a="$1" -v b="$2" -v o="$orders" -v hz="$HZ" 'BEGIN { printf "%.1f", (b - a) / hz * 1e6 / o }'; }
    {
        echo "# Per purchase: make bench-scale $RUN_ID, setup $setup, $CONNS connections"
        echo "PURCHASES_PER_S=$rate"
        echo "APP_US=$(us "$c0" "$c1")"
        echo "HAPROXY_US=$(us "$h0" "$h1")"
        echo "MYSQL_US=$(us "$m0" "$m1")"
        echo "REDIS_US=$(us "$r0" "$r1")"
        echo "TX_PER_S=$(awk -v a="$tx0" -v b="$tx1" -v w="$wall" 'BEGIN { printf "%.0f", (b - a) / w }')"
        echo "PURCHASES_PER_TX=$(awk -v a="$tx0" -v b="$tx1" -v o="$orders" 'BEGIN { printf "%.1f", (b > a) ? o / (b - a) : 0 }')"
    } >"$OUT_SCALE/costs-$setup.env"

    # Sold out.
    sv=$(new_voucher 1)
    curl -s -X POST "http://$hosts/api/vouchers/$sv/seckill" \
        -H "Authorization: Bearer $("$BIN" token --user 2)" >/dev/null
    USERS_CSV=$TOKENS BUY_PATH=/api/vouchers/$sv/seckill BUY_THREADS=2 \
        BUY_REPORT=$RAW/soldout-$setup.json \
        wrk -t2 -c"$CONNS" -d"$((SECS / 2))s" --timeout 10s -s "$LUA" \
        "http://$hosts/" >"$RAW/soldout-$setup.txt" 2>&1 || die "wrk failed"
    so=$(jq -r '(.sold_out / .duration_s) | floor' "$RAW/soldout-$setup.json")

    case $setup in
    direct*) label="$n, no haproxy" ;;
    nobatch*) label="$n behind haproxy, batches off" ;;
    *) label="$n behind haproxy" ;;
    esac
    echo "| $label | $rate | $p50 | $p99 | $so | $cs | $ch | $cm | $cr | $cb of $(nproc) |" >>"$OUT_SCALE/summary.md"
    say "$label: selling $rate/s (p50 $p50 ms, p99 $p99 ms), sold out $so/s; cores: seckilld $cs haproxy $ch mariadbd $cm redis $cr"

    stop_pids "${procs_lb[@]}" "${pids[@]}"
done
# ---- many vouchers at once: one Redis or a cluster, one primary or two ----

MANY=${BENCH_SCALE_MANY-one cluster shards both}
NV=${BENCH_SCALE_VOUCHERS:-16}
if [[ -n $MANY ]]; then
    {
        echo
        echo "| stores ($NV vouchers at once, 1 instance) | purchases/s | p99 ms | µs a purchase: seckilld | mariadbd | redis-server (primaries) | all three | besides: the cluster's replicas |"
        echo "|---|---|---|---|---|---|---|---|"
    } >>"$OUT_SCALE/summary.md"
fi
SHARD_URLS=
CLUSTER_URL=
FSYNC_NOTE=
for setup in $MANY; do
    [[ $setup =~ ^(one|cluster|shards|both)$ ]] ||
        die "unknown BENCH_SCALE_MANY setup '$setup' (one, cluster, shards, both)"
    if [[ $setup =~ ^(cluster|both)$ && -z $CLUSTER_URL ]]; then
        # Every node fsyncs as make services' Redis does (once a second),
        # so that the two columns differ by the cluster alone; the async
        # mode's "always" is a setting away (SECKILL_REDIS_CLUSTER_FSYNC).
        SECKILL_REDIS_CLUSTER_FSYNC=${SECKILL_REDIS_CLUSTER_FSYNC:-everysec} \
            "$ROOT/scripts/redis-cluster.sh" up >"$OUT_SCALE/redis-cluster.log" 2>&1 ||
            die "the Redis Cluster did not start ($OUT_SCALE/redis-cluster.log)"
        FSYNC_NOTE="The cluster's nodes at appendfsync ${SECKILL_REDIS_CLUSTER_FSYNC:-everysec}, make services' Redis at $(redis-cli -p "$R_PORT" CONFIG GET appendfsync | tail -1); each setup's Redis commands a purchase: many-SETUP-commands.txt."
        CLUSTER_URL=$("$ROOT/scripts/redis-cluster.sh" url)
    fi
    if [[ -z $SHARD_URLS ]]; then
        "$ROOT/scripts/mysql-shards.sh" up >"$OUT_SCALE/mysql-shards.log" 2>&1 ||
            die "the MariaDB shards did not start ($OUT_SCALE/mysql-shards.log)"
        # Primaries of their own, started alike: the first alone is the one
        # primary, both are the two shards. make services' MariaDB is left
        # as it is (as a shard its AUTO_INCREMENT would jump past the
        # sharded ids, and its settings differ).
        SHARD_URLS=$("$ROOT/scripts/mysql-shards.sh" urls)
        SECKILL_MYSQL_SHARDS=$SHARD_URLS SECKILL_MYSQL_URL= "$BIN" migrate >"$OUT_SCALE/migrate-shards.log" 2>&1 ||
            die "migrating the shards failed ($OUT_SCALE/migrate-shards.log)"
    fi
    shard_ports=()
    for u in ${SHARD_URLS//,/ }; do
        u=${u#*@*:}
        shard_ports+=("${u%%/*}")
    done
    redises=("$REDIS")
    rports=("$R_PORT")
    pid=$(
        case $setup in cluster | both) export SECKILL_REDIS_URL=$CLUSTER_URL ;; esac
        case $setup in
        shards | both) export SECKILL_MYSQL_SHARDS=$SHARD_URLS ;;
        *) export SECKILL_MYSQL_SHARDS=${SHARD_URLS%%,*} ;;
        esac
        unset SECKILL_MYSQL_URL
        start_instance "many-$setup" "$PORT"
    )
    PIDS+=("$pid")
    replicas=()
    case $setup in cluster | both)
        # The primaries, and apart from them the replicas' own work (the
        # one Redis has none).
        redises=()
        rports=()
        for ((k = 0; k < 6; k++)); do
            p=$((${SECKILL_REDIS_CLUSTER_PORT:-17001} + k))
            if redis-cli -p "$p" ROLE | head -1 | grep -qx master; then
                redises+=("$(listener "$p")")
                rports+=("$p")
            else
                replicas+=("$(listener "$p")")
            fi
        done
        ;;
    esac
    mysqlds=("$(listener "${shard_ports[0]}")")
    case $setup in shards | both) mysqlds+=("$(listener "${shard_ports[1]}")") ;; esac
    vs=()
    paths=""
    for ((k = 0; k < NV; k++)); do
        vs+=("$(new_voucher 100000000)")
        paths+="/api/vouchers/${vs[k]}/seckill,"
    done
    c0=$(cpu_ticks "$pid")
    m0=$(cpu_ticks "${mysqlds[@]}")
    r0=$(cpu_ticks "${redises[@]}")
    q0=$(cpu_ticks "${replicas[@]}")
    cmdstats "${rports[@]}" >"$RAW/many-$setup-commands.0"
    t0=$(date +%s%N)
    USERS_CSV=$TOKENS BUY_PATHS=${paths%,} BUY_THREADS=2 \
        BUY_REPORT=$RAW/many-$setup.json \
        wrk -t2 -c"$CONNS" -d"${SECS}s" --timeout 10s --latency -s "$LUA" \
        "http://127.0.0.1:$PORT/" >"$RAW/many-$setup.txt" 2>&1 &
    wait $! || die "wrk failed: $(cat "$RAW/many-$setup.txt")"
    t1=$(date +%s%N)
    c1=$(cpu_ticks "$pid")
    m1=$(cpu_ticks "${mysqlds[@]}")
    r1=$(cpu_ticks "${redises[@]}")
    q1=$(cpu_ticks "${replicas[@]}")
    cmdstats "${rports[@]}" >"$RAW/many-$setup-commands.1"
    stop_pids "$pid"
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
    orders=0
    on_shard1=0
    for v in "${vs[@]}"; do
        port=${shard_ports[0]}
        if [[ $setup =~ ^(shards|both)$ ]]; then
            if [[ $(MY_PORT=${shard_ports[1]} sql "SELECT COUNT(*) FROM seckill_vouchers WHERE voucher_id = $v") == 1 ]]; then
                port=${shard_ports[1]}
                on_shard1=$((on_shard1 + 1))
            fi
        fi
        MY_PORT=$port check_voucher "many-$setup-$v" "$v" 100000000 0
        orders=$((orders + $(MY_PORT=$port sql "SELECT COUNT(*) FROM voucher_orders WHERE voucher_id = $v")))
        # The bench's clean-up deletes through make services' MariaDB only.
        MY_PORT=$port sql "DELETE FROM voucher_orders WHERE voucher_id = $v;
                DELETE FROM seckill_vouchers WHERE voucher_id = $v;
                DELETE FROM vouchers WHERE id = $v"
    done
    [[ $setup =~ ^(shards|both)$ ]] && ((on_shard1 == 0 || on_shard1 == NV)) &&
        die "$setup: $on_shard1 of $NV vouchers on shard 1: not spread over both"
    rate=$(awk -v o="$orders" -v w="$wall" 'BEGIN { printf "%.0f", o / w }')
    us() { awk -v a="$1" -v b="$2" -v o="$orders" -v hz="$HZ" 'BEGIN { printf "%.1f", (b - a) / hz * 1e6 / o }'; }
    ua=$(us "$c0" "$c1")
    um=$(us "$m0" "$m1")
    ur=$(us "$r0" "$r1")
    uq=$(us "$q0" "$q1")
    ut=$(awk -v a="$ua" -v b="$um" -v c="$ur" 'BEGIN { printf "%.1f", a + b + c }')
    case $setup in
    one) label="one Redis, one primary" ;;
    cluster) label="Redis Cluster (3 primaries), one primary" ;;
    shards) label="one Redis, 2 MariaDB shards ($on_shard1 of $NV vouchers on shard 1)" ;;
    both) label="Redis Cluster, 2 MariaDB shards ($on_shard1 of $NV on shard 1)" ;;
    esac
    # Where Redis' part went: each command's calls and µs a purchase on
    # the primaries; the rest of their CPU is outside any command (the
    # event loop, the sockets, replication, the cluster bus).
    {
        echo "$label: command calls/purchase µs/purchase (primaries' CPU $ur µs a purchase)"
        cmdstats_per "$RAW/many-$setup-commands.0" "$RAW/many-$setup-commands.1" "$orders"
    } >"$OUT_SCALE/many-$setup-commands.txt"
    echo "| $label | $rate | $(j "$RAW/many-$setup.json" .p99_ms) | $ua | $um | $ur | $ut | ${replicas:+$uq} |" >>"$OUT_SCALE/summary.md"
    say "$label: $rate purchases/s; µs a purchase: seckilld $ua mariadbd $um redis $ur (all $ut)${replicas:+; the replicas $uq}"
done
[[ -z $FSYNC_NOTE ]] || printf '\n%s\n' "$FSYNC_NOTE" >>"$OUT_SCALE/summary.md"
((BROKEN == 0)) || die "an invariant broke (raw/invariants-*.json)"
# The simulation starts from one instance behind haproxy: the balancer in
# the path, and no other instance competing for this machine's cores.
for s in 1 ${SETUPS##* }; do
    if [[ -r $OUT_SCALE/costs-$s.env ]]; then
        cp "$OUT_SCALE/costs-$s.env" "$OUT_SCALE/costs.env"
        break
    fi
done
cat "$OUT_SCALE/summary.md"
echo
[[ ! -r $OUT_SCALE/costs.env ]] || cat "$OUT_SCALE/costs.env"
