#!/usr/bin/env bash
# fuzz.sh - run the libFuzzer harnesses built by `make fuzz-build` for a
# bounded time each (make fuzz, make fuzz-smoke).
#
#   scripts/fuzz.sh SECONDS TARGET...
#
# For each target (route, json, token): copy the seeds tests/fuzz/corpus/<target>/
# into a fresh scratch corpus build/fuzz/run/<target>/corpus (so the
# repository's corpus never grows), run build/fuzz/fuzz_<target> on it for
# SECONDS with the target's -max_len and dictionary (tests/fuzz/<target>.dict),
# keep its output in build/fuzz/run/<target>/log, and print one line:
#
#   fuzz route: ok, 412345 runs, 13745 execs/s, cov 1234, ft 5678, corpus 210
#
# A crash, leak, sanitizer report, broken invariant or slow input leaves
# the input in build/fuzz/run/<target>/ (crash-*, leak-*, timeout-*, ...),
# prints the end of the report and fails the run; reproduce it with
# `build/fuzz/fuzz_<target> <file>` (FUZZ_VERBOSE=1 prints each reply).
# The last line is "fuzz: N harnesses ok, ..." or "fuzz: N of M failed".
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN_DIR="$ROOT/build/fuzz"
RUN_DIR="$BIN_DIR/run"

usage() {
    echo "usage: scripts/fuzz.sh SECONDS TARGET..." >&2
    exit 2
}

(($# >= 2)) || usage
seconds=$1
shift
[[ $seconds =~ ^[1-9][0-9]*$ ]] || usage

# Longest input per target: bodies go past the 64 KiB cap so that the 413
# path is fuzzed too; a token is 67 characters.
max_len() {
    case $1 in
    route | json) echo 70000 ;;
    token) echo 256 ;;
    *) echo 4096 ;;
    esac
}

failed=0
total_runs=0
for target in "$@"; do
    bin="$BIN_DIR/fuzz_$target"
    dir="$RUN_DIR/$target"
    seeds="$ROOT/tests/fuzz/corpus/$target"
    [[ -x $bin ]] || {
        echo "fuzz $target: FAILED, $bin not built (make fuzz-build)"
        failed=$((failed + 1))
        continue
    }
    rm -rf "$dir"
    mkdir -p "$dir/corpus"
    [[ -d $seeds ]] && cp "$seeds"/* "$dir/corpus/" 2>/dev/null
    args=(-max_total_time="$seconds" -max_len="$(max_len "$target")"
        -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$dir/")
    [[ -f $ROOT/tests/fuzz/$target.dict ]] && args+=(-dict="$ROOT/tests/fuzz/$target.dict")

    # Leaks fail the run; UBSan stops at the first report (the harnesses
    # are also built with -fno-sanitize-recover=undefined).
    ASAN_OPTIONS=detect_leaks=1:${ASAN_OPTIONS:-} \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$bin" "${args[@]}" "$dir/corpus" >"$dir/log" 2>&1
    rc=$?

    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
    last=$(grep -E '^#[0-9]+.*cov: ' "$dir/log" | tail -1)
    cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
    ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
    corp=$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$last")
    total_runs=$((total_runs + ${runs:-0}))
    summary="${runs:-?} runs, ${eps:-?} execs/s, cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}"

    if ((rc == 0)); then
        echo "fuzz $target: ok, $summary"
    else
        failed=$((failed + 1))
        echo "fuzz $target: FAILED (exit $rc), $summary"
        # The report: from the sanitizer's or libFuzzer's first line.
        grep -n -m1 -E '^==[0-9]+==|fuzz invariant broken|runtime error|^ALARM' \
            "$dir/log" | cut -d: -f1 | {
            read -r first || first=1
            tail -n +"$first" "$dir/log" | head -40 | sed 's/^/    /'
        }
        for a in "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* \
            "$dir"/oom-* "$dir"/slow-unit-*; do
            [[ -e $a ]] && echo "    input kept: ${a#"$ROOT"/}"
        done
        echo "    log: ${dir#"$ROOT"/}/log"
    fi
done

if ((failed)); then
    echo "fuzz: $failed of $# failed"
    exit 1
fi
echo "fuzz: $# harnesses ok, $total_runs runs, ${seconds} s each"
