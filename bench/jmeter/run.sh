#!/usr/bin/env bash
# run.sh - `make bench-jmeter`: the flash sale of make bench driven by the
# JMeter test plan bench/jmeter/seckill.jmx instead of wrk.
#
#   bench/jmeter/run.sh [BUILD_DIR]   (make bench-jmeter first runs
#                                      scripts/deps.sh jmeter, make services, make build)
#
# One seckilld instance on 127.0.0.1:BENCH_PORT (.run/env settings plus
# SECKILL_RATE_USER=0), a fresh voucher with BENCH_JMETER_STOCK (10000), a
# tokens CSV with twice as many users, then JMeter headless with
# BENCH_JMETER_THREADS (64) threads for BENCH_JMETER_SECONDS (20): the
# voucher sells out part-way and the rest of the run is the sold-out crowd.
# Afterwards the invariants in MySQL (as make bench) and a summary from the
# results file: replies by status, purchases/s while selling, rejections/s
# after, p50/p99. Results go to bench/results/<UTC time>/ as for make
# bench (summary-jmeter.md; raw/jmeter.jtl, raw/jmeter.log, raw/jmeter.txt).
#
# Debian 12's `jmeter` cannot load any plan (its JMeter 2.13 meets
# XStream 1.4.20's allow-list: ForbiddenClassException), so JMeter is
# started through bench/jmeter/JMeterLauncher.java, which lifts that
# allow-list for JMeter's own loader and then runs JMeter with the same
# arguments. With a newer JMeter, set JMETER=jmeter to run it directly.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-build}
BIN=$ROOT/$BUILD/seckilld
PORT=${BENCH_PORT:-17180}
FIRST_USER=1000000000
THREADS=${BENCH_JMETER_THREADS:-64}
SECS=${BENCH_JMETER_SECONDS:-20}
STOCK=${BENCH_JMETER_STOCK:-10000}
JMETER_HOME=${JMETER_HOME:-/usr/share/jmeter}

die() { echo "bench: error: $*" >&2; exit 1; }
for tool in java jq curl mariadb redis-cli; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (scripts/deps.sh jmeter)"
done
[[ -n ${JMETER:-} || -r $JMETER_HOME/bin/ApacheJMeter.jar ]] ||
    die "JMeter not found in $JMETER_HOME (scripts/deps.sh jmeter)"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

jmeter_run() {
    if [[ -n ${JMETER:-} ]]; then
        "$JMETER" "$@"
    else
        java -cp "$JMETER_HOME/bin/ApacheJMeter.jar:$JMETER_HOME/lib/*:$JMETER_HOME/lib/ext/*" \
            -Djmeter.home="$JMETER_HOME" "$ROOT/bench/jmeter/JMeterLauncher.java" "$@"
    fi
}

say "results in ${OUT#"$ROOT"/}"
PID_A=$(start_instance A "$PORT")
PIDS+=("$PID_A")
v=$(new_voucher "$STOCK")
ensure_users $((STOCK * 2))
JTL=$RAW/jmeter.jtl

say "jmeter: $THREADS threads, $SECS s, voucher $v with stock $STOCK, $((STOCK * 2)) users"
jmeter_run -n -t "$ROOT/bench/jmeter/seckill.jmx" \
    -Jhost=127.0.0.1 -Jport="$PORT" -Jvoucher="$v" -Jtokens="$TOKENS" \
    -Jthreads="$THREADS" -Jduration="$SECS" -Jresults="$JTL" \
    -Jjmeter.save.saveservice.output_format=csv -j "$RAW/jmeter.log" \
    >"$RAW/jmeter.txt" 2>&1 || { tail -20 "$RAW/jmeter.txt" >&2; die "jmeter failed"; }
grep -E '^summary' "$RAW/jmeter.txt" >&2 || true
[[ -s $JTL ]] || { tail -20 "$RAW/jmeter.txt" >&2; die "jmeter wrote no results ($JTL)"; }

# The results file: timeStamp,elapsed,label,responseCode,success,... with a
# header line. Selling = first sample to the end of the last 201; sold out
# = from there to the end of the last sample.
awk -F, 'NR > 1 && $1 ~ /^[0-9]+$/ {
        n++; code[$4]++; if ($5 != "true") err++
        if (first == 0 || $1 < first) first = $1
        end = $1 + $2; if (end > last) last = end
        if ($4 == "201" && end > sold) sold = end
        print $2, $4, $1 > "/dev/stderr"
    } END {
        printf "%d %d %d %d %d %d %d\n", n, code["201"], code["409"], err, first, sold, last
    }' "$JTL" 2>"$RAW/samples.txt" >"$RAW/counts.txt"
read -r n ok refused errors first sold last <"$RAW/counts.txt"
# pct P FILTER: (an awk pattern over "elapsed code start") the P-th percentile of elapsed ms of the samples FILTER keeps.
pct() {
    awk "$2"' { print $1 }' "$RAW/samples.txt" | sort -n |
        awk -v p="$1" '{ v[NR] = $1 } END { if (NR == 0) { print 0; exit }
            i = int(NR * p / 100 + 0.5); if (i < 1) i = 1; if (i > NR) i = NR; print v[i] }'
}
sell_rate=$(awk -v k="$ok" -v a="$first" -v b="$sold" 'BEGIN { printf "%.0f", (b > a ? k * 1000 / (b - a) : 0) }')
after=$(awk -v s="$sold" '$3 >= s && $2 == "409"' "$RAW/samples.txt" | wc -l)
so_rate=$(awk -v k="$after" -v a="$sold" -v b="$last" 'BEGIN { printf "%.0f", (b > a ? k * 1000 / (b - a) : 0) }')
check_voucher jmeter "$v" "$STOCK" "$ok"

# shellcheck disable=SC2016 # the awk patterns are awk's, not the shell's
{
    echo "| JMeter, $THREADS threads, 1 instance | value |"
    echo "|---|---:|"
    echo "| samples (201 / 409 / errors) | $n ($ok / $refused / $errors) |"
    echo "| selling: purchases/s ($STOCK stock in $(awk -v a="$first" -v b="$sold" 'BEGIN { printf "%.1f", (b - a) / 1000 }') s) | $sell_rate |"
    echo "| selling: p50 / p99 ms of the 201s | $(pct 50 '$2 == "201"') / $(pct 99 '$2 == "201"') |"
    echo "| sold out: rejections/s after the last 201 | $so_rate |"
    echo "| sold out: p50 / p99 ms | $(pct 50 "\$3 >= $sold") / $(pct 99 "\$3 >= $sold") |"
    echo "| invariants | $( ((BROKEN)) && echo BROKEN || echo ok) |"
    echo
    echo "Run $RUN_ID, $(nproc) cores, JMeter $(sed -n 's/.*Version \([0-9.]*\).*/\1/p' "$RAW/jmeter.log" | head -1). Command: make bench-jmeter"
} | tee "$OUT/summary-jmeter.md"
((BROKEN == 0)) || { echo "bench: an invariant is broken (see raw/invariants-jmeter.json)" >&2; exit 1; }
