/*
 * idem_key.c - reading the Idempotency-Key header value, the first gate of a
 * protected request (docs/client-contract.md).
 */
#include "idem_key.h"

#include <stdbool.h>
#include <string.h>

static bool key_char_printable(unsigned char c)
{
    return c >= 0x20 && c <= 0x7e;
}

static bool key_char_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* RFC 8941 3.3.3: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE */
static enum key_status key_parse_sf_string(const char *p, const char *end, size_t max_len,
                                           char *out, size_t outsize, size_t *out_len)
{
    size_t n = 0;

    p++; /* opening DQUOTE */
    for (;;) {
        if (p == end)
            return KEY_BAD_QUOTING;
        unsigned char c = (unsigned char)*p++;
        if (c == '"')
            break;
        if (c == '\\') {
            if (p == end || (*p != '"' && *p != '\\'))
                return KEY_BAD_QUOTING;
            c = (unsigned char)*p++;
        } else if (!key_char_printable(c)) {
            return KEY_BAD_CHAR;
        }
        if (n >= max_len || n + 1 >= outsize)
            return KEY_TOO_LONG;
        out[n++] = (char)c;
    }
    if (p != end)
        return KEY_BAD_QUOTING; /* parameters or junk after the closing quote */
    if (n == 0)
        return KEY_EMPTY;
    out[n] = '\0';
    *out_len = n;
    return KEY_OK;
}

enum key_status key_parse(const char *value, size_t max_len, char *out, size_t outsize,
                          size_t *out_len)
{
    const char *p = value, *end = value + strlen(value);

    while (p < end && key_char_ows(*p))
        p++;
    while (end > p && key_char_ows(end[-1]))
        end--;
    if (p == end)
        return KEY_EMPTY;
    if (*p == '"')
        return key_parse_sf_string(p, end, max_len, out, outsize, out_len);

    size_t n = (size_t)(end - p);
    for (const char *q = p; q < end; q++) {
        if (!key_char_printable((unsigned char)*q))
            return KEY_BAD_CHAR;
        if (*q == '"')
            return KEY_BAD_QUOTING; /* a quote inside a bare key: a broken sf-string */
    }
    if (n > max_len || n + 1 > outsize)
        return KEY_TOO_LONG;
    memcpy(out, p, n);
    out[n] = '\0';
    *out_len = n;
    return KEY_OK;
}

bool key_is_folded_list(const char *value)
{
    while (key_char_ows(*value))
        value++;
    return *value != '"' && strchr(value, ',') != NULL;
}

const char *key_status_reason(enum key_status st)
{
    switch (st) {
    case KEY_OK: return "valid";
    case KEY_EMPTY: return "the idempotency key is empty";
    case KEY_TOO_LONG: return "the idempotency key is longer than the configured maximum";
    case KEY_BAD_CHAR: return "the idempotency key has characters outside printable ASCII";
    case KEY_BAD_QUOTING: return "the idempotency key is not a valid RFC 8941 string";
    }
    return "invalid";
}
