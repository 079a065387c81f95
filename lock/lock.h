/*
 * lock.h - distributed locks with one API over four backends, chosen by URL.
 * The public header of the lock library: installed as <seckill/lock.h>
 * with libseckill-lock.a (link with `pkg-config --libs seckill-lock`);
 * its README is docs/locks.md in the seckill sources. Everything else in
 * lock/ is internal.
 *
 *   redis://[[user]:pass@]host[:port][/db]     one Redis server
 *   redis-sentinel://[[user]:pass@]s1[:p1],s2[:p2].../master[/db]
 *                                              the same, its master found
 *                                              through its sentinels (and
 *                                              followed over a failover)
 *   redis-cluster://[[user]:pass@]h1:p1,h2:p2,...
 *                                              the same on a Redis Cluster
 *                                              named by some of its nodes:
 *                                              each lock on the primary
 *                                              that owns its slot, wake-ups
 *                                              by sharded pub/sub
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
 * &session_ms=N (session timeout; default 10000). A redis:// or
 * redis-sentinel:// URL takes &replicas=N (0..64): every acquire (and
 * watchdog renewal) then waits, with WAIT, until N replicas have the lock,
 * and fails with -EIO if they do not within half of timeout_ms (the lock
 * is released again first). A redis-cluster:// URL takes no database and
 * no replicas (there is no one server to WAIT on); every kind, the
 * fencing tokens, reentrancy and the watchdog work there as on one Redis
 * (docs/locks.md, "On a Redis Cluster").
 *
 * Lock kinds (each a struct lock, with the same acquire/release calls):
 *
 *   kind        made by               redis  zookeeper  redlock  mysql
 *   mutex       lock_new()            yes    yes        yes      yes
 *   fair        lock_fair_new()       yes    yes        -ENOTSUP -ENOTSUP
 *   read/write  lock_rw_new()         yes    yes        -ENOTSUP -ENOTSUP
 *   semaphore   lock_semaphore_new()  yes    yes        -ENOTSUP -ENOTSUP
 *
 * and lock_multi_acquire() takes several struct locks of any kinds and
 * backends all or none. Kinds are separate namespaces: a mutex and a fair
 * lock called "x" are two different locks.
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
 *   -ENOTSUP       a lock kind the backend does not offer (see above);
 *   -EDEADLK       acquiring a write lock while holding only its read
 *                  lock (an upgrade, which could deadlock two readers);
 *   -ECONNREFUSED, -ETIMEDOUT, -ECONNRESET, -EIO
 *                  the backend is unreachable, too slow, dropped the
 *                  connection, or answered with an error;
 *   -EACCES        the backend refused the URL's credentials. Every call that
 *                  talks to a backend returns within a bounded time
 *                  (about timeout_ms per operation, plus the wait budget).
 * Business outcomes (busy) are enum lock_status, never errno.
 *
 * The library reports what goes wrong with a backend (a connection lost
 * or restored, a lock found lost, an error reply) as one line per event
 * on stderr: "ts=... level=... msg=\"...\" key=value...". Some of its
 * Redis connections write through hiredis, which does not guard its
 * writes against SIGPIPE: a program should ignore the signal
 * (signal(SIGPIPE, SIG_IGN)), as seckilld does, or a write to a connection
 * the server has closed ends the process.
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

enum lock_kind {
    LOCK_KIND_MUTEX,     /* lock_new() */
    LOCK_KIND_FAIR,      /* lock_fair_new() */
    LOCK_KIND_READ,      /* lock_rw_new(): the shared side */
    LOCK_KIND_WRITE,     /* lock_rw_new(): the exclusive side */
    LOCK_KIND_SEMAPHORE, /* lock_semaphore_new() */
};

/* Most permits a semaphore may have. */
#define LOCK_PERMITS_MAX 100000
/* Most locks one lock_multi_acquire() takes. */
#define LOCK_MULTI_MAX 64

/*
 * Optional settings; a zero field means "the URL's value, or the default".
 * watchdog_lease_ms exists for tests, which cannot wait 30 s.
 */
struct lock_options {
    uint32_t timeout_ms;
    uint32_t session_ms;
    uint32_t watchdog_lease_ms;
    /* Redis backends: put in front of every key and channel name (up to
     * 32 bytes of letters, digits and "_:.-"; NULL or "": none), so that
     * several applications can share one Redis. Locks of one name under
     * two prefixes are two locks. */
    const char *prefix;
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
 * On Redis a name is a key, and the lock's other keys carry its hash tag
 * (the part between its first '{' and the next '}', or the whole name) so
 * that a Redis Cluster keeps them in one slot: a name whose whole is
 * hashed and that holds a '}' (such as "a}b") is refused there, -EINVAL.
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
 * -ENOLCK when l is not held, or a backend error.
 *
 * Releases are idempotent. When the backend may have run the release but
 * its answer was lost (a timeout, a dropped connection), lock_release()
 * asks again once; if that fails too it returns the error and l keeps the
 * release pending: lock_holds() is 0, and the next lock_release(l) asks
 * again and returns the answer the first one would have had (held 1 if
 * the release it sent freed our lock), never freeing a lock someone else
 * took meanwhile. lock_acquire() and lock_free() finish a pending release
 * first. If it is never finished, the lease or the session end frees the
 * lock. The Redis backends keep each release's answer for 5 * timeout_ms
 * (at least 5 s); a pending release asked later than that answers held 0.
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
 * whose reply was lost is undone, as there; with ?replicas=N one WAIT
 * covers the batch). The locks must be mutexes (lock_new()), not held,
 * with no release pending, and belong to the same client. Returns 0, or
 * -EINVAL (nothing done) for bad arguments.
 *
 * Locks taken this way carry no fencing token (lock_fence() is 0): the
 * callers it is for guard their storage with its own keys (the purchase's
 * unique key on a user's active order), and on Redis a token costs every
 * acquire a counter written beside the lock, about half the acquire's
 * time in Redis.
 */
int lock_acquire_many(struct lock **locks, size_t n, uint32_t lease_ms,
                      enum lock_status *status, int *err);

/*
 * Release each of locks[0..n) (mutexes, each held exactly once), as
 * lock_release(), in one round trip on Redis: a release whose answer was
 * lost is asked once more and answers as the first would have (but for
 * locks taken by lock_acquire_many(), whose release leaves no receipt on
 * Redis: asked again, it says not held if the first had released it).
 * Unlike lock_release() it keeps nothing pending: a release that still
 * failed (err[i]) is left to the lease or the session end. held[i] (may
 * be NULL) and err[i] per lock. Returns 0, or -EINVAL for bad arguments.
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

/* Which kind of lock l is. */
enum lock_kind lock_kind(const struct lock *l);

/* 1 if l has a release whose answer it has not had yet (see
 * lock_release()). */
int lock_release_pending(const struct lock *l);

/* ---- the fair lock ---- */

/*
 * A fair (FIFO) lock called name: waiters get it in the order they started
 * waiting, and a release wakes only the first of them (Redisson's
 * RFairLock; on ZooKeeper the mutex recipe is already ordered by its
 * sequential nodes). An acquire with wait_ms 0 never overtakes a waiter:
 * it is LOCK_BUSY while anyone waits. A waiter that dies does not block the
 * queue: on Redis each waiter checks in at every retry and one that has
 * not for LOCK_CHECKIN_MS plus two timeouts is dropped; on ZooKeeper its
 * node goes with its session.
 * Everything else (leases, the watchdog, fencing, reentrancy) is as for
 * lock_new(). Returns 0 with *out set (free it with lock_free()),
 * -EINVAL for a bad name, or -ENOTSUP on RedLock and MySQL (whose waiters
 * are not ordered by anything the client can see: MySQL's GET_LOCK
 * queue is the server's, RedLock has no single queue to keep). No I/O.
 */
int lock_fair_new(struct lock_client *c, const char *name, struct lock **out);

/*
 * Redis: a waiter that keeps a place (in a fair lock's queue; a writer
 * waiting, which keeps new readers out) checks in at every retry; one that
 * has not for LOCK_CHECKIN_MS plus two timeout_ms is dropped.
 */
#define LOCK_CHECKIN_MS 1000

/* ---- the read-write lock ---- */

/*
 * A read-write lock called name, as two struct locks of one owner: *read
 * (shared: any number of readers at once) and *write (exclusive: one
 * writer and no readers). Curator's InterProcessReadWriteLock and
 * Redisson's RReadWriteLock:
 *   - a writer is not starved by a stream of readers: once a writer
 *     waits, new readers wait behind it, so the writer waits only for the
 *     readers already inside (a waiting writer that dies stops keeping
 *     readers out after LOCK_CHECKIN_MS on Redis, its session on
 *     ZooKeeper);
 *   - both sides are reentrant (hold counts, as lock_acquire());
 *   - downgrade: the write holder may take the read lock, then release
 *     the write lock and keep reading, with no writer in between;
 *   - upgrade is refused: acquiring *write while holding only *read
 *     returns -EDEADLK at once (two readers upgrading would wait for each
 *     other forever);
 *   - leases, the watchdog, lock_lost() and fencing tokens as for a mutex
 *     (each first acquire of either side gets a new token, so a writer's
 *     token is higher than every earlier hold's).
 * The two share the owner: use them from one thread at a time, as one
 * struct lock. Free each with lock_free() (either order). Returns 0,
 * -EINVAL, or -ENOTSUP on RedLock and MySQL (GET_LOCK has no shared mode;
 * a RedLock read lock would need every reader on a quorum). No I/O.
 */
int lock_rw_new(struct lock_client *c, const char *name, struct lock **read,
                struct lock **write);

/* ---- the semaphore ---- */

/*
 * One holder of one permit of the semaphore called name, which has
 * permits permits (1..LOCK_PERMITS_MAX; every user of the name must pass
 * the same number, as with Curator's InterProcessSemaphoreV2). Acquiring
 * takes a permit, waiting up to wait_ms for one to come back; at most
 * permits struct locks hold one at a time. Each permit is leased: a fixed
 * lease, or the watchdog with lease 0 (Redis), or the session
 * (ZooKeeper), so a crashed holder's permit comes back. A reentrant
 * acquire counts holds of the same permit; to hold k permits use k struct
 * locks (lock_multi_acquire() takes them all or none). Each first
 * acquire gets a fencing token that grows, but with permits > 1 several
 * holders are inside at once: the token orders them, it does not exclude.
 * On ZooKeeper contenders queue on a mutex before they count permits, so
 * a fail-fast acquire (wait_ms 0) is LOCK_BUSY while another client is
 * taking a permit, even if one is free (as with Curator).
 * Returns 0, -EINVAL (name, permits), or -ENOTSUP on RedLock and MySQL
 * (GET_LOCK is exclusive only; N permits spread over independent RedLock
 * masters do not add up to a count). No I/O.
 */
int lock_semaphore_new(struct lock_client *c, const char *name,
                       uint32_t permits, struct lock **out);

/* ---- several locks at once ---- */

/*
 * Take all n locks (1..LOCK_MULTI_MAX struct locks of any kinds, clients
 * and backends) or none, like Curator's InterProcessMultiLock. They are
 * taken in one canonical order (by name, backend, servers, kind, owner),
 * whatever order the array has, so two callers wanting overlapping sets
 * cannot deadlock each other. wait_ms is the budget for the whole set;
 * lease_ms applies to each lock. On LOCK_BUSY or an error every lock
 * taken by this call is released again (reentrant holds taken earlier
 * stay). Returns 0 with *status set, -EINVAL (n, a NULL or repeated
 * lock, or two exclusive locks of the same name, which could never both
 * be held), or the first error a lock returned. The locks are used from
 * the calling thread only, as for lock_acquire().
 */
int lock_multi_acquire(struct lock *const *locks, size_t n, uint32_t wait_ms,
                       uint32_t lease_ms, enum lock_status *status);

/*
 * Release each of the n locks once, in the reverse of the acquire order.
 * Every one is released even after one fails. *held (may be NULL) is 1 if
 * every lock was still ours. Returns 0 or the first error.
 */
int lock_multi_release(struct lock *const *locks, size_t n, int *held);

#endif
