#!/usr/bin/env bash
# spider.sh - make bench-spider: the purchase transaction through MariaDB's
# Spider storage engine (the one sharding engine Debian 12 packages) next
# to the same transaction sent to a backend directly. docs/scaling.md
# ("Why not a sharding engine") quotes the figure.
#
#   bench/spider.sh
#
# Starts three private MariaDB servers on loopback, data under
# .run/bench/spider/: two backends (b0, b1) holding the service's
# seckill_vouchers and voucher_orders tables as sql/schema.sql has them
# (without the foreign key to vouchers, which is not there), and a front
# whose tables of the same names are Spider tables partitioned by
# voucher_id over the two backends (HASH: even ids on b0, odd on b1).
# Then sysbench runs bench/sysbench/purchase.lua (the service's purchase
# transaction, as make bench runs it) on one hot voucher row of b0 at each
# thread count of BENCH_SPIDER_THREADS, first against b0 directly, then
# through the front, and the invariant (orders = initial stock - stock) is
# checked after each run, through the front and on b0. Prints tx/s and
# p99 for each and the ratio; the servers are stopped on exit.
#
# Ports: BENCH_SPIDER_PORT (13331) for b0, +1 b1, +2 the front: below
# the kernel's ephemeral range (32768-60999), where an outgoing
# connection can hold the port and a server then fails to bind it.
# Settings: BENCH_SPIDER_SECONDS (5) per run, BENCH_SPIDER_THREADS
# ("16 64"), BENCH_SPIDER_XA (0: spider_internal_xa on the front, 1 turns
# it on).
# Each run starts from fresh copies of one mariadb-install-db, removed on
# exit. Results: bench/results/spider-<time>/ (summary.md; sysbench's output,
# the servers' logs and the statements b0 received for one purchase
# through the front in raw/).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
BASE_PORT=${BENCH_SPIDER_PORT:-13331}
SECS=${BENCH_SPIDER_SECONDS:-5}
THREADS=${BENCH_SPIDER_THREADS:-16 64}
XA=${BENCH_SPIDER_XA:-0}
SB_LUA=$ROOT/bench/sysbench/purchase.lua
DB=seckill
USER_PW=bench
INITIAL=1000000000
# Both vouchers even, so on b0: one for the direct runs, one for Spider's.
V_DIRECT=2
V_SPIDER=4

die() { echo "bench: error: $*" >&2; exit 1; }
say() { printf "bench: [%3ss] %s\n" "$SECONDS" "$*" >&2; }

for tool in mariadbd mariadb mariadb-install-db sysbench; do
    command -v "$tool" >/dev/null || die "$tool not found (scripts/deps.sh bench spider)"
done
[[ -e /usr/lib/mysql/plugin/ha_spider.so ]] ||
    die "ha_spider.so missing (scripts/deps.sh spider installs mariadb-plugin-spider)"

RUN_ID=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$ROOT/bench/results/spider-$RUN_ID
RAW=$OUT/raw
mkdir -p "$RAW"
WORK=$ROOT/.run/bench/spider
mkdir -p "$WORK"

# The admin identity (ADMIN, AS_USER) of the project's MariaDB servers.
# shellcheck source=scripts/lib/mariadb.sh
. "$ROOT/scripts/lib/mariadb.sh"

NAMES=(b0 b1 front)
declare -A PORT_OF PID_OF
for i in 0 1 2; do PORT_OF[${NAMES[$i]}]=$((BASE_PORT + i)); done

# ---- servers ----

cleanup() {
    local n pid
    for n in "${NAMES[@]}"; do
        pid=${PID_OF[$n]:-}
        if [[ -n $pid ]]; then kill -TERM "$pid" 2>/dev/null || true; fi
    done
    for n in "${NAMES[@]}"; do
        pid=${PID_OF[$n]:-}
        [[ -n $pid ]] || continue
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        # The run's data goes with its server (the template stays).
        kill -0 "$pid" 2>/dev/null || rm -rf "${WORK:?}/$n"
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
trap 'say "failed at line $LINENO: $BASH_COMMAND"' ERR

# adm NAME SQL: SQL as the administrator over NAME's socket.
adm() {
    mariadb --no-defaults --protocol=socket -S "$WORK/$1.sock" -u "$ADMIN" \
        -N -B -e "$2"
}
# q NAME SQL: SQL as the bench user over TCP, in the seckill database.
q() {
    mariadb --no-defaults -h 127.0.0.1 -P "${PORT_OF[$1]}" -u bench \
        -p"$USER_PW" -N -B "$DB" -e "$2"
}

# A fresh data directory per server each run, copied from one
# mariadb-install-db (the run's state is the run's alone).
init_datadirs() {
    local n tmpl=$WORK/template log=$WORK/install.log
    if [[ ! -d $tmpl/mysql ]]; then
        rm -rf "$tmpl"
        mkdir -p "$tmpl"
        mariadb-install-db --no-defaults --datadir="$tmpl" \
            --auth-root-authentication-method=socket \
            --auth-root-socket-user="$ADMIN" --skip-test-db "${AS_USER[@]}" \
            >"$log" 2>&1 || { tail -20 "$log" >&2; rm -rf "$tmpl"; die "mariadb-install-db failed"; }
    fi
    for n in "${NAMES[@]}"; do
        rm -rf "${WORK:?}/$n"
        cp -a "$tmpl" "$WORK/$n"
    done
}

# start_server NAME [EXTRA ARGS...]: mariadbd with make services' settings.
start_server() {
    local n=$1 port=${PORT_OF[$1]} pid
    shift
    [[ -z $(ss -Hltn "( sport = :$port )" 2>/dev/null) ]] ||
        die "port $port is in use; pick another BENCH_SPIDER_PORT (uses it, +1 and +2)"
    setsid mariadbd --no-defaults "${AS_USER[@]}" --datadir="$WORK/$n" \
        --port="$port" --bind-address=127.0.0.1 --socket="$WORK/$n.sock" \
        --pid-file="$WORK/$n.pid" --log-error="$RAW/$n.err" \
        --skip-name-resolve \
        --character-set-server=utf8mb4 --collation-server=utf8mb4_bin \
        --innodb-buffer-pool-size=128M --max-connections=1000 \
        "$@" </dev/null >>"$RAW/$n.err" 2>&1 &
    pid=$!
    PID_OF[$n]=$pid
    for _ in $(seq 300); do
        adm "$n" "SELECT 1" >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    tail -20 "$RAW/$n.err" >&2
    die "MariaDB $n on :$port did not start"
}

# table_ddl NAME: the CREATE TABLE of NAME from sql/schema.sql, without
# its foreign keys.
table_ddl() {
    awk -v t="CREATE TABLE \`$1\` (" '
        index($0, t) == 1 { on = 1 }
        on && !/CONSTRAINT `fk_/ { print }
        on && /;$/ { exit }' "$ROOT/sql/schema.sql"
}

# spider_ddl NAME: the front's Spider table over b0 and b1. Partitioning
# wants every unique key to hold voucher_id: the primary key gets it, the
# other unique keys become plain ones (the backends still enforce them),
# and the generated column stays the backends' to compute. (The
# backquotes in single quotes are SQL's.)
# shellcheck disable=SC2016
spider_ddl() {
    table_ddl "$1" | sed -e '/`active_user`/d' \
        -e 's/PRIMARY KEY (`id`)/PRIMARY KEY (`id`,`voucher_id`)/' \
        -e 's/UNIQUE KEY/KEY/' \
        -e "s/ENGINE=InnoDB\(.*\);\$/ENGINE=SPIDER\1 COMMENT='wrapper \"mysql\", table \"$1\"'\n PARTITION BY HASH (\`voucher_id\`) (PARTITION p0 COMMENT = 'srv \"b0\"', PARTITION p1 COMMENT = 'srv \"b1\"');/"
}

say "run $RUN_ID: MariaDB backends on :${PORT_OF[b0]} and :${PORT_OF[b1]}, the Spider front on :${PORT_OF[front]} (data $WORK)"
init_datadirs
start_server b0
start_server b1
start_server front --plugin-load-add=ha_spider.so --spider-internal-xa="$XA"

GRANT="CREATE DATABASE $DB; CREATE USER bench@'%' IDENTIFIED BY '$USER_PW';
       GRANT ALL ON *.* TO bench@'%';"
for n in b0 b1; do
    adm "$n" "$GRANT USE $DB; $(table_ddl seckill_vouchers) $(table_ddl voucher_orders)"
done
spider_ddl seckill_vouchers >"$RAW/front.sql"
spider_ddl voucher_orders >>"$RAW/front.sql"
servers=""
for n in b0 b1; do
    servers+="CREATE SERVER $n FOREIGN DATA WRAPPER mysql OPTIONS (HOST '127.0.0.1',
        PORT ${PORT_OF[$n]}, DATABASE '$DB', USER 'bench', PASSWORD '$USER_PW');"
done
adm front "$GRANT $servers USE $DB; $(cat "$RAW/front.sql")"

# The two hot rows, with stock for far more than any run sells.
row() { echo "INSERT INTO seckill_vouchers (voucher_id, stock, initial_stock, begin_time, end_time)
    VALUES ($1, $INITIAL, $INITIAL, NOW() - INTERVAL 1 MINUTE, NOW() + INTERVAL 1 DAY)"; }
q b0 "$(row $V_DIRECT)"
q front "$(row $V_SPIDER)"
[[ $(q b0 "SELECT stock FROM seckill_vouchers WHERE voucher_id = $V_SPIDER") == "$INITIAL" ]] ||
    die "voucher $V_SPIDER did not land on b0 through the front"

# What Spider sends b0 for one purchase: b0's general log around one
# transaction through the front (the statements of purchase.lua).
adm b0 "SET GLOBAL general_log_file = '$RAW/b0-one-purchase.log', general_log = 1"
q front "SET SESSION idle_write_transaction_timeout = 3, innodb_lock_wait_timeout = 3;
    START TRANSACTION;
    SELECT 1 FROM voucher_orders WHERE user_id = 7 AND voucher_id = $V_SPIDER AND status IN (1, 2) LIMIT 1;
    INSERT INTO voucher_orders (id, user_id, voucher_id, status, pay_deadline)
        VALUES (7, 7, $V_SPIDER, 1, NOW(3) + INTERVAL 900 SECOND);
    UPDATE seckill_vouchers SET stock = stock - 1 WHERE voucher_id = $V_SPIDER AND stock > 0;
    COMMIT" >/dev/null
adm b0 "SET GLOBAL general_log = 0"
q front "SELECT @@global.spider_internal_xa, @@global.spider_sync_trx_isolation,
    @@global.spider_semi_trx, @@global.tx_isolation" >"$RAW/front-settings.txt"

BROKEN=0
# check NAME VOUCHER: orders = initial - stock on VOUCHER, read through the
# front and on b0.
check() {
    local name=$1 v=$2 where s_front o_front s_b0 o_b0 verdict=ok
    where="voucher_id = $v"
    read -r s_front o_front <<<"$(q front "SELECT (SELECT stock FROM seckill_vouchers WHERE $where),
        (SELECT COUNT(*) FROM voucher_orders WHERE $where AND status IN (1, 2))")"
    read -r s_b0 o_b0 <<<"$(q b0 "SELECT (SELECT stock FROM seckill_vouchers WHERE $where),
        (SELECT COUNT(*) FROM voucher_orders WHERE $where AND status IN (1, 2))")"
    if ((o_front != INITIAL - s_front || o_b0 != INITIAL - s_b0 || o_front != o_b0)); then
        verdict=BROKEN
        BROKEN=1
    fi
    say "invariant $name: voucher $v front: stock $s_front orders $o_front; b0: stock $s_b0 orders $o_b0 -> $verdict"
}

# cpu_ticks PID: utime + stime of the process (all threads), in ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

runs=0
# sb NAME SERVER VOUCHER C: purchase.lua on SERVER with C threads; sets
# RATE P99 ERR, and B0_US and FRONT_US: the CPU microseconds per
# transaction of b0 and of the front over the run (coarse: clock ticks).
sb() {
    local name=$1 n=$2 v=$3 c=$4 f id_base b0_0 fr_0 tx
    runs=$((runs + 1))
    id_base=$((1000000000000000 + runs * 10000000000))
    f=$RAW/sysbench-$name-c$c.txt
    b0_0=$(cpu_ticks "${PID_OF[b0]}")
    fr_0=$(cpu_ticks "${PID_OF[front]}")
    sysbench "$SB_LUA" --db-driver=mysql --mysql-host=127.0.0.1 \
        --mysql-port="${PORT_OF[$n]}" --mysql-user=bench \
        --mysql-password="$USER_PW" --mysql-db="$DB" \
        --mysql-ignore-errors=1205,1213 --voucher="$v" \
        --id-base="$id_base" --threads="$c" --time="$SECS" --percentile=99 \
        run >"$f" 2>&1 || { tail -20 "$f" >&2; die "sysbench $name at $c threads failed"; }
    tx=$(sed -n 's/.*transactions: *\([0-9]*\) .*/\1/p' "$f")
    ((tx > 0)) || tx=1
    B0_US=$(( ($(cpu_ticks "${PID_OF[b0]}") - b0_0) * 1000000 / HZ / tx ))
    FRONT_US=$(( ($(cpu_ticks "${PID_OF[front]}") - fr_0) * 1000000 / HZ / tx ))
    RATE=$(sed -n 's/.*transactions: *[0-9]* *(\([0-9.]*\) per sec.*/\1/p' "$f" | awk '{ printf "%.0f", $1 }')
    P99=$(sed -n 's/.*99th percentile: *\([0-9.]*\).*/\1/p' "$f")
    ERR=$(sed -n 's/.*ignored errors: *\([0-9]*\).*/\1/p' "$f")
    say "sysbench $name: $c threads: $RATE tx/s, p99 $P99 ms, ignored errors $ERR; CPU per transaction b0 $B0_US us, front $FRONT_US us"
    check "$name-c$c" "$v"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "0" }'; }

{
    echo "# make bench-spider $RUN_ID"
    echo
    echo "The purchase transaction (bench/sysbench/purchase.lua) on one hot voucher"
    echo "row for $SECS s per run, directly on backend b0 and through a Spider front"
    echo "whose tables are partitioned over b0 and b1 (the row on b0);"
    echo "spider_internal_xa=$XA. $(nproc) cores, $(uname -r)."
    echo
    echo "| threads | direct tx/s | direct p99 ms | Spider tx/s | Spider p99 ms | Spider / direct | CPU µs per tx direct (b0) | CPU µs per tx via Spider (b0 + front) |"
    echo "|---|---|---|---|---|---|---|---|"
} >"$OUT/summary.md"
line=""
for c in $THREADS; do
    sb direct b0 "$V_DIRECT" "$c"
    d_rate=$RATE d_p99=$P99 d_cpu=$B0_US
    sb spider front "$V_SPIDER" "$c"
    r=$(ratio "$RATE" "$d_rate")
    echo "| $c | $d_rate | $d_p99 | $RATE | $P99 | $r | $d_cpu | $B0_US + $FRONT_US |" >>"$OUT/summary.md"
    line+=" c$c: direct=$d_rate spider=$RATE ratio=$r"
done
{
    echo
    echo "Front settings (spider_internal_xa, spider_sync_trx_isolation,"
    echo "spider_semi_trx, tx_isolation): $(tr '\t' ' ' <"$RAW/front-settings.txt")"
    echo
    echo "What b0 received for one purchase through the front (general log):"
    echo
    echo '```'
    grep -P '^\t\t *\d+ Query\t' "$RAW/b0-one-purchase.log" | grep -v general_log |
        sed 's/^\t\t *[0-9]* Query\t//' | cut -c1-400
    echo '```'
} >>"$OUT/summary.md"
cat "$OUT/summary.md"
((BROKEN == 0)) || die "an invariant broke (see above)"
echo "bench-spider$line"
