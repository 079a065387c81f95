#!/usr/bin/env bash
# run.sh - the lock library as an outside user gets it: `make
# install-lock-lib` into a scratch DESTDIR, the example program
# (lock/examples/lock_example.c) compiled from that installation with
# nothing but pkg-config's flags, and run against the private servers of
# .run/env.test.
#
#   tests/lock-lib/run.sh BUILD_DIR
#
# BUILD_DIR is build (plain) or build/san: there the archive is built with
# SANITIZE=address,undefined and the example is compiled with the same
# -fsanitize flags, so leaks and undefined behaviour in the library fail
# the run. Checks, in order:
#   - make install-lock-lib DESTDIR=... PREFIX=/usr installs the archive,
#     the header and the .pc, and nothing else;
#   - the archive's only global symbols are the functions lock.h declares,
#     all of them (the common helpers inside it are private to it, so a
#     program with its own xmalloc or log_write links);
#   - no file outside lock/ and tests/ includes a lock/ header other than
#     lock/lock.h (the service depends on the public header only);
#   - pkg-config --cflags --libs seckill-lock (PKG_CONFIG_SYSROOT_DIR on
#     the DESTDIR) compiles and links the example with -Werror;
#   - mutex: three processes of four threads add to one file under the
#     Redis lock; the file has every increment, the lock key is gone from
#     Redis and the fencing counter grew by at least one per increment;
#     then the same on ZooKeeper and MySQL, one process each;
#   - fair and semaphore on Redis: the example's own checks (FIFO order,
#     never more holders than permits) pass.
# Prints one line per check and "lock-lib: ok", or the first failure and
# exits 1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ENV_FILE=$ROOT/.run/env.test

fail() {
    echo "lock-lib: FAIL: $*" >&2
    exit 1
}
ok() { echo "lock-lib: ok: $*"; }

(($# == 1)) || {
    echo "usage: tests/lock-lib/run.sh BUILD_DIR" >&2
    exit 2
}
build=${1%/}
make_args=()
san_flags=()
if [[ $(basename "$build") == san ]]; then
    make_args=(SANITIZE=address,undefined)
    san_flags=(-fsanitize=address,undefined -fno-omit-frame-pointer
        -fno-sanitize-recover=undefined)
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi

[[ -f $ENV_FILE ]] || fail "$ENV_FILE not found; start the services first"
set -a
# shellcheck source=/dev/null
. "$ENV_FILE"
set +a
for v in SECKILL_REDIS_URL SECKILL_MYSQL_URL SECKILL_LOCK_ZK_URL; do
    [[ -n ${!v:-} ]] || fail "$v is not set in $ENV_FILE"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/seckill-lock-lib.XXXXXX")
trap 'rm -rf "$work"' EXIT
dest=$work/dest

# ---- install ----

make -C "$ROOT" --no-print-directory -s "${make_args[@]}" install-lock-lib \
    DESTDIR="$dest" PREFIX=/usr >"$work/install.log" 2>&1 ||
    fail "make install-lock-lib: $(tail -5 "$work/install.log")"
expected="usr/include/seckill/lock.h
usr/lib/libseckill-lock.a
usr/lib/pkgconfig/seckill-lock.pc"
got=$(cd "$dest" && find . -type f | sed 's|^\./||' | sort)
[[ $got == "$expected" ]] ||
    fail "make install-lock-lib put in place:"$'\n'"$got"$'\n'"expected:"$'\n'"$expected"
cmp -s "$ROOT/lock/lock.h" "$dest/usr/include/seckill/lock.h" ||
    fail "the installed header is not lock/lock.h"
ok "make install-lock-lib DESTDIR PREFIX=/usr: archive, header, seckill-lock.pc"

# ---- what the archive exports ----

archive=$dest/usr/lib/libseckill-lock.a
exported=$(nm -g --defined-only "$archive" | awk 'NF == 3 { print $3 }' |
    sort)
# Every function lock.h declares: a name followed by "(" at the start of
# a declaration's line or after its return type.
declared=$(grep -oE '^[a-z][a-z0-9_ *]*[ *](lock_[a-z0-9_]+)\(' \
    "$ROOT/lock/lock.h" | grep -oE 'lock_[a-z0-9_]+\($' | tr -d '(' | sort -u)
[[ -n $declared ]] || fail "found no declarations in lock/lock.h"
[[ $exported == "$declared" ]] ||
    fail "the archive's global symbols differ from lock.h's functions:"$'\n'"$(
        diff <(echo "$declared") <(echo "$exported") || true)"
ok "the archive exports exactly lock.h's $(wc -l <<<"$declared") functions"

# ---- the service includes the public header only ----

inside=$(cd "$ROOT" && git ls-files '*.c' '*.h' |
    grep -vE '^(lock|tests)/' |
    xargs grep -lE '#include[[:space:]]*"lock/' |
    xargs grep -HnE '#include[[:space:]]*"lock/' |
    grep -vE '#include[[:space:]]*"lock/lock\.h"' || true)
[[ -z $inside ]] || fail "lock/'s internal headers included outside lock/:"$'\n'"$inside"
ok "outside lock/ and tests/ only lock/lock.h is included"

# ---- the example, from the installation ----

pc() {
    PKG_CONFIG_PATH= PKG_CONFIG_LIBDIR=$dest/usr/lib/pkgconfig:$(
        pkg-config --variable pc_path pkg-config) \
        PKG_CONFIG_SYSROOT_DIR=$dest pkg-config "$@"
}
flags=$(pc --cflags --libs seckill-lock) || fail "pkg-config seckill-lock"
echo "lock-lib: pkg-config --cflags --libs seckill-lock: $flags"
example=$work/lock_example
# shellcheck disable=SC2086 # the flags are words
${CC:-cc} -std=c11 -Wall -Wextra -Werror "${san_flags[@]}" -o "$example" \
    "$ROOT/lock/examples/lock_example.c" $flags >"$work/cc.log" 2>&1 ||
    fail "compiling the example: $(cat "$work/cc.log")"
ok "the example compiles and links with pkg-config's flags only"

rcli() { redis-cli -u "$SECKILL_REDIS_URL" "$@"; }
rcli PING >/dev/null || fail "redis at $SECKILL_REDIS_URL does not answer"

# One of the example's runs; its output goes to its log and is shown on a
# failure.
run_example() { # log args...
    local log=$1
    shift
    if ! timeout 120 "$example" "$@" >"$log" 2>&1; then
        cat "$log" >&2
        fail "lock_example $*"
    fi
}

# The number in the example's counter file ("count token").
file_count() { awk 'NR == 1 { print $1 }' "$1"; }

# ---- mutex on Redis: three processes at once ----

procs=3 threads=4 rounds=25
total=$((procs * threads * rounds))
counter=$work/counter-redis
name="lock-example:mutex:$counter"
pids=()
for i in $(seq "$procs"); do
    timeout 120 "$example" "$SECKILL_REDIS_URL" mutex "$counter" "$rounds" \
        >"$work/mutex-$i.log" 2>&1 &
    pids+=($!)
done
for i in "${!pids[@]}"; do
    if ! wait "${pids[i]}"; then
        cat "$work/mutex-$((i + 1)).log" >&2
        fail "lock_example mutex, process $((i + 1))"
    fi
done
count=$(file_count "$counter")
[[ $count == "$total" ]] ||
    fail "mutex on redis: the file counts $count, expected $total"
[[ $(rcli EXISTS "$name") == 0 ]] ||
    fail "mutex on redis: the lock key $name is still in Redis"
# Every write carried a token at least the last one (the example refuses
# a lower one, and then the count falls short); the name's fencing
# counter ends with its lease.
fence_pttl=$(rcli PTTL "lock-fence:{$name}")
((fence_pttl == -2 || fence_pttl > 0)) ||
    fail "mutex on redis: lock-fence:{$name} has PTTL $fence_pttl, expected a TTL or no key"
ok "mutex on redis: $procs processes x $threads threads x $rounds rounds = $count, lock key gone, fencing counter with a TTL"

# ---- mutex on ZooKeeper and MySQL ----

for url in "$SECKILL_LOCK_ZK_URL" "$SECKILL_MYSQL_URL"; do
    backend=${url%%:*}
    counter=$work/counter-$backend
    run_example "$work/mutex-$backend.log" "$url" mutex "$counter" 5
    count=$(file_count "$counter")
    [[ $count == $((threads * 5)) ]] ||
        fail "mutex on $backend: the file counts $count, expected $((threads * 5))"
    ok "mutex on $backend: $count increments"
done

# ---- fair and semaphore on Redis ----

run_example "$work/fair.log" "$SECKILL_REDIS_URL" fair 4
grep -q '^fair: 4 waiters served in the order they came' "$work/fair.log" ||
    fail "fair: $(cat "$work/fair.log")"
ok "$(grep '^fair:' "$work/fair.log")"

run_example "$work/semaphore.log" "$SECKILL_REDIS_URL" semaphore 2 6
grep -qE '^semaphore: 6 threads, 2 permits: at most [12] inside at once' \
    "$work/semaphore.log" || fail "semaphore: $(cat "$work/semaphore.log")"
ok "$(grep '^semaphore:' "$work/semaphore.log")"

# The fair and semaphore demos leave nothing behind either, but for what
# outlives a release by design and then expires: the fencing counter (for
# a lease) and the release receipts (a few seconds).
# A key that expired between the scan and its PTTL (-2) is gone, not left
# (an earlier run's receipt did so once).
left=$(rcli --scan --pattern "*lock-example:*" | while read -r k; do
    pttl=$(rcli PTTL "$k")
    ((pttl == -2)) && continue
    case $k in
    lock-fence:* | lock-rel:*) ((pttl > 0)) && continue ;;
    esac
    echo "$k"
done | head -5)
[[ -z $left ]] || fail "keys left in Redis:"$'\n'"$left"
ok "no lock-example keys left in Redis (but expiring fences and receipts)"

echo "lock-lib: ok ($build)"
