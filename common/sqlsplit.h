/*
 * sqlsplit.h - a text of SQL statements (a migration file) cut into
 * statements, for a client that sends one statement at a time.
 */
#ifndef SECKILL_SQLSPLIT_H
#define SECKILL_SQLSPLIT_H

#include <stdbool.h>
#include <stddef.h>

/*
 * The next statement of the NUL-terminated text at *p: *start and *len
 * span it up to, without, the ';' that ends it outside quotes ('', "",
 * ``, with backslash escapes) and comments ("-- " to the end of the line,
 * and slash-star ones); the last one may lack its ';'. *p moves past it.
 * A piece of only blanks and comments is skipped; a conditional comment
 * (slash-star-!) counts as a statement. Returns false at the end of the
 * text. Pure: no allocation, thread-safe.
 */
bool sql_split_next(const char **p, const char **start, size_t *len);

#endif
