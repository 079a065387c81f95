/*
 * test_metrics.c - common/metrics.c without a server: per-thread counts
 * add up across threads (also threads that have exited), the histograms
 * put observations in the right buckets, and the rendered text passes the
 * Prometheus format checker (tests/it/promtext.c, included here), which
 * itself is shown to refuse broken documents.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/metrics.h"
#include "tests/it/promtext.c"

#define THREADS 8
#define PER_THREAD 200000

static void *count_many(void *arg)
{
    (void)arg;
    for (int i = 0; i < PER_THREAD; i++)
        metrics_count(METRIC_PURCHASE_OK, 1);
    return NULL;
}

/* Concurrent writers each on their own block: nothing is lost. */
static void test_threads_add_up(void **state)
{
    pthread_t th[THREADS];
    uint64_t before = metrics_counter_get(METRIC_PURCHASE_OK);
    (void)state;

    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, count_many, NULL), 0);
    /* Scrapes meanwhile see the sum grow, never shrink. */
    for (int i = 0, last = 0; i < 50; i++) {
        uint64_t now = metrics_counter_get(METRIC_PURCHASE_OK);
        free(metrics_render(NULL, NULL));
        assert_true(now >= before + (uint64_t)last);
        last = (int)(now - before);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    assert_true(metrics_counter_get(METRIC_PURCHASE_OK) - before ==
                (uint64_t)THREADS * PER_THREAD);
}

static void *count_once(void *arg)
{
    metrics_count(METRIC_LOCK_BUSY, (uint64_t)(uintptr_t)arg);
    return NULL;
}

/* Threads that exit keep their counts, one after another (a new thread
 * takes over an exited thread's block) and several at once. */
static void test_exited_threads_keep_counts(void **state)
{
    uint64_t before = metrics_counter_get(METRIC_LOCK_BUSY), want = 0;
    (void)state;

    for (uintptr_t i = 1; i <= 200; i++) {
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, count_once, (void *)i), 0);
        pthread_join(th, NULL);
        want += i;
    }
    for (int round = 0; round < 20; round++) {
        pthread_t th[THREADS];
        for (int i = 0; i < THREADS; i++)
            assert_int_equal(
                pthread_create(&th[i], NULL, count_once, (void *)(uintptr_t)3),
                0);
        for (int i = 0; i < THREADS; i++)
            pthread_join(th[i], NULL);
        want += 3 * THREADS;
    }
    assert_true(metrics_counter_get(METRIC_LOCK_BUSY) - before == want);
}

static char *render(struct prom_doc *doc)
{
    static const char *const names[] = {"/a", "/b/{id}", "unmatched"};
    struct metrics_extra extra = {.route_names = names, .routes = 3};
    size_t len;
    char *text = metrics_render(&extra, &len);

    assert_int_equal(strlen(text), len);
    if (prom_parse(text, doc)) {
        print_error("%s\n%s\n", doc->error, text);
        fail();
    }
    return text;
}

static void test_histograms(void **state)
{
    struct prom_doc doc;
    char *text;
    (void)state;

    /* 0.1 ms, 3 ms, 5 ms exactly (le is inclusive) and 20 s. */
    metrics_request_observe(1, 200, 100000);
    metrics_request_observe(1, 200, 3000000);
    metrics_request_observe(1, 404, 5000000);
    metrics_request_observe(1, 299, 20000000000ull);
    metrics_observe_batch(1);
    metrics_observe_batch(3);
    metrics_observe_batch(4);
    metrics_observe_batch(300);
    text = render(&doc);

#define H "seckill_http_request_duration_seconds"
    assert_true(
        prom_value(&doc, H "_bucket", "route=\"/b/{id}\",le=\"0.0005\"") == 1);
    assert_true(
        prom_value(&doc, H "_bucket", "route=\"/b/{id}\",le=\"0.0025\"") == 1);
    assert_true(
        prom_value(&doc, H "_bucket", "route=\"/b/{id}\",le=\"0.005\"") == 3);
    assert_true(prom_value(&doc, H "_bucket", "route=\"/b/{id}\",le=\"10\"") ==
                3);
    assert_true(
        prom_value(&doc, H "_bucket", "route=\"/b/{id}\",le=\"+Inf\"") == 4);
    assert_true(prom_value(&doc, H "_count", "route=\"/b/{id}\"") == 4);
    double sum = prom_value(&doc, H "_sum", "route=\"/b/{id}\"");
    assert_true(sum > 20.0080 && sum < 20.0082);
    /* A named route with nothing recorded still has its histogram. */
    assert_true(prom_value(&doc, H "_count", "route=\"/a\"") == 0);
#undef H
    assert_true(prom_value(&doc, "seckill_http_requests_total",
                           "route=\"/b/{id}\",code=\"200\"") == 2);
    assert_true(prom_value(&doc, "seckill_http_requests_total",
                           "route=\"/b/{id}\",code=\"404\"") == 1);
    assert_true(prom_value(&doc, "seckill_http_requests_total",
                           "route=\"/b/{id}\",code=\"other\"") == 1);
    /* Nothing recorded: no series. */
    assert_true(prom_value(&doc, "seckill_http_requests_total",
                           "route=\"/a\",code=\"200\"") == -1);

#define B "seckill_purchase_batch_size"
    assert_true(prom_value(&doc, B "_bucket", "le=\"1\"") == 1);
    assert_true(prom_value(&doc, B "_bucket", "le=\"2\"") == 1);
    assert_true(prom_value(&doc, B "_bucket", "le=\"4\"") == 3);
    assert_true(prom_value(&doc, B "_bucket", "le=\"256\"") == 3);
    assert_true(prom_value(&doc, B "_bucket", "le=\"+Inf\"") == 4);
    assert_true(prom_value(&doc, B "_sum", NULL) == 308);
    assert_true(prom_value(&doc, B "_count", NULL) == 4);
#undef B
    assert_true(prom_value(&doc, "seckill_http_open_connections", NULL) == 0);
    assert_true(
        prom_value(&doc, "seckill_process_resident_memory_bytes", NULL) > 0);
    assert_true(prom_value(&doc, "seckill_process_uptime_seconds", NULL) >= 0);
    /* Every series has HELP and TYPE and the prefix. */
    for (size_t i = 0; i < doc.n; i++) {
        assert_true(doc.samples[i].has_help && doc.samples[i].has_type);
        assert_true(strncmp(doc.samples[i].name, "seckill_", 8) == 0);
    }
    prom_free(&doc);
    free(text);
}

/* Out-of-range routes share the last slot; no crash, no lost count. */
static void test_route_overflow(void **state)
{
    struct prom_doc doc;
    char *text;
    char labels[64];
    (void)state;

    metrics_request_observe(METRICS_ROUTES_MAX + 5, 201, 1000);
    text = render(&doc);
    snprintf(labels, sizeof(labels), "route=\"%u\",code=\"201\"",
             METRICS_ROUTES_MAX - 1);
    assert_true(prom_value(&doc, "seckill_http_requests_total", labels) == 1);
    prom_free(&doc);
    free(text);
}

static void expect_refused(const char *text, const char *why)
{
    struct prom_doc doc;
    int rc = prom_parse(text, &doc);

    if (rc == 0)
        print_error("accepted (%s):\n%s", why, text);
    assert_int_equal(rc, -1);
    prom_free(&doc);
}

/* The checker is only worth something if it refuses broken text. */
static void test_checker_refuses(void **state)
{
    struct prom_doc doc;
    (void)state;

    assert_int_equal(prom_parse("# HELP a_total x\n# TYPE a_total counter\n"
                                "a_total{k=\"v\\\"\"} 1\nb 2 1700000000000\n",
                                &doc),
                     0);
    assert_true(prom_value(&doc, "a_total", "k=\"v\\\"\"") == 1);
    assert_true(prom_value(&doc, "b", NULL) == 2);
    prom_free(&doc);

    expect_refused("a 1", "no final newline");
    expect_refused("a{k=\"v\"} x\n", "value not a float");
    expect_refused("a{k=v} 1\n", "unquoted label");
    expect_refused("a{k=\"\\x\"} 1\n", "bad escape");
    expect_refused("a{k=\"1\",k=\"2\"} 1\n", "label twice");
    expect_refused("1a 1\n", "bad name");
    expect_refused("a 1\na 2\n", "series twice");
    expect_refused("a 1\nb 1\na{x=\"1\"} 1\n", "family split");
    expect_refused("a 1\n# TYPE a gauge\n", "TYPE after samples");
    expect_refused("# TYPE a gauge\n# TYPE a gauge\n", "TYPE twice");
    expect_refused("# TYPE a foo\n", "unknown type");
    expect_refused("# TYPE a counter\na -1\n", "negative counter");
    expect_refused("# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
                   "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
                   "not cumulative");
    expect_refused("# TYPE h histogram\nh_bucket{le=\"2\"} 1\n"
                   "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\n"
                   "h_sum 1\nh_count 1\n",
                   "le not ascending");
    expect_refused("# TYPE h histogram\nh_bucket{le=\"1\"} 1\n"
                   "h_sum 1\nh_count 1\n",
                   "no +Inf");
    expect_refused("# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\n"
                   "h_sum 1\nh_count 3\n",
                   "_count != +Inf");
    expect_refused("# TYPE h histogram\nh_bucket{x=\"1\"} 2\n", "no le");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_add_up),
        cmocka_unit_test(test_exited_threads_keep_counts),
        cmocka_unit_test(test_histograms),
        cmocka_unit_test(test_route_overflow),
        cmocka_unit_test(test_checker_refuses),
    };
    return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
