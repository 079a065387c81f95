#!/usr/bin/env bash
# shardsim.sh - how purchases a second would grow with MySQL primaries
# sharded by voucher id (and Redis Cluster nodes), from the costs per
# purchase measured by make bench-scale, and where the one hot voucher
# still bounds it. docs/scaling.md explains the model; this is it.
#
#   bench/shardsim.sh [COSTS_ENV]     (default: the newest
#                                      bench/results/scale-*/costs.env)
#
# The model. A workload of VOUCHERS vouchers on sale at once: one hot
# voucher takes the fraction HOT of all purchases, the others share the
# rest by a Zipf law (s = 1) in random order. Voucher v lives on MySQL
# shard v mod S (its stock row and its orders: a purchase is one
# transaction on one shard). Redis keys spread evenly over R nodes (the
# lock and rate keys are per user, the ID counter is one per day and takes
# blocks of 1,024). The throughput X is the largest rate at which no
# resource is over its capacity (found by bisection):
#   - a MySQL shard (CORES_PER_SHARD cores) spends, per purchase of a
#     voucher whose transactions carry k purchases, c(k) = A / k + B
#     microseconds of CPU: A the cost of a transaction, B of each purchase
#     in it, both solved from the measured costs with batches
#     (costs.env: k = PURCHASES_PER_TX) and without (costs-nobatch1.env:
#     k = 1). A voucher's k is what arrives while its previous
#     transaction runs: k = rate * T(k), at least 1 and at most BATCH,
#     with T(k) = T1 + (k - 1) * B the time a transaction holds the row,
#     T1 one purchase transaction's time on a hot row (1 / HOT_ROW_TX_S:
#     the transactions a second of the unbatched setup, which sells one
#     voucher one purchase at a time);
#   - a voucher's row admits at most BATCH / T(BATCH) purchases a second:
#     its transactions queue on one row lock, one at a time;
#   - a Redis node (one core: Redis runs commands on one thread):
#     1e6 / REDIS_US purchases a second;
#   - app instances and haproxy are stateless and added at will: they
#     bound nothing here (their cost per purchase says how many cores).
# Prints one table per HOT value, S = 1..16, with the bound that binds.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
COSTS=${1:-$(ls -d "$ROOT"/bench/results/scale-*/costs.env 2>/dev/null | tail -1)}
[[ -r $COSTS ]] || { echo "shardsim: no costs.env (make bench-scale)" >&2; exit 1; }
NOBATCH=$(dirname "$COSTS")/costs-nobatch1.env
[[ -r $NOBATCH ]] || { echo "shardsim: no $NOBATCH (make bench-scale)" >&2; exit 1; }
# shellcheck disable=SC1090
MYSQL_US_1=$(. "$NOBATCH" && echo "$MYSQL_US")
# shellcheck disable=SC1090
. "$COSTS"

VOUCHERS=${SIM_VOUCHERS:-1000}
CORES_PER_SHARD=${SIM_CORES_PER_SHARD:-2}
REDIS_NODES=${SIM_REDIS_NODES:-3}
BATCH=${SIM_BATCH:-64}
# One purchase per transaction, all on one voucher: the hot row's own rate.
HOT_ROW_TX_S=${SIM_HOT_ROW_TX_S:-$(. "$NOBATCH" && echo "$TX_PER_S")}
HOTS=${SIM_HOTS:-0 0.05 0.2 1}

echo "measured ($(basename "$(dirname "$COSTS")")): per purchase seckilld ${APP_US} us, haproxy ${HAPROXY_US} us, redis ${REDIS_US} us CPU; mariadbd ${MYSQL_US} us at ${PURCHASES_PER_TX} purchases per transaction, ${MYSQL_US_1} us at 1"
echo "model: $VOUCHERS vouchers, Zipf demand, shard = id mod S, $CORES_PER_SHARD cores per MySQL shard, $REDIS_NODES Redis nodes, batches of up to $BATCH, a one-purchase transaction holds a hot row 1/$HOT_ROW_TX_S s"
awk -v c1="$MYSQL_US_1" -v c2="$MYSQL_US" -v k2="$PURCHASES_PER_TX" \
    -v batch="$BATCH" -v t1s="$HOT_ROW_TX_S" 'BEGIN {
    A = (c1 - c2) / (1 - 1 / k2); if (A < 0) A = 0;
    B = c1 - A; if (B < 0) B = 0;
    printf "so: a transaction costs MySQL A = %.0f us, each purchase in it B = %.1f us; one voucher'"'"'s row admits at most %.0f purchases/s\n",
        A, B, batch / (1 / t1s + (batch - 1) * B / 1e6) }'
for hot in $HOTS; do
    echo
    echo "hot voucher's share of purchases: $hot"
    echo "| MySQL shards | purchases/s | hot voucher's purchases/s | busiest shard's share | bound by | seckilld + haproxy cores needed |"
    echo "|---|---|---|---|---|---|"
    awk -v V="$VOUCHERS" -v hot="$hot" -v cores="$CORES_PER_SHARD" \
        -v rnodes="$REDIS_NODES" -v batch="$BATCH" -v t1s="$HOT_ROW_TX_S" \
        -v c2="$MYSQL_US" -v k2="$PURCHASES_PER_TX" -v c1="$MYSQL_US_1" \
        -v r_us="$REDIS_US" -v app_us="$APP_US" -v lb_us="$HAPROXY_US" '
    # Purchases per transaction of a voucher bought lam times a second.
    function kof(lam,   k) {
        if (lam * B >= 1) return batch;
        k = lam * (T1 - B) / (1 - lam * B);
        return k < 1 ? 1 : (k > batch ? batch : k);
    }
    # The first resource over its capacity at throughput x, or "".
    function over(x,   s, v, lam, load, k) {
        if (x * r_us > rnodes * 1e6) return "Redis (" rnodes " nodes)";
        delete load;
        for (v = 0; v < V; v++) {
            lam = x * share[v];
            if (lam > rowcap) return v == 0 && hot > 0 ? "the hot voucher'"'"'s row" : "one voucher'"'"'s row";
            k = kof(lam);
            load[v % S] += lam * (A / k + B * 1e6);
        }
        for (s = 0; s < S; s++) if (load[s] > cores * 1e6) return "MySQL shard CPU";
        return "";
    }
    BEGIN {
        srand(42);
        h = 0;
        for (i = 1; i < V; i++) h += 1 / i;
        for (i = 1; i < V; i++) id[i] = i;
        for (i = V - 1; i > 1; i--) { j = int(rand() * i) + 1; t = id[i]; id[i] = id[j]; id[j] = t; }
        for (i = 1; i < V; i++) share[id[i]] = (1 - hot) * (1 / i) / h;
        share[0] = hot;                     # the hot voucher is id 0
        # c(k) = A / k + B (A in us, B in s) through both measurements.
        A = (c1 - c2) / (1 - 1 / k2);
        if (A < 0) A = 0;
        B = (c1 - A) / 1e6;
        if (B < 0) B = 0;
        T1 = 1 / t1s;
        rowcap = batch / (T1 + (batch - 1) * B);
        for (S = 1; S <= 16; S *= 2) {
            lo = 0; hi = 1e8;
            for (it = 0; it < 60; it++) {
                mid = (lo + hi) / 2;
                if (over(mid) == "") lo = mid; else hi = mid;
            }
            by = over(lo * 1.001);
            delete load;
            busiest = 0;
            for (v = 0; v < V; v++) load[v % S] += share[v];
            for (s = 0; s < S; s++) if (load[s] > busiest) busiest = load[s];
            printf "| %d | %.0f | %.0f | %.3f | %s | %.1f |\n", S, lo, lo * hot,
                busiest, by, lo * (app_us + lb_us) / 1e6;
        }
    }'
done
