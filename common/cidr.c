/*
 * cidr.c - lists of address blocks (see cidr.h).
 */
#include "common/cidr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ::ffff:a.b.c.d is a.b.c.d. */
static void unmap(struct cidr *c)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0,    0,
                                       0, 0, 0, 0, 0xff, 0xff};

    if (c->v6 && memcmp(c->addr, mapped, 12) == 0) {
        memmove(c->addr, c->addr + 12, 4);
        memset(c->addr + 4, 0, 12);
        c->v6 = 0;
        c->prefix = c->prefix >= 96 ? (uint8_t)(c->prefix - 96) : 0;
    }
}

int cidr_addr_parse(const char *text, struct cidr *out)
{
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET, text, out->addr) == 1) {
        out->prefix = 32;
        return 0;
    }
    if (inet_pton(AF_INET6, text, out->addr) == 1) {
        out->v6 = 1;
        out->prefix = 128;
        unmap(out);
        return 0;
    }
    return -EINVAL;
}

/* Clear the bits of c beyond its prefix. */
static void mask(struct cidr *c)
{
    unsigned bits = c->v6 ? 128 : 32;

    for (unsigned b = c->prefix; b < bits; b++)
        c->addr[b / 8] &= (uint8_t) ~(0x80u >> (b % 8));
}

/* One entry of a list (len bytes of s): 0 or -EINVAL. */
static int entry_parse(const char *s, size_t len, struct cidr *out)
{
    char buf[64], *slash, *end;
    long prefix = -1;

    if (len == 0 || len >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, s, len);
    buf[len] = '\0';
    slash = strchr(buf, '/');
    if (slash) {
        *slash = '\0';
        if (slash[1] < '0' || slash[1] > '9')
            return -EINVAL;
        prefix = strtol(slash + 1, &end, 10);
        if (*end)
            return -EINVAL;
    }
    if (cidr_addr_parse(buf, out))
        return -EINVAL;
    if (prefix >= 0) {
        bool mapped_v4 = !out->v6 && strchr(buf, ':');
        long max = out->v6 || mapped_v4 ? 128 : 32;

        if (prefix > max)
            return -EINVAL;
        out->prefix =
            (uint8_t)(mapped_v4 ? (prefix >= 96 ? prefix - 96 : 0) : prefix);
    }
    mask(out);
    return 0;
}

int cidr_list_parse(const char *text, struct cidr_list *out, char *why,
                    size_t cap)
{
    const char *p = text;

    memset(out, 0, sizeof(*out));
    for (;;) {
        size_t len;

        p += strspn(p, " \t");
        if (!*p)
            return 0;
        len = strcspn(p, ",");
        size_t n = len;
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if (out->n == CIDR_MAX) {
            snprintf(why, cap, "more than %d address blocks", CIDR_MAX);
            return -EINVAL;
        }
        if (entry_parse(p, n, &out->block[out->n])) {
            snprintf(why, cap,
                     "\"%.*s\" is not an address or an address/prefix "
                     "block",
                     (int)(n > 48 ? 48 : n), p);
            return -EINVAL;
        }
        out->n++;
        p += len;
        if (*p == ',')
            p++;
    }
}

bool cidr_list_has(const struct cidr_list *l, const struct cidr *a)
{
    for (size_t i = 0; i < l->n; i++) {
        const struct cidr *b = &l->block[i];
        unsigned full = b->prefix / 8, rest = b->prefix % 8;

        if (b->v6 != a->v6)
            continue;
        if (memcmp(b->addr, a->addr, full) != 0)
            continue;
        if (rest &&
            (a->addr[full] & (uint8_t)(0xff00u >> rest)) != b->addr[full])
            continue;
        return true;
    }
    return false;
}
