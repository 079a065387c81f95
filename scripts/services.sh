#!/usr/bin/env bash
# services.sh - private MariaDB + Redis for seckilld development and tests.
#
#   scripts/services.sh up          start both (idempotent), provision, write .run/env
#   scripts/services.sh down        stop both (data is kept)
#   scripts/services.sh status      one line per server; exit 0 when both are up, 3 if not
#   scripts/services.sh reset-test  empty database seckill_test (schema reloaded) and Redis db 1
#   scripts/services.sh env         print the path of .run/env
#
# Everything lives under the repo's .run/ (SECKILL_RUN_DIR overrides) and
# listens on 127.0.0.1 only: MariaDB on SECKILL_MYSQL_PORT (13306), Redis on
# SECKILL_REDIS_PORT (16379). Works from any cwd.
set -euo pipefail

die() { echo "services.sh: error: $*" >&2; exit 1; }
say() { echo "services.sh: $*"; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
RUN=$(realpath -m "${SECKILL_RUN_DIR:-$ROOT/.run}")
MYSQL_PORT=${SECKILL_MYSQL_PORT:-13306}
REDIS_PORT=${SECKILL_REDIS_PORT:-16379}
SCHEMA=$ROOT/sql/schema.sql

for p in "$MYSQL_PORT" "$REDIS_PORT"; do
    if ! [[ $p =~ ^[0-9]+$ ]] || ((p < 1 || p > 65535)); then die "bad port: '$p'"; fi
done
[[ $MYSQL_PORT != "$REDIS_PORT" ]] || die "MariaDB and Redis ports are both $MYSQL_PORT"

DATADIR=$RUN/mysql
MYSQL_PID=$RUN/mysql.pid
MYSQL_LOG=$RUN/mysql.err
SOCK=$RUN/mysql.sock
if ((${#SOCK} >= 100)); then # sun_path is 108 bytes; keep well inside it
    SOCK=/tmp/seckill-mysql-$(printf '%s' "$RUN" | sha256sum | cut -c1-16).sock
fi
REDIS_DIR=$RUN/redis
REDIS_PID=$RUN/redis.pid
REDIS_LOG=$RUN/redis.log
SECRET_FILE=$RUN/secret
ENV_FILE=$RUN/env
ENV_TEST_FILE=$RUN/env.test

MYSQL_WAIT=${SECKILL_MYSQL_WAIT:-60} # seconds
REDIS_WAIT=${SECKILL_REDIS_WAIT:-30}

# mariadb-install-db creates root and the current OS user, both unix_socket;
# we administer through the socket as whichever of them we are.
if ((EUID == 0)); then
    ADMIN=root
    AS_USER=(--user=root)
else
    ADMIN=$(id -un)
    AS_USER=()
fi
# Name the second admin explicitly: mariadb-install-db would take it from $USER.
INSTALL_ARGS=(--auth-root-authentication-method=socket --auth-root-socket-user="$ADMIN")

for tool in mariadbd mariadb mariadb-admin mariadb-install-db redis-server redis-cli; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found; run scripts/deps.sh"
done

# ---- helpers ----

# live_pid COMM PIDFILE: print the pid in PIDFILE if that process is alive
# and is COMM (so a stale pid file recycled by another process is ignored).
live_pid() {
    local pid comm state
    [[ -r $2 ]] || return 1
    pid=$(<"$2") || return 1
    pid=${pid//[^0-9]/}
    [[ -n $pid ]] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [[ $comm == "$1" ]] || return 1
    state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1) || return 1
    [[ $state != [ZX] ]] || return 1 # killed, waiting to be reaped
    echo "$pid"
}

# await WHAT PING COMM PIDFILE PID SECONDS: wait until PING succeeds (0), the
# server dies (1) or time runs out (2).
await() {
    local deadline=$((SECONDS + $6))
    while ((SECONDS < deadline)); do
        "$2" && return 0
        if ! live_pid "$3" "$4" >/dev/null; then
            # No pid file yet (early start-up): trust the pid we launched.
            [[ -n $5 ]] && kill -0 "$5" 2>/dev/null && [[ ! -s $4 ]] || return 1
        fi
        sleep 0.2
    done
    return 2
}

# wait_gone PID SECONDS: wait until PID has exited (a zombie counts as exited).
wait_gone() {
    local deadline=$((SECONDS + $2)) state
    while ((SECONDS < deadline)); do
        state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1) || return 0
        [[ $state != [ZX] ]] || return 0
        sleep 0.2
    done
    return 1
}

mysql_admin() {
    mariadb --no-defaults --protocol=socket -S "$SOCK" -u "$ADMIN" "$@"
}

mysql_ping() {
    [[ -S $SOCK ]] && mariadb-admin --no-defaults --protocol=socket -S "$SOCK" \
        -u "$ADMIN" --connect-timeout=2 ping >/dev/null 2>&1
}

# redis-cli 7.0 has no timeout option; a stopped server must not hang us.
rcli() { timeout 5 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }

redis_ping() { [[ $(rcli ping 2>/dev/null) == PONG ]]; }

# The dir of whatever Redis answers on our port (to tell ours from a stranger).
redis_dir() { rcli config get dir 2>/dev/null | sed -n 2p; }

take_lock() {
    # -m applies to $RUN only, on purpose: never chmod a directory we did not make.
    # shellcheck disable=SC2174
    [[ -d $RUN ]] || mkdir -p -m 700 "$RUN"
    exec 9>"$RUN/.lock"
    flock -w 300 9 || die "timed out waiting for $RUN/.lock (another services.sh?)"
}

# ---- MariaDB ----

mysql_init() {
    [[ -d $DATADIR/mysql ]] && return 0
    if [[ -d $DATADIR && -n $(ls -A "$DATADIR") ]]; then
        die "$DATADIR is not empty but has no system database; move it away"
    fi
    # Initialise next door and rename, so a failed run never leaves a
    # half-made data directory that would look initialised next time.
    local tmp=$DATADIR.init log=$RUN/mysql-install.log
    rm -rf "$tmp"
    mkdir -p "$tmp"
    say "initialising MariaDB data directory $DATADIR"
    if ! mariadb-install-db --no-defaults --datadir="$tmp" \
        "${INSTALL_ARGS[@]}" --skip-test-db "${AS_USER[@]}" >"$log" 2>&1; then
        tail -n 20 "$log" >&2
        die "mariadb-install-db failed (full log: $log)"
    fi
    rm -rf "$DATADIR"
    mv "$tmp" "$DATADIR"
}

mysql_start() {
    mysql_ping && return 0
    local pid="" rc=0
    if pid=$(live_pid mariadbd "$MYSQL_PID"); then
        say "MariaDB (pid $pid) is running but not answering yet; waiting"
        await MariaDB mysql_ping mariadbd "$MYSQL_PID" "" "$MYSQL_WAIT" || rc=$?
        ((rc != 0)) || return 0
        ((rc == 1)) || die "MariaDB (pid $pid) did not answer within ${MYSQL_WAIT}s (log: $MYSQL_LOG)"
        say "MariaDB (pid $pid) went away; starting afresh"
    fi
    rm -f "$MYSQL_PID" "$SOCK" # stale after a crash
    mysql_init
    say "starting MariaDB on 127.0.0.1:$MYSQL_PORT"
    setsid mariadbd --no-defaults "${AS_USER[@]}" \
        --datadir="$DATADIR" \
        --port="$MYSQL_PORT" --bind-address=127.0.0.1 \
        --socket="$SOCK" --pid-file="$MYSQL_PID" --log-error="$MYSQL_LOG" \
        --skip-name-resolve \
        --character-set-server=utf8mb4 --collation-server=utf8mb4_bin \
        --innodb-buffer-pool-size=256M --max-connections=1000 \
        </dev/null >>"$MYSQL_LOG" 2>&1 9>&- &
    rc=0
    await MariaDB mysql_ping mariadbd "$MYSQL_PID" "$!" "$MYSQL_WAIT" || rc=$?
    ((rc != 0)) || return 0
    tail -n 20 "$MYSQL_LOG" >&2 || true
    ((rc == 1)) && die "MariaDB exited during start-up (log: $MYSQL_LOG)"
    die "MariaDB did not answer on $SOCK within ${MYSQL_WAIT}s (log: $MYSQL_LOG)"
}

mysql_provision() {
    local sql="" host db
    for db in seckill seckill_test; do
        sql+="CREATE DATABASE IF NOT EXISTS $db CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;"$'\n'
    done
    for host in 127.0.0.1 localhost %; do
        sql+="CREATE USER IF NOT EXISTS 'seckill'@'$host' IDENTIFIED BY 'seckill';"$'\n'
        sql+="ALTER USER 'seckill'@'$host' IDENTIFIED BY 'seckill';"$'\n'
        sql+="GRANT ALL PRIVILEGES ON seckill.* TO 'seckill'@'$host';"$'\n'
        sql+="GRANT ALL PRIVILEGES ON seckill_test.* TO 'seckill'@'$host';"$'\n'
        sql+="GRANT PROCESS ON *.* TO 'seckill'@'$host';"$'\n'
    done
    mysql_admin <<<"$sql" || die "provisioning MariaDB (databases, user seckill) failed"
    mysql_admin seckill <"$SCHEMA" || die "loading $SCHEMA into seckill failed"
    mysql_admin seckill_test <"$SCHEMA" || die "loading $SCHEMA into seckill_test failed"
    # The apps connect over TCP as seckill: check exactly that.
    mariadb --no-defaults --protocol=tcp -h 127.0.0.1 -P "$MYSQL_PORT" \
        -u seckill -pseckill seckill -e 'SELECT 1' >/dev/null ||
        die "cannot log in as seckill@127.0.0.1:$MYSQL_PORT"
}

mysql_stop() {
    local pid
    if pid=$(live_pid mariadbd "$MYSQL_PID"); then
        kill -TERM "$pid" 2>/dev/null || true # mariadbd: SIGTERM = clean shutdown
    elif mysql_ping; then
        mariadb-admin --no-defaults --protocol=socket -S "$SOCK" -u "$ADMIN" \
            shutdown || die "mariadb-admin shutdown failed"
        pid=""
    else
        rm -f "$MYSQL_PID" "$SOCK"
        say "MariaDB: already stopped"
        return 0
    fi
    if [[ -n $pid ]] && ! wait_gone "$pid" 120; then
        die "MariaDB (pid $pid) still running after 120s; see $MYSQL_LOG"
    fi
    rm -f "$MYSQL_PID" "$SOCK"
    say "MariaDB: stopped"
}

# ---- Redis ----

redis_start() {
    local pid="" dir rc=0
    if redis_ping; then
        dir=$(redis_dir)
        [[ $dir == "$REDIS_DIR" ]] ||
            die "port $REDIS_PORT answers as another Redis (dir ${dir:-?}); pick SECKILL_REDIS_PORT"
        return 0
    fi
    if pid=$(live_pid redis-server "$REDIS_PID"); then
        say "Redis (pid $pid) is running but not answering yet; waiting"
        await Redis redis_ping redis-server "$REDIS_PID" "" "$REDIS_WAIT" || rc=$?
        ((rc != 0)) || return 0
        ((rc == 1)) || die "Redis (pid $pid) did not answer within ${REDIS_WAIT}s (log: $REDIS_LOG)"
        say "Redis (pid $pid) went away; starting afresh"
    fi
    rm -f "$REDIS_PID"
    mkdir -p "$REDIS_DIR"
    say "starting Redis on 127.0.0.1:$REDIS_PORT"
    # setsid + background (not --daemonize) so we know the pid and a ^C
    # in the terminal never reaches the server. Errors before the log file
    # is open go to stderr, hence the same file.
    # shellcheck disable=SC2094
    setsid redis-server --port "$REDIS_PORT" --bind 127.0.0.1 \
        --dir "$REDIS_DIR" --appendonly yes --appendfsync everysec \
        --save '' --daemonize no \
        --pidfile "$REDIS_PID" --logfile "$REDIS_LOG" \
        --enable-debug-command local \
        </dev/null >>"$REDIS_LOG" 2>&1 9>&- &
    rc=0
    await Redis redis_ping redis-server "$REDIS_PID" "$!" "$REDIS_WAIT" || rc=$?
    ((rc != 0)) || return 0
    tail -n 20 "$REDIS_LOG" >&2 || true
    ((rc == 1)) && die "Redis exited during start-up (log: $REDIS_LOG)"
    die "Redis did not answer PONG on 127.0.0.1:$REDIS_PORT within ${REDIS_WAIT}s (log: $REDIS_LOG)"
}

redis_stop() {
    local pid
    if pid=$(live_pid redis-server "$REDIS_PID"); then
        kill -TERM "$pid" 2>/dev/null || true # redis: SIGTERM = clean shutdown
    elif redis_ping && [[ $(redis_dir) == "$REDIS_DIR" ]]; then
        rcli shutdown >/dev/null 2>&1 || true
        pid=""
    else
        rm -f "$REDIS_PID"
        say "Redis: already stopped"
        return 0
    fi
    if [[ -n $pid ]] && ! wait_gone "$pid" 60; then
        die "Redis (pid $pid) still running after 60s; see $REDIS_LOG"
    fi
    rm -f "$REDIS_PID"
    say "Redis: stopped"
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

# write_env FILE DATABASE REDIS_DB
write_env() {
    (umask 077 && cat >"$1.tmp") <<EOF
export SECKILL_MYSQL_URL=mysql://seckill:seckill@127.0.0.1:$MYSQL_PORT/$2
export SECKILL_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/$3
export SECKILL_SECRET=$SECRET
export SECKILL_DEV=1
EOF
    mv -f "$1.tmp" "$1"
}

# ---- commands ----

ensure_up() {
    take_lock
    [[ -r $SCHEMA ]] || die "schema not found: $SCHEMA"
    mysql_start
    mysql_provision
    redis_start
    ensure_secret
    write_env "$ENV_FILE" seckill 0
    write_env "$ENV_TEST_FILE" seckill_test 1
}

cmd_up() {
    ensure_up
    say "mariadb up on 127.0.0.1:$MYSQL_PORT (socket $SOCK, data $DATADIR)"
    say "redis   up on 127.0.0.1:$REDIS_PORT (data $REDIS_DIR)"
    say "env     $ENV_FILE (tests: $ENV_TEST_FILE)"
}

cmd_reset_test() {
    ensure_up
    # Database-level grants survive DROP DATABASE, so no re-grant is needed.
    mysql_admin <<'EOF' || die "recreating database seckill_test failed"
DROP DATABASE IF EXISTS seckill_test;
CREATE DATABASE seckill_test CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
EOF
    mysql_admin seckill_test <"$SCHEMA" || die "loading $SCHEMA into seckill_test failed"
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
    return "$rc"
}

cmd_status() {
    local pid port rc=0
    if mysql_ping; then
        pid=$(live_pid mariadbd "$MYSQL_PID" || echo '?')
        port=$(mysql_admin -N -B -e 'SELECT @@port' 2>/dev/null || echo "$MYSQL_PORT")
        echo "mariadb: up   pid $pid, 127.0.0.1:$port, socket $SOCK, data $DATADIR"
    elif pid=$(live_pid mariadbd "$MYSQL_PID"); then
        echo "mariadb: not answering (pid $pid running; log $MYSQL_LOG)"
        rc=3
    else
        echo "mariadb: down"
        rc=3
    fi
    if redis_ping && [[ $(redis_dir) == "$REDIS_DIR" ]]; then
        pid=$(live_pid redis-server "$REDIS_PID" || echo '?')
        echo "redis:   up   pid $pid, 127.0.0.1:$REDIS_PORT, data $REDIS_DIR"
    elif pid=$(live_pid redis-server "$REDIS_PID"); then
        echo "redis:   not answering on 127.0.0.1:$REDIS_PORT (pid $pid running; log $REDIS_LOG)"
        rc=3
    else
        echo "redis:   down"
        rc=3
    fi
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
