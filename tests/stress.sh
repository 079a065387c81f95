#!/usr/bin/env bash
# stress.sh - run tests/stress/stress.c's binary of each build directory
# given (make stress: build and build/san) against the test backends, with
# the binary of the same build under test. Sanitizer builds run with the
# options of tests/run.sh. Exits non-zero when any round fails.
#
#   tests/stress.sh BUILD_DIR [BUILD_DIR...]     STRESS_ROUNDS (30)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
# shellcheck disable=SC1091
. .run/env.test
export CMOCKA_MESSAGE_OUTPUT=STDOUT
rc=0
for b in "$@"; do
    export SECKILL_BIN=$b/seckilld SECKILL_IT_LOGDIR=$b/it-logs
    if [[ $(basename "$b") == san ]]; then
        export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
        export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    else
        unset ASAN_OPTIONS UBSAN_OPTIONS
    fi
    echo "=== stress: $b (${STRESS_ROUNDS:-30} rounds)"
    start=$SECONDS
    if "$b/tests/stress"; then
        echo "=== stress: $b ok in $((SECONDS - start)) s"
    else
        echo "=== stress: $b FAILED (logs in $b/it-logs)"
        rc=1
    fi
done
exit $rc
