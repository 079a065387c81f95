/*
 * buyers.c - a buyer's login (see sale.h): a six-digit code kept in Redis
 * for the phone, checked once, and the phone's user, made on its first
 * login. The handlers turn the user into a signed token.
 */
#include "sale/internal.h"

#include <stdio.h>
#include <sodium.h>

int sale_login_code_issue(struct sale *s, const char *phone, char code[7])
{
    snprintf(code, 7, "%06u", randombytes_uniform(1000000));
    return store_code_put(sale__store(s), phone, code, SALE_CODE_TTL_S);
}

int sale_login(struct sale *s, const char *phone, const char *code, bool *ok,
               int64_t *user_id)
{
    struct store *st = sale__store(s);
    enum store_code outcome;
    int err;

    *ok = false;
    err = store_code_check(st, phone, code, SALE_CODE_TRIES, &outcome);
    if (err || outcome != STORE_CODE_OK)
        return err;
    err = store_user_login(st, phone, user_id);
    if (!err)
        *ok = true;
    return err;
}
