# shellcheck shell=bash
# mariadb.sh - a private MariaDB server on loopback, shared by
# scripts/services.sh (the service's database) and scripts/mysql-shards.sh
# (the extra primaries of the shard tests): one set of server options, one
# way to start, check and stop a server. Sourced, not run; it defines
# functions and the admin identity only.
#
# The caller defines die MESSAGE and say MESSAGE, and before each call
# names the server with these variables:
#   MYSQL_NAME         how messages call it ("MariaDB", "MariaDB shard 1")
#   MYSQL_PORT         its port on 127.0.0.1
#   MYSQL_DATADIR      its data directory (mariadb-install-db on first start)
#   MYSQL_SOCK         its socket (mysql_socket_for DIR picks one)
#   MYSQL_PID          its pid file
#   MYSQL_LOG          its error log
#   MYSQL_INSTALL_LOG  the log of mariadb-install-db
#   MYSQL_WAIT         seconds it may take to answer
#   MYSQL_PORT_VAR     the setting that picks the port, for a message

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

# mysql_socket_for DIR: DIR/mysql.sock, or one under /tmp named after DIR
# when that path is too long for a socket (sun_path is 108 bytes; keep
# well inside it).
mysql_socket_for() {
    local sock=$1/mysql.sock
    if ((${#sock} >= 100)); then
        sock=/tmp/seckill-mysql-$(printf '%s' "$1" | sha256sum | cut -c1-16).sock
    fi
    echo "$sock"
}

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

# await WHAT PING COMM PIDFILE PID SECONDS: wait until PING (a command and
# its arguments, split on spaces) succeeds (0), the server dies (1) or time
# runs out (2).
await() {
    local deadline=$((SECONDS + $6)) ping
    read -ra ping <<<"$2"
    while ((SECONDS < deadline)); do
        "${ping[@]}" && return 0
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
    mariadb --no-defaults --protocol=socket -S "$MYSQL_SOCK" -u "$ADMIN" "$@"
}

mysql_ping() {
    [[ -S $MYSQL_SOCK ]] && mariadb-admin --no-defaults --protocol=socket \
        -S "$MYSQL_SOCK" -u "$ADMIN" --connect-timeout=2 ping >/dev/null 2>&1
}

mysql_init() {
    [[ -d $MYSQL_DATADIR/mysql ]] && return 0
    if [[ -d $MYSQL_DATADIR && -n $(ls -A "$MYSQL_DATADIR") ]]; then
        die "$MYSQL_DATADIR is not empty but has no system database; move it away"
    fi
    # Initialise next door and rename, so a failed run never leaves a
    # half-made data directory that would look initialised next time.
    local tmp=$MYSQL_DATADIR.init
    rm -rf "$tmp"
    mkdir -p "$tmp"
    say "initialising $MYSQL_NAME data directory $MYSQL_DATADIR"
    if ! mariadb-install-db --no-defaults --datadir="$tmp" \
        "${INSTALL_ARGS[@]}" --skip-test-db "${AS_USER[@]}" >"$MYSQL_INSTALL_LOG" 2>&1; then
        tail -n 20 "$MYSQL_INSTALL_LOG" >&2
        die "mariadb-install-db failed (full log: $MYSQL_INSTALL_LOG)"
    fi
    rm -rf "$MYSQL_DATADIR"
    mv "$tmp" "$MYSQL_DATADIR"
}

mysql_start() {
    mysql_ping && return 0
    local pid="" rc=0
    if pid=$(live_pid mariadbd "$MYSQL_PID"); then
        say "$MYSQL_NAME (pid $pid) is running but not answering yet; waiting"
        await "$MYSQL_NAME" mysql_ping mariadbd "$MYSQL_PID" "" "$MYSQL_WAIT" || rc=$?
        ((rc != 0)) || return 0
        ((rc == 1)) || die "$MYSQL_NAME (pid $pid) did not answer within ${MYSQL_WAIT}s (log: $MYSQL_LOG)"
        say "$MYSQL_NAME (pid $pid) went away; starting afresh"
    fi
    rm -f "$MYSQL_PID" "$MYSQL_SOCK" # stale after a crash
    mysql_init
    say "starting $MYSQL_NAME on 127.0.0.1:$MYSQL_PORT"
    setsid mariadbd --no-defaults "${AS_USER[@]}" \
        --datadir="$MYSQL_DATADIR" \
        --port="$MYSQL_PORT" --bind-address=127.0.0.1 \
        --socket="$MYSQL_SOCK" --pid-file="$MYSQL_PID" --log-error="$MYSQL_LOG" \
        --skip-name-resolve \
        --character-set-server=utf8mb4 --collation-server=utf8mb4_bin \
        --innodb-buffer-pool-size=256M --max-connections=1000 \
        </dev/null >>"$MYSQL_LOG" 2>&1 9>&- &
    rc=0
    await "$MYSQL_NAME" mysql_ping mariadbd "$MYSQL_PID" "$!" "$MYSQL_WAIT" || rc=$?
    ((rc != 0)) || return 0
    tail -n 20 "$MYSQL_LOG" >&2 || true
    ((rc == 1)) && die "$MYSQL_NAME exited during start-up (log: $MYSQL_LOG)"
    die "$MYSQL_NAME did not answer on $MYSQL_SOCK within ${MYSQL_WAIT}s (log: $MYSQL_LOG)"
}

# mysql_provision_user DATABASE...: the databases and the user seckill
# (password seckill, from 127.0.0.1, localhost and anywhere) with every
# privilege on them and on the migration tests' scratch databases
# (seckill_mig_<pid>...), then a check that the user logs in over TCP on
# MYSQL_PORT and reaches this server there, not another checkout's.
mysql_provision_user() {
    local sql="" host db
    for db in "$@"; do
        sql+="CREATE DATABASE IF NOT EXISTS $db CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;"$'\n'
    done
    for host in 127.0.0.1 localhost %; do
        sql+="CREATE USER IF NOT EXISTS 'seckill'@'$host' IDENTIFIED BY 'seckill';"$'\n'
        sql+="ALTER USER 'seckill'@'$host' IDENTIFIED BY 'seckill';"$'\n'
        for db in "$@"; do
            sql+="GRANT ALL PRIVILEGES ON $db.* TO 'seckill'@'$host';"$'\n'
        done
        # Scratch databases of the migration tests (seckill_mig_<pid>).
        sql+="GRANT ALL PRIVILEGES ON \`seckill\\_mig\\_%\`.* TO 'seckill'@'$host';"$'\n'
        sql+="GRANT PROCESS ON *.* TO 'seckill'@'$host';"$'\n'
    done
    mysql_admin <<<"$sql" || die "provisioning $MYSQL_NAME (databases, user seckill) failed"
    # The apps connect over TCP as seckill: check exactly that.
    mariadb --no-defaults --protocol=tcp -h 127.0.0.1 -P "$MYSQL_PORT" \
        -u seckill -pseckill "$1" -e 'SELECT 1' >/dev/null ||
        die "cannot log in as seckill@127.0.0.1:$MYSQL_PORT"
    # The port must be this server's (another checkout's MariaDB may
    # answer there with the same user).
    local ours theirs
    ours=$(mysql_admin -N -B -e 'SELECT @@datadir') || die "asking $MYSQL_NAME for its datadir failed"
    theirs=$(mariadb --no-defaults --protocol=tcp -h 127.0.0.1 -P "$MYSQL_PORT" \
        -u seckill -pseckill -N -B -e 'SELECT @@datadir') || die "asking 127.0.0.1:$MYSQL_PORT for its datadir failed"
    [[ $ours == "$theirs" ]] ||
        die "127.0.0.1:$MYSQL_PORT is another MariaDB ($theirs, not $ours); pick another $MYSQL_PORT_VAR"
}

mysql_stop() {
    local pid
    if pid=$(live_pid mariadbd "$MYSQL_PID"); then
        kill -TERM "$pid" 2>/dev/null || true # mariadbd: SIGTERM = clean shutdown
    elif mysql_ping; then
        mariadb-admin --no-defaults --protocol=socket -S "$MYSQL_SOCK" -u "$ADMIN" \
            shutdown || die "mariadb-admin shutdown failed"
        pid=""
    else
        rm -f "$MYSQL_PID" "$MYSQL_SOCK"
        say "$MYSQL_NAME: already stopped"
        return 0
    fi
    if [[ -n $pid ]] && ! wait_gone "$pid" 120; then
        die "$MYSQL_NAME (pid $pid) still running after 120s; see $MYSQL_LOG"
    fi
    rm -f "$MYSQL_PID" "$MYSQL_SOCK"
    say "$MYSQL_NAME: stopped"
}
