#!/usr/bin/env bash
# services.sh - private MariaDB, Redis and ZooKeeper for seckilld development
# and tests.
#
#   scripts/services.sh up          start them all (idempotent), provision, write .run/env
#   scripts/services.sh down        stop them all (data is kept)
#   scripts/services.sh status      one line per server; exit 0 when all are up, 3 if not
#   scripts/services.sh reset-test  empty database seckill_test (migrated afresh) and Redis db 1
#   scripts/services.sh env         print the path of .run/env
#
# Everything lives under the repo's .run/ (SECKILL_RUN_DIR overrides) and
# listens on 127.0.0.1 only: MariaDB on SECKILL_MYSQL_PORT (13306), Redis on
# SECKILL_REDIS_PORT (16379), three independent Redis masters for RedLock on
# the next three ports (16380-16382; no persistence) and a standalone
# ZooKeeper on SECKILL_ZK_PORT (12181). Works from any cwd.
set -euo pipefail

die() { echo "services.sh: error: $*" >&2; exit 1; }
say() { echo "services.sh: $*"; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
RUN=$(realpath -m "${SECKILL_RUN_DIR:-$ROOT/.run}")
# shellcheck source=scripts/lib/mariadb.sh
. "$ROOT/scripts/lib/mariadb.sh"
MYSQL_PORT=${SECKILL_MYSQL_PORT:-13306}
REDIS_PORT=${SECKILL_REDIS_PORT:-16379}
ZK_PORT=${SECKILL_ZK_PORT:-12181}
# The databases get their schema from `seckilld migrate` (sql/migrations/,
# compiled in): the binary is built first (a no-op when it is current), so
# that the databases always match the code the tests will run.
BIN=$ROOT/build/seckilld

for p in "$MYSQL_PORT" "$REDIS_PORT" "$ZK_PORT"; do
    if ! [[ $p =~ ^[0-9]+$ ]] || ((p < 1 || p > 65535)); then die "bad port: '$p'"; fi
done
REDIS_PORT=$((10#$REDIS_PORT))
((REDIS_PORT + 3 <= 65535)) || die "SECKILL_REDIS_PORT $REDIS_PORT leaves no room for the RedLock ports"
REDLOCK_PORTS=("$((REDIS_PORT + 1))" "$((REDIS_PORT + 2))" "$((REDIS_PORT + 3))")
declare -A seen_port=()
for p in "$((10#$MYSQL_PORT))" "$REDIS_PORT" "${REDLOCK_PORTS[@]}" "$((10#$ZK_PORT))"; do
    [[ -z ${seen_port[$p]:-} ]] || die "port $p is taken twice (MariaDB, Redis, RedLock x3, ZooKeeper)"
    seen_port[$p]=1
done

# The server itself: scripts/lib/mariadb.sh, with these names.
MYSQL_NAME=MariaDB
MYSQL_DATADIR=$RUN/mysql
MYSQL_PID=$RUN/mysql.pid
MYSQL_LOG=$RUN/mysql.err
MYSQL_INSTALL_LOG=$RUN/mysql-install.log
MYSQL_SOCK=$(mysql_socket_for "$RUN")
MYSQL_PORT_VAR=SECKILL_MYSQL_PORT
REDIS_DIR=$RUN/redis
REDIS_PID=$RUN/redis.pid
REDIS_LOG=$RUN/redis.log
ZK_DIR=$RUN/zookeeper
ZK_CFG=$ZK_DIR/zoo.cfg
ZK_PID=$RUN/zookeeper.pid
ZK_LOG=$RUN/zookeeper.log
# The server's jars from Debian's zookeeper package; the jar's manifest names
# its dependencies. slf4j-simple (libslf4j-java) makes it log to stderr.
ZK_JAR=/usr/share/java/zookeeper.jar
ZK_LOGGER_JAR=/usr/share/java/slf4j-simple.jar
SECRET_FILE=$RUN/secret
ENV_FILE=$RUN/env
ENV_TEST_FILE=$RUN/env.test

MYSQL_WAIT=${SECKILL_MYSQL_WAIT:-60} # seconds
REDIS_WAIT=${SECKILL_REDIS_WAIT:-30}
ZK_WAIT=${SECKILL_ZK_WAIT:-60}

for tool in mariadbd mariadb mariadb-admin mariadb-install-db redis-server redis-cli java; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found; run scripts/deps.sh"
done
[[ -r $ZK_JAR ]] || die "$ZK_JAR not found; run scripts/deps.sh"

# ---- helpers ----

# live_pid, await and wait_gone, which the Redis and ZooKeeper parts use
# too, are scripts/lib/mariadb.sh's.

# rcli_at PORT ARGS...: redis-cli 7.0 has no timeout option; a stopped
# server must not hang us.
rcli_at() { timeout 5 redis-cli -h 127.0.0.1 -p "$@"; }
rcli() { rcli_at "$REDIS_PORT" "$@"; }

redis_ping_at() { [[ $(rcli_at "$1" ping 2>/dev/null) == PONG ]]; }

# The dir of whatever Redis answers on PORT (to tell ours from a stranger).
redis_dir_at() { rcli_at "$1" config get dir 2>/dev/null | sed -n 2p; }

take_lock() {
    # -m applies to $RUN only, on purpose: never chmod a directory we did not make.
    # shellcheck disable=SC2174
    [[ -d $RUN ]] || mkdir -p -m 700 "$RUN"
    exec 9>"$RUN/.lock"
    flock -w 300 9 || die "timed out waiting for $RUN/.lock (another services.sh?)"
}

# ---- MariaDB (the server: scripts/lib/mariadb.sh) ----

mysql_provision() {
    local db
    mysql_provision_user seckill seckill_test
    build_bin
    for db in seckill seckill_test; do migrate "$db"; done
}

# The binary, current (MAKEFLAGS dropped: a make that runs this script
# with SANITIZE=... must not rebuild build/seckilld with it).
build_bin() {
    env -u MAKEFLAGS -u MFLAGS make -C "$ROOT" --no-print-directory -s build >&2 ||
        die "building $BIN failed (the migrations are compiled into it)"
}

# migrate DATABASE: apply what it lacks (quietly unless something fails).
# A list of shards in the caller's environment would be refused beside
# the URL.
migrate() {
    local out
    out=$(SECKILL_MYSQL_URL=mysql://seckill:seckill@127.0.0.1:$MYSQL_PORT/$1 \
        env -u SECKILL_MYSQL_SHARDS "$BIN" migrate 2>&1) || { echo "$out" >&2; die "seckilld migrate of $1 failed"; }
}

# ---- Redis (the main one and the RedLock masters) ----

# redis_start_at NAME PORT DIR PIDFILE LOG [OPTION...]: start a Redis on
# 127.0.0.1:PORT working in DIR, with the extra server OPTIONs, unless ours
# (same dir) already answers there.
redis_start_at() {
    local name=$1 port=$2 dir=$3 pidf=$4 log=$5 pid="" other rc=0
    shift 5
    if redis_ping_at "$port"; then
        other=$(redis_dir_at "$port")
        [[ $other == "$dir" ]] ||
            die "port $port answers as another Redis (dir ${other:-?}); pick SECKILL_REDIS_PORT"
        return 0
    fi
    if pid=$(live_pid redis-server "$pidf"); then
        say "$name (pid $pid) is running but not answering yet; waiting"
        await "$name" "redis_ping_at $port" redis-server "$pidf" "" "$REDIS_WAIT" || rc=$?
        ((rc != 0)) || return 0
        ((rc == 1)) || die "$name (pid $pid) did not answer within ${REDIS_WAIT}s (log: $log)"
        say "$name (pid $pid) went away; starting afresh"
    fi
    rm -f "$pidf"
    mkdir -p "$dir"
    say "starting $name on 127.0.0.1:$port"
    # setsid + background (not --daemonize) so we know the pid and a ^C
    # in the terminal never reaches the server. Errors before the log file
    # is open go to stderr, hence the same file.
    # shellcheck disable=SC2094
    setsid redis-server --port "$port" --bind 127.0.0.1 \
        --dir "$dir" "$@" --daemonize no \
        --pidfile "$pidf" --logfile "$log" \
        --enable-debug-command local \
        </dev/null >>"$log" 2>&1 9>&- &
    rc=0
    await "$name" "redis_ping_at $port" redis-server "$pidf" "$!" "$REDIS_WAIT" || rc=$?
    ((rc != 0)) || return 0
    tail -n 20 "$log" >&2 || true
    ((rc == 1)) && die "$name exited during start-up (log: $log)"
    die "$name did not answer PONG on 127.0.0.1:$port within ${REDIS_WAIT}s (log: $log)"
}

# redis_stop_at NAME PORT DIR PIDFILE LOG: stop our Redis on PORT.
redis_stop_at() {
    local name=$1 port=$2 dir=$3 pidf=$4 log=$5 pid
    if pid=$(live_pid redis-server "$pidf"); then
        kill -TERM "$pid" 2>/dev/null || true # redis: SIGTERM = clean shutdown
    elif redis_ping_at "$port" && [[ $(redis_dir_at "$port") == "$dir" ]]; then
        rcli_at "$port" shutdown >/dev/null 2>&1 || true
        pid=""
    else
        rm -f "$pidf"
        say "$name: already stopped"
        return 0
    fi
    if [[ -n $pid ]] && ! wait_gone "$pid" 60; then
        die "$name (pid $pid) still running after 60s; see $log"
    fi
    rm -f "$pidf"
    say "$name: stopped"
}

# redis_status_at LABEL PORT DIR PIDFILE LOG: print one status line; 3 if
# ours is not answering.
redis_status_at() {
    local label=$1 port=$2 dir=$3 pidf=$4 log=$5 pid
    if redis_ping_at "$port" && [[ $(redis_dir_at "$port") == "$dir" ]]; then
        pid=$(live_pid redis-server "$pidf" || echo '?')
        echo "$label up   pid $pid, 127.0.0.1:$port, data $dir"
    elif pid=$(live_pid redis-server "$pidf"); then
        echo "$label not answering on 127.0.0.1:$port (pid $pid running; log $log)"
        return 3
    else
        echo "$label down (127.0.0.1:$port)"
        return 3
    fi
}

# The main Redis keeps its data (AOF); the RedLock masters keep nothing.
REDIS_ARGS=("Redis" "$REDIS_PORT" "$REDIS_DIR" "$REDIS_PID" "$REDIS_LOG")
redlock_args() { # PORT
    REDLOCK_ARGS=("RedLock Redis $1" "$1" "$RUN/redlock-$1" "$RUN/redlock-$1.pid"
        "$RUN/redlock-$1.log")
}

redis_start() {
    redis_start_at "${REDIS_ARGS[@]}" --appendonly yes --appendfsync everysec --save ''
}

redis_stop() { redis_stop_at "${REDIS_ARGS[@]}"; }

redlock_start() {
    local port
    for port in "${REDLOCK_PORTS[@]}"; do
        redlock_args "$port"
        redis_start_at "${REDLOCK_ARGS[@]}" --appendonly no --save ''
    done
}

redlock_stop() {
    local port rc=0
    for port in "${REDLOCK_PORTS[@]}"; do
        redlock_args "$port"
        (redis_stop_at "${REDLOCK_ARGS[@]}") || rc=1
    done
    return "$rc"
}

# ---- ZooKeeper ----

# zk_ask WORD: print the answer to a four-letter word (ruok, srvr, stat) from
# the server on our port; bash's /dev/tcp, so no nc needed. Bounded, so a
# hung server cannot hang us.
zk_ask() {
    # shellcheck disable=SC2016
    timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf %s "$2" >&3 && cat <&3' \
        _ "$ZK_PORT" "$1" 2>/dev/null
}

zk_ping() { [[ $(zk_ask ruok) == imok ]]; }

# zk_live_pid: print the pid in $ZK_PID if it is alive and is the java that
# serves our zoo.cfg ("java" alone is too common a name to trust).
zk_live_pid() {
    local pid
    pid=$(live_pid java "$ZK_PID") || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "$ZK_CFG" || return 1
    echo "$pid"
}

# zk_await SECONDS: wait until our server answers (0), its process (named by
# the pid file it writes when it starts) dies (1), or time runs out (2).
zk_await() {
    local deadline=$((SECONDS + $1)) pid state
    while ((SECONDS < deadline)); do
        zk_ping && return 0
        if [[ -s $ZK_PID ]]; then
            pid=$(<"$ZK_PID")
            state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1) || return 1
            [[ -n $state && $state != [ZX] ]] || return 1
        fi
        sleep 0.1
    done
    return 2
}

# Rewritten at every start. tickTime 500 lets tests ask for sessions of 1 s
# and up (minSessionTimeout is 2 ticks); the admin server (an HTTP port) is
# off; only the four-letter words the scripts use are allowed. forceSync=no
# and small preallocated logs: this is a throw-away test server.
zk_write_cfg() {
    mkdir -p "$ZK_DIR/data"
    cat >"$ZK_CFG.tmp" <<EOF
# Generated by scripts/services.sh at every start; edits are lost.
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=$ZK_DIR/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,stat,srvr
forceSync=no
preAllocSize=4096
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
EOF
    mv -f "$ZK_CFG.tmp" "$ZK_CFG"
}

zk_start() {
    local pid rc=0 cp=$ZK_JAR
    if pid=$(zk_live_pid); then
        zk_ping && return 0
        say "ZooKeeper (pid $pid) is running but not answering yet; waiting"
        zk_await "$ZK_WAIT" || rc=$?
        ((rc != 0)) || return 0
        ((rc == 1)) || die "ZooKeeper (pid $pid) did not answer within ${ZK_WAIT}s (log: $ZK_LOG)"
        say "ZooKeeper (pid $pid) went away; starting afresh"
    elif zk_ping; then
        die "port $ZK_PORT answers as another ZooKeeper (not the one in $ZK_PID); pick SECKILL_ZK_PORT"
    fi
    rm -f "$ZK_PID"
    zk_write_cfg
    [[ -r $ZK_LOGGER_JAR ]] && cp+=:$ZK_LOGGER_JAR
    say "starting ZooKeeper on 127.0.0.1:$ZK_PORT"
    # java runs the server in the foreground: the shell writes its own pid
    # (whether or not setsid forked) and execs java, which keeps that pid. A
    # small serial-GC heap and C1 only: start-up in well under a second.
    # shellcheck disable=SC2016
    setsid bash -c 'echo "$$" >"$0" && exec "$@"' "$ZK_PID" \
        java -Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -XX:-UsePerfData -Djava.net.preferIPv4Stack=true \
        -Dzookeeper.jmx.log4j.disable=true \
        -Dorg.slf4j.simpleLogger.showDateTime=true \
        -cp "$cp" org.apache.zookeeper.server.ZooKeeperServerMain "$ZK_CFG" \
        </dev/null >>"$ZK_LOG" 2>&1 9>&- &
    rc=0
    zk_await "$ZK_WAIT" || rc=$?
    ((rc != 0)) || return 0
    tail -n 20 "$ZK_LOG" >&2 || true
    ((rc == 1)) && die "ZooKeeper exited during start-up (log: $ZK_LOG)"
    die "ZooKeeper did not answer ruok on 127.0.0.1:$ZK_PORT within ${ZK_WAIT}s (log: $ZK_LOG)"
}

zk_stop() {
    local pid
    if ! pid=$(zk_live_pid); then
        rm -f "$ZK_PID"
        say "ZooKeeper: already stopped"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true # runs its shutdown hook
    wait_gone "$pid" 60 || die "ZooKeeper (pid $pid) still running after 60s; see $ZK_LOG"
    rm -f "$ZK_PID"
    say "ZooKeeper: stopped"
}

zk_status() {
    local pid
    if pid=$(zk_live_pid); then
        if zk_ping; then
            echo "zookeeper: up   pid $pid, 127.0.0.1:$ZK_PORT, data $ZK_DIR/data"
            return 0
        fi
        echo "zookeeper: not answering on 127.0.0.1:$ZK_PORT (pid $pid running; log $ZK_LOG)"
    elif zk_ping; then
        echo "zookeeper: port $ZK_PORT answers, but not as ours (pid file $ZK_PID)"
    else
        echo "zookeeper: down (127.0.0.1:$ZK_PORT)"
    fi
    return 3
}

# ---- secret and env files ----

ensure_secret() {
    if [[ -f $SECRET_FILE ]]; then
        SECRET=$(<"$SECRET_FILE")
        [[ $SECRET =~ ^[0-9a-f]{64}$ ]] ||
            die "$SECRET_FILE is not 64 lowercase hex chars; delete it to make a new one"
    else
        SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
        [[ $SECRET =~ ^[0-9a-f]{64}$ ]] || die "could not read 32 bytes from /dev/urandom"
        (umask 077 && printf '%s' "$SECRET" >"$SECRET_FILE.tmp")
        mv -f "$SECRET_FILE.tmp" "$SECRET_FILE"
    fi
    chmod 600 "$SECRET_FILE"
}

# write_env FILE DATABASE REDIS_DB ZK_PATH [EXTRA LINES]
write_env() {
    local redlock=127.0.0.1:${REDLOCK_PORTS[0]},127.0.0.1:${REDLOCK_PORTS[1]},127.0.0.1:${REDLOCK_PORTS[2]}
    (umask 077 && cat >"$1.tmp") <<EOF
export SECKILL_MYSQL_URL=mysql://seckill:seckill@127.0.0.1:$MYSQL_PORT/$2
export SECKILL_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/$3
export SECKILL_LOCK_REDLOCK_URL=redlock://$redlock
export SECKILL_LOCK_ZK_URL=zookeeper://127.0.0.1:$ZK_PORT/$4
export SECKILL_SECRET=$SECRET
export SECKILL_DEV=1
# Instances started by hand, by the tests and by the benchmarks stop at
# once on SIGTERM; behind a load balancer (make cluster) they drain first.
export SECKILL_DRAIN_S=0
${5:-}
EOF
    mv -f "$1.tmp" "$1"
}

# ---- commands ----

ensure_up() {
    take_lock
    mysql_start
    mysql_provision
    redis_start
    redlock_start
    zk_start
    ensure_secret
    write_env "$ENV_FILE" seckill 0 seckill-locks
    # The tests ask for login codes by the hundred: no proof of work,
    # except where a test asks for it (and the README's walk-through,
    # which runs at the defaults).
    write_env "$ENV_TEST_FILE" seckill_test 1 seckill-test-locks \
        "export SECKILL_POW_MAXNUMBER=0"
}

cmd_up() {
    ensure_up
    say "mariadb up on 127.0.0.1:$MYSQL_PORT (socket $MYSQL_SOCK, data $MYSQL_DATADIR)"
    say "redis   up on 127.0.0.1:$REDIS_PORT (data $REDIS_DIR)"
    say "redlock up on 127.0.0.1:${REDLOCK_PORTS[0]},${REDLOCK_PORTS[1]},${REDLOCK_PORTS[2]} (no persistence)"
    say "zookeeper up on 127.0.0.1:$ZK_PORT (data $ZK_DIR/data)"
    say "env     $ENV_FILE (tests: $ENV_TEST_FILE)"
}

cmd_reset_test() {
    ensure_up
    # Database-level grants survive DROP DATABASE, so no re-grant is needed.
    mysql_admin <<'EOF' || die "recreating database seckill_test failed"
DROP DATABASE IF EXISTS seckill_test;
CREATE DATABASE seckill_test CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
EOF
    migrate seckill_test
    [[ $(rcli -n 1 flushdb 2>&1) == OK ]] || die "FLUSHDB on Redis db 1 failed"
    say "reset seckill_test and Redis db 1"
}

cmd_down() {
    if [[ ! -d $RUN ]]; then
        say "nothing to stop ($RUN does not exist)"
        return 0
    fi
    take_lock
    local rc=0
    (mysql_stop) || rc=1
    (redis_stop) || rc=1
    redlock_stop || rc=1
    (zk_stop) || rc=1
    return "$rc"
}

cmd_status() {
    local pid port rc=0
    if mysql_ping; then
        pid=$(live_pid mariadbd "$MYSQL_PID" || echo '?')
        port=$(mysql_admin -N -B -e 'SELECT @@port' 2>/dev/null || echo "$MYSQL_PORT")
        echo "mariadb: up   pid $pid, 127.0.0.1:$port, socket $MYSQL_SOCK, data $MYSQL_DATADIR"
    elif pid=$(live_pid mariadbd "$MYSQL_PID"); then
        echo "mariadb: not answering (pid $pid running; log $MYSQL_LOG)"
        rc=3
    else
        echo "mariadb: down"
        rc=3
    fi
    redis_status_at "redis:  " "${REDIS_ARGS[@]:1}" || rc=3
    for port in "${REDLOCK_PORTS[@]}"; do
        redlock_args "$port"
        redis_status_at "redlock:" "${REDLOCK_ARGS[@]:1}" || rc=3
    done
    zk_status || rc=3
    return "$rc"
}

cmd_env() {
    [[ -f $ENV_FILE ]] || die "$ENV_FILE does not exist yet; run: scripts/services.sh up"
    echo "$ENV_FILE"
}

usage() { echo "usage: $0 up|down|status|reset-test|env" >&2; exit 2; }

(($# == 1)) || usage
case $1 in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
reset-test) cmd_reset_test ;;
env) cmd_env ;;
*) usage ;;
esac
