/*
 * admin_answer.c - an operator's answer for a held record, as PUT
 * /records/<id> and a bulk resolve (POST /records/bulk) give it: the JSON
 * members {"status": 201, "headers": [["Name", "value"], ...],
 * "body_base64": "..."}, checked as an upstream answer is before it is
 * stored (headers.c header_is_stored, limits.max_stored_response, RFC 4648
 * base64) and refused whole with a reason, then made into the record a
 * retry replays: state resolved (record.h RECORD_RESOLVED), built by the
 * record codec (record_set_answer, record_encode_alloc) as the exchange
 * builds its own.
 */
#include "admin_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/evp.h>

#include "clock.h"
#include "decide.h"
#include "config.h"
#include "headers.h"
#include "record.h"
#include "route.h"

void admin_answer_init(struct admin_answer *a, size_t max_stored)
{
    memset(a, 0, sizeof(*a));
    TAILQ_INIT(&a->headers);
    a->max_stored = max_stored;
}

void admin_answer_deinit(struct admin_answer *a)
{
    evhttp_clear_headers(&a->headers);
    free(a->body);
    a->body = NULL;
}

/* A field value as RFC 9110 section 5.5 allows: visible characters, SP and HTAB, obs-text. */
static bool admin_answer_value_valid(const char *v, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)v[i];
        if (ch != '\t' && (ch < 0x20 || ch == 0x7f))
            return false;
    }
    return true;
}

/* headers: [[name, value], ...], each a stored field. 0, or -1 with why (len bytes). */
static int admin_answer_headers(struct admin_answer *a, const json_t *headers, char *why,
                                size_t len)
{
    size_t i;
    json_t *pair;

    if (!json_is_array(headers)) {
        snprintf(why, len, "\"headers\" must be an array of [name, value] pairs");
        return -1;
    }
    if (json_array_size(headers) > RECORD_MAX_HEADERS) {
        snprintf(why, len, "at most %d header fields can be recorded", RECORD_MAX_HEADERS);
        return -1;
    }
    json_array_foreach(headers, i, pair) {
        const json_t *name = json_array_get(pair, 0), *value = json_array_get(pair, 1);
        const char *n, *v;

        if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_string(name) ||
            !json_is_string(value)) {
            snprintf(why, len, "headers[%zu] must be a [name, value] pair of strings", i);
            return -1;
        }
        n = json_string_value(name);
        v = json_string_value(value);
        if (strlen(n) != json_string_length(name) || !header_name_valid(n)) {
            snprintf(why, len, "headers[%zu]: the name is not a field name (RFC 9110 token)", i);
            return -1;
        }
        if (!header_is_stored(n)) {
            /* the same fields a recorded upstream answer leaves out */
            snprintf(why, len, "headers[%zu]: %.64s is never stored or replayed (hop-by-hop, "
                     "Set-Cookie, WWW-Authenticate, Content-Length or Idempotent-Replayed)",
                     i, n);
            return -1;
        }
        if (strlen(v) != json_string_length(value) ||
            !admin_answer_value_valid(v, strlen(v))) {
            snprintf(why, len, "headers[%zu]: the value of %.64s holds a control character", i,
                     n);
            return -1;
        }
        if (evhttp_add_header(&a->headers, n, v) != 0) {
            snprintf(why, len, "headers[%zu]: %.64s cannot be recorded", i, n);
            return -1;
        }
    }
    return 0;
}

/*
 * Whether text (len bytes) is base64 as RFC 4648 section 4 writes it: the
 * alphabet in groups of 4, "=" padding at the end only, no line breaks.
 * OpenSSL's decoder is lenient (it skips white space and stops quietly at
 * a "-"), which would record a cut body: the text is checked first.
 */
static bool admin_answer_base64_valid(const char *text, size_t len)
{
    size_t n = strspn(text, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");

    return len % 4 == 0 && (n == len || (len - n <= 2 && strspn(text + n, "=") == len - n));
}

/* body_base64 (RFC 4648 section 4) into a->body, at most a->max_stored bytes. */
static int admin_answer_body(struct admin_answer *a, const json_t *b64, char *why, size_t len)
{
    size_t in_len;
    EVP_ENCODE_CTX *ctx;
    int out = 0, last = 0, rc;

    if (!json_is_string(b64)) {
        snprintf(why, len, "\"body_base64\" must be a string (base64 of the body)");
        return -1;
    }
    in_len = json_string_length(b64);
    if (strlen(json_string_value(b64)) != in_len ||
        !admin_answer_base64_valid(json_string_value(b64), in_len)) {
        snprintf(why, len, "\"body_base64\" is not base64 (RFC 4648 section 4, padded, "
                 "without line breaks)");
        return -1;
    }
    if (in_len / 4 * 3 > a->max_stored + 3 || in_len > INT_MAX) {
        snprintf(why, len, "the body is larger than limits.max_stored_response (%zu bytes)",
                 a->max_stored);
        return -1;
    }
    a->body = malloc(in_len / 4 * 3 + 3 + 1);
    ctx = EVP_ENCODE_CTX_new();
    if (a->body == NULL || ctx == NULL) {
        EVP_ENCODE_CTX_free(ctx);
        snprintf(why, len, "out of memory");
        return -1;
    }
    EVP_DecodeInit(ctx);
    rc = EVP_DecodeUpdate(ctx, a->body, &out, (const unsigned char *)json_string_value(b64),
                          (int)in_len);
    if (rc >= 0)
        rc = EVP_DecodeFinal(ctx, a->body + out, &last);
    EVP_ENCODE_CTX_free(ctx);
    if (rc < 0) {
        snprintf(why, len, "\"body_base64\" is not base64");
        return -1;
    }
    a->body_len = (size_t)out + (size_t)last;
    if (a->body_len > a->max_stored) {
        snprintf(why, len, "the body (%zu bytes) is larger than limits.max_stored_response "
                 "(%zu bytes)", a->body_len, a->max_stored);
        return -1;
    }
    return 0;
}

int admin_answer_parse(struct admin_answer *a, const json_t *doc, char *why, size_t len)
{
    const json_t *status = json_object_get(doc, "status");

    if (!json_is_integer(status) || json_integer_value(status) < 200 ||
        json_integer_value(status) > 599) {
        snprintf(why, len, "\"status\" must be a final HTTP status, an integer 200..599");
        return -1;
    }
    a->status = (int)json_integer_value(status);
    if (json_object_get(doc, "headers") != NULL &&
        admin_answer_headers(a, json_object_get(doc, "headers"), why, len) != 0)
        return -1;
    if (json_object_get(doc, "body_base64") == NULL) {
        snprintf(why, len, "\"body_base64\" is missing (\"\" records an empty body)");
        return -1;
    }
    if (admin_answer_body(a, json_object_get(doc, "body_base64"), why, len) != 0)
        return -1;
    /* RFC 9110 sections 15.3.5 and 15.4.5: no content; a replay would drop it unseen */
    if ((a->status == 204 || a->status == 304) && a->body_len > 0) {
        snprintf(why, len, "a %d answer has no body (RFC 9110): \"body_base64\" must be \"\"",
                 a->status);
        return -1;
    }
    return 0;
}

bool admin_answer_released(const struct admin_answer *a, const struct config *conf,
                           const char *route)
{
    for (size_t i = 0; route != NULL && route[0] != '\0' && i < conf->n_routes; i++) {
        const struct route *r = &conf->routes[i];

        if (strcmp(r->path, route) != 0)
            continue;
        /* what an upstream answer with this status would do: release_statuses, and every
           non-2xx on a webhook route (the provider's retry must be delivered) */
        return decide_releases(&r->policy, a->status);
    }
    return false;
}

char *admin_answer_record(const struct admin_answer *a, const struct record *old,
                          const struct config *conf, const char *record_key, size_t *len,
                          size_t *stored_headers)
{
    struct record rec;
    char *encoded;

    record_init(&rec, RECORD_RESOLVED, old->owner, old->fingerprint, old->created_ms);
    /* the retry compares its fingerprint as the claim's was made: its key, mode and list */
    memcpy(rec.key_id, old->key_id, sizeof(rec.key_id));
    rec.basis = old->basis;
    rec.route = old->route;
    rec.route_len = old->route_len;
    rec.completed_ms = clock_now_ms();
    /* checked by admin_answer_parse: anything but RECORD_RESOLVED is a build defect */
    if (record_set_answer(&rec, a->status, &a->headers, (const char *)a->body, a->body_len,
                          a->max_stored) != RECORD_RESOLVED)
        return NULL;
    encoded = record_encode_alloc(&rec, conf->keyring, record_key, len);
    if (encoded != NULL && stored_headers != NULL)
        *stored_headers = rec.n_headers;
    return encoded;
}
