/*
 * cidr.h - lists of address blocks ("10.0.0.0/8, 127.0.0.1, ::1/128"),
 * and whether an address is in one. Used for the proxies whose
 * X-Forwarded-For the service believes (SECKILL_TRUSTED_PROXIES).
 * An IPv4 address written as IPv6 (::ffff:a.b.c.d) is the IPv4 one.
 */
#ifndef SECKILL_CIDR_H
#define SECKILL_CIDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CIDR_MAX 32

struct cidr {
    uint8_t v6;       /* 0: IPv4 (addr[0..4)), 1: IPv6 */
    uint8_t prefix;   /* bits that must match */
    uint8_t addr[16]; /* the block's address, host bits cleared */
};

struct cidr_list {
    struct cidr block[CIDR_MAX];
    size_t n;
};

/*
 * Parse text, blocks separated by commas (spaces around them allowed);
 * an address without "/N" is the one address. Empty text is the empty
 * list. 0, or -EINVAL with why (at most cap bytes) naming the bad entry.
 */
int cidr_list_parse(const char *text, struct cidr_list *out, char *why,
                    size_t cap);

/* An address in text form (IPv4 or IPv6, no brackets or port): 0 and
 * *out as a one-address block, or -EINVAL. */
int cidr_addr_parse(const char *text, struct cidr *out);

/* Whether the address a (cidr_addr_parse()'s form) is in l. */
bool cidr_list_has(const struct cidr_list *l, const struct cidr *a);

#endif
