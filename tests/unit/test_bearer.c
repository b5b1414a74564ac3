/*
 * test_bearer.c - the admin bearer token (RFC 6750 section 2.1): what a
 * token file may hold, and which Authorization fields pass. Prints `ok NAME`
 * or `FAIL NAME: why` per check (unit.h); exits 1 if any check failed.
 */
#include <stdio.h>
#include <string.h>

#include "bearer.h"
#include "unit.h"

#define TOKEN "0123456789abcdef0123456789abcdef0123456789abcdef"

int main(void)
{
    static const struct {
        const char *name, *text;
        const char *reason;         /* a word of the refusal, NULL: accepted */
    } files[] = {
        { "a token and a newline", TOKEN "\n", NULL },
        { "a token without a newline", TOKEN, NULL },
        { "a token and CRLF", TOKEN "\r\n", NULL },
        { "base64 with padding", "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789+/_-.~==\n", NULL },
        { "an empty file", "", "empty" },
        { "a newline only", "\n", "empty" },
        { "31 characters", "0123456789abcdef0123456789abcde\n", "shorter than 32" },
        { "a space inside", "0123456789abcdef 0123456789abcdef\n", "cannot carry" },
        { "a leading space", " " TOKEN "\n", "cannot carry" },
        { "two lines", TOKEN "\n" TOKEN "\n", "cannot carry" },
        { "padding inside", "0123456789abcdef=0123456789abcdef\n", "cannot carry" },
    };
    struct bearer_token t;

    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        const char *why = bearer_token_set(&t, files[i].text, strlen(files[i].text));

        UNIT_CHECK(files[i].name, files[i].reason == NULL
                                      ? why == NULL
                                      : why != NULL && strstr(why, files[i].reason) != NULL,
                   "%s", why != NULL ? why : "accepted");
    }
    {
        char big[BEARER_TOKEN_MAX_LEN + 2];

        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        UNIT_CHECK("longer than 1024", bearer_token_set(&t, big, strlen(big)) != NULL,
                   "accepted");
    }
    /* known answer: the fingerprint is the first 12 hex of SHA-256 of the token, without its newline */
    UNIT_CHECK("fingerprint", bearer_token_set(&t, TOKEN "\n", strlen(TOKEN) + 1) == NULL &&
                                  strcmp(t.fingerprint, "34c26e154bab") == 0,
               "%s", t.fingerprint);

    static const struct {
        const char *name, *value;
        int lines;
        enum bearer_verdict want;
    } fields[] = {
        { "the token", "Bearer " TOKEN, 1, BEARER_OK },
        { "the scheme in lower case", "bearer " TOKEN, 1, BEARER_OK },
        { "two spaces after the scheme", "Bearer  " TOKEN, 1, BEARER_OK },
        { "trailing white space", "Bearer " TOKEN " \t", 1, BEARER_OK },
        { "no field", NULL, 0, BEARER_MISSING },
        { "another scheme", "Basic " TOKEN, 1, BEARER_MISSING },
        { "a scheme that starts like Bearer", "Bearerx " TOKEN, 1, BEARER_MISSING },
        { "the scheme alone", "Bearer", 1, BEARER_INVALID },
        { "the scheme and a space", "Bearer ", 1, BEARER_INVALID },
        { "another token", "Bearer " TOKEN "0", 1, BEARER_INVALID },
        { "the token cut short", "Bearer 0123456789abcdef0123456789abcdef0123456789abcde", 1,
          BEARER_INVALID },
        { "the token in another case", "Bearer 0123456789ABCDEF0123456789abcdef0123456789abcdef",
          1, BEARER_INVALID },
        { "the token and a second word", "Bearer " TOKEN " x", 1, BEARER_INVALID },
        { "the token on two lines", "Bearer " TOKEN, 2, BEARER_INVALID },
        { "no space after the scheme", "Bearer" TOKEN, 1, BEARER_MISSING },
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        enum bearer_verdict got = bearer_check(&t, fields[i].value, fields[i].lines);

        UNIT_CHECK(fields[i].name, got == fields[i].want, "got %d, want %d", (int)got,
                   (int)fields[i].want);
    }
    UNIT_DONE();
}
