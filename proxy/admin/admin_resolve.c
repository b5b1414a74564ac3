/*
 * admin_resolve.c - PUT /records/<id>: an operator records the answer they
 * found at the upstream for a record held as outcome unknown (or a claim
 * whose lease ran out), so that the client's retries replay it instead of
 * getting 502 outcome-unknown, and nothing executes a second time.
 *
 * The body is JSON (jansson): {"status": 201, "headers": [["Name", "value"],
 * ...], "body_base64": "..."}. It is checked as an upstream answer is before
 * it is stored (headers.c header_is_stored, limits.max_stored_response) and
 * refused whole with 400 problem invalid-resolution; the record is built by
 * the record codec (record_set_answer, record_encode_alloc) as the exchange
 * builds its own, then written by one compare-and-set on the record as it
 * was read (store_replace_unchanged), which keeps the key's TTL.
 */
#include "admin_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/evp.h>

#include "http_server.h"
#include "clock.h"
#include "config.h"
#include "exchange.h"
#include "fingerprint.h"
#include "record_id.h"
#include "headers.h"
#include "metrics.h"
#include "record.h"
#include "route.h"
#include "store.h"

/* A resolve waiting on Redis, with the answer it records (all owned). */
struct admin_resolve_call {
    struct http_req *req;
    const struct admin_env *env;
    struct admin_actor actor;
    char record_id[RECORD_ID_HEX_LEN + 1];
    char record_key[RECORD_KEY_MAX];
    int status;                     /* the answer's HTTP status */
    struct evkeyvalq headers;       /* its fields, in the order given */
    unsigned char *body;            /* its body, decoded; body_len bytes */
    size_t body_len;
    size_t max_stored;              /* bytes: the limit the answer was checked against */
    size_t stored_headers;          /* fields in the record written */
    char route[256];                /* the record's route (admin_record_route), "" for none */
};

static void admin_resolve_free(struct admin_resolve_call *c)
{
    evhttp_clear_headers(&c->headers);
    free(c->body);
    free(c);
}

/*
 * Whether c's status is one the record's route releases (release_statuses)
 * instead of recording: such an answer is never stored by the proxy, so it
 * is not stored by a resolve either. False when the record names no route
 * that the running configuration has.
 */
static bool admin_resolve_released(const struct admin_resolve_call *c)
{
    const struct config *conf = exchange_set_conf(c->env->set);

    for (size_t i = 0; c->route[0] != '\0' && i < conf->n_routes; i++) {
        const struct route *r = &conf->routes[i];

        if (strcmp(r->path, c->route) != 0)
            continue;
        for (size_t j = 0; j < r->policy.n_release_statuses; j++)
            if (r->policy.release_statuses[j] == c->status)
                return true;
        return false;
    }
    return false;
}

/*
 * The audit line (with the record's route once it was read), then doc
 * (stolen) as the JSON answer.
 */
static void admin_resolve_done(struct admin_resolve_call *c, int status, json_t *doc)
{
    admin_audit_resolve(c->req, &c->actor, c->record_id, c->route[0] != '\0' ? c->route : NULL,
                        status, status == 200 ? c->status : 0);
    admin_reply_json(c->req, status, doc);
    admin_resolve_free(c);
}

/* A field value as RFC 9110 section 5.5 allows: visible characters, SP and HTAB, obs-text. */
static bool admin_resolve_value_valid(const char *v, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)v[i];
        if (ch != '\t' && (ch < 0x20 || ch == 0x7f))
            return false;
    }
    return true;
}

/* headers: [[name, value], ...], each a stored field. 0, or -1 with why (len bytes). */
static int admin_resolve_headers(struct admin_resolve_call *c, const json_t *headers, char *why,
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
            !admin_resolve_value_valid(v, strlen(v))) {
            snprintf(why, len, "headers[%zu]: the value of %.64s holds a control character", i,
                     n);
            return -1;
        }
        if (evhttp_add_header(&c->headers, n, v) != 0) {
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
static bool admin_resolve_base64_valid(const char *text, size_t len)
{
    size_t n = strspn(text, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");

    return len % 4 == 0 && (n == len || (len - n <= 2 && strspn(text + n, "=") == len - n));
}

/* body_base64 (RFC 4648 section 4) into c->body, at most c->max_stored bytes. */
static int admin_resolve_body(struct admin_resolve_call *c, const json_t *b64, char *why,
                              size_t len)
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
        !admin_resolve_base64_valid(json_string_value(b64), in_len)) {
        snprintf(why, len, "\"body_base64\" is not base64 (RFC 4648 section 4, padded, "
                 "without line breaks)");
        return -1;
    }
    if (in_len / 4 * 3 > c->max_stored + 3 || in_len > INT_MAX) {
        snprintf(why, len, "the body is larger than limits.max_stored_response (%zu bytes)",
                 c->max_stored);
        return -1;
    }
    c->body = malloc(in_len / 4 * 3 + 3 + 1);
    ctx = EVP_ENCODE_CTX_new();
    if (c->body == NULL || ctx == NULL) {
        EVP_ENCODE_CTX_free(ctx);
        snprintf(why, len, "out of memory");
        return -1;
    }
    EVP_DecodeInit(ctx);
    rc = EVP_DecodeUpdate(ctx, c->body, &out, (const unsigned char *)json_string_value(b64),
                          (int)in_len);
    if (rc >= 0)
        rc = EVP_DecodeFinal(ctx, c->body + out, &last);
    EVP_ENCODE_CTX_free(ctx);
    if (rc < 0) {
        snprintf(why, len, "\"body_base64\" is not base64");
        return -1;
    }
    c->body_len = (size_t)out + (size_t)last;
    if (c->body_len > c->max_stored) {
        snprintf(why, len, "the body (%zu bytes) is larger than limits.max_stored_response "
                 "(%zu bytes)", c->body_len, c->max_stored);
        return -1;
    }
    return 0;
}

/* The request body as the answer to record; 0, or -1 with why (len bytes) for the 400. */
static int admin_resolve_parse(struct admin_resolve_call *c, struct evbuffer *in, char *why,
                               size_t len)
{
    size_t n = evbuffer_get_length(in);
    const char *text = n > 0 ? (const char *)evbuffer_pullup(in, -1) : "";
    json_error_t error;
    json_t *doc = json_loadb(text, n, JSON_REJECT_DUPLICATES, &error), *status;
    const char *member;
    json_t *value;
    int rc = -1;

    if (doc == NULL || !json_is_object(doc)) {
        snprintf(why, len, "the body must be a JSON object {\"status\", \"headers\", "
                 "\"body_base64\"}%s%.100s", doc == NULL ? ": " : "",
                 doc == NULL ? error.text : "");
        goto done;
    }
    json_object_foreach(doc, member, value) {
        if (strcmp(member, "status") != 0 && strcmp(member, "headers") != 0 &&
            strcmp(member, "body_base64") != 0) {
            snprintf(why, len, "unknown member \"%.64s\": only status, headers and body_base64",
                     member);
            goto done;
        }
    }
    status = json_object_get(doc, "status");
    if (!json_is_integer(status) || json_integer_value(status) < 200 ||
        json_integer_value(status) > 599) {
        snprintf(why, len, "\"status\" must be a final HTTP status, an integer 200..599");
        goto done;
    }
    c->status = (int)json_integer_value(status);
    if (json_object_get(doc, "headers") != NULL &&
        admin_resolve_headers(c, json_object_get(doc, "headers"), why, len) != 0)
        goto done;
    if (json_object_get(doc, "body_base64") == NULL) {
        snprintf(why, len, "\"body_base64\" is missing (\"\" records an empty body)");
        goto done;
    }
    rc = admin_resolve_body(c, json_object_get(doc, "body_base64"), why, len);
done:
    json_decref(doc);
    return rc;
}

static void admin_resolve_on_written(enum store_status st, bool applied, void *arg)
{
    struct admin_resolve_call *c = arg;

    if (st != STORE_OK) {
        admin_resolve_done(c, 503, json_pack(
            "{s:s}", "error", st == STORE_LOST || st == STORE_TIMEOUT
                ? "redis did not answer; the answer may or may not be recorded: look at the "
                  "record (GET /records/<id>) before trying again"
                : "redis unavailable; nothing was written"));
        return;
    }
    if (!applied) {
        admin_resolve_done(c, 409, json_pack(
            "{s:s}", "error", "the record changed (or went away) since it was read; nothing "
                              "was written: look at it again"));
        return;
    }
    metrics_count(c->env->metrics, METRICS_RECORDS_RESOLVED);
    admin_resolve_done(c, 200, json_pack(
        "{s:s, s:s, s:i, s:I, s:I}", "record_id", c->record_id, "state", "done",
        "status", c->status, "stored_headers", (json_int_t)c->stored_headers,
        "body_bytes", (json_int_t)c->body_len));
}

/*
 * The record as read: only an outcome-unknown record or a claim whose lease
 * ran out takes an answer; the new record keeps its fingerprint (the
 * retry's must match), owner token and created time, and is written only
 * if the record is still exactly value.
 */
static void admin_resolve_on_get(enum store_status st, const char *value, size_t len, void *arg)
{
    struct admin_resolve_call *c = arg;
    struct record old, rec;
    const char *route;
    char *encoded;
    size_t encoded_len = 0;

    if (st != STORE_OK) {
        admin_resolve_done(c, 503, json_pack("{s:s}", "error",
                                                   "redis unavailable; nothing was written"));
        return;
    }
    if (value == NULL) {
        admin_resolve_done(c, 404, json_pack("{s:s}", "error", "no such record"));
        return;
    }
    if (record_decode(value, len, &old) != 0) {
        admin_resolve_done(c, 500, json_pack("{s:s}", "error", "the record cannot be read; "
                                                   "nothing was written"));
        return;
    }
    route = admin_record_route(&old, c->route, sizeof(c->route));
    if (route == NULL)
        c->route[0] = '\0';
    if (old.state == RECORD_CLAIMED && clock_now_ms() < old.lease_deadline_ms) {
        admin_resolve_done(c, 409, json_pack(
            "{s:s}", "error", "the record is claimed by a request still in flight (its lease "
                              "is live); its own answer will be recorded"));
        return;
    }
    if (old.state != RECORD_CLAIMED && old.state != RECORD_UNKNOWN) {
        admin_resolve_done(c, 409, json_pack(
            "{s:s}", "error", "the record is finished already (it holds an answer, or says the "
                              "answer was too large to keep); nothing was written"));
        return;
    }
    if (admin_resolve_released(c)) {
        char why[400];

        /* the route's release_statuses are never recorded: each retry would replay "retry" */
        snprintf(why, sizeof(why), "status %d is in the release_statuses of route %s: an "
                 "upstream answer with it releases the claim and is never recorded",
                 c->status, c->route);
        admin_audit_resolve(c->req, &c->actor, c->record_id, c->route, 400, 0);
        admin_reply_problem(c->req, PROBLEM_INVALID_RESOLUTION, why);
        admin_resolve_free(c);
        return;
    }
    record_init(&rec, RECORD_DONE, old.owner, old.fingerprint, old.created_ms);
    /* the retry compares its fingerprint under the key that made the claim's */
    memcpy(rec.key_id, old.key_id, sizeof(rec.key_id));
    rec.route = old.route;
    rec.route_len = old.route_len;
    rec.completed_ms = clock_now_ms();
    if (record_set_answer(&rec, c->status, &c->headers, (const char *)c->body, c->body_len,
                          c->max_stored) != RECORD_DONE ||
        (encoded = record_encode_alloc(&rec, exchange_set_conf(c->env->set)->keyring,
                                       c->record_key, &encoded_len)) == NULL) {
        /* checked in admin_resolve_parse: a build defect, not the operator's */
        admin_resolve_done(c, 500, json_pack("{s:s}", "error", "the answer cannot be "
                                                    "encoded; nothing was written"));
        return;
    }
    c->stored_headers = rec.n_headers;
    store_replace_unchanged(c->env->store, c->record_key, value, len, encoded, encoded_len,
                            admin_resolve_on_written, c);
    free(encoded);
}

void admin_resolve(const struct admin_env *env, struct http_req *req, const char *id,
                   const char *key, const struct admin_actor *actor)
{
    struct admin_resolve_call *c = calloc(1, sizeof(*c));
    char why[256];

    if (c == NULL) {
        admin_audit_resolve(req, actor, id, NULL, 500, 0);
        admin_reply_error(req, 500, "out of memory");
        return;
    }
    c->req = req;
    c->env = env;
    c->actor = *actor;
    memcpy(c->record_id, id, RECORD_ID_HEX_LEN + 1);
    snprintf(c->record_key, sizeof(c->record_key), "%s", key);
    TAILQ_INIT(&c->headers);
    /*
     * The limit an upstream answer is stored under (exchange.c: the global
     * one). ROUTE: should a route get its own max_stored_response, the
     * record's route (admin_record_route) names the one to check.
     */
    c->max_stored = exchange_set_conf(env->set)->max_stored_response;
    if (admin_resolve_parse(c, http_server_body(req), why, sizeof(why)) != 0) {
        admin_audit_resolve(req, actor, id, NULL, 400, 0);
        admin_reply_problem(req, PROBLEM_INVALID_RESOLUTION, why);
        admin_resolve_free(c);
        return;
    }
    store_get(env->store, c->record_key, admin_resolve_on_get, c);
}
