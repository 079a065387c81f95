/*
 * lock.h - distributed locks with one API over four backends, chosen by URL:
 *
 *   redis://[[user]:pass@]host[:port][/db]     one Redis server
 *   redlock://[[user]:pass@]h1:p1,h2:p2,h3:p3[/db]
 *                                              RedLock over N independent
 *                                              Redis masters, 3 <= N <= 9
 *                                              (quorum N/2+1)
 *   mysql://user:pass@host[:port]/db           GET_LOCK/RELEASE_LOCK, one
 *                                              session per held lock
 *   zookeeper://h1:p1[,h2:p2...]/path          ephemeral sequential nodes
 *                                              under path (Curator's recipe)
 *
 * Every URL takes optional query settings: ?timeout_ms=N (each network
 * operation, including connecting; default 1000) and, for ZooKeeper,
 * &session_ms=N (session timeout; default 10000).
 *
 * The model (see docs/locks.md for what each backend guarantees):
 *   - A struct lock_client is one backend: its connections, the pub/sub
 *     listener that wakes waiters and the watchdog thread. It is
 *     thread-safe; open one per process and share it.
 *   - A struct lock is one owner of one lock name: a random 128-bit owner
 *     id drawn when it is made. It is used by one thread at a time.
 *     Acquiring it again while held is reentrant (a local count, as in
 *     Curator); it must be released as many times. Two struct locks with
 *     the same name exclude each other, even in the same thread.
 *   - Each first acquire returns a fencing token (lock_fence()), a number
 *     that only grows for that lock name: storage guarded by the lock keeps
 *     the highest token it accepted and refuses writes with a lower one.
 *   - A lease of 0 asks for the watchdog: the lock is taken for
 *     LOCK_WATCHDOG_LEASE_MS and renewed (owner-checked) every third of
 *     that until released. A renewal that finds the lock gone marks the
 *     lock lost (lock_lost()); check it before committing work.
 *     MySQL and ZooKeeper locks live as long as their session: the lease
 *     is ignored and the watchdog only checks the session still holds it.
 *
 * Functions return 0 or a negative errno:
 *   -EINVAL        bad argument (URL, name, or a lock used wrongly);
 *   -ENOLCK        release of a lock not held, or reentrant acquire of
 *                  a hold that was lost meanwhile (its release then
 *                  returns 0 with *held = 0);
 *   -ECONNREFUSED, -ETIMEDOUT, -ECONNRESET, -EIO
 *                  the backend is unreachable, too slow, dropped the
 *                  connection, or answered with an error;
 *   -EACCES        the backend refused the URL's credentials. Every call that
 *                  talks to a backend returns within a bounded time
 *                  (about timeout_ms per operation, plus the wait budget).
 * Business outcomes (busy) are enum lock_status, never errno.
 */
#ifndef SECKILL_LOCK_H
#define SECKILL_LOCK_H

#include <stddef.h>
#include <stdint.h>

/* Longest lock name, in bytes. Names are any bytes but NUL. */
#define LOCK_NAME_MAX 200
/* The watchdog's lease, as Redisson's lockWatchdogTimeout. */
#define LOCK_WATCHDOG_LEASE_MS 30000

struct lock_client;
struct lock;

enum lock_status {
    LOCK_ACQUIRED, /* the struct lock now holds the lock */
    LOCK_BUSY,     /* someone else held it for the whole wait budget */
};

/*
 * Optional settings; a zero field means "the URL's value, or the default".
 * watchdog_lease_ms exists for tests, which cannot wait 30 s.
 */
struct lock_options {
    uint32_t timeout_ms;
    uint32_t session_ms;
    uint32_t watchdog_lease_ms;
};

/*
 * Open the backend named by url (see above). Connections are made lazily,
 * so an unreachable server is not an error here; a malformed URL or an
 * unknown scheme is (-EINVAL, with a one-line reason logged). opt may be
 * NULL. On success *out is a client to close with lock_client_close().
 */
int lock_client_open(const char *url, const struct lock_options *opt,
                     struct lock_client **out);

/*
 * Stop the client's threads and close its connections. Every struct lock
 * made from it must be freed first. Accepts NULL.
 */
void lock_client_close(struct lock_client *c);

/* "redis", "redlock", "mysql" or "zookeeper". */
const char *lock_client_backend(const struct lock_client *c);

/*
 * Check that the backend can serve locks now: a script round trip on
 * Redis (a quorum of servers for RedLock), a query on a MySQL session, a
 * connected ZooKeeper session. Within about timeout_ms. Thread-safe.
 * Returns 0, or a negative errno as below (-EACCES: the server refused
 * the credentials).
 */
int lock_client_ping(struct lock_client *c);

/*
 * Make an owner for the lock called name (1..LOCK_NAME_MAX bytes). No I/O.
 * Returns 0 with *out set, or -EINVAL. Free it with lock_free().
 */
int lock_new(struct lock_client *c, const char *name, struct lock **out);

/*
 * Free l. If it is still held, it is released first (best effort, errors
 * logged) as many times as it was acquired. Accepts NULL.
 */
void lock_free(struct lock *l);

/*
 * Take the lock, waiting up to wait_ms for a holder to release it (0: try
 * once and fail fast). lease_ms > 0 is a fixed lease: the lock frees
 * itself after that long unless released; 0 asks for the watchdog. A
 * waiter sleeps until the holder's release wakes it (pub/sub, watch, or
 * the server's own queue), with a jittered retry as a fallback.
 * If l is already held, the hold count grows and the lease is renewed to
 * lease_ms (when fixed), with no wait; -ENOLCK if it was lost meanwhile.
 * Returns 0 with *status set, or a negative errno (see above).
 */
int lock_acquire(struct lock *l, uint32_t wait_ms, uint32_t lease_ms,
                 enum lock_status *status);

/*
 * Undo one lock_acquire(). The last release frees the lock for others
 * (only if this owner still holds it), stops its watchdog and wakes a
 * waiter. *held (may be NULL) is set to 1 if the lock was still ours,
 * 0 if it had expired or been taken by someone else since. Returns 0,
 * -ENOLCK when l is not held, or a backend error (the hold is dropped
 * locally anyway: the lease or the session end frees it).
 */
int lock_release(struct lock *l, int *held);

/*
 * Many locks at once, for callers that serve many owners together (the
 * purchase engine takes the per-user locks of a whole batch): each of
 * locks[0..n) is taken without waiting (as lock_acquire() with wait_ms 0)
 * with the fixed lease lease_ms (> 0). On Redis every command goes out in
 * one pipelined write and the replies come back in one round trip; on
 * the other backends they run one after another. Per lock: err[i] is 0
 * with status[i] set, or a negative errno as lock_acquire() (an acquire
 * whose reply was lost is undone, as there). The locks must not be held
 * and must belong to the same client. Returns 0, or -EINVAL (nothing
 * done) for bad arguments.
 */
int lock_acquire_many(struct lock **locks, size_t n, uint32_t lease_ms,
                      enum lock_status *status, int *err);

/*
 * Release each of locks[0..n) (each held exactly once), as
 * lock_release(), in one round trip on Redis. held[i] (may be NULL) and
 * err[i] per lock. Returns 0, or -EINVAL for bad arguments.
 */
int lock_release_many(struct lock **locks, size_t n, int *held, int *err);

/* The fencing token of the current hold, or 0 when not held. */
uint64_t lock_fence(const struct lock *l);

/* How many times l is held (0: not held). */
unsigned lock_holds(const struct lock *l);

/*
 * 1 if the watchdog or the session found the lock gone while held: work
 * done under it must not be committed. Thread-safe.
 */
int lock_lost(const struct lock *l);

/* The name given to lock_new() and the owner id (32 hex characters). */
const char *lock_name(const struct lock *l);
const char *lock_owner(const struct lock *l);

#endif
