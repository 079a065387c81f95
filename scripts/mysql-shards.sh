#!/usr/bin/env bash
# mysql-shards.sh - independent MariaDB primaries on loopback, for the tests
# of sales sharded over several primaries (make test-cluster).
#
#   scripts/mysql-shards.sh up      start them (idempotent), each with the
#                                   database seckill and the user seckill
#   scripts/mysql-shards.sh down    stop them (data is kept)
#   scripts/mysql-shards.sh status  one line per shard; exit 0 when all are
#                                   up, 3 if not
#   scripts/mysql-shards.sh urls    print the value of SECKILL_MYSQL_SHARDS
#                                   for them, shard 0 first
#
# SECKILL_MYSQL_SHARD_COUNT (2) servers listen on 127.0.0.1, shard i on
# port SECKILL_MYSQL_SHARD_PORT (13311) + i; the MariaDB of
# scripts/services.sh is none of them. Each is started with the options of
# that one (scripts/lib/mariadb.sh) and keeps its data, socket, pid file
# and logs under .run/mysql-shards/<port>/ (SECKILL_RUN_DIR overrides
# .run). up does not migrate them; seckilld does:
#
#   SECKILL_MYSQL_SHARDS=$(scripts/mysql-shards.sh urls) build/seckilld migrate
#
# Works from any cwd.
set -euo pipefail

die() { echo "mysql-shards.sh: error: $*" >&2; exit 1; }
say() { echo "mysql-shards.sh: $*"; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
RUN=$(realpath -m "${SECKILL_RUN_DIR:-$ROOT/.run}")
# shellcheck source=scripts/lib/mariadb.sh
. "$ROOT/scripts/lib/mariadb.sh"
DIR=$RUN/mysql-shards
BASE=${SECKILL_MYSQL_SHARD_PORT:-13311}
COUNT=${SECKILL_MYSQL_SHARD_COUNT:-2}
MYSQL_WAIT=${SECKILL_MYSQL_WAIT:-60} # seconds
MYSQL_PORT_VAR=SECKILL_MYSQL_SHARD_PORT

[[ $BASE =~ ^[0-9]+$ ]] || die "bad SECKILL_MYSQL_SHARD_PORT: '$BASE'"
[[ $COUNT =~ ^[0-9]+$ ]] || die "bad SECKILL_MYSQL_SHARD_COUNT: '$COUNT'"
BASE=$((10#$BASE))
COUNT=$((10#$COUNT))
((COUNT >= 1 && COUNT <= 64)) || die "bad SECKILL_MYSQL_SHARD_COUNT: $COUNT (1..64)"
((BASE >= 1 && BASE + COUNT - 1 <= 65535)) ||
    die "bad SECKILL_MYSQL_SHARD_PORT: $BASE (the last shard's port would pass 65535)"

for tool in mariadbd mariadb mariadb-admin mariadb-install-db; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found; run scripts/deps.sh"
done

take_lock() {
    mkdir -p "$DIR"
    exec 9>"$DIR/.lock"
    flock -w 300 9 || die "timed out waiting for $DIR/.lock"
}

# shard I: point scripts/lib/mariadb.sh at shard I's server.
shard() {
    local port=$((BASE + $1)) dir
    dir=$DIR/$port
    MYSQL_NAME="MariaDB shard $1"
    MYSQL_PORT=$port
    MYSQL_DATADIR=$dir/data
    MYSQL_PID=$dir/mysql.pid
    MYSQL_LOG=$dir/mysql.err
    MYSQL_INSTALL_LOG=$dir/install.log
    MYSQL_SOCK=$(mysql_socket_for "$dir")
}

up() {
    local i
    take_lock
    for ((i = 0; i < COUNT; i++)); do
        shard "$i"
        mkdir -p "$DIR/$MYSQL_PORT"
        mysql_start
        mysql_provision_user seckill
    done
    for ((i = 0; i < COUNT; i++)); do
        shard "$i"
        say "shard $i up on 127.0.0.1:$MYSQL_PORT (data $MYSQL_DATADIR)"
    done
}

down() {
    local i rc=0
    [[ -d $DIR ]] || { say "nothing to stop ($DIR does not exist)"; return 0; }
    take_lock
    for ((i = 0; i < COUNT; i++)); do
        shard "$i"
        (mysql_stop) || rc=1
    done
    return "$rc"
}

status() {
    local i pid rc=0
    for ((i = 0; i < COUNT; i++)); do
        shard "$i"
        if mysql_ping; then
            pid=$(live_pid mariadbd "$MYSQL_PID" || echo '?')
            echo "shard $i: up   pid $pid, 127.0.0.1:$MYSQL_PORT, data $MYSQL_DATADIR"
        elif pid=$(live_pid mariadbd "$MYSQL_PID"); then
            echo "shard $i: not answering on 127.0.0.1:$MYSQL_PORT (pid $pid running; log $MYSQL_LOG)"
            rc=3
        else
            echo "shard $i: down (127.0.0.1:$MYSQL_PORT)"
            rc=3
        fi
    done
    return "$rc"
}

urls() {
    local i urls=()
    for ((i = 0; i < COUNT; i++)); do
        urls+=("mysql://seckill:seckill@127.0.0.1:$((BASE + i))/seckill")
    done
    (IFS=,; echo "${urls[*]}")
}

case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
urls) urls ;;
*)
    echo "usage: scripts/mysql-shards.sh up|down|status|urls" >&2
    exit 2
    ;;
esac
