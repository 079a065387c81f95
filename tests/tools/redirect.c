/*
 * redirect.c - an LD_PRELOAD library for tests: a process's TCP
 * connections to some loopback ports go to other loopback ports instead.
 * make soak gives each seckilld instance its own tcpproxy in front of
 * each Redis server, so that the nemesis can slow, break or cut one
 * instance's link to Redis alone; but the instances find the Redis master
 * through Sentinel, which names the server's own port. With this library
 * preloaded, a connect(2) to 127.0.0.1:PORT for a PORT in the map goes to
 * that instance's proxy.
 *
 *   LD_PRELOAD=build/tools/libredirect.so \
 *   SECKILL_REDIRECT=16379:21001,16380:21002 seckilld ...
 *
 * SECKILL_REDIRECT is read once, at the first connect: comma-separated
 * FROM:TO pairs of ports (at most 16); anything else is ignored, and a
 * malformed list redirects nothing. Only IPv4 loopback connections are
 * touched. Test tool only.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define PAIRS_MAX 16

static uint16_t from_port[PAIRS_MAX], to_port[PAIRS_MAX];
static int npairs;
static int (*real_connect)(int, __CONST_SOCKADDR_ARG, socklen_t);
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void map_read(void)
{
    const char *p = getenv("SECKILL_REDIRECT");

    real_connect = (int (*)(int, __CONST_SOCKADDR_ARG, socklen_t))dlsym(
        RTLD_NEXT, "connect");
    while (p && *p && npairs < PAIRS_MAX) {
        char *end;
        unsigned long from = strtoul(p, &end, 10), to;

        if (*end != ':' || from == 0 || from > 65535)
            break;
        to = strtoul(end + 1, &end, 10);
        if ((*end != ',' && *end != '\0') || to == 0 || to > 65535)
            break;
        from_port[npairs] = (uint16_t)from;
        to_port[npairs++] = (uint16_t)to;
        p = *end ? end + 1 : end;
    }
}

/* glibc declares connect() with a transparent union for its address
 * (_GNU_SOURCE): the definition must match it. */
int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
    const struct sockaddr *sa = addr.__sockaddr__;

    pthread_once(&once, map_read);
    if (sa && sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        struct sockaddr_in in;

        memcpy(&in, sa, sizeof(in));
        for (int i = 0; i < npairs; i++)
            if (in.sin_addr.s_addr == htonl(INADDR_LOOPBACK) &&
                ntohs(in.sin_port) == from_port[i]) {
                in.sin_port = htons(to_port[i]);
                return real_connect(fd, (const struct sockaddr *)&in,
                                    sizeof(in));
            }
    }
    return real_connect(fd, addr, len);
}
