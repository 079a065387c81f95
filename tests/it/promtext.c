/*
 * promtext.c - the Prometheus text format checker of promtext.h.
 */
#include "tests/it/promtext.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

struct family {
    char *name;
    char type[16]; /* "" until a TYPE line */
    bool help;
    bool started; /* samples seen */
    bool closed;  /* another family's samples came after them */
};

struct parser {
    struct prom_doc *doc;
    struct family *fams;
    size_t nfams;
    size_t current; /* the last sample's family (index), SIZE_MAX: none */
    unsigned line;
    bool has_le; /* the sample being parsed has an le label */
};

__attribute__((format(printf, 2, 3))) static int
parse_fail(struct parser *p, const char *fmt, ...)
{
    va_list ap;
    int n =
        snprintf(p->doc->error, sizeof(p->doc->error), "line %u: ", p->line);

    va_start(ap, fmt);
    vsnprintf(p->doc->error + n, sizeof(p->doc->error) - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static bool name_start(char c, bool colon)
{
    return isalpha((unsigned char)c) || c == '_' || (colon && c == ':');
}

static bool name_char(char c, bool colon)
{
    return name_start(c, colon) || isdigit((unsigned char)c);
}

/* Length of the metric (colon) or label name at s, 0 if none. */
static size_t name_len(const char *s, bool colon)
{
    size_t n = 0;

    if (!name_start(s[0], colon))
        return 0;
    while (name_char(s[n], colon))
        n++;
    return n;
}

static struct family *family_find(struct parser *p, const char *name,
                                  size_t len)
{
    for (size_t i = 0; i < p->nfams; i++)
        if (strlen(p->fams[i].name) == len &&
            strncmp(p->fams[i].name, name, len) == 0)
            return &p->fams[i];
    return NULL;
}

static struct family *family_get(struct parser *p, const char *name, size_t len)
{
    struct family *f = family_find(p, name, len);

    if (f)
        return f;
    p->fams = xrealloc(p->fams, (p->nfams + 1) * sizeof(*p->fams));
    f = &p->fams[p->nfams++];
    memset(f, 0, sizeof(*f));
    f->name = xstrndup(name, len);
    return f;
}

/* A float as the format writes it; returns 0 or -1. */
static int parse_float(const char *s, size_t len, double *out)
{
    char buf[64], *end;

    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (strcmp(buf, "+Inf") == 0 || strcmp(buf, "Inf") == 0) {
        *out = INFINITY;
        return 0;
    }
    if (strcmp(buf, "-Inf") == 0) {
        *out = -INFINITY;
        return 0;
    }
    if (strcmp(buf, "NaN") == 0) {
        *out = NAN;
        return 0;
    }
    /* strtod also takes "inf", "nan" and hex; the format does not. */
    for (size_t i = 0; i < len; i++)
        if (!strchr("0123456789+-.eE", buf[i]))
            return -1;
    *out = strtod(buf, &end);
    return *end == '\0' ? 0 : -1;
}

/* HELP text: only \\ and \n are escapes. */
static int check_help_text(struct parser *p, const char *s)
{
    for (; *s; s++)
        if (*s == '\\' && s[1] != '\\' && s[1] != 'n')
            return parse_fail(p, "bad escape in HELP text");
        else if (*s == '\\')
            s++;
    return 0;
}

static int parse_comment(struct parser *p, const char *s)
{
    bool help = strncmp(s, "# HELP ", 7) == 0;
    bool type = strncmp(s, "# TYPE ", 7) == 0;
    struct family *f;
    size_t n;

    if (!help && !type)
        return 0; /* a plain comment */
    s += 7;
    n = name_len(s, true);
    if (n == 0 || (s[n] != ' ' && s[n] != '\0'))
        return parse_fail(p, "bad metric name after %s",
                          help ? "HELP" : "TYPE");
    f = family_get(p, s, n);
    s += n;
    if (help) {
        if (f->help)
            return parse_fail(p, "second HELP for %s", f->name);
        if (f->started)
            return parse_fail(p, "HELP for %s after its samples", f->name);
        f->help = true;
        return check_help_text(p, *s ? s + 1 : s);
    }
    if (f->type[0])
        return parse_fail(p, "second TYPE for %s", f->name);
    if (f->started)
        return parse_fail(p, "TYPE for %s after its samples", f->name);
    if (*s != ' ')
        return parse_fail(p, "TYPE without a type");
    s++;
    if (strcmp(s, "counter") && strcmp(s, "gauge") && strcmp(s, "histogram") &&
        strcmp(s, "summary") && strcmp(s, "untyped"))
        return parse_fail(p, "unknown type \"%s\"", s);
    snprintf(f->type, sizeof(f->type), "%s", s);
    return 0;
}

/* The family of sample name (len bytes): a histogram's or summary's
 * suffixed series belong to the base name. */
static struct family *sample_family(struct parser *p, const char *name,
                                    size_t len)
{
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};

    for (size_t i = 0; i < 3; i++) {
        size_t sl = strlen(suffixes[i]);
        struct family *f;
        if (len <= sl || strncmp(name + len - sl, suffixes[i], sl) != 0)
            continue;
        f = family_find(p, name, len - sl);
        if (f && (strcmp(f->type, "histogram") == 0 ||
                  (i > 0 && strcmp(f->type, "summary") == 0)))
            return f;
    }
    return family_get(p, name, len);
}

/* Labels from just after '{' up to and including '}'; *s moves past. */
static int parse_labels(struct parser *p, const char **sp, char **raw)
{
    const char *s = *sp, *start = s;
    char seen[16][64];
    size_t nseen = 0;

    while (*s != '}') {
        size_t n = name_len(s, false);
        const char *name = s;
        char value[256];
        size_t vlen = 0;

        if (n == 0)
            return parse_fail(p, "bad label name");
        if (n >= sizeof(seen[0]) || nseen == 16)
            return parse_fail(p, "label name too long or too many labels");
        for (size_t i = 0; i < nseen; i++)
            if (strlen(seen[i]) == n && strncmp(seen[i], name, n) == 0)
                return parse_fail(p, "label %.*s twice", (int)n, name);
        memcpy(seen[nseen], name, n);
        seen[nseen++][n] = '\0';
        s += n;
        if (s[0] != '=' || s[1] != '"')
            return parse_fail(p, "label %.*s without =\"", (int)n, name);
        s += 2;
        while (*s != '"') {
            if (*s == '\0' || *s == '\n')
                return parse_fail(p, "unterminated label value");
            if (*s == '\\') {
                if (s[1] != '\\' && s[1] != '"' && s[1] != 'n')
                    return parse_fail(p, "bad escape in label value");
                s++;
            }
            if (vlen + 1 < sizeof(value))
                value[vlen++] = *s;
            s++;
        }
        value[vlen] = '\0';
        if (n == 2 && strncmp(name, "le", 2) == 0) {
            double le;
            if (parse_float(value, vlen, &le))
                return parse_fail(p, "le=\"%s\" is not a float", value);
            p->has_le = true;
        }
        s++; /* the closing quote */
        if (*s == ',')
            s++;
        else if (*s != '}')
            return parse_fail(p, "expected , or } after a label");
    }
    *raw = xstrndup(start, (size_t)(s - start));
    *sp = s + 1;
    return 0;
}

static int parse_sample(struct parser *p, const char *s)
{
    struct prom_doc *doc = p->doc;
    struct prom_sample smp = {0};
    struct family *f;
    size_t n = name_len(s, true), vlen;
    int err = -1;

    p->has_le = false;
    if (n == 0)
        return parse_fail(p, "not a sample, HELP, TYPE or comment line");
    smp.name = xstrndup(s, n);
    s += n;
    if (*s == '{') {
        s++;
        if (parse_labels(p, &s, &smp.labels))
            goto out;
    } else {
        smp.labels = xstrdup("");
    }
    if (*s != ' ') {
        parse_fail(p, "no space before the value of %s", smp.name);
        goto out;
    }
    while (*s == ' ')
        s++;
    vlen = strcspn(s, " ");
    if (parse_float(s, vlen, &smp.value)) {
        parse_fail(p, "value of %s is not a float", smp.name);
        goto out;
    }
    s += vlen;
    if (*s == ' ') { /* a timestamp: an integer of milliseconds */
        s++;
        if (*s == '-')
            s++;
        if (!*s || strspn(s, "0123456789") != strlen(s)) {
            parse_fail(p, "bad timestamp");
            goto out;
        }
    }

    f = sample_family(p, smp.name, n);
    if ((size_t)(f - p->fams) != p->current) {
        if (f->closed) {
            parse_fail(p, "samples of %s are not together", f->name);
            goto out;
        }
        if (p->current < p->nfams)
            p->fams[p->current].closed = true;
        p->current = (size_t)(f - p->fams);
    }
    f->started = true;
    if (strcmp(f->type, "counter") == 0 && !(smp.value >= 0)) {
        parse_fail(p, "counter %s is %g", smp.name, smp.value);
        goto out;
    }
    if (strcmp(f->type, "histogram") == 0 &&
        strcmp(smp.name + strlen(f->name), "_bucket") == 0 && !p->has_le) {
        parse_fail(p, "bucket without le");
        goto out;
    }
    for (size_t i = 0; i < doc->n; i++)
        if (strcmp(doc->samples[i].name, smp.name) == 0 &&
            strcmp(doc->samples[i].labels, smp.labels) == 0) {
            parse_fail(p, "series %s{%s} twice", smp.name, smp.labels);
            goto out;
        }
    smp.family = xstrdup(f->name);
    smp.has_help = f->help;
    smp.has_type = f->type[0] != '\0';
    doc->samples = xrealloc(doc->samples, (doc->n + 1) * sizeof(smp));
    doc->samples[doc->n++] = smp;
    memset(&smp, 0, sizeof(smp));
    err = 0;
out:
    free(smp.name);
    free(smp.labels);
    free(smp.family);
    return err;
}

/* One histogram series: the buckets, _sum and _count with its labels. */
struct hseries {
    const char *family;
    char *key;
    double last_le, last_count, inf_count, count;
    bool any, inf, sum, has_count;
};

static struct hseries *hseries_get(struct hseries **hs, size_t *n,
                                   const char *family, const char *key)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*hs)[i].family, family) == 0 &&
            strcmp((*hs)[i].key, key) == 0)
            return &(*hs)[i];
    *hs = xrealloc(*hs, (*n + 1) * sizeof(**hs));
    memset(&(*hs)[*n], 0, sizeof(**hs));
    (*hs)[*n].family = family;
    (*hs)[*n].key = xstrdup(key);
    return &(*hs)[(*n)++];
}

/* The labels of s without le, into buf. */
static void labels_without_le(const char *labels, char *buf, size_t cap)
{
    const char *s = labels;
    size_t len = 0;

    buf[0] = '\0';
    while (*s) {
        const char *start = s;
        bool is_le = strncmp(s, "le=\"", 4) == 0;
        s = strchr(s, '"') + 1;
        while (*s != '"')
            s += *s == '\\' ? 2 : 1;
        s++;
        if (!is_le && len < cap)
            len += (size_t)snprintf(buf + len, cap - len, "%s%.*s",
                                    len ? "," : "", (int)(s - start), start);
        if (*s == ',')
            s++;
    }
}

static int check_histograms(struct parser *p)
{
    struct prom_doc *doc = p->doc;
    struct hseries *hs = NULL;
    size_t nhs = 0;
    int err = 0;

    for (size_t i = 0; i < doc->n && !err; i++) {
        struct prom_sample *s = &doc->samples[i];
        struct family *f = family_find(p, s->family, strlen(s->family));
        const char *suffix = s->name + strlen(s->family);
        char key[512];
        struct hseries *h;

        if (strcmp(f->type, "histogram") != 0)
            continue;
        labels_without_le(s->labels, key, sizeof(key));
        h = hseries_get(&hs, &nhs, s->family, key);
        if (strcmp(suffix, "_bucket") == 0) {
            double le = 0;
            const char *at = strstr(s->labels, "le=\"");
            /* the checked value: parse_labels accepted it */
            parse_float(at + 4, strcspn(at + 4, "\""), &le);
            if (h->inf || (h->any && !(le > h->last_le)))
                err = parse_fail(p, "%s{%s}: buckets not in ascending le order",
                                 s->name, key);
            else if (h->any && s->value < h->last_count)
                err = parse_fail(p, "%s{%s}: bucket counts not cumulative",
                                 s->name, key);
            h->any = true;
            h->last_le = le;
            h->last_count = s->value;
            if (isinf(le)) {
                h->inf = true;
                h->inf_count = s->value;
            }
        } else if (strcmp(suffix, "_sum") == 0) {
            h->sum = true;
        } else if (strcmp(suffix, "_count") == 0) {
            h->has_count = true;
            h->count = s->value;
        }
    }
    for (size_t i = 0; i < nhs; i++) {
        struct hseries *h = &hs[i];
        if (!err && (!h->inf || !h->sum || !h->has_count))
            err = parse_fail(p, "histogram %s{%s} lacks +Inf, _sum or _count",
                             h->family, h->key);
        if (!err && h->count != h->inf_count)
            err =
                parse_fail(p, "histogram %s{%s}: _count %g but +Inf bucket %g",
                           h->family, h->key, h->count, h->inf_count);
        free(h->key);
    }
    free(hs);
    return err;
}

int prom_parse(const char *text, struct prom_doc *doc)
{
    struct parser p = {.doc = doc, .current = SIZE_MAX};
    const char *s = text;
    int err = 0;

    memset(doc, 0, sizeof(*doc));
    while (*s && !err) {
        const char *nl = strchr(s, '\n');
        char *line;

        p.line++;
        if (!nl) {
            err = parse_fail(&p, "the last line does not end with a newline");
            break;
        }
        line = xstrndup(s, (size_t)(nl - s));
        if (line[0] == '#')
            err = parse_comment(&p, line);
        else if (line[0] != '\0')
            err = parse_sample(&p, line);
        free(line);
        s = nl + 1;
    }
    if (!err)
        err = check_histograms(&p);
    for (size_t i = 0; i < p.nfams; i++)
        free(p.fams[i].name);
    free(p.fams);
    return err;
}

void prom_free(struct prom_doc *doc)
{
    for (size_t i = 0; i < doc->n; i++) {
        free(doc->samples[i].name);
        free(doc->samples[i].labels);
        free(doc->samples[i].family);
    }
    free(doc->samples);
    memset(doc, 0, sizeof(*doc));
}

double prom_value(const struct prom_doc *doc, const char *name,
                  const char *labels)
{
    for (size_t i = 0; i < doc->n; i++)
        if (strcmp(doc->samples[i].name, name) == 0 &&
            strcmp(doc->samples[i].labels, labels ? labels : "") == 0)
            return doc->samples[i].value;
    return -1;
}
