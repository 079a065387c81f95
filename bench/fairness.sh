#!/usr/bin/env bash
# fairness.sh - `make bench-fairness`: does a queue sale's waiting room
# keep bots from taking a flash sale? The same crowd of people and bots
# buys a queue sale, then an open sale (the baseline), and the orders in
# MySQL say who won.
#
#   bench/fairness.sh [BUILD_DIR]   (default build; make bench-fairness
#                                    first runs make services and builds
#                                    BUILD_DIR/seckilld and bench/fairness)
#
# Set-up: two seckilld instances from BUILD_DIR on 127.0.0.1:BENCH_FAIR_PORT
# and the next port, at the service's defaults except SECKILL_RATE_USER=0
# (bench/lib.sh: a load generator would trip it by design),
# SECKILL_WAITROOM_OPEN_S = BENCH_FAIR_JOIN_S + 5 (the room opens before
# the people's minute) and SECKILL_POW_TTL_S=1800 (challenges solved
# before the sale stay good through it). Users from `seckilld tokens`:
# BENCH_FAIR_PEOPLE people (users 3,000,000,000 and up), then
# BENCH_FAIR_BOTS bot accounts (the ids after them: an operator running
# ten accounts is ten bots here, each account can hold one order).
#
# Phases (bench/fairness.c drives the actors over BENCH_FAIR_CONNS
# keep-alive connections shared by all, half to each instance):
#   1. proof of work: one challenge (GET /api/pow) per account, solved with
#      pow_solve() on every core; prints the cost of one solve
#      (pow_solve_ms p50=...).
#   2. queue sale: a voucher of BENCH_FAIR_STOCK units with
#      "admission":"queue" that begins BENCH_FAIR_JOIN_S + 8 s after the
#      set-up (its room opens 3 s after it is made). Bots join at the
#      room's first moment, read their place every second (the most the
#      room allows; again 50 ms after a 429, ignoring Retry-After) and buy
#      the moment they are admitted; people join once at a uniform time in
#      the BENCH_FAIR_JOIN_S before the begin, read their place when
#      Retry-After says, and buy once admitted.
#   3. open sale, the baseline: a voucher of the same stock with
#      "admission":"open" that begins BENCH_FAIR_OPEN_LEAD_S after it is
#      made. Bots send a purchase from the begin every
#      BENCH_FAIR_BOT_EVERY_MS until they win or it is sold out; people buy
#      at the begin plus a reaction time drawn uniformly from
#      BENCH_FAIR_REACTION_MS, and again after a 429 when Retry-After says.
# After each sale, in MySQL: the orders of bot accounts over all orders
# (by user id range), and the invariants (orders never above the stock,
# one active order per user, stock + orders = initial stock).
#
# Writes bench/results/<RUN_ID>/ (fairness.md, results.json; raw/ with the
# generator's summaries and one line per actor) and ends with
#   bench-fairness bots_orders_share=<x> bots_accounts_share=<a> ratio=<x/a>
#                  open_bots_orders_share=<y> open_ratio=<y/a>
# Exit 1 when the queue sale's ratio is above 1.2 or an invariant broke
# (the open sale is expected to be unfair: reported, never failed on).
#
# Environment (defaults): BENCH_FAIR_PEOPLE (10000), BENCH_FAIR_BOTS
# (1000), BENCH_FAIR_STOCK (1000), BENCH_FAIR_JOIN_S (60),
# BENCH_FAIR_REACTION_MS (200,1500), BENCH_FAIR_BOT_EVERY_MS (50),
# BENCH_FAIR_CONNS (256), BENCH_FAIR_OPEN_LEAD_S (5), BENCH_FAIR_TAIL_S
# (60: how long after a begin the actors may take), BENCH_FAIR_SEED (the
# actors' random times; default the clock), BENCH_FAIR_ADMIT_RATE (unset:
# the service's SECKILL_WAITROOM_ADMIT_RATE default), BENCH_FAIR_PORT
# (17290), BENCH_KEEP=1 (keep the vouchers, orders and rooms).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-build}
BIN=$ROOT/$BUILD/seckilld
GEN=$ROOT/$BUILD/bench/fairness
PEOPLE=${BENCH_FAIR_PEOPLE:-10000}
BOTS=${BENCH_FAIR_BOTS:-1000}
STOCK=${BENCH_FAIR_STOCK:-1000}
JOIN_S=${BENCH_FAIR_JOIN_S:-60}
REACTION=${BENCH_FAIR_REACTION_MS:-200,1500}
BOT_EVERY=${BENCH_FAIR_BOT_EVERY_MS:-50}
CONNS=${BENCH_FAIR_CONNS:-256}
OPEN_LEAD_S=${BENCH_FAIR_OPEN_LEAD_S:-5}
TAIL_S=${BENCH_FAIR_TAIL_S:-60}
SEED=${BENCH_FAIR_SEED:-$(date +%s)}
PORT=${BENCH_FAIR_PORT:-17290}
PORT_B=$((PORT + 1))
FIRST_USER=3000000000
BOT_FIRST=$((FIRST_USER + PEOPLE))
BOT_END=$((BOT_FIRST + BOTS))
# The waiting room's read limit at its default (SECKILL_WAITROOM_POLL_S).
POLL_S=1
MAX_RATIO=1.2

die() { echo "bench: error: $*" >&2; exit 1; }
for tool in curl jq mariadb redis-cli; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (scripts/deps.sh bench)"
done
[[ -x $GEN ]] || die "$GEN missing (make bench-fairness builds it)"
for n in PEOPLE BOTS STOCK JOIN_S BOT_EVERY CONNS OPEN_LEAD_S TAIL_S SEED; do
    [[ ${!n} =~ ^[0-9]+$ ]] || die "BENCH_FAIR_$n must be a whole number, not '${!n}'"
done
[[ $REACTION =~ ^[0-9]+,[0-9]+$ ]] || die "BENCH_FAIR_REACTION_MS must be LO,HI (ms)"
((PEOPLE + BOTS > 0 && STOCK > 0 && BOTS > 0 && CONNS >= 2)) ||
    die "need people or bots, bots, stock and 2 connections at least"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

# The scenario's settings; everything else at the service's defaults.
unset SECKILL_WAITROOM_ADMIT_RATE SECKILL_WAITROOM_TICKET_TTL_S \
    SECKILL_WAITROOM_POLL_S SECKILL_POW_MAXNUMBER SECKILL_RATE_IP \
    SECKILL_PURCHASE_MODE SECKILL_MAX_CONN_PER_IP
export SECKILL_WAITROOM_OPEN_S=$((JOIN_S + 5)) SECKILL_POW_TTL_S=1800
[[ -n ${BENCH_FAIR_ADMIT_RATE:-} ]] &&
    export SECKILL_WAITROOM_ADMIT_RATE=$BENCH_FAIR_ADMIT_RATE

# The rooms go with the vouchers (a day after the end otherwise).
fair_cleanup() {
    local v
    if [[ ${BENCH_KEEP:-0} != 1 && -r $OUT/vouchers.txt ]]; then
        while read -r v; do
            rcli DEL "{v:$v}:wr:pre" "{v:$v}:wr:late" "{v:$v}:wr:seq" \
                "{v:$v}:wr:joined" "{v:$v}:wr:queue" >/dev/null 2>&1 || true
        done <"$OUT/vouchers.txt"
    fi
    cleanup
}
trap fair_cleanup EXIT

# fair_voucher ADMISSION STOCK BEGIN: a seckill voucher of STOCK units on
# sale from BEGIN (epoch s) until TAIL_S + 5 minutes later, with ADMISSION
# (queue or open); prints its id.
fair_voucher() {
    local begin end body id
    begin=$(date -u -d "@$3" +%Y-%m-%dT%H:%M:%SZ)
    end=$(date -u -d "@$(($3 + TAIL_S + 300))" +%Y-%m-%dT%H:%M:%SZ)
    body="{\"shopId\":1,\"title\":\"make bench-fairness $RUN_ID $1\","
    body+="\"payValue\":100,\"actualValue\":200,\"type\":\"seckill\","
    body+="\"stock\":$2,\"beginTime\":\"$begin\",\"endTime\":\"$end\","
    body+="\"admission\":\"$1\"}"
    id=$(curl -sf -X POST "http://127.0.0.1:$PORT/api/vouchers" \
        -H "Authorization: Bearer $ADMIN" --json "$body" | jq -r .id) ||
        die "creating a $1 voucher failed"
    [[ $id =~ ^[0-9]+$ ]] || die "creating a $1 voucher answered '$id'"
    echo "$id" >>"$OUT/vouchers.txt"
    echo "$id"
}

# alive: both instances still run (a signal from elsewhere stops them,
# and what followed would blame the sale).
alive() {
    local pid
    for pid in "$PID_A" "$PID_B"; do
        kill -0 "$pid" 2>/dev/null ||
            die "instance pid $pid stopped during the run: $(tail -1 "$OUT"/instance-*.log | grep -o 'msg=.*' | sort -u | tr '\n' ' ')"
    done
}

# orders_by_role V: "orders people bots" (active orders of V).
orders_by_role() {
    sql "SELECT COUNT(*),
        COALESCE(SUM(user_id >= $FIRST_USER AND user_id < $BOT_FIRST), 0),
        COALESCE(SUM(user_id >= $BOT_FIRST AND user_id < $BOT_END), 0)
        FROM voucher_orders WHERE voucher_id = $1 AND status IN (1, 2)"
}

# cpu_ms PID...: the CPU time (user + system) the processes used so far,
# in milliseconds (/proc/PID/stat fields 14 and 15, in clock ticks).
cpu_ms() {
    local t=0 f p
    for p in "$@"; do
        read -r -a f <"/proc/$p/stat"
        t=$((t + f[13] + f[14]))
    done
    echo $((t * 1000 / $(getconf CLK_TCK)))
}

# share PART WHOLE: PART / WHOLE with 4 decimals (0 when WHOLE is 0).
share() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.4f", a / b; else print "0" }'; }

# sale NAME MODE VOUCHER BEGIN [OPEN]: the generator's run of one sale;
# its summary in $RAW/NAME.json, its actors in $RAW/NAME-actors.csv.
sale() {
    local name=$1 mode=$2 v=$3 begin=$4 open=${5:-} extra=()
    [[ -n $open ]] && extra=(--open-ms "$((open * 1000))" --pow "$POW_FILE")
    "$GEN" sale --hosts "$HOSTS" --mode "$mode" --voucher "$v" \
        --begin-ms "$((begin * 1000))" "${extra[@]}" --tokens "$USERS_CSV" \
        --people "$PEOPLE" --bots "$BOTS" --conns "$CONNS" \
        --join-window-ms "$((JOIN_S * 1000))" --reaction-ms "$REACTION" \
        --bot-every-ms "$BOT_EVERY" --poll-ms "$((POLL_S * 1000))" \
        --tail-ms "$((TAIL_S * 1000))" --seed "$SEED" \
        --json "$RAW/$name.json" --actors "$RAW/$name-actors.csv" \
        >"$RAW/$name.txt" 2>&1 || { cat "$RAW/$name.txt" >&2; die "the $name sale's generator failed"; }
    say "$(tail -1 "$RAW/$name.txt")"
}

# ---- set-up ----

say "results in ${OUT#"$ROOT"/}"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
awk -v l="${LOAD_START%% *}" -v c="$(nproc)" 'BEGIN { exit !(l > c / 2) }' &&
    say "warning: load average $LOAD_START on $(nproc) cores before the run: other work competes, figures will be noisy"
USERS_CSV=$WORK/fairness-users.csv
POW_FILE=$WORK/fairness-pow.txt
"$BIN" tokens --first "$FIRST_USER" --count "$((PEOPLE + BOTS))" >"$USERS_CSV"
PID_A=$(start_instance A "$PORT")
PIDS+=("$PID_A")
PID_B=$(start_instance B "$PORT_B")
PIDS+=("$PID_B")
HOSTS=127.0.0.1:$PORT,127.0.0.1:$PORT_B
say "$PEOPLE people (users $FIRST_USER..$((BOT_FIRST - 1))), $BOTS bots (users $BOT_FIRST..$((BOT_END - 1))), stock $STOCK, $CONNS connections, seed $SEED"

# ---- 1. proof of work ----

say "proof of work: $((PEOPLE + BOTS)) challenges, solved on $(nproc) threads"
"$GEN" pow --hosts "$HOSTS" --count "$((PEOPLE + BOTS))" --threads "$(nproc)" \
    --conns "$CONNS" --out "$POW_FILE" --json "$RAW/pow.json" >"$RAW/pow.txt" ||
    { cat "$RAW/pow.txt" >&2; die "solving the proofs of work failed"; }
cat "$RAW/pow.txt"
alive
SETUP_S=$SECONDS

# ---- 2. the queue sale ----

NOW=$(date +%s)
Q_BEGIN=$((NOW + JOIN_S + 8))
Q_OPEN=$((Q_BEGIN - SECKILL_WAITROOM_OPEN_S))
QV=$(fair_voucher queue "$STOCK" "$Q_BEGIN")
say "queue sale: voucher $QV, room opens in $((Q_OPEN - NOW)) s, sale begins in $((Q_BEGIN - NOW)) s"
Q_CPU0=$(cpu_ms "$PID_A" "$PID_B")
sale queue queue "$QV" "$Q_BEGIN" "$Q_OPEN"
Q_CPU_MS=$(($(cpu_ms "$PID_A" "$PID_B") - Q_CPU0))
alive
# Every request the instances served in the queue sale: the joins, the
# reads of a place (answered or refused as too soon) and the purchases.
Q_REQUESTS=$(j "$RAW/queue.json" "$((PEOPLE + BOTS)) + .polls.before_begin.ok + .polls.before_begin.limited + .polls.after_begin.ok + .polls.after_begin.limited + .roles.people.purchases_sent + .roles.bots.purchases_sent")
Q_CPU_US=$(awk -v ms="$Q_CPU_MS" -v n="$Q_REQUESTS" 'BEGIN { if (n > 0) printf "%.1f", ms * 1000 / n; else print 0 }')
check_voucher queue "$QV" "$STOCK" "$(j "$RAW/queue.json" '.roles.people.won + .roles.bots.won')"
read -r Q_ORDERS Q_PEOPLE Q_BOTS <<<"$(orders_by_role "$QV")"

# ---- 3. the open sale ----

O_BEGIN=$(($(date +%s) + OPEN_LEAD_S))
OV=$(fair_voucher open "$STOCK" "$O_BEGIN")
say "open sale: voucher $OV, begins in $OPEN_LEAD_S s"
sale open open "$OV" "$O_BEGIN"
alive
check_voucher open "$OV" "$STOCK" "$(j "$RAW/open.json" '.roles.people.won + .roles.bots.won')"
read -r O_ORDERS O_PEOPLE O_BOTS <<<"$(orders_by_role "$OV")"

# ---- results ----

ACC_SHARE=$(share "$BOTS" "$((PEOPLE + BOTS))")
Q_SHARE=$(share "$Q_BOTS" "$Q_ORDERS")
O_SHARE=$(share "$O_BOTS" "$O_ORDERS")
# Against the exact share of accounts, not its rounding.
Q_RATIO=$(awk -v s="$Q_SHARE" -v b="$BOTS" -v n="$((PEOPLE + BOTS))" 'BEGIN { printf "%.3f", s / (b / n) }')
O_RATIO=$(awk -v s="$O_SHARE" -v b="$BOTS" -v n="$((PEOPLE + BOTS))" 'BEGIN { printf "%.3f", s / (b / n) }')
UNFAIR=$(awk -v r="$Q_RATIO" -v m="$MAX_RATIO" 'BEGIN { print (r > m) ? 1 : 0 }')
TOTAL_S=$SECONDS

commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git -C "$ROOT" status --porcelain -- cmd common handlers store sale engine idgen lock async bench/fairness.c 2>/dev/null) ]] &&
    commit+="+dirty"
jq -n --arg run "$RUN_ID" --arg commit "$commit" \
    --arg cpu "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" \
    --argjson cores "$(nproc)" --arg load0 "$LOAD_START" \
    --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
    --argjson people "$PEOPLE" --argjson bots "$BOTS" --argjson stock "$STOCK" \
    --argjson join_s "$JOIN_S" --arg reaction "$REACTION" \
    --argjson bot_every "$BOT_EVERY" --argjson conns "$CONNS" --argjson seed "$SEED" \
    --argjson open_s "$SECKILL_WAITROOM_OPEN_S" \
    --arg admit_rate "${BENCH_FAIR_ADMIT_RATE:-default}" \
    --argjson acc "$ACC_SHARE" \
    --argjson qv "$QV" --argjson qo "$Q_ORDERS" --argjson qp "$Q_PEOPLE" --argjson qb "$Q_BOTS" \
    --argjson qs "$Q_SHARE" --argjson qr "$Q_RATIO" \
    --argjson qcpu "$Q_CPU_MS" --argjson qreq "$Q_REQUESTS" --argjson qcpuus "$Q_CPU_US" \
    --argjson ov "$OV" --argjson oo "$O_ORDERS" --argjson op "$O_PEOPLE" --argjson ob "$O_BOTS" \
    --argjson os "$O_SHARE" --argjson oratio "$O_RATIO" \
    --argjson broken "$BROKEN" --argjson unfair "$UNFAIR" \
    --argjson setup_s "$SETUP_S" --argjson total_s "$TOTAL_S" \
    --slurpfile pow "$RAW/pow.json" --slurpfile q "$RAW/queue.json" \
    --slurpfile o "$RAW/open.json" \
    --slurpfile inv <(cat "$RAW"/invariants-*.json) \
    '{run: $run, commit: $commit,
      machine: {cpu: $cpu, cores: $cores, load_at_start: $load0, load_at_end: $load},
      settings: {people: $people, bots: $bots, stock: $stock, join_window_s: $join_s,
                 reaction_ms: $reaction, bot_every_ms: $bot_every, connections: $conns,
                 seed: $seed, instances: 2,
                 instance_settings: {SECKILL_RATE_USER: "0",
                     SECKILL_WAITROOM_OPEN_S: $open_s, SECKILL_POW_TTL_S: 1800,
                     SECKILL_WAITROOM_ADMIT_RATE: $admit_rate,
                     others: "defaults"}},
      pow: $pow[0],
      bots_accounts_share: $acc,
      queue: {voucher: $qv, orders: $qo, people_orders: $qp, bots_orders: $qb,
              bots_orders_share: $qs, ratio: $qr,
              instances_cpu_ms: $qcpu, requests: $qreq,
              cpu_us_per_request: $qcpuus, generator: $q[0]},
      open: {voucher: $ov, orders: $oo, people_orders: $op, bots_orders: $ob,
             bots_orders_share: $os, ratio: $oratio, generator: $o[0]},
      invariants: $inv, invariants_ok: ($broken == 0),
      fair: ($unfair == 0), max_ratio: 1.2,
      seconds: {setup: $setup_s, total: $total_s}}' >"$OUT/results.json"

# cell EXPR: one figure of both sales' summaries, "queue | open".
cell() { printf '%s | %s' "$(j "$RAW/queue.json" "$1")" "$(j "$RAW/open.json" "$1")"; }
table() {
    echo "# make bench-fairness, run $RUN_ID"
    echo
    echo "| figure | queue sale | open sale (baseline) |"
    echo "|---|---:|---:|"
    printf '| orders in MySQL (stock %s) | %s | %s |\n' "$STOCK" "$Q_ORDERS" "$O_ORDERS"
    printf '| orders of bot accounts | %s | %s |\n' "$Q_BOTS" "$O_BOTS"
    printf '| bots'"'"' share of orders (of accounts: %s) | **%s** | %s |\n' "$ACC_SHARE" "$Q_SHARE" "$O_SHARE"
    printf '| ratio: share of orders / share of accounts | **%s** | %s |\n' "$Q_RATIO" "$O_RATIO"
    printf '| people: begin to 201, p50 / p99 ms | %s |\n' \
        "$(cell '.roles.people.time_to_201_ms | if .n > 0 then "\(.p50) / \(.p99)" else "- (no 201)" end')"
    printf '| bots: begin to 201, p50 / p99 ms | %s |\n' \
        "$(cell '.roles.bots.time_to_201_ms | if .n > 0 then "\(.p50) / \(.p99)" else "- (no 201)" end')"
    printf '| purchases sent: people / bots | %s |\n' \
        "$(cell '"\(.roles.people.purchases_sent) / \(.roles.bots.purchases_sent)"')"
    printf '| admitted by the room: people / bots | %s | - |\n' \
        "$(j "$RAW/queue.json" '"\(.roles.people.admitted) / \(.roles.bots.admitted)"')"
    printf '| bots among the first %s places drawn (seen) | %s | - |\n' \
        "$(j "$RAW/queue.json" .first_places.places)" \
        "$(j "$RAW/queue.json" '"\(.first_places.bots) of \(.first_places.seen)"')"
    printf '| reads of the place before the begin: 200/s, 429/s | %s | - |\n' \
        "$(j "$RAW/queue.json" '"\(.polls.before_begin.ok_per_s | floor), \(.polls.before_begin.limited_per_s | floor) (over \(.polls.before_begin.seconds) s)"')"
    printf '| reads from the begin: 200/s, 429/s (peak second) | %s | - |\n' \
        "$(j "$RAW/queue.json" '"\(.polls.after_begin.ok_per_s | floor), \(.polls.after_begin.limited_per_s | floor) (\(.polls.after_begin.peak_ok_per_s), \(.polls.after_begin.peak_limited_per_s); over \(.polls.after_begin.seconds) s)"')"
    printf '| the instances'"'"' CPU per request (joins, reads, purchases) | %s µs (%s ms for %s) | - |\n' \
        "$Q_CPU_US" "$Q_CPU_MS" "$Q_REQUESTS"
    printf '| reads per bot / per person (200 + 429) | %s | - |\n' \
        "$(j "$RAW/queue.json" '"\((.roles.bots.polls_ok + .roles.bots.polls_limited) / .roles.bots.actors | . * 10 | floor / 10) / \((.roles.people.polls_ok + .roles.people.polls_limited) / ([.roles.people.actors, 1] | max) | . * 10 | floor / 10)"')"
    printf '| invariants in MySQL | %s | %s |\n' \
        "$(j "$RAW/invariants-queue.json" .verdict)" "$(j "$RAW/invariants-open.json" .verdict)"
    echo
    printf 'Proof of work: %s challenges solved with pow_solve() on %s threads: p50 %s ms, p99 %s ms per solve, %s s in all.\n' \
        "$(j "$RAW/pow.json" .challenges)" "$(j "$RAW/pow.json" .threads)" \
        "$(j "$RAW/pow.json" '.solve_ms.p50 * 10 | floor / 10')" \
        "$(j "$RAW/pow.json" '.solve_ms.p99 * 10 | floor / 10')" \
        "$(j "$RAW/pow.json" '.solve_wall_s | floor')"
    echo "Actors: $PEOPLE people, $BOTS bots over $CONNS connections to 2 instances; people join in the $JOIN_S s before the begin (queue) or react in $REACTION ms (open); bots every $BOT_EVERY ms; seed $SEED."
    echo "Instances: defaults but SECKILL_RATE_USER=0, SECKILL_WAITROOM_OPEN_S=$SECKILL_WAITROOM_OPEN_S, SECKILL_POW_TTL_S=1800$([[ -n ${BENCH_FAIR_ADMIT_RATE:-} ]] && echo ", SECKILL_WAITROOM_ADMIT_RATE=$BENCH_FAIR_ADMIT_RATE")."
    echo "Run $RUN_ID, commit $commit, $(nproc) cores, load $LOAD_START at start, $(cut -d' ' -f1-3 /proc/loadavg) at end; set-up ${SETUP_S} s, ${TOTAL_S} s in all."
    echo "Command: $(env | grep '^BENCH_FAIR_\|^BENCH_KEEP=' | sort | tr '\n' ' ')make bench-fairness"
}
table | tee "$OUT/fairness.md"
echo
echo "bench: results in ${OUT#"$ROOT"/}/ (fairness.md, results.json)"
echo "bench-fairness bots_orders_share=$Q_SHARE bots_accounts_share=$ACC_SHARE ratio=$Q_RATIO open_bots_orders_share=$O_SHARE open_ratio=$O_RATIO"
((BROKEN == 0)) || { echo "bench: an invariant is broken (see raw/invariants-*.json)" >&2; exit 1; }
((UNFAIR == 0)) || { echo "bench: the queue sale gave bots $Q_RATIO times their share of accounts (more than $MAX_RATIO)" >&2; exit 1; }
