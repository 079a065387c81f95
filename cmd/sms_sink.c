/*
 * sms_sink.c - `seckilld sms-sink` (see sms_sink.h). Each POST's body is
 * {"phone","code","expiresIn"}, signed in X-Signature (the lower-case hex
 * HMAC-SHA256 of the body) with SECKILL_SMS_SECRET: a good one is printed
 * on standard output, one line, and answered 204; a bad signature 401, a
 * body that is not such an object 400, both with a line on standard
 * error. It is what an SMS gateway's adapter does, minus the SMS.
 */
#include "cmd/sms_sink.h"

#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <microhttpd.h>
#include <sodium.h>

#define BODY_MAX 1024

struct sink {
    const unsigned char *key;
};

/* One request's body as it arrives. */
struct body {
    char buf[BODY_MAX + 1];
    size_t len;
    bool too_long;
};

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(c, status, r);

    MHD_destroy_response(r);
    return ret;
}

static bool signed_right(const struct sink *s, struct MHD_Connection *c,
                         const struct body *b)
{
    const char *hex =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Signature");
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    size_t n = 0;

    if (!hex || strlen(hex) != 2 * sizeof(mac) ||
        sodium_hex2bin(mac, sizeof(mac), hex, strlen(hex), NULL, &n, NULL) ||
        n != sizeof(mac))
        return false;
    return crypto_auth_hmacsha256_verify(mac, (const unsigned char *)b->buf,
                                         b->len, s->key) == 0;
}

/* The whole body is in: check it and print the code. */
static enum MHD_Result finish(const struct sink *s, struct MHD_Connection *c,
                              const struct body *b)
{
    const char *phone = NULL, *code = NULL;
    json_int_t ttl = 0;
    json_t *j;

    if (b->too_long) {
        fprintf(stderr, "sms-sink: refused: a body over %d bytes\n", BODY_MAX);
        return answer(c, MHD_HTTP_CONTENT_TOO_LARGE);
    }
    if (!signed_right(s, c, b)) {
        fprintf(stderr, "sms-sink: refused: X-Signature missing or wrong\n");
        return answer(c, MHD_HTTP_UNAUTHORIZED);
    }
    j = json_loadb(b->buf, b->len, 0, NULL);
    if (!j || json_unpack(j, "{s:s,s:s,s:I}", "phone", &phone, "code", &code,
                          "expiresIn", &ttl) != 0) {
        json_decref(j);
        fprintf(stderr, "sms-sink: refused: not {\"phone\",\"code\","
                        "\"expiresIn\"}\n");
        return answer(c, MHD_HTTP_BAD_REQUEST);
    }
    printf("sms-sink: to %s: your login code is %s (valid %lld s)\n", phone,
           code, (long long)ttl);
    fflush(stdout);
    json_decref(j);
    return answer(c, MHD_HTTP_NO_CONTENT);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *data,
                                  size_t *size, void **state)
{
    struct body *b = *state;

    (void)url;
    (void)version;
    if (strcmp(method, "POST") != 0)
        return answer(c, MHD_HTTP_METHOD_NOT_ALLOWED);
    if (!b) {
        b = calloc(1, sizeof(*b));
        if (!b)
            return MHD_NO;
        *state = b;
        return MHD_YES;
    }
    if (*size) {
        if (b->len + *size > BODY_MAX)
            b->too_long = true;
        else
            memcpy(b->buf + b->len, data, *size);
        b->len += b->too_long ? 0 : *size;
        *size = 0;
        return MHD_YES;
    }
    return finish(cls, c, b);
}

static void on_done(void *cls, struct MHD_Connection *c, void **state,
                    enum MHD_RequestTerminationCode why)
{
    (void)cls;
    (void)c;
    (void)why;
    free(*state);
    *state = NULL;
}

int sms_sink_run(const struct config *cfg)
{
    const struct handlers_config *h = &cfg->http;
    struct sink s = {.key = h->sms_secret};
    struct sockaddr_storage ss = {0};
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    struct MHD_Daemon *d;
    sigset_t set;
    int sig;

    if (!h->has_sms_secret) {
        fprintf(stderr, "seckilld: SECKILL_SMS_SECRET: must be set for "
                        "sms-sink (64 hex characters)\n");
        return 2;
    }
    if (inet_pton(AF_INET, h->bind, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(h->port);
    } else if (inet_pton(AF_INET6, h->bind, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(h->port);
        flags |= MHD_USE_IPv6;
    } else {
        fprintf(stderr, "seckilld: SECKILL_BIND: not an address\n");
        return 2;
    }
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    d = MHD_start_daemon(flags, h->port, NULL, NULL, on_request, &s,
                         MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                         MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL,
                         MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "seckilld: sms-sink: cannot listen on %s port %u\n",
                h->bind, (unsigned)h->port);
        return 1;
    }
    printf("sms-sink: listening on %s port %u\n", h->bind, (unsigned)h->port);
    fflush(stdout);
    sigwait(&set, &sig);
    MHD_stop_daemon(d);
    return 0;
}
