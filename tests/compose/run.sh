#!/usr/bin/env bash
# run.sh - make test-compose: the Dockerfile and docker-compose.yml, run
# for real with Debian's podman and podman-compose (no Docker engine here).
#
#   tests/compose/run.sh
#
# 1. A base image: `mmdebstrap --variant=apt bookworm` imported as
#    docker.io/library/debian:12 and :12-slim (once; no registry is
#    reached for images, every build runs with --pull=never).
# 2. Images: the app from the Dockerfile, and stand-ins for the official
#    mariadb:10.11, redis:7 and haproxy:2.6 images built from Debian's
#    packages (tests/compose/standins/), passed to docker-compose.yml
#    through its image variables (MARIADB_IMAGE, REDIS_IMAGE,
#    HAPROXY_IMAGE, SECKILL_IMAGE).
# 3. podman-compose up: database, Redis, the one-shot migrate service, two
#    app replicas, haproxy on a free loopback port; wait until haproxy has
#    both replicas UP; schema_version has every migration once.
# 4. The README's curl walk-through through haproxy; a crowd of 600
#    purchases for 200 in stock through haproxy; one replica stopped
#    (SIGTERM: it drains) and started again during a second crowd; the
#    invariants in MySQL; both replicas served.
# 5. podman-compose down -v, whatever happened.
#
# podman runs with CONTAINERS_CONF=.run/compose/containers.conf
# (default_ulimits = [], runtime runc, cgroupfs, netavark): nothing in /etc
# is changed. Prints the time of each step; exits non-zero on a failure.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
RUN=$ROOT/.run/compose
BIN=$ROOT/build/seckilld
PROJECT=seckill-compose-$$
TAG=compose-test
T0=$(date +%s)

die() { echo "test-compose: FAILED: $*" >&2; exit 1; }
say() { echo "test-compose: [$(($(date +%s) - T0)) s] $*"; }

for tool in podman podman-compose mmdebstrap curl jq; do
    command -v "$tool" >/dev/null || die "$tool not found (scripts/deps.sh containers)"
done
[[ -x $BIN ]] || die "$BIN not found (make build)"
# shellcheck source=tests/lib/podman.sh
. "$ROOT/tests/lib/podman.sh"
# shellcheck source=tests/lib/walkthrough.sh
. "$ROOT/tests/lib/walkthrough.sh"
# shellcheck source=tests/lib/ports.sh
. "$ROOT/tests/lib/ports.sh"
podman_setup "$RUN"

# ---- 1. the base image ----
podman image exists docker.io/library/debian:12 ||
    say "making the Debian 12 base image with mmdebstrap"
podman_debian12 "$RUN" ||
    die "making the base image failed (log: $RUN/mmdebstrap.log)"

# ---- 2. images ----
build() { # tag context
    podman build --pull=never -q -t "$1" "$2" >"$RUN/build-${1//[\/:]/-}.log" 2>&1 ||
        die "podman build $1 failed (log: $RUN/build-${1//[\/:]/-}.log)"
}
say "building the app image from the Dockerfile"
build "localhost/seckilld:$TAG" "$ROOT"
say "building stand-ins for mariadb:10.11, redis:7 and haproxy:2.6"
build localhost/seckill-standin-mariadb:10.11 "$ROOT/tests/compose/standins/mariadb"
build localhost/seckill-standin-redis:7 "$ROOT/tests/compose/standins/redis"
build localhost/seckill-standin-haproxy:2.6 "$ROOT/tests/compose/standins/haproxy"

# ---- 3. up ----
export SECKILL_IMAGE=localhost/seckilld:$TAG
export MARIADB_IMAGE=localhost/seckill-standin-mariadb:10.11
export REDIS_IMAGE=localhost/seckill-standin-redis:7
export HAPROXY_IMAGE=localhost/seckill-standin-haproxy:2.6
SECKILL_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
SECKILL_SMS_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
# Dev mode for the walk-through's login code; the code also goes to the
# sms-sink service, as without dev mode.
export SECKILL_SECRET SECKILL_SMS_SECRET SECKILL_DEV=1
SECKILL_HTTP_PORT=$(free_port)
SECKILL_STATS_PORT=$(free_port)
export SECKILL_HTTP_PORT SECKILL_STATS_PORT
LB=http://127.0.0.1:$SECKILL_HTTP_PORT
STATS="http://127.0.0.1:$SECKILL_STATS_PORT/;csv"
COMPOSE=(podman-compose -p "$PROJECT" -f "$ROOT/docker-compose.yml")

teardown() {
    local rc=$?
    if ((rc != 0)); then
        for c in $(podman ps -a --filter "label=io.podman.compose.project=$PROJECT" \
            --format '{{.Names}}'); do
            echo "---- last lines of $c ----" >&2
            podman logs --tail 15 "$c" >&2 2>&1 || true
        done
    fi
    say "tearing down"
    "${COMPOSE[@]}" down -v >"$RUN/down.log" 2>&1 || true
    podman volume rm -f "${PROJECT}_mysql-data" "${PROJECT}_redis-data" >/dev/null 2>&1 || true
    exit "$rc"
}
trap teardown EXIT

say "podman-compose up (project $PROJECT, haproxy on $LB)"
(cd "$ROOT" && "${COMPOSE[@]}" up -d >"$RUN/up.log" 2>&1) ||
    die "podman-compose up failed (log: $RUN/up.log)"

container() { # service
    podman ps --filter "label=io.podman.compose.project=$PROJECT" \
        --filter "label=com.docker.compose.service=$1" --format '{{.Names}}' | head -1
}
# status N: haproxy's status of appN.
status() { curl -s --max-time 2 "$STATS" | awk -F, -v s="app$1" '$1 == "seckilld" && $2 == s { print $18 }'; }
await_up() { # N seconds
    for _ in $(seq $(($2 * 5))); do
        [[ $(status "$1" || true) == UP* ]] && return 0
        sleep 0.2
    done
    die "haproxy did not report app$1 UP within $2 s (now: '$(status "$1" || true)')"
}
await_up 1 240
await_up 2 60
say "stack up: both replicas UP behind haproxy"

sql() { podman exec "$(container mysql)" mariadb -useckill -pseckill seckill -N -B -e "$1"; }

# The migrate service made the schema: every migration recorded once.
want=$(find "$ROOT/sql/migrations" -name '*.sql' | wc -l)
got=$(sql "SELECT COUNT(*), COUNT(DISTINCT version), MAX(version) FROM schema_version")
[[ $got == "$want"$'\t'"$want"$'\t'"$want" ]] ||
    die "schema_version after the migrate service: $got (count, distinct, max; want $want)"
say "the migrate service applied the $want migrations"

# ---- 4a. the README's walk-through, through haproxy ----
walkthrough_run "$LB" "$SECKILL_SECRET" "$ROOT/build" "$RUN/walkthrough" \
    >/dev/null || die "the README's walk-through through haproxy"
say "README walk-through: ok"
podman logs "$(container sms-sink)" 2>&1 | grep -q "to +8613800138000: your login code is" ||
    die "the sms-sink service did not print the walk-through's login code"
say "the login code reached the sms-sink service"

# ---- 4b. a crowd through haproxy ----
ADMIN=$("$BIN" token --user 1 --admin)
new_voucher() { # stock
    local b e
    b=$(date -u -d '-1 min' +%Y-%m-%dT%H:%M:%SZ)
    e=$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)
    curl -s -X POST "$LB/api/vouchers" -H "Authorization: Bearer $ADMIN" \
        --json "{\"shopId\":9,\"title\":\"compose\",\"payValue\":100,\"actualValue\":200,
             \"type\":\"seckill\",\"stock\":$1,\"beginTime\":\"$b\",\"endTime\":\"$e\"}" |
        jq -r .id
}
# crowd VOUCHER FIRST_USER COUNT OUT: COUNT purchases by distinct users, 32
# at a time; one "status code" line each into OUT.
crowd() {
    "$BIN" tokens --first "$2" --count "$3" | tail -n +2 |
        xargs -P 32 -n 1 sh -c '
            tok=${0#*,}
            st=$(curl -s -o /tmp/$$.body -w "%{http_code}" --max-time 30 -X POST \
                "'"$LB"'/api/vouchers/'"$1"'/seckill" -H "Authorization: Bearer $tok")
            code=$(jq -r ".error.code // \"-\"" /tmp/$$.body 2>/dev/null || echo not-json)
            rm -f /tmp/$$.body
            echo "$st $code"' >"$4"
}
# check_crowd OUT: every answer a sale, sold out, or (retryable) 429/503.
check_crowd() {
    local bad
    bad=$(grep -vE '^(201 -|409 SOLD_OUT|429 BUSY|503 UNAVAILABLE)$' "$1" || true)
    [[ -z $bad ]] || die "answers that are not allowed: $(sort "$1" | uniq -c | tr '\n' ';')"
}
# check_invariants VOUCHER STOCK OUT
check_invariants() {
    local orders stock users sold
    orders=$(sql "SELECT COUNT(*) FROM voucher_orders WHERE voucher_id = $1")
    users=$(sql "SELECT COUNT(DISTINCT user_id) FROM voucher_orders WHERE voucher_id = $1")
    stock=$(sql "SELECT stock FROM seckill_vouchers WHERE voucher_id = $1")
    sold=$(grep -c '^201 ' "$3" || true)
    [[ $orders == "$sold" && $users == "$sold" && $((orders + stock)) == "$2" ]] ||
        die "voucher $1: $sold answered 201, MySQL has $orders orders by $users users and stock $stock of $2"
    echo "$sold"
}

V1=$(new_voucher 200)
[[ $V1 =~ ^[0-9]+$ ]] || die "creating a voucher failed: $V1"
crowd "$V1" 1000 600 "$RUN/crowd1.txt"
check_crowd "$RUN/crowd1.txt"
sold=$(check_invariants "$V1" 200 "$RUN/crowd1.txt")
((sold == 200)) || die "voucher $V1 sold $sold of 200 to a crowd of 600"
say "crowd: 600 purchases for 200 in stock: $(sort "$RUN/crowd1.txt" | uniq -c | awk '{printf "%s %s %s; ", $1, $2, $3}')MySQL agrees"

# ---- 4c. a replica stopped and started during a crowd ----
V2=$(new_voucher 100000)
crowd "$V2" 5000 3000 "$RUN/crowd2.txt" &
crowd_pid=$!
sleep 1
APP1=$(container app1)
t=$(date +%s%N)
podman stop -t 30 "$APP1" >/dev/null
stopped_ms=$((($(date +%s%N) - t) / 1000000))
grep -q "draining before the stop" <(podman logs "$APP1" 2>&1) ||
    die "app1 did not drain on podman stop"
podman start "$APP1" >/dev/null
await_up 1 60
wait "$crowd_pid"
check_crowd "$RUN/crowd2.txt"
sold=$(check_invariants "$V2" 100000 "$RUN/crowd2.txt")
say "restart of app1 during a crowd of 3000: stop took ${stopped_ms} ms (drain), $(sort "$RUN/crowd2.txt" | uniq -c | awk '{printf "%s %s %s; ", $1, $2, $3}')MySQL agrees"

# Both replicas served through haproxy.
for n in 1 2; do
    served=$(curl -s --max-time 2 "$STATS" | awk -F, -v s="app$n" '$1 == "seckilld" && $2 == s { print $8 }')
    ((${served:-0} > 0)) || die "haproxy sent app$n no session"
done
say "ok: Dockerfile, docker-compose.yml, walk-through, crowds, drain ($(($(date +%s) - T0)) s in all)"
