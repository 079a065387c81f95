/*
 * redis_keys.h - how the service names its Redis keys and channels.
 *
 * Every name starts with one prefix (SECKILL_REDIS_PREFIX, empty by
 * default), set once at start-up, so that deployments (or the tests) can
 * share one Redis or one Redis Cluster, which has only database 0. The
 * prefix holds no '{' or '}', so it never changes a key's hash slot when
 * the key has a hash tag of its own, and no glob character, so that a
 * SCAN pattern can carry it as it is.
 *
 * Redis Cluster runs a script or a multi-key command only when its keys
 * share one hash slot. redis_key_tagged() names a key (or channel) that
 * shares the slot of another key, whatever that key is: it embeds the part
 * of the other key that decides its slot as its own hash tag. The keys of
 * each script, and which of them share a tag, are listed in
 * docs/scaling.md.
 */
#ifndef SECKILL_REDIS_KEYS_H
#define SECKILL_REDIS_KEYS_H

#include <stddef.h>

/* Longest prefix, in bytes. */
#define REDIS_PREFIX_MAX 32

/*
 * 0 when p may be a prefix: at most REDIS_PREFIX_MAX bytes of letters,
 * digits and "_:.-" (the empty string too). Else -EINVAL with a reason
 * in why.
 */
int redis_prefix_check(const char *p, char *why, size_t whylen);

/*
 * Set the prefix of every name redis_key() makes (copied). Call it at
 * start-up, before any thread uses Redis; p must pass
 * redis_prefix_check() (else the prefix stays as it was and -EINVAL).
 */
int redis_prefix_set(const char *p);

/* The prefix (never NULL; "" when none). Thread-safe once set. */
const char *redis_prefix(void);

/*
 * The prefix followed by fmt's expansion, into buf (size bytes). Returns
 * the length, or -ENAMETOOLONG when it does not fit (buf then holds a
 * truncated name that must not be used). Thread-safe.
 */
int redis_key(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * A name in the hash slot of key (key_len bytes): prefix, then what, then
 * "{" and the part of key that decides its slot (its hash tag, or all of
 * it) and "}", then suffix (may be NULL). prefix is given (not the
 * global one) so that the lock library can use its own. Returns the
 * length; -ENAMETOOLONG when it does not fit; -EINVAL when key's slot is
 * decided by a part holding '}', which no tag can carry.
 */
int redis_key_tagged(char *buf, size_t size, const char *prefix,
                     const char *what, const char *key, size_t key_len,
                     const char *suffix);

#endif
