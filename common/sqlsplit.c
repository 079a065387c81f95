/*
 * sqlsplit.c - SQL text cut into statements (see sqlsplit.h).
 */
#include "common/sqlsplit.h"

#include <string.h>

static bool blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

bool sql_split_next(const char **p, const char **start, size_t *len)
{
    for (;;) {
        const char *s = *p, *c = s;
        bool body = false;
        char quote = 0;

        if (!*s)
            return false;
        for (; *c; c++) {
            if (quote) {
                if (*c == '\\' && c[1])
                    c++;
                else if (*c == quote)
                    quote = 0;
            } else if (c[0] == '-' && c[1] == '-' &&
                       (blank(c[2]) || c[2] == '\0')) {
                while (c[1] && c[1] != '\n')
                    c++;
            } else if (c[0] == '/' && c[1] == '*') {
                const char *e = strstr(c + 2, "*/");

                if (c[2] == '!' || (c[2] == 'M' && c[3] == '!'))
                    body = true;
                c = e ? e + 1 : c + strlen(c) - 1;
            } else if (*c == ';') {
                break;
            } else if (*c == '\'' || *c == '"' || *c == '`') {
                quote = *c;
                body = true;
            } else if (!blank(*c)) {
                body = true;
            }
        }
        *p = *c ? c + 1 : c;
        if (body) {
            *start = s;
            *len = (size_t)(c - s);
            return true;
        }
    }
}
