#!/usr/bin/env bash
# cluster.sh - N seckilld instances behind haproxy on loopback, against the
# private MariaDB and Redis of scripts/services.sh (.run/env).
#
#   scripts/cluster.sh up [N]   start N instances (1..8, default 3) and haproxy
#   scripts/cluster.sh roll     restart every instance in turn, gracefully
#   scripts/cluster.sh status   haproxy's view of each instance
#   scripts/cluster.sh down     stop them all
#
# Instance i listens on 127.0.0.1:$((SECKILL_CLUSTER_PORT + i))
# (SECKILL_CLUSTER_PORT: 18080, so 18081..), haproxy (deploy/haproxy.cfg)
# on 127.0.0.1:SECKILL_LB_PORT (18080) with its stats page on
# 127.0.0.1:SECKILL_LB_STATS_PORT (18079, ";csv" for machines). Instances
# drain for CLUSTER_DRAIN_S (5) seconds on SIGTERM. The binary is
# $BUILD/seckilld (BUILD: build). Pid files and logs in .run/cluster/.
#
# roll: for each instance, SIGTERM; haproxy sees /readyz 503 and takes it
# out of rotation while it still serves; it exits 0 after its drain; it
# starts again on its port; the next one waits until haproxy reports this
# one UP again, so at most one instance is out at a time.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
RUN=$(realpath -m "${SECKILL_RUN_DIR:-$ROOT/.run}")
DIR=$RUN/cluster
BUILD=${BUILD:-build}
BIN=$ROOT/$BUILD/seckilld
BASE=${SECKILL_CLUSTER_PORT:-18080}
LB_PORT=${SECKILL_LB_PORT:-18080}
STATS_PORT=${SECKILL_LB_STATS_PORT:-18079}
DRAIN_S=${CLUSTER_DRAIN_S:-5}
UP_WAIT_S=30

die() { echo "cluster.sh: error: $*" >&2; exit 1; }
say() { echo "cluster.sh: $*"; }

# live PIDFILE COMM: the pid in PIDFILE if that process is alive and is COMM.
live() {
    local pid
    [[ -r $1 ]] || return 1
    pid=$(<"$1")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]] || return 1
    echo "$pid"
}

# stats_csv: haproxy's stats as CSV.
stats_csv() { curl -s --max-time 2 "http://127.0.0.1:$STATS_PORT/;csv" || true; }

# server_status N: haproxy's status of appN (UP, DOWN, ...), or "".
server_status() {
    stats_csv | awk -F, -v s="app$1" '$1 == "seckilld" && $2 == s { print $18 }'
}

# count: how many instances the running cluster has.
count() {
    local n=0
    while [[ -e $DIR/app-$((n + 1)).pid ]]; do n=$((n + 1)); done
    echo "$n"
}

# start_app I: start instance I in the background, wait for /healthz.
start_app() {
    local i=$1 port=$((BASE + $1)) pid
    (
        # shellcheck disable=SC1091
        . "$RUN/env"
        export SECKILL_DRAIN_S=$DRAIN_S
        exec setsid "$BIN" --port "$port" >>"$DIR/app-$i.log" 2>&1 </dev/null
    ) &
    pid=$!
    echo "$pid" >"$DIR/app-$i.pid"
    for _ in $(seq 100); do
        if curl -sf --max-time 1 "http://127.0.0.1:$port/healthz" >/dev/null; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || die "instance $i died on start; log: $DIR/app-$i.log"
        sleep 0.1
    done
    die "instance $i does not answer on $port; log: $DIR/app-$i.log"
}

# stop_app I: SIGTERM instance I and wait for it to exit (drain included).
stop_app() {
    local i=$1 pid
    pid=$(live "$DIR/app-$i.pid" seckilld) || { rm -f "$DIR/app-$i.pid"; return 0; }
    kill -TERM "$pid"
    for _ in $(seq $(((DRAIN_S + 20) * 10))); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "instance $i still running $((DRAIN_S + 20)) s after SIGTERM; killing it"
        kill -KILL "$pid"
    fi
    rm -f "$DIR/app-$i.pid"
}

# await_status I WANT: wait until haproxy reports appI as WANT (a prefix).
await_status() {
    local st=""
    for _ in $(seq $((UP_WAIT_S * 10))); do
        st=$(server_status "$1")
        [[ $st == "$2"* ]] && return 0
        sleep 0.1
    done
    die "haproxy reports app$1 as '$st', not $2, after $UP_WAIT_S s"
}

cmd_up() {
    local n=${1:-3} i
    [[ $n =~ ^[1-8]$ ]] || die "N must be 1..8 (deploy/haproxy.cfg has 8 server lines)"
    [[ -x $BIN ]] || die "$BIN not found (make build)"
    [[ -r $RUN/env ]] || die "$RUN/env not found (make services)"
    command -v haproxy >/dev/null || die "haproxy not found (scripts/deps.sh)"
    if live "$DIR/haproxy.pid" haproxy >/dev/null; then
        die "already running ($(count) instances); scripts/cluster.sh down first"
    fi
    mkdir -p "$DIR"
    for ((i = 1; i <= n; i++)); do
        start_app "$i"
    done
    (
        export SECKILL_LB_BIND=127.0.0.1:$LB_PORT
        export SECKILL_LB_STATS=127.0.0.1:$STATS_PORT
        for ((i = 1; i <= n; i++)); do
            export "SECKILL_LB_SERVER_$i=127.0.0.1:$((BASE + i))"
        done
        exec setsid haproxy -db -f "$ROOT/deploy/haproxy.cfg" \
            >>"$DIR/haproxy.log" 2>&1 </dev/null
    ) &
    echo "$!" >"$DIR/haproxy.pid"
    for ((i = 1; i <= n; i++)); do
        await_status "$i" UP
    done
    say "$n instances on 127.0.0.1:$((BASE + 1))..$((BASE + n)), drain ${DRAIN_S} s"
    say "haproxy on http://127.0.0.1:$LB_PORT (stats http://127.0.0.1:$STATS_PORT/)"
    say "logs in $DIR; stop with scripts/cluster.sh down"
}

cmd_roll() {
    local n i t0 t
    n=$(count)
    ((n > 0)) || die "no cluster running (scripts/cluster.sh up)"
    live "$DIR/haproxy.pid" haproxy >/dev/null || die "haproxy is not running"
    for ((i = 1; i <= n; i++)); do
        t0=$(date +%s%N)
        local pid
        pid=$(live "$DIR/app-$i.pid" seckilld) || die "instance $i is not running"
        kill -TERM "$pid"
        await_status "$i" DOWN
        t=$((($(date +%s%N) - t0) / 1000000))
        kill -0 "$pid" 2>/dev/null || die "instance $i exited before haproxy took it out"
        for _ in $(seq $(((DRAIN_S + 20) * 10))); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && die "instance $i still running after its drain"
        start_app "$i"
        await_status "$i" UP
        say "app$i: out of rotation after ${t} ms, restarted, back in $((($(date +%s%N) - t0) / 1000000)) ms"
    done
}

cmd_status() {
    local n i rc=0 st
    n=$(count)
    if ! live "$DIR/haproxy.pid" haproxy >/dev/null; then
        echo "haproxy: down"
        rc=3
    else
        echo "haproxy: up on 127.0.0.1:$LB_PORT"
    fi
    for ((i = 1; i <= n; i++)); do
        st=$(server_status "$i" || true)
        if live "$DIR/app-$i.pid" seckilld >/dev/null; then
            echo "app$i: running on 127.0.0.1:$((BASE + i)), haproxy: ${st:-?}"
        else
            echo "app$i: down"
            rc=3
        fi
    done
    return "$rc"
}

cmd_down() {
    local n i pid
    n=$(count)
    for ((i = 1; i <= n; i++)); do
        stop_app "$i" &
    done
    wait
    if pid=$(live "$DIR/haproxy.pid" haproxy); then
        kill -TERM "$pid"
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$DIR/haproxy.pid"
    say "stopped"
}

case ${1:-} in
up) cmd_up "${2:-3}" ;;
roll) cmd_roll ;;
status) cmd_status ;;
down) cmd_down ;;
*)
    echo "usage: $0 up [N]|roll|status|down" >&2
    exit 2
    ;;
esac
