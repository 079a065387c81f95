# shellcheck shell=bash
# walkthrough.sh - the README's curl walk-through (the block between
# <!-- walkthrough:begin --> and <!-- walkthrough:end -->) run against a
# service somewhere else, as the container tests do (tests/compose/run.sh,
# tests/deb/run.sh).
#
# Source it, then:
#   walkthrough_run API SECRET BUILD_DIR WORK_DIR
#     runs the block in a fresh WORK_DIR with API in place of
#     http://127.0.0.1:8080, BUILD_DIR linked as build/ (its seckilld
#     solves the proof of work and mints the admin token) and SECRET as
#     SECKILL_SECRET in .run/env. Checks its answers (the voucher, a
#     second purchase refused, the order unpaid, the order in the list)
#     and prints its output, then a last line "walkthrough: voucher=ID
#     order=ID". On a failure prints why on standard error and returns 1.

WALKTHROUGH_README=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/README.md

walkthrough_run() { # api secret build_dir work_dir
    local api=$1 secret=$2 build=$3 wt=$4 out want
    rm -rf "$wt"
    mkdir -p "$wt/.run"
    ln -s "$build" "$wt/build"
    echo "export SECKILL_SECRET=$secret" >"$wt/.run/env"
    sed -n '/<!-- walkthrough:begin -->/,/<!-- walkthrough:end -->/p' \
        "$WALKTHROUGH_README" | sed '1,2d;$d' | sed '$d' |
        sed "s|http://127.0.0.1:8080|$api|" >"$wt/walkthrough.sh"
    grep -q "$api" "$wt/walkthrough.sh" || {
        echo "the README's walk-through names no API address" >&2
        return 1
    }
    # shellcheck disable=SC2016 # expanded by the walk-through's shell
    echo 'echo "walkthrough: voucher=$VOUCHER order=$ORDER"' \
        >>"$wt/walkthrough.sh"
    out=$(cd "$wt" && bash -euo pipefail walkthrough.sh 2>&1) || {
        echo "the walk-through failed: $out" >&2
        return 1
    }
    for want in '"type":"seckill"' '"stock":100' ALREADY_PURCHASED \
        '"status":"unpaid"' '{"items":[{'; do
        grep -qF "$want" <<<"$out" || {
            echo "the walk-through's output lacks $want: $out" >&2
            return 1
        }
    done
    printf '%s\n' "$out"
}
