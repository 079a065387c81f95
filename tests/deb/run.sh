#!/usr/bin/env bash
# run.sh - make test-deb: the Debian packages of make deb as an
# administrator installs and runs them, in a clean Debian 12 container.
#
#   tests/deb/run.sh [DEB_DIR]    (DEB_DIR: build/deb, from make deb)
#
# 1. A container of the local Debian 12 base image (tests/lib/podman.sh:
#    mmdebstrap, no registry), on the host's network so that it reaches
#    the private MariaDB and Redis of .run/env.test on loopback.
# 2. apt-get installs seckilld_*.deb, its dependencies coming from
#    Debian's archive (downloads kept in .run/deb/apt-archives); the
#    binary runs, its files are in place, the settings example is a
#    conffile.
# 3. ExecStart=, EnvironmentFile=, KillSignal= and TimeoutStopSec= are
#    read from the installed unit, which must also keep its sandbox
#    (DynamicUser, ProtectSystem=strict, NoNewPrivileges, PrivateTmp) and
#    Restart=on-failure. The settings file is made as docs/install.md says
#    (from the installed example, mode 600) with the test servers and a
#    free port. ExecStart's command runs as an unprivileged user id
#    without new privileges (setpriv), with only the settings file's
#    environment and PATH, as systemd would (no systemd runs in the
#    container).
# 4. The README's walk-through against it from the host, with the
#    installed binary solving the proof of work and minting the admin
#    token; the order checked in MySQL from the host (paid, the stock one
#    down).
# 5. KillSignal sent: the service drains and exits 0 within
#    TimeoutStopSec.
# 6. apt-get installs libseckill-lock-dev (and gcc, pkg-config: the
#    user's tools); the example it ships is compiled with pkg-config's
#    flags only (--libs and --libs --static), and run against Redis.
# 7. In a second clean container, the source make deb built from
#    (seckilld-VERSION-src.tar) is built again with dpkg-buildpackage
#    after apt-get build-dep: Build-Depends lists all the build needs.
# The containers are removed on exit, whatever happened. Prints the time of
# each step; exits non-zero on a failure.
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
DEBS=$(cd "${1:-$ROOT/build/deb}" && pwd -P)
RUN=$ROOT/.run/deb
C=seckill-deb-$$
T0=$(date +%s)

die() { echo "test-deb: FAILED: $*" >&2; exit 1; }
say() { echo "test-deb: [$(($(date +%s) - T0)) s] $*"; }

for tool in podman mmdebstrap curl jq mariadb ss; do
    command -v "$tool" >/dev/null || die "$tool not found (scripts/deps.sh containers)"
done
[[ -f $ROOT/.run/env.test ]] || die ".run/env.test not found (make services)"
shopt -s nullglob
service_deb=("$DEBS"/seckilld_*.deb)
dev_deb=("$DEBS"/libseckill-lock-dev_*.deb)
src_tar=("$DEBS"/seckilld-*-src.tar)
shopt -u nullglob
((${#service_deb[@]} == 1 && ${#dev_deb[@]} == 1 && ${#src_tar[@]} == 1)) ||
    die "expected one seckilld and one libseckill-lock-dev package and the source in $DEBS (make deb)"

# The test servers, without taking the rest of .run/env.test along.
# shellcheck disable=SC1091
read -r MYSQL_URL REDIS_URL SECRET < <(. "$ROOT/.run/env.test" &&
    echo "$SECKILL_MYSQL_URL $SECKILL_REDIS_URL $SECKILL_SECRET")

# shellcheck source=tests/lib/podman.sh
. "$ROOT/tests/lib/podman.sh"
# shellcheck source=tests/lib/walkthrough.sh
. "$ROOT/tests/lib/walkthrough.sh"
# shellcheck source=tests/lib/ports.sh
. "$ROOT/tests/lib/ports.sh"
podman_setup "$RUN"

# ---- 1. the container ----
podman image exists docker.io/library/debian:12 ||
    say "making the Debian 12 base image with mmdebstrap"
podman_debian12 "$RUN" ||
    die "making the base image failed (log: $RUN/mmdebstrap.log)"

teardown() {
    local rc=$?
    if ((rc != 0)); then
        echo "---- last lines of the service's log ----" >&2
        podman exec "$C" tail -20 /tmp/seckilld.log >&2 2>&1 || true
    fi
    podman rm -f -t 0 "$C" >/dev/null 2>&1 || true
    exit "$rc"
}
trap teardown EXIT
mkdir -p "$RUN/apt-archives/partial"
podman run -d --name "$C" --network=host -v "$DEBS:/debs:ro" \
    -v "$RUN/apt-archives:/var/cache/apt/archives" \
    docker.io/library/debian:12 sleep infinity >/dev/null ||
    die "podman run failed"
ctr() { podman exec -i "$C" "$@"; }
say "container $C up (Debian $(ctr cat /etc/debian_version))"

# ---- 2. apt-get install seckilld ----
apt_install() { # log packages...
    local log=$RUN/$1
    shift
    ctr env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "$@" >"$log" 2>&1 ||
        die "apt-get install $* failed: $(tail -15 "$log")"
}
ctr apt-get update -q >"$RUN/apt-update.log" 2>&1 ||
    die "apt-get update failed: $(tail -5 "$RUN/apt-update.log")"
apt_install apt-seckilld.log "/debs/$(basename "${service_deb[0]}")"
[[ $(ctr dpkg-query -W -f='${Status}' seckilld) == "install ok installed" ]] ||
    die "seckilld is not installed after apt-get install"
ctr /usr/sbin/seckilld --help >/dev/null 2>&1 ||
    die "the installed /usr/sbin/seckilld does not run: $(ctr /usr/sbin/seckilld --help 2>&1 | head -3)"
for f in /usr/sbin/seckilld /lib/systemd/system/seckilld.service \
    /etc/seckilld/seckilld.env.example /usr/share/man/man8/seckilld.8.gz \
    /usr/share/seckilld/schema.sql /usr/share/seckilld/migrations/0001-initial.sql \
    /usr/share/seckilld/prometheus-alerts.yml; do
    ctr test -f "$f" || die "the package did not install $f"
done
ctr dpkg-query -W -f='${Conffiles}' seckilld |
    grep -q '^ /etc/seckilld/seckilld.env.example ' ||
    die "seckilld.env.example is not a conffile"
say "apt-get install seckilld: ok ($(ctr dpkg-query -W -f='${Version}' seckilld); the binary's libraries came with it)"

# ---- 3. the installed unit, the settings file, the service ----
UNIT=/lib/systemd/system/seckilld.service
unit=$(ctr cat "$UNIT") || die "$UNIT is not installed"
unit_value() { sed -n "s/^$1=//p" <<<"$unit" | tail -1; }
for want in DynamicUser=yes ProtectSystem=strict NoNewPrivileges=yes \
    PrivateTmp=yes Restart=on-failure; do
    [[ $(unit_value "${want%%=*}") == "${want#*=}" ]] ||
        die "the installed unit lacks $want"
done
EXEC=$(unit_value ExecStart)
ENV_FILE=$(unit_value EnvironmentFile)
KILL_SIGNAL=$(unit_value KillSignal)
STOP_S=$(unit_value TimeoutStopSec)
[[ $EXEC == /* ]] || die "ExecStart=$EXEC: not a plain absolute command"
[[ $ENV_FILE == /* ]] || die "EnvironmentFile=$ENV_FILE: not a plain path"
[[ $KILL_SIGNAL =~ ^SIG[A-Z0-9]+$ ]] || die "KillSignal=$KILL_SIGNAL"
[[ $STOP_S =~ ^[0-9]+$ ]] || die "TimeoutStopSec=$STOP_S is not in seconds"
say "installed unit: ExecStart=$EXEC EnvironmentFile=$ENV_FILE KillSignal=$KILL_SIGNAL TimeoutStopSec=$STOP_S"

PORT=$(free_port)
API=http://127.0.0.1:$PORT
# As docs/install.md says: the example copied mode 600, the required settings
# filled in (SECKILL_DEV=1: the walk-through reads the login code from
# the answer and pays without a payment provider).
ctr install -m 600 "$(dirname "$ENV_FILE")/seckilld.env.example" "$ENV_FILE" ||
    die "no seckilld.env.example beside $ENV_FILE"
ctr sh -c "cat >>'$ENV_FILE'" <<EOF2
SECKILL_MYSQL_URL=$MYSQL_URL
SECKILL_REDIS_URL=$REDIS_URL
SECKILL_SECRET=$SECRET
SECKILL_PORT=$PORT
SECKILL_DEV=1
EOF2

# As README.Debian says: seckilld migrate with the settings file. The
# test database is current already (scripts/services.sh migrated it), so
# the installed binary, which carries the migrations, applies none.
want=$(find "$ROOT/sql/migrations" -name '*.sql' | wc -l)
out=$(ctr sh -c "set -a; . '$ENV_FILE'; /usr/sbin/seckilld migrate" 2>&1) ||
    die "seckilld migrate failed: $out"
[[ $out == *": 0 applied; at version $want" ]] ||
    die "seckilld migrate said: $out (want version $want)"
say "seckilld migrate with the settings file: $out"

# systemd's EnvironmentFile, one VAR=value a line; ours have no quotes or
# spaces, so the shell's word splitting passes each line as it is. A user
# id of DynamicUser's range, no supplementary groups, no new privileges.
ctr sh -c "
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        \$(grep -E '^[A-Za-z_][A-Za-z0-9_]*=' '$ENV_FILE') \
        setpriv --reuid=61234 --regid=61234 --clear-groups --no-new-privs \
        $EXEC >/tmp/seckilld.log 2>&1 &
    echo \$! >/tmp/seckilld.pid
    wait \$!
    echo \$? >/tmp/seckilld.rc" </dev/null &
runner=$!
for _ in $(seq 100); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$API/readyz" || true) == 200 ]] &&
        break
    kill -0 "$runner" 2>/dev/null || die "the service exited at start"
    sleep 0.2
done
[[ $(curl -s -o /dev/null -w '%{http_code}' "$API/readyz") == 200 ]] ||
    die "the service did not become ready on $API within 20 s"
PID=$(ctr cat /tmp/seckilld.pid)
user=$(ctr sh -c "awk '/^Uid:/ { print \$2 }' /proc/$PID/status")
[[ $user == 61234 ]] || die "the service runs as uid $user"
say "$EXEC: ready on $API as uid $user"

# ---- 4. the README's walk-through, from the host ----
mkdir -p "$RUN/bin"
cat >"$RUN/bin/seckilld" <<EOF2
#!/bin/sh
# The installed binary, for the walk-through's build/seckilld.
CONTAINERS_CONF=$CONTAINERS_CONF exec podman exec -i -e SECKILL_SECRET $C \
    /usr/sbin/seckilld "\$@"
EOF2
chmod 755 "$RUN/bin/seckilld"
out=$(walkthrough_run "$API" "$SECRET" "$RUN/bin" "$RUN/walkthrough") ||
    die "the README's walk-through"
ids=$(tail -1 <<<"$out")
[[ $ids =~ ^walkthrough:\ voucher=([0-9]+)\ order=([0-9]+)$ ]] ||
    die "no voucher and order ids from the walk-through: $ids"
VOUCHER=${BASH_REMATCH[1]} ORDER=${BASH_REMATCH[2]}

# mysql://user:pass@host:port/db, without %-escapes (.run/env.test's).
url=${MYSQL_URL#mysql://}
my_user=${url%%:*} url=${url#*:}
my_pass=${url%%@*} url=${url#*@}
my_host=${url%%:*} url=${url#*:}
my_port=${url%%/*} my_db=${url#*/}
sql() {
    mariadb --no-defaults -h "$my_host" -P "$my_port" -u "$my_user" \
        -p"$my_pass" -N -B "$my_db" -e "$1"
}
row=$(sql "SELECT o.status, (SELECT COUNT(*) FROM voucher_orders
               WHERE voucher_id = $VOUCHER), s.stock
           FROM voucher_orders o JOIN seckill_vouchers s USING (voucher_id)
           WHERE o.id = $ORDER AND o.voucher_id = $VOUCHER")
[[ $row == $'2\t1\t99' ]] ||
    die "MySQL has for order $ORDER of voucher $VOUCHER (status, orders, stock): '$row', expected paid (2), 1, 99"
say "README walk-through: ok; MySQL: order $ORDER paid, the only one of voucher $VOUCHER, stock 99"

# ---- 5. the stop ----
t=$(date +%s%N)
ctr sh -c "kill -s ${KILL_SIGNAL#SIG} $PID"
for _ in $(seq $((STOP_S * 10))); do
    kill -0 "$runner" 2>/dev/null || break
    sleep 0.1
done
kill -0 "$runner" 2>/dev/null &&
    die "the service still runs $STOP_S s after $KILL_SIGNAL (TimeoutStopSec)"
stop_ms=$((($(date +%s%N) - t) / 1000000))
rc=$(ctr cat /tmp/seckilld.rc)
[[ $rc == 0 ]] || die "the service exited $rc on $KILL_SIGNAL"
ctr grep -q "draining before the stop" /tmp/seckilld.log ||
    die "the service did not drain on $KILL_SIGNAL"
say "$KILL_SIGNAL: drained and exited 0 in $stop_ms ms (TimeoutStopSec=$STOP_S)"

# ---- 6. the lock library, from libseckill-lock-dev ----
apt_install apt-dev.log "/debs/$(basename "${dev_deb[0]}")" gcc libc6-dev \
    pkg-config
EXAMPLE=/usr/share/doc/libseckill-lock-dev/examples/lock_example.c
for libs in --libs "--libs --static"; do
    ctr sh -c "cc -std=c11 -Wall -Wextra -Werror -o /tmp/lock_example $EXAMPLE \
        \$(pkg-config --cflags $libs seckill-lock)" >"$RUN/cc.log" 2>&1 ||
        die "cc lock_example.c \$(pkg-config --cflags $libs seckill-lock): $(cat "$RUN/cc.log")"
done
say "libseckill-lock-dev: the example compiles with pkg-config's flags ($(ctr pkg-config --libs seckill-lock))"
ctr rm -f /tmp/counter
ctr timeout 60 /tmp/lock_example "$REDIS_URL" mutex /tmp/counter 5 \
    >"$RUN/example.log" 2>&1 || die "lock_example mutex: $(cat "$RUN/example.log")"
count=$(ctr awk 'NR == 1 { print $1 }' /tmp/counter)
[[ $count == 20 ]] || die "lock_example mutex on Redis counted $count, expected 20"
say "lock_example mutex on Redis: 4 threads x 5 = $count"

# ---- 7. the build from source, with only Build-Depends ----
# A fresh container: the source make deb built, apt-get build-dep (which
# brings build-essential and debian/control's Build-Depends, nothing
# else) and dpkg-buildpackage, as a Debian builder would.
srctar=$(basename "${src_tar[0]}")
podman run --rm --network=host -v "$DEBS:/debs:ro" \
    -v "$RUN/apt-archives:/var/cache/apt/archives" \
    docker.io/library/debian:12 sh -exc "
        apt-get update -q
        mkdir -p /build/src && tar -C /build/src -xf /debs/$srctar
        cd /build/src
        DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -q ./
        dpkg-buildpackage -us -uc -b
        ls /build/*.deb" >"$RUN/build-dep.log" 2>&1 ||
    die "building from source with only Build-Depends failed: $(tail -20 "$RUN/build-dep.log")"
grep -q '^/build/seckilld_.*\.deb$' "$RUN/build-dep.log" &&
    grep -q '^/build/libseckill-lock-dev_.*\.deb$' "$RUN/build-dep.log" ||
    die "the build from source made no packages: $(tail -10 "$RUN/build-dep.log")"
say "a clean container builds both packages with only build-essential and the Build-Depends"

say "ok: packages installed, service run from its unit, walk-through, stop, lock library, Build-Depends ($(($(date +%s) - T0)) s in all)"
