/*
 * admin.c - `seckilld admin add` (admin.h): one line of standard input
 * is the password (never echoed or logged), stored as an Argon2id hash
 * (common/password.h) in MySQL's admins table.
 */
#include "cmd/admin.h"

#include <errno.h>
#include <stdbool.h>
#include <mysql.h>
#include <stdio.h>
#include <string.h>
#include <sodium.h>
#include <termios.h>
#include <unistd.h>

#include "common/password.h"
#include "common/util.h"
#include "store/store.h"

#define PASSWORD_MIN 12
#define PASSWORD_MAX 1024

/* The first line of standard input, without its line end, into buf.
 * Its length, or -1 when it is too short, too long, or holds a NUL. */
static long read_password(char *buf, size_t cap)
{
    size_t n;

    if (!fgets(buf, (int)cap, stdin))
        return -1;
    n = strlen(buf);
    if (n == cap - 1 && buf[n - 1] != '\n' && !feof(stdin))
        return -1; /* longer than the buffer */
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    if (n < PASSWORD_MIN || n > PASSWORD_MAX)
        return -1;
    return (long)n;
}

int admin_add(const struct config *cfg)
{
    char password[PASSWORD_MAX + 3], hash[PASSWORD_HASH_LEN];
    struct store *st;
    int64_t id = 0;
    long len;
    int err;

    if (isatty(fileno(stdin))) {
        /* Typed at a terminal: not shown. */
        struct termios t, quiet;
        bool hidden = tcgetattr(fileno(stdin), &t) == 0;

        fprintf(stderr, "password for %s (one line): ", cfg->admin_username);
        if (hidden) {
            quiet = t;
            quiet.c_lflag &= ~(tcflag_t)ECHO;
            hidden = tcsetattr(fileno(stdin), TCSAFLUSH, &quiet) == 0;
        }
        len = read_password(password, sizeof(password));
        if (hidden)
            tcsetattr(fileno(stdin), TCSAFLUSH, &t);
        fputc('\n', stderr);
    } else {
        len = read_password(password, sizeof(password));
    }
    if (len < 0) {
        sodium_memzero(password, sizeof(password));
        fprintf(stderr,
                "seckilld: admin add: the password is one line of %d to %d "
                "bytes on standard input\n",
                PASSWORD_MIN, PASSWORD_MAX);
        return 2;
    }
    err = password_hash(password, (size_t)len, hash);
    sodium_memzero(password, sizeof(password));
    if (err) {
        fprintf(stderr, "seckilld: admin add: out of memory for the hash\n");
        return 1;
    }
    if (mysql_library_init(0, NULL, NULL)) {
        fprintf(stderr, "seckilld: admin add: mysql library init failed\n");
        return 1;
    }
    st = store_new(&cfg->http.store);
    err = store_admin_insert(st, cfg->admin_username, hash, &id);
    store_free(st);
    mysql_library_end();
    if (err == -EEXIST) {
        fprintf(stderr, "seckilld: admin add: \"%s\" exists already\n",
                cfg->admin_username);
        return 1;
    }
    if (err) {
        fprintf(stderr, "seckilld: admin add: MySQL refused it (%s)\n",
                strerror(-err));
        return 1;
    }
    printf("admin %s id %lld\n", cfg->admin_username, (long long)id);
    return 0;
}
