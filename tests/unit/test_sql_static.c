/*
 * test_sql_static.c - the service only ever runs SQL text that is fixed at
 * compile time: it reads the sources (from the repository root, where
 * tests/run.sh starts the tests) and fails on any query built at run
 * time. Values reach MySQL only as bound parameters of prepared
 * statements, so no input can be executed as SQL.
 *
 * The rules, over every production source (cmd, common, handlers, idgen,
 * lock, store):
 *   1. mysql_query, mysql_send_query and the escape functions are not
 *      used at all (escaping implies SQL built from strings).
 *   2. The SQL argument of mysql_real_query and mysql_stmt_prepare (and
 *      their non-blocking _start forms) is a string literal, an entry of a
 *      stmt_sql[] table, or the parameter of one of the two wrappers,
 *      store_query(st, sql) and the lock's struct call .sql.
 *   3. store_query() is only called with a string literal, and .sql is
 *      only set from stmt_sql[] or a `static const char NAME[] = "..."`.
 *   4. stmt_sql tables are arrays of constant pointers to literals.
 *   5. No string literal formats SQL: a literal holding an SQL keyword and
 *      a printf conversion (%s, %d, %lld ...) is refused.
 * The checker is tested on bad code first, so a checker that finds
 * nothing cannot pass unnoticed.
 */
#include <ctype.h>
#include <glob.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/util.h"

/* ---- a small C lexer: comments out, literals kept ---- */

/* A copy of src with every comment replaced by spaces (newlines kept). */
static char *strip_comments(const char *src)
{
    size_t n = strlen(src);
    char *out = xmalloc(n + 1);
    size_t i = 0;

    while (i < n) {
        char c = src[i];
        if (c == '"' || c == '\'') { /* a literal: copy it whole */
            out[i] = src[i];
            i++;
            while (i < n && src[i] != c) {
                if (src[i] == '\\' && i + 1 < n) {
                    out[i] = src[i];
                    i++;
                }
                out[i] = src[i];
                i++;
            }
            if (i < n) {
                out[i] = src[i];
                i++;
            }
        } else if (c == '/' && src[i + 1] == '*') {
            while (i < n && !(src[i] == '*' && src[i + 1] == '/')) {
                out[i] = src[i] == '\n' ? '\n' : ' ';
                i++;
            }
            if (i < n) {
                out[i] = out[i + 1] = ' ';
                i += 2;
            }
        } else if (c == '/' && src[i + 1] == '/') {
            while (i < n && src[i] != '\n')
                out[i++] = ' ';
        } else {
            out[i] = c;
            i++;
        }
    }
    out[n] = '\0';
    return out;
}

/* Skip a string or char literal starting at p; returns the end. */
static const char *skip_literal(const char *p)
{
    char q = *p++;

    while (*p && *p != q) {
        if (*p == '\\' && p[1])
            p++;
        p++;
    }
    return *p ? p + 1 : p;
}

#define ARGS_MAX 8

struct call {
    const char *name_at;  /* where the name starts */
    char *args[ARGS_MAX]; /* trimmed argument texts, owned */
    int nargs;
};

static void call_free(struct call *c)
{
    for (int i = 0; i < c->nargs; i++)
        free(c->args[i]);
    c->nargs = 0;
}

static char *trimmed(const char *s, const char *e)
{
    while (s < e && isspace((unsigned char)*s))
        s++;
    while (e > s && isspace((unsigned char)e[-1]))
        e--;
    return xstrndup(s, (size_t)(e - s));
}

/*
 * Find the next call of name (a whole identifier followed by '(') at or
 * after *pos outside literals, and split its top-level arguments. Returns
 * false when there is none.
 */
static bool next_call(const char *src, const char **pos, const char *name,
                      struct call *c)
{
    size_t nl = strlen(name);
    const char *p = *pos;

    while (*p) {
        if (*p == '"' || *p == '\'') {
            p = skip_literal(p);
            continue;
        }
        bool start =
            p == src || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        const char *q = p + nl;
        if (!start || strncmp(p, name, nl) != 0 || isalnum((unsigned char)*q) ||
            *q == '_') {
            p++;
            continue;
        }
        while (isspace((unsigned char)*q))
            q++;
        if (*q != '(') {
            p++;
            continue;
        }
        /* Split the arguments at depth-one commas. */
        const char *arg = ++q;
        int depth = 1;
        c->name_at = p;
        c->nargs = 0;
        while (*q && depth) {
            if (*q == '"' || *q == '\'') {
                q = skip_literal(q);
                continue;
            }
            if (*q == '(' || *q == '[' || *q == '{')
                depth++;
            else if (*q == ')' || *q == ']' || *q == '}')
                depth--;
            if ((depth == 0 || (depth == 1 && *q == ',')) &&
                c->nargs < ARGS_MAX) {
                c->args[c->nargs++] = trimmed(arg, q);
                arg = q + 1;
            }
            q++;
        }
        *pos = q;
        /* The function's own definition is not a call. */
        while (isspace((unsigned char)*q))
            q++;
        if (*q == '{') {
            call_free(c);
            p = q;
            continue;
        }
        return true;
    }
    *pos = p;
    return false;
}

/* ---- the rules ---- */

static bool is_literal(const char *a)
{
    /* One or more adjacent literals: "a" "b". */
    if (*a != '"')
        return false;
    while (*a == '"') {
        a = skip_literal(a);
        while (isspace((unsigned char)*a))
            a++;
    }
    return *a == '\0';
}

static bool is_table_entry(const char *a)
{
    return strncmp(a, "stmt_sql[", 9) == 0 && a[strlen(a) - 1] == ']';
}

/* The session settings of common/sqlflavour.c: an entry of its stmt_sql
 * table (held to rule 4 like every other). */
static bool is_session_settings(const char *a)
{
    return strncmp(a, "sql_session_settings(", 21) == 0;
}

/* Line number of p in src. */
static int line_of(const char *src, const char *p)
{
    int line = 1;

    for (; src < p; src++)
        line += *src == '\n';
    return line;
}

struct report {
    int count;
    char text[2048];
};

static void violation(struct report *r, const char *file, const char *src,
                      const char *at, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void violation(struct report *r, const char *file, const char *src,
                      const char *at, const char *fmt, ...)
{
    size_t used = strlen(r->text);
    va_list ap;

    r->count++;
    if (used + 200 >= sizeof(r->text))
        return;
    used += (size_t)snprintf(r->text + used, sizeof(r->text) - used,
                             "%s:%d: ", file, line_of(src, at));
    va_start(ap, fmt);
    used += (size_t)vsnprintf(r->text + used, sizeof(r->text) - used, fmt, ap);
    va_end(ap);
    snprintf(r->text + used, sizeof(r->text) - used, "\n");
}

/* True if src declares `static const char name[] = "`. */
static bool is_const_text(const char *src, const char *name)
{
    char *decl = xasprintf("static const char %s[] =", name);
    const char *p = strstr(src, decl);
    bool ok = false;

    if (p) {
        p += strlen(decl);
        while (isspace((unsigned char)*p))
            p++;
        ok = *p == '"';
    }
    free(decl);
    return ok;
}

/* Rules 1-3 for one call name; sql_arg is the SQL argument's index. */
static void check_calls(const char *file, const char *src, const char *name,
                        int sql_arg, struct report *r)
{
    const char *pos = src;
    struct call c;

    while (next_call(src, &pos, name, &c)) {
        const char *a =
            sql_arg >= 0 && sql_arg < c.nargs ? c.args[sql_arg] : "";

        if (sql_arg < 0)
            violation(r, file, src, c.name_at, "%s() is not allowed", name);
        else if (strcmp(name, "store_query") == 0
                     ? !is_literal(a)
                     : !(is_literal(a) || is_table_entry(a) ||
                         is_session_settings(a) || strcmp(a, "sql") == 0 ||
                         strcmp(a, "c->sql") == 0))
            violation(r, file, src, c.name_at,
                      "%s(): SQL \"%s\" is not fixed text", name, a);
        call_free(&c);
    }
}

/* Rule 3 for `.sql = X` designated initialisers and assignments. */
static void check_sql_fields(const char *file, const char *src,
                             struct report *r)
{
    const char *p = src;

    while ((p = strstr(p, ".sql")) != NULL) {
        const char *q = p + 4, *e;
        char *v;

        if (isalnum((unsigned char)*q) || *q == '_') {
            p = q;
            continue;
        }
        while (isspace((unsigned char)*q))
            q++;
        if (*q != '=' || q[1] == '=') {
            p = q;
            continue;
        }
        q++;
        e = q + strcspn(q, ",;}");
        v = trimmed(q, e);
        if (!(is_literal(v) || is_table_entry(v) || is_const_text(src, v)))
            violation(r, file, src, p, ".sql = %s is not fixed text", v);
        free(v);
        p = e;
    }
}

/* Rule 4: every stmt_sql table is `static const char *const`. */
static void check_tables(const char *file, const char *src, struct report *r)
{
    const char *p = src;

    while ((p = strstr(p, "stmt_sql[")) != NULL) {
        /* A declaration has a type before it on the same line. */
        const char *bol = p;
        while (bol > src && bol[-1] != '\n')
            bol--;
        if (strncmp(bol, "static", 6) == 0 &&
            strncmp(bol, "static const char *const stmt_sql[", 34) != 0)
            violation(r, file, src, p,
                      "stmt_sql must be static const char *const");
        p += 9;
    }
}

/*
 * Whether the literal at p is an argument of a hiredis call (redisCommand,
 * redisAppendCommand...): Redis has its own SELECT, and hiredis formats
 * arguments as separate, binary-safe strings.
 */
static bool in_redis_call(const char *src, const char *p)
{
    int depth = 0;

    while (p > src) {
        p--;
        if (*p == ')')
            depth++;
        else if (*p == '(' && depth-- == 0)
            break;
        else if (*p == ';' || *p == '{' || *p == '}')
            return false;
    }
    while (p > src && isspace((unsigned char)p[-1]))
        p--;
    const char *e = p;
    while (p > src && (isalnum((unsigned char)p[-1]) || p[-1] == '_'))
        p--;
    return e - p > 5 && strncmp(p, "redis", 5) == 0;
}

/* Rule 5: no literal both names an SQL verb and formats a value. */
static void check_formats(const char *file, const char *src, struct report *r)
{
    regex_t re;
    const char *p = src;

    assert_int_equal(
        0, regcomp(&re,
                   "(SELECT|INSERT|UPDATE|DELETE|REPLACE|CALL|WHERE|VALUES)"
                   ".*%[-+ #0-9.*]*(l|ll|z|j|h|hh)?[sdiuxXcfgep]",
                   REG_EXTENDED | REG_NOSUB));
    while (*p) {
        if (*p != '"') {
            p++;
            continue;
        }
        const char *e = skip_literal(p);
        char *lit = xstrndup(p + 1, (size_t)(e - p - 2));
        if (regexec(&re, lit, 0, NULL, 0) == 0 && !in_redis_call(src, p))
            violation(r, file, src, p, "SQL formatted with printf: %.60s", lit);
        free(lit);
        p = e;
    }
    regfree(&re);
}

/* Run every rule over one file's text; adds to r. */
static void check_source(const char *file, const char *raw, struct report *r)
{
    static const char *const banned[] = {
        "mysql_query",
        "mysql_send_query",
        "mysql_real_escape_string",
        "mysql_real_escape_string_quote",
        "mysql_escape_string",
        "mysql_hex_string",
    };
    char *src = strip_comments(raw);

    for (size_t i = 0; i < sizeof(banned) / sizeof(banned[0]); i++)
        check_calls(file, src, banned[i], -1, r);
    check_calls(file, src, "mysql_real_query", 1, r);
    check_calls(file, src, "mysql_real_query_start", 2, r);
    check_calls(file, src, "mysql_stmt_prepare", 1, r);
    check_calls(file, src, "mysql_stmt_prepare_start", 2, r);
    check_calls(file, src, "store_query", 1, r);
    check_sql_fields(file, src, r);
    check_tables(file, src, r);
    check_formats(file, src, r);
    free(src);
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf = NULL;
    size_t cap = 0;

    if (!f) {
        print_error("cannot open %s (run from the repository root)\n", path);
        fail();
    }
    if (getdelim(&buf, &cap, '\0', f) < 0) {
        free(buf);
        buf = xstrdup("");
    }
    fclose(f);
    return buf;
}

/* ---- tests ---- */

static int count_of(const char *code)
{
    struct report r = {0};

    check_source("snippet.c", code, &r);
    return r.count;
}

static void test_checker_finds_built_sql(void **state)
{
    (void)state;
    assert_int_equal(1, count_of("int f(MYSQL *m) { return mysql_query(m, "
                                 "\"SELECT 1\"); }"));
    assert_int_equal(1, count_of("void f(MYSQL *m, char *q) {"
                                 " mysql_real_query(m, q, strlen(q)); }"));
    assert_int_equal(1, count_of("void f(MYSQL_STMT *s, const char *t) {\n"
                                 "  mysql_stmt_prepare(s,\n  t, 3); }"));
    assert_int_equal(1, count_of("void f(struct store *st, char *b) {"
                                 " store_query(st, b); }"));
    assert_int_equal(1, count_of("void f(struct store *st) {"
                                 " store_query(st, stmt_sql[1]); }"));
    assert_int_equal(1, count_of("struct call c = {.op = 1, .sql = buf};"));
    assert_int_equal(1, count_of("void f(char *q, long id) { snprintf(q, 99,"
                                 " \"SELECT * FROM t WHERE id = %ld\", id);"
                                 " }"));
    assert_int_equal(1, count_of("char *q = xasprintf(\"DELETE FROM t WHERE "
                                 "name = '%s'\", name);"));
    assert_int_equal(1, count_of("static const char *stmt_sql[2] = {0};"));
    assert_int_equal(1, count_of("void f(MYSQL *m, char *o, const char *i) {"
                                 " mysql_real_escape_string(m, o, i, 3); }"));
}

static void test_checker_accepts_fixed_sql(void **state)
{
    (void)state;
    assert_int_equal(0, count_of("void f(struct store *st) {"
                                 " store_query(st, \"START TRANSACTION\"); }"));
    assert_int_equal(0, count_of("static const char *const stmt_sql[2] = {"
                                 "\"SELECT 1\", \"SELECT ?\"};\n"
                                 "void f(MYSQL_STMT *s, int id) {"
                                 " mysql_stmt_prepare(s, stmt_sql[id], 9); }"));
    assert_int_equal(0, count_of("void f(redisContext *rc, unsigned db) {"
                                 " redisCommand(rc, \"SELECT %u\", db); }"));
    assert_int_equal(0, count_of("static const char ddl[] = \"CREATE TABLE "
                                 "x (a INT)\";\n"
                                 "struct call c = {.sql = ddl};"));
    /* Comments and log formats are not SQL. */
    assert_int_equal(0, count_of("/* mysql_query(m, q) is banned */\n"
                                 "// store_query(st, q)\n"
                                 "log_warn(\"mysql failed\", \"op=%s\", op);"));
}

static void test_sources_use_prepared_sql_only(void **state)
{
    static const char *const dirs[] = {"cmd",   "common", "handlers",
                                       "idgen", "lock",   "store"};
    struct report r = {0};
    size_t files = 0, store_files = 0;

    (void)state;
    for (size_t d = 0; d < sizeof(dirs) / sizeof(dirs[0]); d++) {
        char pattern[64];
        glob_t g;

        snprintf(pattern, sizeof(pattern), "%s/*.c", dirs[d]);
        if (glob(pattern, 0, NULL, &g) != 0)
            continue;
        for (size_t i = 0; i < g.gl_pathc; i++) {
            char *src = read_file(g.gl_pathv[i]);

            check_source(g.gl_pathv[i], src, &r);
            free(src);
            files++;
            store_files += strcmp(dirs[d], "store") == 0;
        }
        globfree(&g);
    }
    /* Run from the wrong folder, this would check nothing. */
    if (store_files == 0) {
        print_error("no store/*.c found: run from the repository root\n");
        fail();
    }
    if (r.count) {
        print_error("%d place(s) run SQL that is not fixed text:\n%s", r.count,
                    r.text);
        fail();
    }
    print_message("      %zu source files: only fixed SQL text\n", files);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checker_finds_built_sql),
        cmocka_unit_test(test_checker_accepts_fixed_sql),
        cmocka_unit_test(test_sources_use_prepared_sql_only),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
