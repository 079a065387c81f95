/*
 * web.h - the files of web/ (and docs/openapi.json) compiled into the
 * binary by scripts/embed-web.sh, which writes the table web_files[] of
 * build/gen/web_files.c, sorted by path. Served by web_get()
 * (endpoints.h).
 */
#ifndef SECKILL_HANDLERS_WEB_H
#define SECKILL_HANDLERS_WEB_H

#include <stddef.h>

struct web_file {
    const char *path; /* the URL path: "/", "/admin", "/static/app.js" */
    const char *type; /* Content-Type */
    const unsigned char *data;
    size_t len;
    const char *etag; /* a strong entity tag from the content's SHA-256 */
};

extern const struct web_file web_files[];
extern const size_t web_file_count;

#endif
