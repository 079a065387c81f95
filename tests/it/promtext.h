/*
 * promtext.h - a strict checker and reader of the Prometheus text
 * exposition format (version 0.0.4), for the tests of GET /metrics.
 *
 * prom_parse() accepts a document only if every line is a HELP, TYPE or
 * comment line or a sample, names and label names are valid, label values
 * use only the \\ \" \n escapes, values are floats (or +Inf, -Inf, NaN),
 * each family's samples are contiguous and come after its TYPE line, no
 * series appears twice, HELP and TYPE appear at most once per family,
 * counters are non-negative, and each histogram series has ascending le
 * buckets ending with +Inf, cumulative (non-decreasing) counts, a _sum and
 * a _count equal to its +Inf bucket. Uses no cmocka: the unit tests
 * include promtext.c directly.
 */
#ifndef SECKILL_IT_PROMTEXT_H
#define SECKILL_IT_PROMTEXT_H

#include <stdbool.h>
#include <stddef.h>

struct prom_sample {
    char *name;   /* "seckill_http_requests_total" */
    char *labels; /* as written between the braces, "" for none */
    double value;
    char *family; /* the family it belongs to (histogram: without suffix) */
    bool has_help, has_type;
};

struct prom_doc {
    struct prom_sample *samples;
    size_t n;
    char error[256]; /* why prom_parse() failed, with the line number */
};

/*
 * Parse and check text (NUL-terminated) into doc. Returns 0, or -1 with
 * doc->error set; either way release doc with prom_free().
 */
int prom_parse(const char *text, struct prom_doc *doc);

/* Release what doc owns; zeroes it. */
void prom_free(struct prom_doc *doc);

/*
 * The value of the series name{labels} (labels exactly as written, "" or
 * NULL for none), or -1 when the document has no such series.
 */
double prom_value(const struct prom_doc *doc, const char *name,
                  const char *labels);

#endif
