/*
 * waitroom.c - a queue sale's waiting room in Redis (store.h): one
 * script places a buyer (or reads its place) and says whether it is
 * admitted, by Redis' own clock, so that every instance agrees without
 * any thread of its own moving the queue along.
 */
#include "store/internal.h"

#include <errno.h>
#include <stdio.h>
#include <sodium.h>
#include <string.h>

#include "common/failpoint.h"
#include "common/util.h"

/* A day after the sale's end its room goes. */
#define KEEP_MS (24 * 3600 * 1000LL)

/*
 * KEYS: pre, late, seq, joined, poll. ARGV: user, random score, open,
 * begin, end (ms), rate, poll interval (ms), 1 join / 0 poll, expire-at
 * (ms), 1 admit by the rate alone (a test build's planted bug) / 0.
 * Returns {outcome, position, admitted, admit_at, now, retry}. A join of
 * a buyer who has a place is a read of it, limited like one.
 *
 * Place p is admitted at begin + ceil(p * 1000 / rate), or when its buyer
 * joined if that is later: a latecomer behind a short queue is admitted
 * at once, not at a turn that went by before it came. Both are fixed
 * when the place is given (the join time is kept in joined), so a read
 * computes the same admission every time. Earlier joiners are never
 * admitted after later ones: the early joiners' join times are before
 * the begin, so theirs is the rate's alone; a latecomer's place and join
 * time both grow with its turn (a join time is kept no earlier than the
 * last latecomer's, should Redis' clock step back), so the later of the
 * two does too.
 */
static struct redis_script place_script = REDIS_SCRIPT(
    "local t = redis.call('time') "
    "local now = t[1] * 1000 + math.floor(t[2] / 1000) "
    "local open, begin, fin = tonumber(ARGV[3]), tonumber(ARGV[4]), "
    "                         tonumber(ARGV[5]) "
    "local rate = tonumber(ARGV[6]) "
    "local join = ARGV[8] == '1' "
    "if now >= fin then return {2, 0, 0, 0, now, 0} end "
    "local pre = redis.call('zscore', KEYS[1], ARGV[1]) "
    "local late = false "
    "if not pre then late = redis.call('zscore', KEYS[2], ARGV[1]) end "
    "local read = not join or pre or late "
    "if read then "
    "  local ttl = redis.call('pttl', KEYS[5]) "
    "  if ttl > 0 then return {4, 0, 0, 0, now, ttl} end "
    "end "
    "if not pre and not late then "
    "  if not join then return {3, 0, 0, 0, now, 0} end "
    "  if now < open then return {1, 0, 0, 0, now, open - now} end "
    "  if now < begin then "
    "    redis.call('zadd', KEYS[1], 'NX', ARGV[2], ARGV[1]) "
    "    pre = true "
    "  else "
    "    local joined = now "
    "    local last = redis.call('zrange', KEYS[2], -1, -1)[1] "
    "    if last then "
    "      joined = math.max(joined, "
    "        tonumber(redis.call('hget', KEYS[4], last) or 0)) "
    "    end "
    "    redis.call('zadd', KEYS[2], 'NX', redis.call('incr', KEYS[3]), "
    "               ARGV[1]) "
    "    redis.call('hset', KEYS[4], ARGV[1], joined) "
    "  end "
    "  for i = 1, 4 do redis.call('pexpireat', KEYS[i], ARGV[9]) end "
    "end "
    "if read then redis.call('set', KEYS[5], 1, 'PX', ARGV[7]) end "
    "if now < begin then return {0, 0, 0, 0, now, 0} end "
    "local pos "
    "if pre then pos = redis.call('zrank', KEYS[1], ARGV[1]) + 1 "
    "else pos = redis.call('zcard', KEYS[1]) + "
    "           redis.call('zrank', KEYS[2], ARGV[1]) + 1 end "
    "local admit_at = begin + math.ceil(pos * 1000 / rate) "
    "if not pre and ARGV[10] ~= '1' then "
    "  admit_at = math.max(admit_at, "
    "    tonumber(redis.call('hget', KEYS[4], ARGV[1]) or 0)) "
    "end "
    "return {0, pos, now >= admit_at and 1 or 0, admit_at, now, 0}");

void store_waitroom_key(char *buf, int64_t voucher_id, const char *what)
{
    redis_key(buf, STORE_KEY_MAX, "{v:%lld}:wr:%s", (long long)voucher_id,
              what);
}

void store_waitroom_poll_key(char *buf, int64_t voucher_id, int64_t user_id)
{
    redis_key(buf, STORE_KEY_MAX, "{v:%lld}:wr:poll:%lld",
              (long long)voucher_id, (long long)user_id);
}

int store_waitroom_place(struct store *st, int64_t voucher_id,
                         const struct store_waitroom *w, int64_t user_id,
                         bool join, struct store_wr_place *out)
{
    char k[5][STORE_KEY_MAX], user[24], score[24], a[7][24];
    const char *argv[15];
    redisReply *r;
    uint64_t rnd;
    int err = 0;

    memset(out, 0, sizeof(*out));
    store_waitroom_key(k[0], voucher_id, "pre");
    store_waitroom_key(k[1], voucher_id, "late");
    store_waitroom_key(k[2], voucher_id, "seq");
    store_waitroom_key(k[3], voucher_id, "joined");
    store_waitroom_poll_key(k[4], voucher_id, user_id);
    /* 52 random bits: exact in the double Redis keeps a score in. */
    randombytes_buf(&rnd, sizeof(rnd));
    snprintf(user, sizeof(user), "%lld", (long long)user_id);
    snprintf(score, sizeof(score), "%llu", (unsigned long long)(rnd >> 12));
    snprintf(a[0], sizeof(a[0]), "%lld", (long long)w->open_ms);
    snprintf(a[1], sizeof(a[1]), "%lld", (long long)w->begin_ms);
    snprintf(a[2], sizeof(a[2]), "%lld", (long long)w->end_ms);
    snprintf(a[3], sizeof(a[3]), "%u", w->rate ? w->rate : 1);
    snprintf(a[4], sizeof(a[4]), "%u", w->poll_ms ? w->poll_ms : 1);
    snprintf(a[5], sizeof(a[5]), "%d", join ? 1 : 0);
    snprintf(a[6], sizeof(a[6]), "%lld", (long long)(w->end_ms + KEEP_MS));
    /* A test build can admit latecomers by the rate alone, as if their
     * join time were not kept: their tickets expire before they come. */
    const char *rate_only = FAILPOINT_FAILS("waitroom_rate_only") ? "1" : "0";
    const char *v[] = {k[0], k[1], k[2], k[3], k[4], user, score,    a[0],
                       a[1], a[2], a[3], a[4], a[5], a[6], rate_only};
    memcpy(argv, v, sizeof(argv));
    r = store_redis_script(st, &place_script, 5, 15, argv, NULL, &err);
    if (!r)
        return -ENOTCONN;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 6) {
        log_error("redis reply unexpected", "op=waitroom type=%d err=\"%s\"",
                  r->type, r->type == REDIS_REPLY_ERROR ? r->str : "");
        err = -EIO;
    } else {
        long long e[6];

        for (int i = 0; i < 6; i++)
            e[i] = r->element[i]->type == REDIS_REPLY_INTEGER
                       ? r->element[i]->integer
                       : 0;
        out->outcome = (enum store_wr_outcome)e[0];
        out->position = e[1];
        out->admitted = e[2] != 0;
        out->admit_at_ms = e[3];
        out->now_ms = e[4];
        out->retry_ms = e[5];
    }
    freeReplyObject(r);
    return err;
}

int store_waitroom_mark(struct store *st, int64_t voucher_id,
                        int64_t expire_at_ms)
{
    redisReply *r;
    char k[STORE_KEY_MAX], at[24];
    const char *argv[5] = {"SET", k, "1", "PXAT", at};
    int err;

    store_waitroom_key(k, voucher_id, "queue");
    snprintf(at, sizeof(at), "%lld", (long long)(expire_at_ms + KEEP_MS));
    r = store_redis_command(st, k, 5, argv, NULL, &err);
    if (!r)
        return -ENOTCONN;
    err = r->type == REDIS_REPLY_ERROR ? -EIO : 0;
    freeReplyObject(r);
    return err;
}

int store_waitroom_forget(struct store *st, int64_t voucher_id)
{
    static const char *const names[5] = {"pre", "late", "seq", "joined",
                                         "queue"};
    char k[5][STORE_KEY_MAX];
    const char *argv[6] = {"DEL"};
    redisReply *r;
    int err;

    for (int i = 0; i < 5; i++) {
        store_waitroom_key(k[i], voucher_id, names[i]);
        argv[1 + i] = k[i];
    }
    /* One DEL of five keys: they share the sale's hash tag. */
    r = store_redis_command(st, k[0], 6, argv, NULL, &err);
    if (!r)
        return -ENOTCONN;
    err = r->type == REDIS_REPLY_ERROR ? -EIO : 0;
    freeReplyObject(r);
    return err;
}

int store_waitroom_marked(struct store *st, int64_t voucher_id)
{
    redisReply *r;
    char k[STORE_KEY_MAX];
    const char *argv[2] = {"EXISTS", k};
    int ret;

    store_waitroom_key(k, voucher_id, "queue");
    r = store_redis_command(st, k, 2, argv, NULL, &ret);
    if (!r)
        return -ENOTCONN;
    ret = r->type == REDIS_REPLY_INTEGER ? (r->integer ? 1 : 0) : -EIO;
    freeReplyObject(r);
    return ret;
}

int store_waitroom_counts(struct store *st, int64_t voucher_id,
                          const struct store_waitroom *w, int64_t *joined,
                          int64_t *admitted)
{
    char k1[STORE_KEY_MAX], k2[STORE_KEY_MAX];
    const char *a1[2] = {"ZCARD", k1}, *a2[2] = {"ZCARD", k2};
    unsigned slot;
    redisReply *r[2];
    int64_t now = util_now_ms();
    int err;

    *joined = *admitted = 0;
    store_waitroom_key(k1, voucher_id, "pre");
    store_waitroom_key(k2, voucher_id, "late");
    /* Both counts in one round trip (the sale's tag: one slot). */
    slot = redis_key_slot_str(k1);
    err = store_redis_pipeline(st,
                               (struct redis_cluster_cmd[2]){
                                   {.slot = (int)slot, .argc = 2, .argv = a1},
                                   {.slot = (int)slot, .argc = 2, .argv = a2}},
                               2, r);
    for (int i = 0; i < 2; i++) {
        if (r[i] && r[i]->type == REDIS_REPLY_INTEGER)
            *joined += r[i]->integer;
        freeReplyObject(r[i]);
    }
    if (err)
        return -ENOTCONN;
    /* By the rate alone: a place admitted later than its turn is one
     * whose buyer joined after the turn, so it is admitted already. */
    if (now > w->begin_ms && w->rate) {
        int64_t a = (now - w->begin_ms) * (int64_t)w->rate / 1000;

        *admitted = a < *joined ? a : *joined;
    }
    return 0;
}
