/*
 * canonical_json.c - the canonical JSON text a json fingerprint hashes
 * (canonical.h): jansson parses, fingerprint_ignore's pointers take out what
 * they name, jansson writes the rest back sorted and compact.
 */
#include "canonical.h"

#include <stdio.h>

#include <jansson.h>

#include "json_pointer.h"
#include "json_text.h"
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
        what = "the JSON body nests deeper than 2048 levels (every value counts one: in "
               "[[1]] the 1 is at level 3)";
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

int canonical_json(const char *body, size_t len, const struct canonical_ignore *ignore,
                   char **out, size_t *out_len, char *why)
{
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
    /* through jansson's allocator: counted like the tree (meter.h) */
    *out = json_text_flags(root, CANONICAL_JSON_ENCODE, out_len);
    return *out != NULL ? CANONICAL_OK : CANONICAL_FAILED;
}
