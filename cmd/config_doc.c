/*
 * config_doc.c - the settings table of config.c written out for people:
 * the --help text, the configuration table of docs/configuration.md
 * (markdown) and the man page seckilld(8) (troff). The table's texts are
 * markdown with `code` spans, [links](purchase.md#a-section) relative to
 * docs/, and "{range}"; each writer renders them in its own style.
 */
#include "cmd/config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/config_table.h"
#include "common/util.h"

/* --help's columns: the flag at 2, the variable at 22, the text at 43. */
#define HELP_FLAG_COL 2
#define HELP_ENV_COL 22
#define HELP_TEXT_COL 43
#define HELP_WIDTH 80

/* A growing string; release s with free(3). */
struct text {
    char *s;
    size_t len, cap;
};

static void text_add(struct text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->s = xrealloc(t->s, t->cap);
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}

static void text_puts(struct text *t, const char *s)
{
    text_add(t, s, strlen(s));
}

static void text_printf(struct text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void text_printf(struct text *t, const char *fmt, ...)
{
    char *s;
    va_list ap;

    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        abort(); /* out of memory, as in xmalloc() */
    va_end(ap);
    text_puts(t, s);
    free(s);
}

enum style { STYLE_PLAIN, STYLE_MARKDOWN, STYLE_TROFF };

/*
 * One character of the text at *p in troff: escapes for the backslash and
 * for a minus sign in code (a flag, a literal), and \[uXXXX] for UTF-8, so
 * that the page renders without a preprocessor. The ellipsis is three
 * dots: groff's ASCII device (man in the C locale) has no glyph for it and
 * would drop it with a warning. Advances *p.
 */
static void troff_char(struct text *t, const char **p, const char *end,
                       bool code)
{
    const unsigned char *u = (const unsigned char *)*p;
    unsigned cp;
    size_t n;

    if (u[0] < 0x80) {
        if (u[0] == '\\')
            text_puts(t, "\\e");
        else if (u[0] == '-' && code)
            text_puts(t, "\\-");
        else
            text_add(t, *p, 1);
        (*p)++;
        return;
    }
    n = u[0] >= 0xf0 ? 4 : u[0] >= 0xe0 ? 3 : 2;
    cp = u[0] & (0x7f >> n);
    for (size_t i = 1; i < n && *p + i < end; i++)
        cp = cp << 6 | (u[i] & 0x3f);
    if (cp == 0x2026)
        text_puts(t, "...");
    else
        text_printf(t, "\\[u%04X]", cp);
    *p += n;
}

/*
 * The n bytes of markdown at md into t in style st, "{range}" replaced by
 * s's range. Markdown keeps the rest as is; plain text drops the code
 * marks and a link's target; troff sets code in bold, never hyphenated
 * (\%), and the text of a link to a document of docs/ (a target that is
 * no URL) in italics.
 */
static void render(struct text *t, const char *md, size_t n,
                   const struct config_setting *s, enum style st)
{
    const char *p = md, *end = md + n;
    bool code = false;

    while (p < end) {
        if ((size_t)(end - p) >= 7 && memcmp(p, "{range}", 7) == 0) {
            text_printf(t, "%lld..%lld", (long long)s->min, (long long)s->max);
            p += 7;
            continue;
        }
        if (st == STYLE_MARKDOWN) {
            text_add(t, p++, 1);
            continue;
        }
        if (*p == '`') {
            code = !code;
            if (st == STYLE_TROFF)
                text_puts(t, code ? "\\fB\\%" : "\\fR");
            p++;
            continue;
        }
        if (*p == '[' && !code) {
            const char *close = memchr(p, ']', (size_t)(end - p));
            const char *rp = close && close + 1 < end && close[1] == '('
                                 ? memchr(close, ')', (size_t)(end - close))
                                 : NULL;

            if (rp) {
                bool section =
                    st == STYLE_TROFF &&
                    !memmem(close + 2, (size_t)(rp - close - 2), "://", 3);

                text_puts(t, section ? "\\fI" : "");
                render(t, p + 1, (size_t)(close - p - 1), s, st);
                text_puts(t, section ? "\\fR" : "");
                p = rp + 1;
                continue;
            }
        }
        if (st == STYLE_TROFF)
            troff_char(t, &p, end, code);
        else
            text_add(t, p++, 1);
    }
}

static void render_str(struct text *t, const char *md,
                       const struct config_setting *s, enum style st)
{
    render(t, md, strlen(md), s, st);
}

/* The default of s in words (markdown). */
static const char *default_md(const struct config_setting *s, char *buf,
                              size_t n)
{
    if (!s->def)
        return "required";
    if (s->def_doc)
        return s->def_doc;
    snprintf(buf, n, "`%s`", s->def);
    return buf;
}

/* ---- --help ---- */

/* Go to column to on this line, or on the next if this one is past it. */
static void help_pad(struct text *t, size_t *col, size_t to)
{
    if (*col + 1 > to) {
        text_puts(t, "\n");
        *col = 0;
    }
    for (; *col < to; (*col)++)
        text_puts(t, " ");
}

/* words from column *col on, wrapped at HELP_WIDTH into column indent. */
static void help_wrap(struct text *t, size_t *col, size_t indent,
                      const char *words)
{
    const char *p = words;

    while (*p) {
        size_t n = strcspn(p, " ");

        if (n) {
            if (*col > indent && *col + 1 + n > HELP_WIDTH) {
                text_puts(t, "\n");
                *col = 0;
                help_pad(t, col, indent);
            } else if (*col > indent) {
                text_puts(t, " ");
                (*col)++;
            }
            text_add(t, p, n);
            *col += n;
        }
        p += n + strspn(p + n, " ");
    }
    text_puts(t, "\n");
}

/* "--flag ARG", "--flag[=ARG]" or, for a synopsis, "--flag". */
static void flag_plain(struct text *t, const struct config_setting *s,
                       bool synopsis)
{
    if (s->bare)
        text_printf(t, synopsis ? "--%s" : "--%s[=%s]", s->flag, s->arg);
    else
        text_printf(t, "--%s %s", s->flag, s->arg);
}

/* flag_plain() in troff: the flag in bold, its value in italics. */
static void troff_flag(struct text *t, const struct config_setting *s,
                       bool synopsis)
{
    struct text md = {0};

    text_printf(&md, "`--%s`", s->flag);
    render_str(t, md.s, s, STYLE_TROFF);
    if (s->bare && !synopsis)
        text_printf(t, "[=\\fI%s\\fR]", s->arg);
    else if (!s->bare)
        text_printf(t, " \\fI%s\\fR", s->arg);
    free(md.s);
}

/* One option: the flag, its variable (if any) and what it does. */
static void help_option(struct text *t, const struct config_setting *s)
{
    struct text left = {0}, body = {0};
    char buf[64];
    size_t col = HELP_FLAG_COL;

    flag_plain(&left, s, false);
    render_str(&body, s->help, s, STYLE_PLAIN);
    text_puts(&body, " [");
    render_str(&body, default_md(s, buf, sizeof(buf)), s, STYLE_PLAIN);
    text_puts(&body, "]");

    text_puts(t, "  ");
    text_puts(t, left.s);
    col += left.len;
    if (s->env) {
        help_pad(t, &col, HELP_ENV_COL);
        text_puts(t, s->env);
        col += strlen(s->env);
        help_pad(t, &col, HELP_TEXT_COL);
    } else {
        help_pad(t, &col, HELP_ENV_COL);
    }
    help_wrap(t, &col, s->env ? HELP_TEXT_COL : HELP_ENV_COL, body.s);
    free(left.s);
    free(body.s);
}

/* A command's synopsis: its required options, then [the others]. */
static void synopsis(struct text *t, enum style st, unsigned scope)
{
    for (int pass = 0; pass < 2; pass++) {
        bool required = pass == 0;

        for (size_t i = 0; i < config_settings_count; i++) {
            const struct config_setting *s = &config_settings[i];

            if (s->env || !(s->scope & scope) || (s->def == NULL) != required)
                continue;
            text_puts(t, required ? " " : " [");
            if (st == STYLE_TROFF)
                troff_flag(t, s, true);
            else
                flag_plain(t, s, true);
            text_puts(t, required ? "" : "]");
        }
    }
}

static void write_help(struct text *t)
{
    text_puts(t, "usage: seckilld [serve] [options]\n"
                 "       seckilld token");
    synopsis(t, STYLE_PLAIN, CONFIG_FOR_TOKEN);
    text_puts(t, "\n       seckilld tokens");
    synopsis(t, STYLE_PLAIN, CONFIG_FOR_TOKENS);
    text_puts(t, "\n       seckilld admin add");
    synopsis(t, STYLE_PLAIN, CONFIG_FOR_ADMIN_ADD);
    text_puts(t, "\n       seckilld pow < challenge.json");
    text_puts(t, "\n       seckilld users normalize");
    synopsis(t, STYLE_PLAIN, CONFIG_FOR_USERS_NORMALIZE);
    text_puts(t, "\n       seckilld sms-sink");
    synopsis(t, STYLE_PLAIN, CONFIG_FOR_SMS_SINK);
    text_puts(t, "\n       seckilld migrate");
    synopsis(t, STYLE_PLAIN, CONFIG_FOR_MIGRATE);
    text_puts(t, "\n       seckilld --help | --help-markdown | --help-man\n"
                 "\n"
                 "Every option is also an environment variable; the flag "
                 "wins.\n");
    for (size_t i = 0; i < config_settings_count; i++)
        if (config_settings[i].env)
            help_option(t, &config_settings[i]);
    text_puts(t, "  --help              this text; --help-markdown: the table "
                 "of them in\n"
                 "                      docs/configuration.md; --help-man: "
                 "the man page\n"
                 "                      seckilld(8)\n"
                 "\n"
                 "token prints one bearer token; tokens prints CSV "
                 "user_id,token for load\n"
                 "tests; both read only the secret. admin add makes an admin "
                 "account with the\n"
                 "password read from standard input (12 to 1024 bytes, one "
                 "line), in the MySQL\n"
                 "of SECKILL_MYSQL_URL. pow solves the challenge of GET "
                 "/api/pow read from\n"
                 "standard input: its output is the Seckill-PoW header. "
                 "users normalize\n"
                 "rewrites phones stored before they were kept in E.164 "
                 "form (SECKILL_MYSQL_URL,\n"
                 "SECKILL_PHONE_REGION). sms-sink receives the login codes "
                 "of\n"
                 "SECKILL_SMS_WEBHOOK and prints them, for development "
                 "(SECKILL_BIND,\n"
                 "SECKILL_PORT, SECKILL_SMS_SECRET). migrate brings the "
                 "database of\n"
                 "SECKILL_MYSQL_URL up to the schema this binary needs (its "
                 "migrations are\n"
                 "compiled in; the service refuses to start on an older "
                 "one). Their options:\n");
    for (size_t i = 0; i < config_settings_count; i++)
        if (!config_settings[i].env)
            help_option(t, &config_settings[i]);
}

/* ---- the table of docs/configuration.md ---- */

static void write_markdown(struct text *t)
{
    text_puts(t, "| variable | flag | default | meaning |\n"
                 "|---|---|---|---|\n");
    for (size_t i = 0; i < config_settings_count; i++) {
        const struct config_setting *s = &config_settings[i];
        char buf[64];

        if (!s->env)
            continue;
        text_printf(t, "| `%s` | `--%s` | ", s->env, s->flag);
        render_str(t, default_md(s, buf, sizeof(buf)), s, STYLE_MARKDOWN);
        text_puts(t, " | ");
        render_str(t, s->doc, s, STYLE_MARKDOWN);
        text_puts(t, " |\n");
    }
}

/* ---- seckilld(8) ---- */

/* A paragraph's line: never one that troff would take for a request. */
static void man_line(struct text *t, const char *md,
                     const struct config_setting *s)
{
    if (md[0] == '.' || md[0] == '\'')
        text_puts(t, "\\&");
    render_str(t, md, s, STYLE_TROFF);
    text_puts(t, "\n");
}

/* .TP with the flag (and its variable), then its meaning and default. */
static void man_option(struct text *t, const struct config_setting *s)
{
    char buf[64];

    text_puts(t, ".TP\n");
    troff_flag(t, s, false);
    if (s->env) {
        text_puts(t, ", ");
        text_printf(t, "\\fB%s\\fR", s->env);
    }
    text_puts(t, "\n");
    man_line(t, s->env ? s->doc : s->help, s);
    text_puts(t, ".br\n");
    if (s->def) {
        text_puts(t, "Default: ");
        render_str(t, default_md(s, buf, sizeof(buf)), s, STYLE_TROFF);
        text_puts(t, ".\n");
    } else {
        text_puts(t, "Required.\n");
    }
}

static void write_man(struct text *t)
{
    text_puts(t,
              ".\\\" seckilld(8), written by `seckilld --help-man` from the "
              "settings table\n"
              ".\\\" of cmd/config.c: edit that, then run `make config-docs`.\n"
              ".TH SECKILLD 8 \"\" \"seckilld\" \"System Manager's Manual\"\n"
              ".SH NAME\n"
              "seckilld \\- flash-sale HTTP service\n"
              ".SH SYNOPSIS\n"
              ".nf\n"
              "\\fBseckilld\\fR [\\fBserve\\fR] [\\fIoptions\\fR]\n"
              "\\fBseckilld token\\fR");
    synopsis(t, STYLE_TROFF, CONFIG_FOR_TOKEN);
    text_puts(t, "\n\\fBseckilld tokens\\fR");
    synopsis(t, STYLE_TROFF, CONFIG_FOR_TOKENS);
    text_puts(t, "\n\\fBseckilld admin add\\fR");
    synopsis(t, STYLE_TROFF, CONFIG_FOR_ADMIN_ADD);
    text_puts(t, "\n\\fBseckilld pow\\fR < \\fIchallenge.json\\fR");
    text_puts(t, "\n\\fBseckilld users normalize\\fR");
    synopsis(t, STYLE_TROFF, CONFIG_FOR_USERS_NORMALIZE);
    text_puts(t, "\n\\fBseckilld sms\\-sink\\fR");
    synopsis(t, STYLE_TROFF, CONFIG_FOR_SMS_SINK);
    text_puts(t, "\n\\fBseckilld migrate\\fR");
    synopsis(t, STYLE_TROFF, CONFIG_FOR_MIGRATE);
    text_puts(
        t, "\n\\fBseckilld \\-\\-help\\fR | \\fB\\-\\-help\\-markdown\\fR | "
           "\\fB\\-\\-help\\-man\\fR\n"
           ".fi\n"
           ".SH DESCRIPTION\n"
           "\\fBseckilld\\fR sells vouchers in flash sales over HTTP. The "
           "orders are in\n"
           "MySQL (or MariaDB); Redis holds the purchase locks, caches and "
           "rate limits,\n"
           "and decides the sales of async vouchers. It never sells more "
           "than the stock\n"
           "nor two orders of one voucher to one user, and stays fast when a "
           "crowd buys\n"
           "the same voucher.\n"
           ".PP\n"
           "Every setting is an environment variable and a flag; the flag "
           "wins. A\n"
           "missing or malformed setting, or an unknown or abbreviated flag, "
           "stops\n"
           "\\fBseckilld\\fR with one line on standard error naming it, and "
           "exit status 2.\n"
           "Names in italics are sections of the documents in the "
           "source's \\fIdocs/\\fR,\n"
           "which explain more.\n"
           ".SH OPTIONS\n");
    for (size_t i = 0; i < config_settings_count; i++)
        if (config_settings[i].env)
            man_option(t, &config_settings[i]);
    text_puts(
        t,
        ".TP\n"
        "\\fB\\-\\-help\\fR, \\fB\\-h\\fR\n"
        "print the options; \\fB\\-\\-help\\-markdown\\fR prints the "
        "table of them in\n"
        "\\fIdocs/configuration.md\\fR, "
        "\\fB\\-\\-help\\-man\\fR this page.\n"
        ".SH COMMANDS\n"
        ".TP\n"
        ".B serve\n"
        "the default: serve HTTP until \\fBSIGTERM\\fR or "
        "\\fBSIGINT\\fR.\n"
        ".TP\n"
        ".B token\n"
        "print one bearer token, signed with the secret.\n"
        ".TP\n"
        ".B tokens\n"
        "print a header line \\fBuser_id,token\\fR, then a line of CSV for "
        "each user,\n"
        "for load tests.\n"
        ".TP\n"
        ".B admin add\n"
        "make an admin account, with the password read from standard input "
        "(12 to 1024\n"
        "bytes, one line), in the database of \\fBSECKILL_MYSQL_URL\\fR; "
        "it logs in at\n"
        "\\fBPOST /api/admin/login\\fR.\n"
        ".TP\n"
        ".B pow\n"
        "read a proof-of-work challenge (the answer of \\fBGET /api/pow\\fR) "
        "on standard\n"
        "input and print its solution, the value of the "
        "\\fBSeckill-PoW\\fR header.\n"
        ".TP\n"
        ".B users normalize\n"
        "rewrite the phones of users stored before phones were kept in "
        "E.164 form\n"
        "(with \\fBSECKILL_PHONE_REGION\\fR); when two rows are one "
        "number the older\n"
        "keeps it and the other is merged into it and logged out. Run it "
        "once after\n"
        "upgrading, before taking traffic; a second run changes nothing.\n"
        ".TP\n"
        ".B sms\\-sink\n"
        "receive the login codes that \\fBSECKILL_SMS_WEBHOOK\\fR sends "
        "(on \\fBSECKILL_BIND\\fR:\\fBSECKILL_PORT\\fR),\n"
        "check each one's \\fBX\\-Signature\\fR with "
        "\\fBSECKILL_SMS_SECRET\\fR and print it on standard\n"
        "output instead of sending an SMS: for development and the "
        "compose file.\n"
        ".TP\n"
        ".B migrate\n"
        "apply the schema migrations compiled into the binary that the "
        "database of\n"
        "\\fBSECKILL_MYSQL_URL\\fR has not had, in order, one line "
        "each; record them in its\n"
        "\\fBschema_version\\fR table. Safe to run again and from two "
        "hosts at once. Exit\n"
        "status 0 up to date, 1 a migration failed or a recorded one was "
        "changed, 2 bad\n"
        "settings. The service refuses to start on a database that is "
        "behind: run\n"
        "it first after an upgrade. A read replica gets the changes by "
        "replication.\n"
        ".PP\n"
        "\\fBtoken\\fR and \\fBtokens\\fR read only "
        "\\fBSECKILL_SECRET\\fR of the settings above. The\n"
        "commands take these options:\n");
    for (size_t i = 0; i < config_settings_count; i++)
        if (!config_settings[i].env)
            man_option(t, &config_settings[i]);
    text_puts(
        t, ".SH SIGNALS\n"
           ".TP\n"
           ".B SIGTERM\n"
           "drain: answer \\fB/readyz\\fR 503 and keep serving "
           "\\fB\\-\\-drain\\-s\\fR seconds,\n"
           "then stop: refuse new work, answer every request still waiting, "
           "and exit.\n"
           ".TP\n"
           ".B SIGINT\n"
           "stop at once; so does a second signal during the drain.\n"
           ".SH EXIT STATUS\n"
           ".TP\n"
           ".B 0\n"
           "stopped by a signal, or printed what was asked.\n"
           ".TP\n"
           ".B 1\n"
           "could not start serving (the address is taken, the lock "
           "backend's URL is\n"
           "refused, a library failed to start), or could not write the "
           "tokens.\n"
           ".TP\n"
           ".B 2\n"
           "a missing or malformed setting, or an unknown command or option; "
           "or\n"
           "\\fB\\-\\-purchase\\-mode async\\fR on a Redis that may lose "
           "acknowledged writes,\n"
           "without \\fB\\-\\-async\\-accept\\-loss 1\\fR.\n"
           ".SH SEE ALSO\n"
           "The README of the source, and in its \\fIdocs/\\fR: "
           "\\fIproduction.md\\fR (a\n"
           "checklist before a sale takes traffic), "
           "\\fIlocks.md\\fR (the lock\n"
           "backends), \\fIreliability.md\\fR (what each failure costs), "
           "\\fIperformance.md\\fR.\n");
}

int config_doc_write(FILE *f, enum config_doc doc)
{
    struct text t = {0};
    int ret = 0;

    switch (doc) {
    case CONFIG_DOC_HELP:
        write_help(&t);
        break;
    case CONFIG_DOC_MARKDOWN:
        write_markdown(&t);
        break;
    case CONFIG_DOC_MAN:
        write_man(&t);
        break;
    }
    if (fwrite(t.s, 1, t.len, f) != t.len || fflush(f) != 0)
        ret = -EIO;
    free(t.s);
    return ret;
}
