#!/usr/bin/env bash
# run.sh - run the fault-injection suite (make test-faults) against the
# failpoint build in BUILD_DIR (build/fp): sources .run/env.test, points the
# suite at BUILD_DIR/seckilld and BUILD_DIR/tools/tcpproxy, and keeps the
# instances' and servers' logs in BUILD_DIR/faults-logs/. Extra arguments
# name the scenarios to run (default: all). The suite prints its table
# and exits non-zero on any broken invariant.
#
#   tests/faults/run.sh build/fp [SCENARIO...]
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
(($# >= 1)) || { echo "usage: tests/faults/run.sh BUILD_DIR [SCENARIO...]" >&2; exit 2; }
BUILD=$1
shift
[[ $BUILD = /* ]] || BUILD=$ROOT/$BUILD
ENV_FILE=$ROOT/.run/env.test
[[ -f $ENV_FILE ]] || { echo "run.sh: $ENV_FILE missing; run make services" >&2; exit 2; }
for f in "$BUILD/seckilld" "$BUILD/tests/faults" "$BUILD/tools/tcpproxy"; do
    [[ -x $f ]] || { echo "run.sh: $f missing; run make FAILPOINTS=1 faults" >&2; exit 2; }
done

set -a
# shellcheck source=/dev/null
. "$ENV_FILE"
set +a
export SECKILL_BIN=$BUILD/seckilld
export SECKILL_TCPPROXY=$BUILD/tools/tcpproxy
export SECKILL_IT_LOGDIR=$BUILD/faults-logs
rm -rf "$SECKILL_IT_LOGDIR"
mkdir -p "$SECKILL_IT_LOGDIR"

cd "$ROOT" || exit 2
# Bounded: the whole suite takes a few minutes.
exec timeout -k 10 900 "$BUILD/tests/faults" "$@"
