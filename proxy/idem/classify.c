/*
 * classify.c - a request's route, key and limits, before any I/O; see classify.h.
 */
#include "classify.h"

#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "headers.h"
#include "idem_key.h"
#include "path.h"
#include "webhook.h"

static void classify_refuse(struct classify_result *out, enum problem p, int status,
                            const char *detail)
{
    out->verdict = CLASSIFY_REFUSE;
    out->problem = p;
    out->status = status;
    out->detail = detail;
}

/* classify_refuse with a detail that names the route's rule, formatted into out->detail_text. */
static void classify_refuse_rule(struct classify_result *out, enum problem p, int status,
                                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void classify_refuse_rule(struct classify_result *out, enum problem p, int status,
                                 const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(out->detail_text, sizeof(out->detail_text), fmt, ap);
    va_end(ap);
    classify_refuse(out, p, status, out->detail_text);
}

/*
 * The provider's signature over the raw body, before anything is claimed, so
 * nobody can pre-claim an event id (docs/webhooks.md). False after a 401
 * refusal. *id_header: for standard-webhooks, the event id header of the
 * spelling that verified (webhook-id or svix-id), else NULL.
 */
static bool classify_signature(const struct route_policy *policy,
                               const struct classify_input *in, struct classify_result *out,
                               const char **id_header)
{
    const struct evkeyvalq *headers = in->headers;
    const struct webhook_headers wh = {
        .webhook_id = evhttp_find_header(headers, "webhook-id"),
        .webhook_timestamp = evhttp_find_header(headers, "webhook-timestamp"),
        .webhook_signature = evhttp_find_header(headers, "webhook-signature"),
        .svix_id = evhttp_find_header(headers, "svix-id"),
        .svix_timestamp = evhttp_find_header(headers, "svix-timestamp"),
        .svix_signature = evhttp_find_header(headers, "svix-signature"),
        .hub_signature_256 = evhttp_find_header(headers, "X-Hub-Signature-256"),
        .stripe_signature = evhttp_find_header(headers, "Stripe-Signature"),
    };
    const char *reason = NULL;

    if (webhook_verify(policy->verify, policy->secrets, policy->n_secrets, &wh, in->body,
                       in->body_len, in->now_s, &reason, id_header) == WEBHOOK_OK)
        return true;
    classify_refuse(out, PROBLEM_SIGNATURE_INVALID, 401,
                    reason != NULL ? reason : "the webhook signature does not verify");
    return false;
}

/*
 * The header that carries the key: key_header, except that a standard-webhooks
 * route keyed by header:webhook-id or header:svix-id takes the id of the
 * spelling whose signature verified (Svix sends svix-*, others webhook-*):
 * the one id the signature covers.
 */
static const char *classify_key_header_name(const struct route_policy *policy,
                                            const char *signed_id)
{
    const char *name = policy->key_header;

    if (signed_id != NULL &&
        (strcasecmp(name, "webhook-id") == 0 || strcasecmp(name, "svix-id") == 0))
        return signed_id;
    return name;
}

/* Why a key from a JSON body is refused: a webhook route's event id, or another route's key. */
static const char *classify_body_key_reason(const struct route_policy *policy)
{
    return policy->webhook ? "the event id in the JSON body is not a non-empty printable "
                             "string within the configured length"
                           : "the idempotency key in the JSON body is not a non-empty string of "
                             "printable ASCII within this route's key_max_length";
}

/*
 * A key taken from a JSON body (key, NUL-terminated) is a key as it
 * stands: non-empty printable ASCII within key_max_length, which key_parse
 * leaves unchanged. Sets out->key_len; false after a 400 refusal.
 */
static bool classify_event_id(const struct route_policy *policy, const char *key,
                              struct classify_result *out)
{
    char checked[CLASSIFY_KEY_MAX];

    if (key_parse(key, policy->key_max_length, checked, sizeof(checked), &out->key_len) !=
            KEY_OK ||
        strcmp(checked, key) != 0) {
        classify_refuse(out, PROBLEM_INVALID_KEY, 400, classify_body_key_reason(policy));
        return false;
    }
    return true;
}

/*
 * The string at the route's key_from: json:/pointer into key (keysize
 * bytes, at most key_max_length of it), its length in out->key_len:
 * webhook_key_from_json's result.
 */
static int classify_json_key(const struct route_policy *policy, const struct classify_input *in,
                             char *key, size_t keysize, struct classify_result *out)
{
    size_t max = policy->key_max_length + 1 < keysize ? policy->key_max_length + 1 : keysize;

    return webhook_key_from_json(in->body != NULL ? in->body : "", in->body_len,
                                 policy->key_json_pointer, key, max, &out->key_len);
}

/* A webhook route's key_from: json:/pointer (e.g. Stripe's event id). False after a 400 refusal. */
static bool classify_key_from_body(const struct route_policy *policy,
                                   const struct classify_input *in, char *key, size_t keysize,
                                   struct classify_result *out)
{
    int rc = classify_json_key(policy, in, key, keysize, out);

    if (rc == -1 || rc == -3) {
        classify_refuse(out, PROBLEM_MISSING_KEY, 400,
                        "the JSON body has no event id at the configured pointer");
        return false;
    }
    if (rc != 0) {
        classify_refuse(out, PROBLEM_INVALID_KEY, 400,
                        "the event id in the JSON body is not a non-empty printable string "
                        "within the configured length");
        return false;
    }
    return classify_event_id(policy, key, out);
}

/*
 * key_from: json:/pointer on an ordinary protected route (no verify;
 * docs/client-contract.md#the-key-in-the-body): the key is the JSON string
 * at the pointer. An empty body, or a JSON one without the member, has no
 * key: unprotected, or 400 missing-key with require_key, and 400
 * missing-key as well when the request carries the route's key header (its
 * client means it to be protected, and this route does not read that
 * header). A body that is not one JSON document (or repeats a member)
 * cannot be told to hold no key: 400 invalid-key, never forwarded
 * unprotected. PROTECT or UNPROTECTED in out, or a refusal.
 */
static void classify_key_in_body(const struct route_policy *policy,
                                 const struct classify_input *in, char *key, size_t keysize,
                                 struct classify_result *out)
{
    const char *pointer = policy->key_json_pointer;
    int rc = in->body_len == 0 ? -1 : classify_json_key(policy, in, key, keysize, out);
    int lines;

    if (rc == -3) {
        classify_refuse_rule(out, PROBLEM_INVALID_KEY, 400, "the request body cannot be read "
                             "as one JSON document (not JSON, a member name written twice, a "
                             "number beyond a double, or nesting deeper than 2048 levels), so "
                             "whether it holds the idempotency key this route reads (key_from: "
                             "json:%s) cannot be told; nothing was claimed or forwarded",
                             pointer);
    } else if (rc == -2) {
        classify_refuse(out, PROBLEM_INVALID_KEY, 400, classify_body_key_reason(policy));
    } else if (rc == -1 && policy->require_key) {
        classify_refuse_rule(out, PROBLEM_MISSING_KEY, 400, "this route requires an idempotency "
                             "key in the JSON body at %s (key_from: json:%s)", pointer, pointer);
    } else if (rc == -1) {
        header_find_all(in->headers, policy->key_header, &lines);
        if (lines > 0)
            classify_refuse_rule(out, PROBLEM_MISSING_KEY, 400, "this route reads the "
                                 "idempotency key from the JSON body at %s (key_from: json:%s), "
                                 "not from the %s header, and the body has none", pointer,
                                 pointer, policy->key_header);
        else
            out->verdict = CLASSIFY_UNPROTECTED;
    } else if (classify_event_id(policy, key, out)) {
        out->verdict = CLASSIFY_PROTECT;
    }
}

/*
 * The route's rules for the key it read (key, key_len bytes, NUL-terminated;
 * docs/client-contract.md#key-rules): at least key_min_length bytes, and
 * the whole key matches key_pattern (key_regex is anchored at load,
 * config_key_rules.c). The detail names the rule, never the key. False
 * after a 400 refusal.
 *
 * Several worker threads may run regexec on one route's regex_t at once:
 * POSIX lists no regexec among the functions that need not be thread-safe,
 * and glibc's takes the pattern's own lock (dfa->lock, posix/regexec.c)
 * around each match, so the workers take turns on a pattern. A turn is
 * short: without back-references (refused at load) glibc matches as an
 * automaton over the key, whose length key_max_length bounds.
 */
static bool classify_key_rules(const struct route_policy *policy, const char *key,
                               size_t key_len, struct classify_result *out)
{
    const char *what = policy->webhook ? "event id" : "idempotency key";

    if (key_len < policy->key_min_length) {
        classify_refuse_rule(out, PROBLEM_INVALID_KEY, 400, "the %s is shorter than this "
                             "route's key_min_length (%zu bytes)", what,
                             policy->key_min_length);
        return false;
    }
    if (policy->key_regex != NULL && regexec(policy->key_regex, key, 0, NULL, 0) != 0) {
        classify_refuse_rule(out, PROBLEM_INVALID_KEY, 400, "the %s does not match this route's "
                             "key_pattern", what);
        return false;
    }
    return true;
}

/*
 * A scope header (docs/client-contract.md#the-key) sent on two lines: which one names the
 * caller is a guess, so the request is refused rather than recorded under
 * one of them (fail closed). With scope_required (docs/client-contract.md#key-rules),
 * a scope header absent or empty (spaces and tabs only) is 400 missing-scope:
 * such requests would share one namespace.
 */
static void classify_check_scope(const struct route_policy *policy,
                                 const struct evkeyvalq *headers, struct classify_result *out)
{
    for (size_t i = 0; i < policy->n_scope_headers; i++) {
        int lines;
        const char *value = header_find_all(headers, policy->scope_headers[i], &lines);

        if (lines > 1) {
            classify_refuse(out, PROBLEM_INVALID_KEY, 400,
                            "a scope header of this route appears more than once, so the "
                            "caller's namespace is ambiguous");
            return;
        }
        if (policy->scope_required && (lines == 0 || value[strspn(value, " \t")] == '\0')) {
            classify_refuse_rule(out, PROBLEM_MISSING_SCOPE, 400, "this route requires the "
                                 "scope header %s (scope_required), and the request has none "
                                 "or an empty one; nothing was claimed or forwarded",
                                 policy->scope_headers[i]);
            return;
        }
    }
}

/*
 * A queued delivery stores its header fields with it (docs/webhooks.md#webhook-inbox): more than DELIVERY_MAX_HEADERS is refused now, before anything
 * is claimed, so the provider gets an error and retries (or its operator
 * sees it), rather than an entry too large to move or a field dropped
 * unseen. False after the 431 refusal.
 */
static bool classify_queued_fields(const struct route_policy *policy,
                                   const struct classify_input *in, struct classify_result *out)
{
    const struct evkeyval *h;
    size_t n = 0;

    if (policy->delivery.mode != DELIVERY_QUEUED)
        return true;
    TAILQ_FOREACH(h, in->headers, next)
        if (header_is_queued(h->key) && ++n > DELIVERY_MAX_HEADERS) {
            _Static_assert(DELIVERY_MAX_HEADERS == 128, "the detail below names the bound");
            classify_refuse(out, PROBLEM_TOO_MANY_HEADER_FIELDS, 431,
                            "the delivery has more than 128 header fields, more than a queued "
                            "delivery stores; nothing was queued");
            return false;
        }
    return true;
}

/* The key from the one value of its header line, raw; PROTECT or a 400 refusal. */
static void classify_key_value(const struct route_policy *policy, const char *raw, char *key,
                               size_t keysize, struct classify_result *out)
{
    size_t max = keysize < policy->key_max_length + 1 ? keysize : policy->key_max_length + 1;
    enum key_status ks;

    if (key_is_folded_list(raw)) {
        classify_refuse(out, PROBLEM_INVALID_KEY, 400,
                        "the idempotency key has a comma outside quotes, so it may be two header "
                        "lines joined into one; send it as an RFC 8941 string (\"a,b\")");
    } else if ((ks = key_parse(raw, policy->key_max_length, key, max, &out->key_len)) !=
               KEY_OK) {
        classify_refuse(out, PROBLEM_INVALID_KEY, 400, key_status_reason(ks));
    } else {
        out->verdict = CLASSIFY_PROTECT;
    }
}

/*
 * The header the IETF draft names (draft-ietf-httpapi-idempotency-key-header,
 * section 2): a request that sends it to a route whose key_from names
 * another header means to be protected, and is refused rather than passed
 * unprotected.
 */
#define CLASSIFY_STANDARD_KEY_HEADER "Idempotency-Key"

/* The key from its header (docs/client-contract.md#how-a-request-is-handled, 4.3). */
static void classify_key_from_header(const struct route_policy *policy,
                                     const struct classify_input *in, const char *signed_id,
                                     char *key, size_t keysize, struct classify_result *out)
{
    int lines;
    const char *raw = header_find_all(in->headers,
                                          classify_key_header_name(policy, signed_id), &lines);

    if (lines == 0 && policy->webhook) {
        /* a signed delivery without its event id is malformed, whatever require_key says */
        classify_refuse(out, PROBLEM_MISSING_KEY, 400,
                        "the webhook delivery carries no event id header");
    } else if (lines == 0 && policy->require_key) {
        classify_refuse(out, PROBLEM_MISSING_KEY, 400,
                        "this route requires an idempotency key header");
    } else if (lines == 0 && policy->key_from_header &&
               strcasecmp(policy->key_header, CLASSIFY_STANDARD_KEY_HEADER) != 0 &&
               evhttp_find_header(in->headers, CLASSIFY_STANDARD_KEY_HEADER) != NULL) {
        /*
         * its client means it to be protected, and this route reads another header (a
         * key_header route keeps 0.1's rule: its other headers mean nothing)
         */
        classify_refuse_rule(out, PROBLEM_MISSING_KEY, 400, "this route reads the idempotency "
                             "key from the %s header, not from %s, and the request has none",
                             policy->key_header, CLASSIFY_STANDARD_KEY_HEADER);
    } else if (lines == 0) {
        out->verdict = CLASSIFY_UNPROTECTED;
    } else if (lines > 1) {
        classify_refuse(out, PROBLEM_INVALID_KEY, 400,
                        "the idempotency key header appears more than once");
    } else {
        classify_key_value(policy, raw, key, keysize, out);
    }
}

/* The route path (normalised: path.h) matches into *route; a path_status. */
static enum path_status classify_match(const struct config *cfg, const char *path,
                                       const struct route **route)
{
    size_t size = path_normalized_size(path);
    char small[512], *normalized = size <= sizeof(small) ? small : malloc(size);
    enum path_status st = normalized != NULL ? path_normalize(path, normalized, size)
                                             : PATH_NO_MEMORY;

    /* never match the raw path instead: it is a spelling the routes were not written for */
    *route = st == PATH_OK ? config_match_route(cfg, normalized) : NULL;
    if (normalized != small)
        free(normalized);
    return st;
}

/*
 * The route for path, normalised (path.h); false after a 400 refusal when it
 * cannot be. A path that starts with two slashes ('\' is one: WHATWG) is
 * also read as a URL parser reads "//host/rest", the first segment a host:
 * when that reading names a route the normalised one does not (//x/v1/payments
 * for /v1/payments), which endpoint the upstream runs is its parser's choice,
 * and the request is refused rather than passed unprotected.
 */
static bool classify_route(const struct config *cfg, const char *path,
                           struct classify_result *out)
{
    enum path_status st = classify_match(cfg, path, &out->route);
    const struct route *as_host = NULL;
    size_t slashes = strspn(path, "/\\");
    const char *rest = path + slashes + strcspn(path + slashes, "/\\");

    if (st != PATH_OK) {
        classify_refuse(out, PROBLEM_INVALID_TARGET, 400, path_status_reason(st));
        return false;
    }
    /* WHATWG skips every slash after the first two, then reads the host up to the next one */
    if (slashes >= 2 && *rest != '\0' && classify_match(cfg, rest, &as_host) == PATH_OK &&
        as_host != NULL && as_host != out->route) {
        classify_refuse(out, PROBLEM_INVALID_TARGET, 400,
                        "the path starts with two slashes: a URL parser may read its first "
                        "segment as a host and the rest as another route's path");
        out->route = NULL;
        return false;
    }
    return true;
}

const struct route *classify_route_of(const struct config *cfg, const char *path)
{
    struct classify_result out;

    memset(&out, 0, sizeof(out));
    return classify_route(cfg, path, &out) ? out.route : NULL;
}

void classify_lookup(const struct config *cfg, const char *method, const char *path,
                     const struct evkeyvalq *headers, const char *key_value, char *key,
                     size_t keysize, struct classify_result *out)
{
    const struct route_policy *policy;

    memset(out, 0, sizeof(*out));
    if (!classify_route(cfg, path, out))
        return;
    if (out->route == NULL ||
        (method != NULL && !(out->route->policy.methods & config_method_bit(method)))) {
        out->verdict = CLASSIFY_PASS_THROUGH;
        return;
    }
    policy = &out->route->policy;
    if (policy->key_from == KEY_FROM_JSON) {
        size_t len = strlen(key_value);

        if (len >= keysize || len > policy->key_max_length) {
            classify_refuse(out, PROBLEM_INVALID_KEY, 400,
                            "the event id is longer than the route's key_max_length");
            return;
        }
        memcpy(key, key_value, len + 1);
        if (classify_event_id(policy, key, out))
            out->verdict = CLASSIFY_PROTECT;
    } else {
        classify_key_value(policy, key_value, key, keysize, out);
    }
    if (out->verdict == CLASSIFY_PROTECT && classify_key_rules(policy, key, out->key_len, out))
        classify_check_scope(policy, headers, out);
}

void classify_request(const struct config *cfg, const struct classify_input *in, char *key,
                      size_t keysize, struct classify_result *out)
{
    const struct route_policy *policy;
    const char *signed_id = NULL;

    memset(out, 0, sizeof(*out));
    if (in->invalid_target) {
        classify_refuse(out, PROBLEM_INVALID_TARGET, 400,
                        "the request target has a control character or an unsupported form");
        return;
    }
    if (!classify_route(cfg, in->path, out))
        return;
    if (in->body_len > cfg->max_request_body) {
        classify_refuse(out, PROBLEM_BODY_TOO_LARGE, 413,
                        "the request body is larger than the configured limit");
        return;
    }
    if (out->route != NULL && out->route->policy.webhook &&
        !(out->route->policy.methods & config_method_bit(in->method))) {
        /* a webhook receiver takes only signed deliveries: any other method is refused */
        classify_refuse(out, PROBLEM_METHOD_NOT_ALLOWED, 405,
                        "this webhook route takes only the methods whose deliveries it verifies");
        return;
    }
    if (out->route == NULL || !(out->route->policy.methods & config_method_bit(in->method))) {
        /* the route (if any) stays for the access log and metrics: the method is not protected */
        out->verdict = CLASSIFY_PASS_THROUGH;
        return;
    }
    policy = &out->route->policy;
    if (policy->verify != VERIFY_NONE && !classify_signature(policy, in, out, &signed_id))
        return;
    if (!classify_queued_fields(policy, in, out))
        return;
    if (policy->key_from == KEY_FROM_JSON && policy->webhook) {
        if (classify_key_from_body(policy, in, key, keysize, out))
            out->verdict = CLASSIFY_PROTECT;
    } else if (policy->key_from == KEY_FROM_JSON) {
        classify_key_in_body(policy, in, key, keysize, out);
    } else {
        classify_key_from_header(policy, in, signed_id, key, keysize, out);
    }
    if (out->verdict == CLASSIFY_PROTECT && classify_key_rules(policy, key, out->key_len, out))
        classify_check_scope(policy, in->headers, out);
}

bool classify_streams(const struct config *cfg, const struct classify_input *in, char *key,
                      size_t keysize, struct classify_result *out)
{
    struct classify_input head = *in;
    const struct route_policy *policy;

    memset(out, 0, sizeof(*out));
    head.body = NULL;
    head.body_len = 0;
    if (in->invalid_target || !classify_route(cfg, in->path, out))
        return false; /* refused: classify_request says so once the request is whole */
    if (out->route != NULL && out->route->policy.webhook)
        return false; /* a signature, an event id or a method refusal: the body decides */
    if (out->route == NULL || !(out->route->policy.methods & config_method_bit(in->method))) {
        out->verdict = CLASSIFY_PASS_THROUGH;
        return true;
    }
    policy = &out->route->policy;
    if (policy->verify != VERIFY_NONE || policy->key_from == KEY_FROM_JSON ||
        policy->delivery.mode == DELIVERY_QUEUED)
        return false;
    classify_key_from_header(policy, &head, NULL, key, keysize, out);
    return out->verdict == CLASSIFY_UNPROTECTED;
}
