#!/usr/bin/env bash
# run.sh - run the nemesis (make soak) against the failpoint build in
# BUILD_DIR (build/fp): sources .run/env.test, points the driver at
# BUILD_DIR's seckilld, tcpproxy and libredirect.so, and keeps every
# process's log in BUILD_DIR/soak-logs/. SOAK_SEED, SOAK_MINUTES,
# SOAK_CANARY, SOAK_BUYERS, SOAK_REDIS and SOAK_MYSQL_SHARDS pass through
# (tests/soak/main.c). A
# sanitizer build (build/fp/san: make soak SANITIZE=address,undefined)
# runs its instances under AddressSanitizer with leak reports at exit.
#
#   tests/soak/run.sh BUILD_DIR
#   tests/soak/run.sh --canary-check BUILD_DIR
#
# --canary-check (make test-faults) runs a short canary soak
# (SOAK_CANARY=1, SOAK_MINUTES 2 unless set) and succeeds only when the
# checker caught every planted fault: a 202 whose order is not in MySQL
# (sold-not-in-mysql), a unit not given back to Redis (Redis and MySQL
# disagreeing: sale-repaired, already-without-order or redis-differs), a
# restock applied twice (restock-not-once) and a latecomer refused its
# ticket (late-joiner-refused), with the seed printed.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CANARY_CHECK=0
if [[ ${1:-} == --canary-check ]]; then
    CANARY_CHECK=1
    shift
fi
(($# == 1)) || { echo "usage: tests/soak/run.sh [--canary-check] BUILD_DIR" >&2; exit 2; }
BUILD=$1
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
ENV_FILE=$ROOT/.run/env.test
[[ -f $ENV_FILE ]] || { echo "run.sh: $ENV_FILE missing; run make services" >&2; exit 2; }
for f in "$BUILD/seckilld" "$BUILD/tests/soak" "$BUILD/tools/tcpproxy" \
    "$BUILD/tools/libredirect.so"; do
    [[ -e $f ]] || { echo "run.sh: $f missing; run make FAILPOINTS=1 soak-build" >&2; exit 2; }
done

set -a
# shellcheck source=/dev/null
. "$ENV_FILE"
set +a
export SECKILL_BIN=$BUILD/seckilld
export SECKILL_TCPPROXY=$BUILD/tools/tcpproxy
export SECKILL_REDIRECT_LIB=$BUILD/tools/libredirect.so
export SECKILL_IT_LOGDIR=$BUILD/soak-logs
if [[ $(basename "$BUILD") == san ]]; then
    # The driver keeps its history to the end; the instances report leaks
    # and run with libfaketime and the redirect preloaded before ASan.
    export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0
    export SOAK_ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:verify_asan_link_order=0
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi
rm -rf "$SECKILL_IT_LOGDIR"
mkdir -p "$SECKILL_IT_LOGDIR"
cd "$ROOT" || exit 2

if ((!CANARY_CHECK)); then
    # Bounded: the run, the settling and the checks, and some.
    minutes=${SOAK_MINUTES:-10}
    exec timeout -k 10 "$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 + 600 }')" \
        "$BUILD/tests/soak"
fi

export SOAK_CANARY=1
export SOAK_MINUTES=${SOAK_MINUTES:-2}
out=$SECKILL_IT_LOGDIR/canary.txt
timeout -k 10 900 "$BUILD/tests/soak" | tee "$out"
status=${PIPESTATUS[0]}
verdict=$(grep '^soak: FAIL' "$out" || true)
if ((status == 1)) && [[ $verdict == *sold-not-in-mysql=* ]] &&
    [[ $verdict =~ (sale-repaired|already-without-order|redis-differs)= ]] &&
    [[ $verdict == *restock-not-once=* ]] &&
    [[ $verdict == *late-joiner-refused=* ]] &&
    [[ $verdict == *seed=* ]]; then
    echo "canary: the checker caught the dropped 202, the unit not returned, the restock applied twice and the latecomer refused ($verdict)"
    exit 0
fi
echo "canary: the checker did NOT report all four planted faults (exit $status): ${verdict:-no verdict}" >&2
exit 1
