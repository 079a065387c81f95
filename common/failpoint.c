/*
 * failpoint.c - the test-build failpoints (see failpoint.h). Empty unless
 * compiled with -DSECKILL_FAILPOINTS.
 */
#include "common/failpoint.h"

#ifdef SECKILL_FAILPOINTS

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"

#define FP_MAX 16
#define FP_NAME_MAX 32

enum fp_action { FP_KILL, FP_STOP, FP_SLEEP, FP_FAIL };

struct failpoint {
    char name[FP_NAME_MAX];
    enum fp_action action;
    long sleep_ms;
    long fire_at; /* the hit that fires, from 1 */
    long every;   /* > 0: every every-th hit fires instead */
    atomic_long hits;
};

static struct failpoint points[FP_MAX];
static int npoints;
static pthread_once_t parse_once = PTHREAD_ONCE_INIT;

static void die_bad(const char *spec)
{
    log_error("failpoint list malformed", "SECKILL_FAILPOINTS=\"%s\"", spec);
    abort();
}

/* One name=action[@n|%n] entry of length len. */
static void parse_one(const char *spec, const char *s, size_t len)
{
    char buf[128], *eq, *at, *pct, *end;
    struct failpoint *fp;

    if (len == 0)
        return;
    if (len >= sizeof(buf) || npoints == FP_MAX)
        die_bad(spec);
    memcpy(buf, s, len);
    buf[len] = '\0';
    fp = &points[npoints];
    eq = strchr(buf, '=');
    if (!eq || eq == buf || (size_t)(eq - buf) >= FP_NAME_MAX)
        die_bad(spec);
    *eq = '\0';
    memcpy(fp->name, buf, (size_t)(eq - buf) + 1);
    fp->fire_at = 1;
    at = strchr(eq + 1, '@');
    if (at) {
        *at = '\0';
        fp->fire_at = strtol(at + 1, &end, 10);
        if (*end || fp->fire_at < 1)
            die_bad(spec);
    }
    pct = strchr(eq + 1, '%');
    if (pct) {
        *pct = '\0';
        fp->every = strtol(pct + 1, &end, 10);
        if (*end || fp->every < 1 || at)
            die_bad(spec);
    }
    if (strcmp(eq + 1, "kill") == 0) {
        fp->action = FP_KILL;
    } else if (strcmp(eq + 1, "stop") == 0) {
        fp->action = FP_STOP;
    } else if (strcmp(eq + 1, "fail") == 0) {
        fp->action = FP_FAIL;
    } else if (strncmp(eq + 1, "sleep:", 6) == 0) {
        fp->action = FP_SLEEP;
        fp->sleep_ms = strtol(eq + 7, &end, 10);
        if (*end || fp->sleep_ms < 0 || eq[7] == '\0')
            die_bad(spec);
    } else {
        die_bad(spec);
    }
    npoints++;
}

static void parse_env(void)
{
    const char *spec = getenv("SECKILL_FAILPOINTS");
    const char *p = spec;

    if (!spec)
        return;
    while (*p) {
        size_t len = strcspn(p, ",");

        parse_one(spec, p, len);
        p += len;
        if (*p == ',')
            p++;
    }
}

bool failpoint_hit(const char *name)
{
    bool fail = false;

    pthread_once(&parse_once, parse_env);
    for (int i = 0; i < npoints; i++) {
        struct failpoint *fp = &points[i];
        long hit;

        if (strcmp(fp->name, name) != 0)
            continue;
        hit = atomic_fetch_add(&fp->hits, 1) + 1;
        if (fp->every ? hit % fp->every != 0 : hit != fp->fire_at)
            continue;
        log_warn("failpoint fired", "name=%s hit=%ld", name, hit);
        switch (fp->action) {
        case FP_KILL:
            raise(SIGKILL);
            break;
        case FP_STOP:
            raise(SIGSTOP);
            break;
        case FP_SLEEP: {
            struct timespec ts = {fp->sleep_ms / 1000,
                                  fp->sleep_ms % 1000 * 1000000L};
            while (nanosleep(&ts, &ts) != 0)
                ;
            break;
        }
        case FP_FAIL:
            fail = true;
            break;
        }
    }
    return fail;
}

#else

/* ISO C wants at least one declaration in a translation unit. */
typedef int failpoint_unused;

#endif
