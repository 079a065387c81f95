/*
 * sms.c - sending a login code (see sale.h): POSTed as JSON
 * {"phone","code","expiresIn"} to the configured webhook, which sends the
 * SMS, with X-Signature: the lower-case hex HMAC-SHA256 of the body, keyed
 * by the configured secret (as the payment provider signs its
 * notifications). Each try has 2 s; a failed one is tried once more.
 * Runs on a thread of the task pool (it waits).
 */
#include "sale/internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>
#include <sodium.h>

#include "common/util.h"

#define SMS_TIMEOUT_MS 2000L
#define SMS_TRIES 2

/* The answer's body is not read: only its status counts. */
static size_t discard(char *p, size_t size, size_t n, void *ctx)
{
    (void)p;
    (void)ctx;
    return size * n;
}

/* One POST of body; 0 for a 2xx answer, else -ECOMM with a log line. */
static int post_once(const struct sale_sms_config *c, const char *body,
                     struct curl_slist *headers)
{
    char why[CURL_ERROR_SIZE] = "";
    long status = 0;
    CURLcode rc;
    CURL *h = curl_easy_init();

    if (!h)
        return -ENOMEM;
    curl_easy_setopt(h, CURLOPT_URL, c->webhook);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, SMS_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, why);
    /* Only the webhook's own scheme: a redirect elsewhere is a failure. */
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    rc = curl_easy_perform(h);
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    if (rc == CURLE_OK && status >= 200 && status < 300)
        return 0;
    if (rc != CURLE_OK)
        log_warn("login code not sent", "why=\"%s\"",
                 why[0] ? why : curl_easy_strerror(rc));
    else
        log_warn("login code not sent", "status=%ld", status);
    return -ECOMM;
}

int sale__sms_send(const struct sale_sms_config *c, const char *phone,
                   const char *code, unsigned expires_in_s)
{
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    char body[128], sig[2 * sizeof(mac) + 16], hex[2 * sizeof(mac) + 1];
    struct curl_slist *headers = NULL;
    int n, err = -ECOMM;

    n = snprintf(body, sizeof(body),
                 "{\"phone\":\"%s\",\"code\":\"%s\",\"expiresIn\":%u}", phone,
                 code, expires_in_s);
    if (n < 0 || (size_t)n >= sizeof(body))
        return -EINVAL;
    crypto_auth_hmacsha256(mac, (const unsigned char *)body, (size_t)n,
                           c->secret);
    sodium_bin2hex(hex, sizeof(hex), mac, sizeof(mac));
    snprintf(sig, sizeof(sig), "X-Signature: %s", hex);
    headers = curl_slist_append(headers, "Content-Type: application/json");
    headers = curl_slist_append(headers, sig);
    /* No "Expect: 100-continue" round trip for a small body. */
    headers = curl_slist_append(headers, "Expect:");
    for (int i = 0; i < SMS_TRIES && err; i++)
        err = post_once(c, body, headers);
    curl_slist_free_all(headers);
    return err;
}
