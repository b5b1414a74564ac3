/*
 * path.c - request path normalisation for route matching. Pure.
 */
#include "path.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>

/* RFC 3629 4 (UTF8-octets): shortest forms only, no surrogates, at most U+10FFFF. */
static bool path_utf8_valid(const unsigned char *s, size_t len)
{
    size_t i = 0;

    while (i < len) {
        unsigned char c = s[i], lo = 0x80, hi = 0xBF;
        size_t more;

        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            more = 1;
        else if (c == 0xE0)
            more = 2, lo = 0xA0;
        else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
            more = 2;
        else if (c == 0xED)
            more = 2, hi = 0x9F;
        else if (c == 0xF0)
            more = 3, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3)
            more = 3;
        else if (c == 0xF4)
            more = 3, hi = 0x8F;
        else
            return false;
        if (len - i - 1 < more || s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t k = 2; k <= more; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                return false;
        i += more + 1;
    }
    return true;
}

/* What one decoded segment may not hold: it would change the path's structure. */
static enum path_status path_check_segment(const char *seg, size_t len)
{
    if (strlen(seg) != len)
        return PATH_ENCODED_DELIMITER; /* %00 */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)seg[i];
        if (c == '/' || c == '\\')
            return PATH_ENCODED_SLASH;
        if (c == '?' || c == '#' || c < 0x20 || c == 0x7f)
            return PATH_ENCODED_DELIMITER;
    }
    return path_utf8_valid((const unsigned char *)seg, len) ? PATH_OK : PATH_BAD_UTF8;
}

/* Append one decoded segment (or resolve it when it is "." or ".."); out holds n bytes. */
static enum path_status path_append(char *seg, char *out, size_t outsize, size_t *n)
{
    size_t len;

    seg[strcspn(seg, ";")] = '\0';
    if (seg[0] == '\0' || strcmp(seg, ".") == 0)
        return PATH_OK;
    if (strcmp(seg, "..") == 0) {
        while (*n > 0 && out[*n] != '/')
            (*n)--; /* back to the slash before the last segment */
        out[*n == 0 ? 1 : *n] = '\0';
        return PATH_OK;
    }
    len = strlen(seg);
    if (*n + 1 + len + 1 > outsize)
        return PATH_TOO_LONG;
    out[(*n)++] = '/';
    for (size_t i = 0; i < len; i++)
        out[(*n)++] = (char)tolower((unsigned char)seg[i]);
    out[*n] = '\0';
    return PATH_OK;
}

enum path_status path_normalize(const char *raw, char *out, size_t outsize)
{
    enum path_status st = PATH_OK;
    char small[512], *work, *seg, *save = NULL;
    size_t n = 0, raw_len = strlen(raw);

    if (outsize < 2)
        return PATH_TOO_LONG;
    strcpy(out, "/");
    work = raw_len < sizeof(small) ? memcpy(small, raw, raw_len + 1) : strdup(raw);
    if (work == NULL)
        return PATH_NO_MEMORY;
    for (char *c = work; *c != '\0'; c++)
        if (*c == '\\')
            *c = '/';
    /* split before decoding, so that an encoded '/' can be told from a separator */
    for (seg = strtok_r(work, "/", &save); seg != NULL && st == PATH_OK;
         seg = strtok_r(NULL, "/", &save)) {
        size_t len = 0;
        /* without a '%' evhttp_uridecode (no '+' decoding) would return a copy of seg */
        bool escaped = strchr(seg, '%') != NULL;
        char *decoded = escaped ? evhttp_uridecode(seg, 0, &len) : seg;

        if (decoded == NULL) {
            st = PATH_NO_MEMORY;
            break;
        }
        if (!escaped)
            len = strlen(seg);
        st = path_check_segment(decoded, len);
        if (st == PATH_OK)
            st = path_append(decoded, out, outsize, &n);
        if (escaped)
            free(decoded);
    }
    if (work != small)
        free(work);
    if (st != PATH_OK || n == 0)
        strcpy(out, "/");
    return st;
}

size_t path_normalized_size(const char *raw)
{
    return strlen(raw) + 2;
}

const char *path_status_reason(enum path_status st)
{
    switch (st) {
    case PATH_OK: return "valid";
    case PATH_ENCODED_SLASH:
        return "the path has an encoded slash or backslash (%2F, %5C)";
    case PATH_ENCODED_DELIMITER:
        return "the path has an encoded '?', '#', NUL or control character";
    case PATH_BAD_UTF8: return "the path is not valid UTF-8 once percent-decoded";
    case PATH_TOO_LONG: return "the path does not fit the normalisation buffer";
    case PATH_NO_MEMORY: return "the proxy ran out of memory normalising the path";
    }
    return "the path cannot be normalised";
}
