/*
 * phone.c - phone numbers in E.164 form (see phone.h).
 */
#include "common/phone.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The regions a national number may be of: the country code, and the
 * trunk prefix dialled before a national number ("" for none). */
static const struct region {
    const char *iso, *cc, *trunk;
} regions[] = {
    {"CN", "86", "0"}, {"HK", "852", ""}, {"MO", "853", ""}, {"TW", "886", "0"},
    {"SG", "65", ""},  {"JP", "81", "0"}, {"KR", "82", "0"}, {"IN", "91", "0"},
    {"GB", "44", "0"}, {"DE", "49", "0"}, {"FR", "33", "0"}, {"US", "1", "1"},
    {"CA", "1", "1"},  {"AU", "61", "0"},
};

static const struct region *region_of(const char *iso)
{
    for (size_t i = 0; i < sizeof(regions) / sizeof(regions[0]); i++)
        if (iso && strcasecmp(regions[i].iso, iso) == 0)
            return &regions[i];
    return NULL;
}

bool phone_region_known(const char *region)
{
    return region_of(region) != NULL;
}

const char *phone_region_cc(const char *region)
{
    const struct region *r = region_of(region);

    return r ? r->cc : NULL;
}

static bool all_digits(const char *s)
{
    return *s && strspn(s, "0123456789") == strlen(s);
}

int phone_normalize(const char *in, const char *region,
                    char out[PHONE_E164_MAX], const char **why)
{
    const struct region *r = region_of(region);
    const char *digits;
    char full[PHONE_E164_MAX + 8];
    size_t n;

    *why = NULL;
    out[0] = '\0';
    if (in[0] == '+')
        digits = in + 1;
    else if (in[0] == '0' && in[1] == '0')
        digits = in + 2;
    else
        digits = NULL;
    if (digits) {
        /* International: the country code is in the number. */
        if (!all_digits(digits) || digits[0] == '0') {
            *why = "an international number is + (or 00) and digits, "
                   "the first not 0";
            return -EINVAL;
        }
        snprintf(full, sizeof(full), "%.20s", digits);
    } else {
        if (!all_digits(in)) {
            *why = "digits, with an optional + or 00 in front";
            return -EINVAL;
        }
        if (!r) {
            *why = "a national number of an unknown region";
            return -EINVAL;
        }
        n = strlen(in);
        /* Chinese numbers written with the country code but no "+". */
        if (strcmp(r->iso, "CN") == 0 && n == 13 && strncmp(in, "86", 2) == 0)
            in += 2;
        else if (r->trunk[0] && in[0] == r->trunk[0] && n > strlen(r->cc) + 6)
            in++; /* the trunk prefix */
        snprintf(full, sizeof(full), "%s%.20s", r->cc, in);
    }
    n = strlen(full);
    if (n < 7 || n > 15) {
        *why = "7 to 15 digits with the country code (E.164)";
        return -EINVAL;
    }
    /* China: SMS reaches mobile numbers, 11 digits from 1. */
    if (strncmp(full, "86", 2) == 0 && (n != 13 || full[2] != '1')) {
        *why = "a Chinese mobile number is 11 digits starting with 1";
        return -EINVAL;
    }
    out[0] = '+';
    memcpy(out + 1, full, n + 1);
    return 0;
}
