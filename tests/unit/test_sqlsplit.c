/*
 * test_sqlsplit.c - migration files cut into statements: ';' ends one
 * only outside quotes and comments (the files' comments are prose, with
 * apostrophes and semicolons), pieces of only comments are not sent, the
 * last statement may lack its ';'.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/sqlsplit.h"

/* Cut text and compare with want[0..n), blanks at both ends trimmed. */
static void expect(const char *text, const char *const *want, size_t n)
{
    const char *p = text, *s;
    size_t len, i = 0;

    while (sql_split_next(&p, &s, &len)) {
        while (len && (*s == ' ' || *s == '\n')) {
            s++;
            len--;
        }
        while (len && (s[len - 1] == ' ' || s[len - 1] == '\n'))
            len--;
        if (i >= n)
            fail_msg("statement %zu too many: \"%.*s\"", i, (int)len, s);
        if (strlen(want[i]) != len || memcmp(want[i], s, len) != 0)
            fail_msg("statement %zu: \"%.*s\", want \"%s\"", i, (int)len, s,
                     want[i]);
        i++;
    }
    assert_int_equal(n, i);
}

static void test_plain(void **state)
{
    static const char *const want[] = {"CREATE TABLE a (x INT)",
                                       "ALTER TABLE a ADD y INT"};

    (void)state;
    expect("CREATE TABLE a (x INT);\nALTER TABLE a ADD y INT;\n", want, 2);
    expect("CREATE TABLE a (x INT);\nALTER TABLE a ADD y INT", want, 2);
}

static void test_comments(void **state)
{
    static const char *const want[] = {
        "-- a sale's orders; by id\nALTER TABLE o ADD KEY k (v, id)",
        "UPDATE s SET x = 1 /* not; the end */ WHERE x IS NULL"};

    (void)state;
    expect("-- a sale's orders; by id\nALTER TABLE o ADD KEY k (v, id);\n"
           "UPDATE s SET x = 1 /* not; the end */ WHERE x IS NULL;\n"
           "-- only a comment; at the end\n/* and another; */\n",
           want, 2);
}

static void test_quotes(void **state)
{
    static const char *const want[] = {
        "INSERT INTO t VALUES ('a;b', \"c;d\", 'it\\'s;')",
        "SELECT `odd;name` FROM t", "SELECT '--; not a comment'"};

    (void)state;
    expect("INSERT INTO t VALUES ('a;b', \"c;d\", 'it\\'s;');\n"
           "SELECT `odd;name` FROM t;SELECT '--; not a comment';",
           want, 3);
}

static void test_empty(void **state)
{
    static const char *const want[] = {"/*!40101 SET x = 1 */"};

    (void)state;
    expect("", NULL, 0);
    expect("  \n;\n;  -- nothing\n", NULL, 0);
    expect("/*!40101 SET x = 1 */;\n", want, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_comments),
        cmocka_unit_test(test_quotes),
        cmocka_unit_test(test_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
