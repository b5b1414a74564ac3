/*
 * canonical.c - a request's fingerprint under a mode (canonical.h): the
 * media type a mode reads, the canonical body (canonical_json.c,
 * canonical_form.c), and the hash, keyed or not (fingerprint.h, seal.h).
 */
#include "canonical.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fingerprint.h"
#include "meter.h"
#include "seal.h"

const char *canonical_mode_name(enum fingerprint_mode mode)
{
    switch (mode) {
    case FINGERPRINT_REQUEST: return "request";
    case FINGERPRINT_NONE: return "none";
    case FINGERPRINT_JSON: return "json";
    case FINGERPRINT_FORM: return "form";
    }
    return "unknown";
}

void canonical_basis_of(struct fingerprint_basis *b, const struct route_policy *policy)
{
    b->mode = policy->fingerprint;
    b->ignore.n = policy->fingerprint == FINGERPRINT_JSON ? policy->n_fingerprint_ignore : 0;
    for (size_t i = 0; i < b->ignore.n; i++) {
        b->ignore.pointer[i] = policy->fingerprint_ignore[i];
        b->ignore.len[i] = strlen(policy->fingerprint_ignore[i]);
    }
}

bool canonical_basis_equal(const struct fingerprint_basis *a, const struct fingerprint_basis *b)
{
    if (a->mode != b->mode || a->ignore.n != b->ignore.n)
        return false;
    for (size_t i = 0; i < a->ignore.n; i++)
        if (a->ignore.len[i] != b->ignore.len[i] ||
            memcmp(a->ignore.pointer[i], b->ignore.pointer[i], a->ignore.len[i]) != 0)
            return false;
    return true;
}

bool canonical_media_type(enum fingerprint_mode mode, const char *content_type)
{
    static const char json_type[] = "application/json", form_type[] =
        "application/x-www-form-urlencoded", app[] = "application/", suffix[] = "+json";
    const char *s = content_type;
    size_t n;

    if (mode != FINGERPRINT_JSON && mode != FINGERPRINT_FORM)
        return true;
    if (s == NULL)
        return false;
    /* the media type is what comes before any parameter, without whitespace around it */
    s += strspn(s, " \t");
    n = strcspn(s, ";");
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (mode == FINGERPRINT_FORM)
        return n == sizeof(form_type) - 1 && strncasecmp(s, form_type, n) == 0;
    if (n == sizeof(json_type) - 1 && strncasecmp(s, json_type, n) == 0)
        return true;
    /* application/<subtype>+json (RFC 6839 section 3.1): a subtype before the suffix */
    return n > sizeof(app) - 1 + sizeof(suffix) - 1 && strncasecmp(s, app, sizeof(app) - 1) == 0 &&
           strncasecmp(s + n - (sizeof(suffix) - 1), suffix, sizeof(suffix) - 1) == 0 &&
           memchr(s + sizeof(app) - 1, '/', n - (sizeof(app) - 1)) == NULL &&
           memchr(s, ' ', n) == NULL && memchr(s, '\t', n) == NULL;
}

/* The media type check of a json or form request; false after why says what is wrong. */
static bool canonical_check_type(const struct fingerprint_basis *basis,
                                 const struct canonical_request *rq, char *why)
{
    const char *want = basis->mode == FINGERPRINT_JSON
                           ? "application/json or application/*+json"
                           : "application/x-www-form-urlencoded";

    if (rq->body_len == 0) /* nothing to read: a body-less POST (a capture) needs no type */
        return true;
    if (rq->content_type_lines > 1) {
        snprintf(why, CANONICAL_WHY_MAX, "the request has more than one Content-Type field; "
                 "this route reads bodies of %s", want);
        return false;
    }
    if (canonical_media_type(basis->mode, rq->content_type))
        return true;
    snprintf(why, CANONICAL_WHY_MAX, "%s; this route reads bodies of %s",
             rq->content_type == NULL ? "the request has a body and no Content-Type"
                                      : "the Content-Type is not one this route reads",
             want);
    return false;
}

/* The hash of method, target and body (len bytes) under key_id as canonical_fingerprint says. */
static int canonical_hash(const struct keyring *kr, const char *key_id,
                          const struct canonical_request *rq, const char *body, size_t len,
                          char *hex)
{
    int r;

    if (key_id != NULL && key_id[0] == '\0') {
        fingerprint_request(rq->method, rq->target, body, len, hex);
        return CANONICAL_OK;
    }
    if (kr == NULL) {
        if (key_id != NULL)
            return CANONICAL_KEY_UNAVAILABLE;
        fingerprint_request(rq->method, rq->target, body, len, hex);
        return CANONICAL_OK;
    }
    r = seal_fingerprint(kr, key_id, key_id != NULL ? strlen(key_id) : 0, rq->method,
                         rq->target, body, len, hex);
    if (r == SEAL_OK)
        return CANONICAL_OK;
    return r == SEAL_KEY_UNAVAILABLE ? CANONICAL_KEY_UNAVAILABLE : CANONICAL_FAILED;
}

int canonical_fingerprint(const struct keyring *kr, const char *key_id,
                          const struct fingerprint_basis *basis,
                          const struct canonical_request *rq, char *hex, char *why)
{
    char *canon = NULL;
    size_t len = 0;
    int r;

    hex[0] = '\0';
    why[0] = '\0';
    switch (basis->mode) {
    case FINGERPRINT_NONE:
        fingerprint_none(hex);
        return CANONICAL_OK;
    case FINGERPRINT_REQUEST:
        return canonical_hash(kr, key_id, rq, rq->body, rq->body_len, hex);
    case FINGERPRINT_JSON:
    case FINGERPRINT_FORM:
        break;
    }
    if (!canonical_check_type(basis, rq, why))
        return CANONICAL_INVALID_BODY;
    r = basis->mode == FINGERPRINT_JSON
            ? canonical_json(rq->body, rq->body_len, &basis->ignore, &canon, &len, why)
            : canonical_form(rq->body, rq->body_len, &canon, &len, why);
    if (r == CANONICAL_OK)
        r = canonical_hash(kr, key_id, rq, canon, len, hex);
    meter_free(canon);
    if (r != CANONICAL_OK)
        hex[0] = '\0';
    return r;
}
