/*
 * bearer.c - the admin bearer token: kept as its SHA-256, checked in constant time.
 */
#include "bearer.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "hex.h"

static bool bearer_is_token68_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("-._~+/", c) != NULL);
}

/* RFC 6750 section 2.1: b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=" */
static bool bearer_is_b64token(const char *s, size_t len)
{
    size_t n = 0;

    while (n < len && bearer_is_token68_char(s[n]))
        n++;
    if (n == 0)
        return false;
    while (n < len && s[n] == '=')
        n++;
    return n == len;
}

static void bearer_digest(const char *token, size_t len, unsigned char *digest)
{
    unsigned int digest_len = 0;

    /* no token can be checked without it: refuse to run rather than open the door */
    if (EVP_Digest(token, len, digest, &digest_len, EVP_sha256(), NULL) != 1 ||
        digest_len != BEARER_DIGEST_LEN)
        abort();
}

const char *bearer_token_set(struct bearer_token *t, const char *text, size_t len)
{
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
        len--;
    if (len == 0)
        return "the file is empty";
    if (len < BEARER_TOKEN_MIN_LEN)
        return "the token is shorter than 32 characters (make one with `openssl rand -hex 32`)";
    if (len > BEARER_TOKEN_MAX_LEN)
        return "the token is longer than 1024 characters";
    if (!bearer_is_b64token(text, len))
        return "the token has a character a Bearer token cannot carry (RFC 6750: letters, "
               "digits, - . _ ~ + / and trailing =; no spaces, one line)";
    bearer_digest(text, len, t->digest);
    hex_lower(t->digest, BEARER_FINGERPRINT_LEN / 2, t->fingerprint);
    return NULL;
}

enum bearer_verdict bearer_sent(const char *value, int lines,
                                unsigned char digest[BEARER_DIGEST_LEN])
{
    size_t len;

    if (lines == 0 || value == NULL)
        return BEARER_MISSING;
    if (lines > 1)
        return BEARER_INVALID;
    if (strncasecmp(value, "Bearer", 6) != 0 || (value[6] != ' ' && value[6] != '\0'))
        return BEARER_MISSING;
    value += 6;
    while (*value == ' ')
        value++;
    len = strlen(value);
    while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t')) /* OWS */
        len--;
    /* shorter than any token the proxy takes: an operator's digest may be of a weak one */
    if (len < BEARER_TOKEN_MIN_LEN || len > BEARER_TOKEN_MAX_LEN ||
        !bearer_is_b64token(value, len))
        return BEARER_INVALID;
    bearer_digest(value, len, digest);
    return BEARER_OK;
}

enum bearer_verdict bearer_check(const struct bearer_token *t, const char *value, int lines)
{
    unsigned char sent[BEARER_DIGEST_LEN];
    enum bearer_verdict v = bearer_sent(value, lines, sent);

    if (v != BEARER_OK)
        return v;
    return CRYPTO_memcmp(sent, t->digest, sizeof(sent)) == 0 ? BEARER_OK : BEARER_INVALID;
}
