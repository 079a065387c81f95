#!/usr/bin/env bash
# redis-cluster.sh - a Redis Cluster of three primaries and three replicas
# on loopback, for the tests of the cluster routing (make test-cluster).
#
#   scripts/redis-cluster.sh up      start the six nodes (idempotent: a node
#                                    that is down is started again, a cluster
#                                    not yet formed is created) and wait for
#                                    cluster_state:ok
#   scripts/redis-cluster.sh down    stop them (data is kept)
#   scripts/redis-cluster.sh status  one line per node; exit 0 when all are
#                                    up and the cluster is ok, 3 if not
#   scripts/redis-cluster.sh url     print the redis-cluster:// URL
#
# The nodes listen on 127.0.0.1, ports SECKILL_REDIS_CLUSTER_PORT (17001)
# to that plus 5, each with appendonly yes and appendfsync always (what
# the async mode asks of every primary; SECKILL_REDIS_CLUSTER_FSYNC=everysec
# for a comparison with a Redis that fsyncs once a second, as make
# services' does; set again at every up), data, nodes.conf, pid and log
# under .run/redis-cluster/<port>/ (SECKILL_RUN_DIR overrides .run). The
# cluster is created with redis-cli --cluster create --cluster-replicas 1:
# the first three ports start as primaries, each of the others replicates
# one of them. A failover may swap those roles later; the routing finds
# the primaries itself. Works from any cwd.
set -euo pipefail

die() { echo "redis-cluster.sh: error: $*" >&2; exit 1; }
say() { echo "redis-cluster.sh: $*"; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
RUN=$(realpath -m "${SECKILL_RUN_DIR:-$ROOT/.run}")
DIR=$RUN/redis-cluster
BASE=${SECKILL_REDIS_CLUSTER_PORT:-17001}
FSYNC=${SECKILL_REDIS_CLUSTER_FSYNC:-always}
[[ $FSYNC =~ ^(always|everysec)$ ]] ||
    die "SECKILL_REDIS_CLUSTER_FSYNC must be always or everysec, not '$FSYNC'"
NODES=6
START_WAIT_S=30
OK_WAIT_S=60

[[ $BASE =~ ^[0-9]+$ ]] || die "bad SECKILL_REDIS_CLUSTER_PORT: '$BASE'"
BASE=$((10#$BASE))
((BASE >= 1 && BASE + NODES - 1 <= 55535)) ||
    die "bad SECKILL_REDIS_CLUSTER_PORT: $BASE (1..55530: the cluster bus takes port + 10000)"

for tool in redis-server redis-cli; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found; run scripts/deps.sh"
done

PORTS=()
for ((i = 0; i < NODES; i++)); do PORTS+=("$((BASE + i))"); done

rcli_at() { timeout 5 redis-cli -h 127.0.0.1 -p "$@"; }
ping_at() { [[ $(rcli_at "$1" ping 2>/dev/null) == PONG ]]; }
dir_at() { rcli_at "$1" config get dir 2>/dev/null | sed -n 2p; }
# info_at PORT FIELD: one field of CLUSTER INFO.
info_at() {
    rcli_at "$1" cluster info 2>/dev/null | tr -d '\r' |
        awk -F: -v f="$2" '$1 == f { print $2 }'
}

# live PIDFILE: the pid in PIDFILE if that process is a live redis-server.
live() {
    local pid state
    [[ -r $1 ]] || return 1
    pid=$(<"$1")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == redis-server ]] || return 1
    state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1) || return 1
    [[ $state != [ZX] ]] || return 1
    echo "$pid"
}

take_lock() {
    mkdir -p "$DIR"
    exec 9>"$DIR/.lock"
    flock -w 300 9 || die "timed out waiting for $DIR/.lock"
}

# start_node PORT: start the node on PORT unless ours already answers.
start_node() {
    local port=$1 dir=$DIR/$1 other pid
    if ping_at "$port"; then
        other=$(dir_at "$port")
        [[ $other == "$dir" ]] ||
            die "port $port answers as another Redis (dir ${other:-?}); pick SECKILL_REDIS_CLUSTER_PORT"
        # A node started by an older copy of this script, or for a
        # comparison, may fsync otherwise.
        redis-cli -p "$port" CONFIG SET appendfsync "$FSYNC" >/dev/null ||
            die "node $port refused CONFIG SET appendfsync $FSYNC"
        return 0
    fi
    mkdir -p "$dir"
    rm -f "$dir/redis.pid"
    say "starting node on 127.0.0.1:$port"
    # setsid + background, as scripts/services.sh does: we know the pid,
    # and a ^C in the terminal never reaches the server. Errors before
    # the log file is open go to stderr, hence the same file.
    # shellcheck disable=SC2094
    setsid redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" \
        --cluster-enabled yes --cluster-config-file nodes.conf \
        --cluster-node-timeout 2000 \
        --appendonly yes --appendfsync "$FSYNC" --save '' \
        --daemonize no --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
        --enable-debug-command local \
        </dev/null >>"$dir/redis.log" 2>&1 9>&- &
    pid=$!
    for ((t = 0; t < START_WAIT_S * 5; t++)); do
        ping_at "$port" && return 0
        kill -0 "$pid" 2>/dev/null || {
            tail -n 20 "$dir/redis.log" >&2
            die "node $port exited during start-up (log: $dir/redis.log)"
        }
        sleep 0.2
    done
    die "node $port did not answer within ${START_WAIT_S}s (log: $dir/redis.log)"
}

# formed: true when some node already knows the others (created before).
formed() {
    local p n
    for p in "${PORTS[@]}"; do
        n=$(info_at "$p" cluster_known_nodes)
        [[ -n $n ]] && ((n > 1)) && return 0
    done
    return 1
}

# all_ok: every node says cluster_state:ok and knows all six.
all_ok() {
    local p
    for p in "${PORTS[@]}"; do
        [[ $(info_at "$p" cluster_state) == ok ]] || return 1
        [[ $(info_at "$p" cluster_known_nodes) == "$NODES" ]] || return 1
    done
}

up() {
    local p hosts=()
    take_lock
    for p in "${PORTS[@]}"; do start_node "$p"; done
    if ! formed; then
        for p in "${PORTS[@]}"; do hosts+=("127.0.0.1:$p"); done
        say "creating the cluster: ${hosts[*]}"
        redis-cli --cluster create "${hosts[@]}" --cluster-replicas 1 \
            --cluster-yes >"$DIR/create.log" 2>&1 ||
            { cat "$DIR/create.log" >&2; die "redis-cli --cluster create failed"; }
    fi
    for ((t = 0; t < OK_WAIT_S * 5; t++)); do
        if all_ok; then
            say "cluster ok on 127.0.0.1:${PORTS[0]}-${PORTS[-1]}"
            return 0
        fi
        sleep 0.2
    done
    status >&2 || true
    die "the cluster is not cluster_state:ok after ${OK_WAIT_S}s"
}

down() {
    local p pid
    take_lock
    for p in "${PORTS[@]}"; do
        if pid=$(live "$DIR/$p/redis.pid"); then
            kill -TERM "$pid" 2>/dev/null || true
            for ((t = 0; t < 300; t++)); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.2
            done
            kill -0 "$pid" 2>/dev/null && die "node $p (pid $pid) still running after 60s"
            say "node $p: stopped"
        elif ping_at "$p" && [[ $(dir_at "$p") == "$DIR/$p" ]]; then
            rcli_at "$p" shutdown >/dev/null 2>&1 || true
            say "node $p: stopped"
        else
            say "node $p: already stopped"
        fi
        rm -f "$DIR/$p/redis.pid"
    done
}

status() {
    local p rc=0 pid role
    for p in "${PORTS[@]}"; do
        if ping_at "$p" && [[ $(dir_at "$p") == "$DIR/$p" ]]; then
            pid=$(live "$DIR/$p/redis.pid" || echo '?')
            role=$(rcli_at "$p" role 2>/dev/null | head -n1)
            echo "node $p up   pid $pid, $role, cluster_state:$(info_at "$p" cluster_state)"
            [[ $(info_at "$p" cluster_state) == ok ]] || rc=3
        else
            echo "node $p down (127.0.0.1:$p)"
            rc=3
        fi
    done
    return $rc
}

url() {
    local p hosts=()
    for p in "${PORTS[@]:0:3}"; do hosts+=("127.0.0.1:$p"); done
    (IFS=,; echo "redis-cluster://${hosts[*]}")
}

case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
url) url ;;
*)
    echo "usage: scripts/redis-cluster.sh up|down|status|url" >&2
    exit 2
    ;;
esac
