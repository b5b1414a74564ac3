/*
 * canonical_json.c - the canonical JSON text a json fingerprint hashes
 * (canonical.h): jansson parses, fingerprint_ignore's pointers take out what
 * they name, jansson writes the rest back sorted and compact.
 */
#include "canonical.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "json_pointer.h"
#include "meter.h"

/*
 * Parsed as the webhook event ids are (webhook.c): any value at the top,
 * a repeated member name refused (which one an upstream takes is its
 * parser's choice), \u0000 kept inside strings (a string that holds one
 * differs from one cut there).
 */
#define CANONICAL_JSON_DECODE (JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL)

/*
 * Written compact, members sorted by their names' bytes (jansson compares
 * them with memcmp, then by length), any value at the top, and every real
 * with 17 significant digits, which tell any two doubles apart: two reals
 * write the same text exactly when they are the same double.
 */
#define CANONICAL_JSON_ENCODE \
    (JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17))

/* What jansson's parser refused, in words that never quote the body. */
static int canonical_json_refused(const json_error_t *error, char *why)
{
    const char *what;

    switch (json_error_code(error)) {
    case json_error_out_of_memory:
        return CANONICAL_FAILED;
    case json_error_duplicate_key:
        what = "the JSON body repeats a member name in one object";
        break;
    case json_error_numeric_overflow:
        what = "the JSON body has an integer outside the signed 64-bit range, or a number "
               "too large for a double";
        break;
    case json_error_invalid_utf8:
        what = "the JSON body is not UTF-8";
        break;
    case json_error_null_byte_in_key:
        what = "the JSON body has a member name with \\u0000 in it";
        break;
    case json_error_stack_overflow:
        what = "the JSON body nests arrays and objects deeper than 2048 levels";
        break;
    default:
        what = "the body is not JSON (RFC 8259)";
        break;
    }
    snprintf(why, CANONICAL_WHY_MAX, "%s (at byte %d)", what, error->position);
    return CANONICAL_INVALID_BODY;
}

/*
 * Take out of root what each pointer of ignore names: an object's member
 * is deleted, an array's element becomes null (the elements after it keep
 * their positions); a pointer that names nothing in this body, or the
 * whole body, changes nothing. Whatever the order of the pointers, the
 * result is the same: each only removes or nulls.
 */
static void canonical_json_ignore(json_t *root, const struct canonical_ignore *ignore)
{
    char token[CONFIG_MAX_IGNORE_POINTER];

    for (size_t i = 0; i < ignore->n; i++) {
        json_t *parent;
        size_t n, index;

        if (ignore->len[i] > sizeof(token) ||
            json_pointer_parent(root, ignore->pointer[i], ignore->len[i], &parent, token,
                                &n) != 0 || parent == NULL)
            continue;
        if (json_is_object(parent))
            json_object_deln(parent, token, n);
        else if (json_is_array(parent) &&
                 json_pointer_index(token, n, json_array_size(parent), &index))
            json_array_set_new(parent, index, json_null());
    }
}

/* The canonical text as jansson writes it, piece by piece. */
struct canonical_text {
    char *buf;
    size_t len;
    size_t size;
};

static int canonical_json_append(const char *piece, size_t n, void *arg)
{
    struct canonical_text *t = arg;

    if (n > t->size - t->len) {
        size_t size = t->size * 2 > t->len + n ? t->size * 2 : t->len + n;
        char *grown = meter_malloc(size); /* counted like the tree (meter.h) */

        if (grown == NULL)
            return -1;
        memcpy(grown, t->buf, t->len);
        meter_free(t->buf);
        t->buf = grown;
        t->size = size;
    }
    memcpy(t->buf + t->len, piece, n);
    t->len += n;
    return 0;
}

int canonical_json(const char *body, size_t len, const struct canonical_ignore *ignore,
                   char **out, size_t *out_len, char *why)
{
    struct canonical_text t = { NULL, 0, 0 };
    json_error_t error;
    json_t *root;

    *out = NULL;
    *out_len = 0;
    why[0] = '\0';
    if (len == 0)
        return CANONICAL_OK; /* its own canonical value: no JSON text is empty */
    root = json_loadb(body, len, CANONICAL_JSON_DECODE, &error);
    if (root == NULL) /* jansson may name a failed allocation as a syntax error */
        return meter_fits() ? canonical_json_refused(&error, why) : CANONICAL_FAILED;
    if (ignore != NULL)
        canonical_json_ignore(root, ignore);
    /* about the body's size: the text rarely grows (a real may: 0.1 is 0.10000000000000001) */
    t.size = len + 16;
    t.buf = meter_malloc(t.size);
    if (t.buf == NULL ||
        json_dump_callback(root, canonical_json_append, &t, CANONICAL_JSON_ENCODE) != 0) {
        json_decref(root);
        meter_free(t.buf);
        return CANONICAL_FAILED;
    }
    json_decref(root);
    *out = t.buf;
    *out_len = t.len;
    return CANONICAL_OK;
}
