/*
 * phone.h - phone numbers in one form, E.164 ("+8613800138000"), so that
 * the ways one number is written ("13800138000", "+86 138...",
 * "008613800138000", "013800138000") name one user.
 *
 * A number that starts with "+" or "00" is international: its country
 * code follows. Any other is a national number of the region given
 * (SECKILL_PHONE_REGION, ISO 3166 alpha-2): its trunk prefix is dropped
 * and its country code put in front; for CN a 13-digit number that starts
 * with 86 is taken as written without its "+". Chinese numbers (+86) must
 * be mobile numbers (11 digits from 1); others only within E.164's
 * lengths (7 to 15 digits with the country code).
 */
#ifndef SECKILL_PHONE_H
#define SECKILL_PHONE_H

#include <stdbool.h>
#include <stddef.h>

/* "+" and at most 15 digits, and the NUL. */
#define PHONE_E164_MAX 17
/* A list of country calling codes (SECKILL_SMS_REGIONS) holds at most
 * this many. */
#define PHONE_CALLING_CODES_MAX 16

/* Whether region is one this file knows (its country code and trunk). */
bool phone_region_known(const char *region);
/* The country calling code of a known region ("86" for CN); NULL if it
 * is not one. */
const char *phone_region_cc(const char *region);

/*
 * Write in's E.164 form to out (PHONE_E164_MAX bytes). 0, or -EINVAL with
 * *why saying what is wrong (a static string).
 */
int phone_normalize(const char *in, const char *region,
                    char out[PHONE_E164_MAX], const char **why);

#endif
