/*
 * canonical_form.c - the canonical form of an
 * application/x-www-form-urlencoded body that a form fingerprint hashes
 * (canonical.h): its pairs, decoded by libevent, checked, sorted stably
 * by name and written length-prefixed.
 */
#include "canonical.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>
#include <jansson.h>

#include "meter.h"

/* One name or value: in the body's copy, or decoded into a buffer of its own. */
struct canonical_part {
    const char *bytes;
    size_t len;
    char *decoded;          /* owned when it was decoded; bytes then points into it */
};

struct canonical_pair {
    struct canonical_part name, value;
    size_t order;           /* its place in the body: the sort is stable by it */
};

/* Bytes a pair adds to the canonical form: a 4-byte length before each of its two parts. */
#define CANONICAL_PAIR_HEAD 8

/*
 * Decode the NUL-terminated component s (a name or a value as sent) into
 * *part: as it is without '%' and '+', else by evhttp_uridecode ('+' a
 * space), whose length is the decoded one, %00 included. A '%' not followed
 * by two hex digits is refused rather than kept as it is (WHATWG keeps it,
 * so "%zz" and "%25zz" would read the same). Then UTF-8 (jansson checks it:
 * shortest forms, no surrogates). CANONICAL_OK, CANONICAL_INVALID_BODY with
 * why, CANONICAL_FAILED.
 */
static int canonical_form_part(const char *s, struct canonical_part *part, char *why)
{
    size_t len = strlen(s);
    bool escaped = false, ascii = true;
    json_t *utf8;

    part->bytes = s;
    part->len = len;
    part->decoded = NULL;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '+') {
            escaped = true;
        } else if (s[i] == '%') {
            if (!isxdigit((unsigned char)s[i + 1]) || !isxdigit((unsigned char)s[i + 2])) {
                snprintf(why, CANONICAL_WHY_MAX, "the form body has a '%%' that is not "
                         "followed by two hex digits");
                return CANONICAL_INVALID_BODY;
            }
            escaped = true;
        }
    }
    if (escaped) {
        if ((part->decoded = evhttp_uridecode(s, 1, &part->len)) == NULL)
            return CANONICAL_FAILED;
        part->bytes = part->decoded;
    }
    for (size_t i = 0; i < part->len && ascii; i++)
        ascii = (unsigned char)part->bytes[i] < 0x80;
    if (ascii)
        return CANONICAL_OK;
    utf8 = json_stringn(part->bytes, part->len); /* NULL: not UTF-8 (or out of memory) */
    if (utf8 == NULL) {
        snprintf(why, CANONICAL_WHY_MAX, "the form body has a name or value that is not "
                 "UTF-8 once percent-decoded");
        return CANONICAL_INVALID_BODY;
    }
    json_decref(utf8);
    return CANONICAL_OK;
}

/* By name's bytes, a prefix first; equal names in the order the body has them. */
static int canonical_pair_cmp(const void *a, const void *b)
{
    const struct canonical_pair *x = a, *y = b;
    size_t n = x->name.len < y->name.len ? x->name.len : y->name.len;
    int c = n > 0 ? memcmp(x->name.bytes, y->name.bytes, n) : 0;

    if (c != 0)
        return c;
    if (x->name.len != y->name.len)
        return x->name.len < y->name.len ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static void canonical_put_len(char *out, size_t len)
{
    for (int i = 0; i < 4; i++)
        out[i] = (char)((uint32_t)len >> (24 - 8 * i));
}

/* The sorted pairs, length-prefixed, into a new buffer; CANONICAL_OK or CANONICAL_FAILED. */
static int canonical_form_write(struct canonical_pair *pairs, size_t n, char **out,
                                size_t *out_len)
{
    size_t size = 0;
    char *p;

    qsort(pairs, n, sizeof(*pairs), canonical_pair_cmp);
    for (size_t i = 0; i < n; i++)
        size += CANONICAL_PAIR_HEAD + pairs[i].name.len + pairs[i].value.len;
    if (size == 0)
        return CANONICAL_OK;
    if ((*out = p = malloc(size)) == NULL)
        return CANONICAL_FAILED;
    for (size_t i = 0; i < n; i++) {
        const struct canonical_part *parts[2] = { &pairs[i].name, &pairs[i].value };

        for (int j = 0; j < 2; j++) {
            canonical_put_len(p, parts[j]->len);
            memcpy(p + 4, parts[j]->bytes, parts[j]->len);
            p += 4 + parts[j]->len;
        }
    }
    *out_len = size;
    return CANONICAL_OK;
}

int canonical_form(const char *body, size_t len, char **out, size_t *out_len, char *why)
{
    struct canonical_pair *pairs = NULL;
    size_t n = 0, max = 1;
    char *copy = NULL, *s, *end;
    int r = CANONICAL_FAILED;

    *out = NULL;
    *out_len = 0;
    why[0] = '\0';
    if (len == 0)
        return CANONICAL_OK;
    /* evhttp_uridecode reads C strings: a raw NUL would cut a pair short unseen */
    if (memchr(body, '\0', len) != NULL) {
        snprintf(why, CANONICAL_WHY_MAX, "the form body has a NUL byte (send it as %%00)");
        return CANONICAL_INVALID_BODY;
    }
    for (size_t i = 0; i < len; i++)
        max += body[i] == '&';
    /*
     * What this takes at most, counted before it is allocated (meter.h): the
     * copy, the pairs, their decoded parts (no longer than the body, plus a
     * NUL each) and the written form (the parts plus 8 bytes a pair).
     */
    if (!meter_reserve((len + 1) + max * sizeof(*pairs) + (len + 2 * max) + (len + 8 * max)))
        return CANONICAL_FAILED;
    /* a NUL-terminated copy whose '&' (and each pair's first '=') become the ends of its parts */
    copy = malloc(len + 1);
    pairs = calloc(max, sizeof(*pairs));
    if (copy == NULL || pairs == NULL)
        goto done;
    memcpy(copy, body, len);
    copy[len] = '\0';
    for (s = copy; s <= copy + len; s = end + 1) {
        char *eq;

        end = s + strcspn(s, "&");
        *end = '\0';
        if (end == s) /* an empty pair: dropped */
            continue;
        eq = strchr(s, '=');
        if (eq != NULL)
            *eq = '\0';
        pairs[n].order = n;
        r = canonical_form_part(s, &pairs[n].name, why);
        if (r == CANONICAL_OK)
            r = canonical_form_part(eq != NULL ? eq + 1 : "", &pairs[n].value, why);
        n++; /* freed below whatever its parts did */
        if (r != CANONICAL_OK)
            goto done;
    }
    r = canonical_form_write(pairs, n, out, out_len);
done:
    for (size_t i = 0; pairs != NULL && i < n; i++) {
        free(pairs[i].name.decoded);
        free(pairs[i].value.decoded);
    }
    free(pairs);
    free(copy);
    return r;
}
