#!/usr/bin/env bash
# run.sh - run the cmocka test binaries of one or more build directories and
# total their results.
#
#   tests/run.sh [--unit|--it] BUILD_DIR [BUILD_DIR...]
#
# For each build directory: source .run/env.test from the repository root
# (needed by the integration tests, optional for the unit tests), export
# SECKILL_BIN=<build>/seckilld, then run every <build>/tests/unit_* and then
# every <build>/tests/it_* (only one kind with --unit or --it). Each binary
# runs from the repository root under `timeout 600`; its output is streamed
# and also kept in <build>/tests/<name>.log. Under a sanitizer build
# directory (one named "san", e.g. build/san) ASAN_OPTIONS and UBSAN_OPTIONS
# are set so that leaks and undefined behaviour fail the run.
#
# Tests are counted from cmocka's summary lines; a binary that exits non-zero
# (crash, timeout, sanitizer report) without a FAILED line counts as one
# failed test, and so does one that exits 0 without any summary line. The
# last line printed is always "N passed, N failed". Exits 0 only when nothing
# failed and at least one test ran.
set -uo pipefail

TIMEOUT_S=600
# Grace period after the timeout before SIGKILL, for tests that ignore TERM.
KILL_AFTER_S=10

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ENV_FILE="$ROOT/.run/env.test"

usage() {
    echo "usage: tests/run.sh [--unit|--it] BUILD_DIR [BUILD_DIR...]" >&2
    exit 2
}

run_unit=1
run_it=1
builds=()
while (($#)); do
    case $1 in
    --unit) run_unit=1 run_it=0 ;;
    --it) run_unit=0 run_it=1 ;;
    -h | --help) usage ;;
    --)
        shift
        builds+=("$@")
        break
        ;;
    -*)
        echo "run.sh: unknown option: $1" >&2
        usage
        ;;
    *) builds+=("$1") ;;
    esac
    shift
done
((${#builds[@]})) || usage

# Forced, so the summary lines below are in the format we parse.
export CMOCKA_MESSAGE_OUTPUT=STDOUT

# One row per binary, filled by record().
rows_build=()
rows_name=()
rows_passed=()
rows_failed=()
rows_status=()
rows_secs=()
total_passed=0
total_failed=0

record() { # build name passed failed status secs
    rows_build+=("$1")
    rows_name+=("$2")
    rows_passed+=("$3")
    rows_failed+=("$4")
    rows_status+=("$5")
    rows_secs+=("$6")
    total_passed=$((total_passed + $3))
    total_failed=$((total_failed + $4))
}

# Sum the N of every cmocka line matching the given label ("PASSED" or
# "FAILED") in a log. Not anchored to the line start: cmocka writes some
# lines to stdout (buffered) and some to stderr, so in the merged stream a
# summary line can land in the middle of another one. Prints the sum, or
# nothing if there was no such line.
cmocka_sum() { # label log
    grep -aoE "\[  $1  \] [0-9]+ test\(s\)" "$2" |
        awk '{ n += $(NF - 1) } END { if (NR) print n }'
}

# Turn an exit status from timeout(1) into a short word for the table.
describe_status() { # rc
    local rc=$1
    if ((rc == 0)); then
        echo ok
    elif ((rc == 124)); then
        echo "timeout ${TIMEOUT_S}s"
    elif ((rc == 137)); then
        echo "killed"
    elif ((rc > 128)); then
        local sig
        sig=$(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128)))
        echo "signal $sig"
    else
        echo "exit $rc"
    fi
}

# Run one test binary with the per-build environment in env_args, tee its
# output to its log and record the result.
run_binary() { # build_label bin
    local label=$1 bin=$2 name log rc start secs passed failed status
    name=$(basename "$bin")
    log="$(dirname "$bin")/$name.log"
    echo "=== $label/$name"
    start=$(date +%s)
    # Not exec'd: this subshell reports a crash ("Segmentation fault") into
    # the log instead of the script's own stderr, then passes the status on.
    (
        cd "$ROOT" || exit 127
        env "${env_args[@]}" \
            timeout -k "$KILL_AFTER_S" "$TIMEOUT_S" "$bin"
        rc=$?
        exit $rc
    ) 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    secs=$(($(date +%s) - start))

    passed=$(cmocka_sum PASSED "$log")
    failed=$(cmocka_sum FAILED "$log")
    status=$(describe_status "$rc")
    if [[ -z $failed ]]; then
        failed=0
        if ((rc != 0)); then
            failed=1
        elif [[ -z $passed ]]; then
            failed=1
            status="no cmocka summary"
        fi
    elif ((rc == 0)); then
        # cmocka exits with the number of failures; be safe anyway.
        status="failed"
    fi
    passed=${passed:-0}
    record "$label" "$name" "$passed" "$failed" "$status" "$secs"
    echo "=== $label/$name: $passed passed, $failed failed ($status)"
}

env_loaded=0
if [[ -f $ENV_FILE ]]; then
    # set -a: the file may be plain VAR=value lines without export.
    set -a
    # shellcheck source=/dev/null
    . "$ENV_FILE" || echo "run.sh: warning: errors while sourcing $ENV_FILE" >&2
    set +a
    env_loaded=1
fi

for b in "${builds[@]}"; do
    # Relative to the caller's directory first, then to the repository.
    if [[ -d $b ]]; then
        dir=$(cd "$b" && pwd)
    elif [[ -d $ROOT/$b ]]; then
        dir=$(cd "$ROOT/$b" && pwd)
    else
        echo "run.sh: error: build directory not found: $b" >&2
        record "$b" "(build directory)" 0 1 "missing" 0
        continue
    fi
    label=${dir#"$ROOT"/}

    env_args=("SECKILL_BIN=$dir/seckilld")
    if [[ $(basename "$dir") == san ]]; then
        env_args+=(
            "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0"
            "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
        )
    fi

    kinds=()
    ((run_unit)) && kinds+=(unit)
    ((run_it)) && kinds+=(it)
    for kind in "${kinds[@]}"; do
        bins=()
        for f in "$dir"/tests/"$kind"_*; do
            [[ -f $f && -x $f && $f != *.log ]] && bins+=("$f")
        done
        if ((${#bins[@]} == 0)); then
            echo "run.sh: warning: no $kind test binaries in $label/tests" >&2
            continue
        fi
        if [[ $kind == it ]] && ((!env_loaded)); then
            echo "run.sh: error: $ENV_FILE not found; start the test" \
                "services first (scripts/services.sh up)" >&2
            for f in "${bins[@]}"; do
                record "$label" "$(basename "$f")" 0 1 "not run: no env" 0
            done
            continue
        fi
        for f in "${bins[@]}"; do
            run_binary "$label" "$f"
        done
    done
done

echo
printf '%-12s %-28s %7s %7s %6s  %s\n' build binary passed failed secs status
for i in "${!rows_name[@]}"; do
    printf '%-12s %-28s %7d %7d %6d  %s\n' "${rows_build[i]}" \
        "${rows_name[i]}" "${rows_passed[i]}" "${rows_failed[i]}" \
        "${rows_secs[i]}" "${rows_status[i]}"
done
echo

rc=0
if ((total_failed > 0)); then
    rc=1
elif ((total_passed == 0)); then
    echo "run.sh: error: no tests ran" >&2
    rc=1
fi
# stderr notes above must not land after the totals line.
echo "$total_passed passed, $total_failed failed"
exit $rc
