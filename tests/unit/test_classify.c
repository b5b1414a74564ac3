/*
 * Request classification (README "How a request is handled" and 8): one case per rule, each a
 * request against one configuration, checked for its verdict, problem and
 * route.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "classify.h"
#include "unit.h"

static const char config_yaml[] =
    "limits: {max_request_body: 64B}\n"
    "routes:\n"
    "  - path: /v1/payments*\n"
    "  - path: /v1/strict*\n"
    "    require_key: true\n"
    "    key_max_length: 8\n"
    "  - path: /hooks/gh\n"
    "    methods: [POST]\n"
    "    key_from: header:X-GitHub-Delivery\n"
    "    verify: none\n"
    "  - path: /hooks/json\n"
    "    methods: [POST]\n"
    "    key_from: json:/id\n"
    "    verify: none\n"
    "  - path: /hooks/queued\n"
    "    methods: [POST]\n"
    "    key_from: header:X-GitHub-Delivery\n"
    "    verify: none\n"
    "    delivery: {mode: queued}\n"
    /* the client contract's key and scope rules, and key_from on ordinary routes */
    "  - path: /v2/rules*\n"
    "    key_min_length: 8\n"
    "    key_pattern: '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|short-[0-9]+'\n"
    "  - path: /v2/tenant*\n"
    "    scope_headers: [X-Account-Id]\n"
    "    scope_required: true\n"
    "  - path: /v2/orders*\n"
    "    key_from: json:/reference\n"
    "  - path: /v2/transfers*\n"
    "    key_from: json:/reference\n"
    "    require_key: true\n"
    "  - path: /v2/legacy*\n"
    "    key_from: header:X-Reference\n";

struct header { const char *name, *value; };

static const struct {
    const char *name;
    const char *method, *path;
    struct header headers[3];
    const char *body;
    bool invalid_target;
    enum classify_verdict want;
    enum problem problem;           /* REFUSE */
    const char *route;              /* matched route path, NULL for none */
    const char *key;                /* PROTECT */
} cases[] = {
    { "no route: pass-through", "POST", "/v2/x", { { NULL, NULL } }, "{}", false,
      CLASSIFY_PASS_THROUGH, 0, NULL, NULL },
    { "unprotected method on a route: pass-through", "GET", "/v1/payments/1",
      { { "Idempotency-Key", "k" } }, NULL, false, CLASSIFY_PASS_THROUGH, 0, "/v1/payments",
      NULL },
    { "no key, key optional: unprotected", "POST", "/v1/payments", { { NULL, NULL } }, "{}",
      false, CLASSIFY_UNPROTECTED, 0, "/v1/payments", NULL },
    { "a key: protect", "POST", "/v1/payments", { { "Idempotency-Key", "k-1" } }, "{}", false,
      CLASSIFY_PROTECT, 0, "/v1/payments", "k-1" },
    { "sf-string key unquoted", "POST", "/v1/payments", { { "Idempotency-Key", "\"k-1\"" } },
      "{}", false, CLASSIFY_PROTECT, 0, "/v1/payments", "k-1" },
    { "path spelling matches the route", "POST", "//V1/x/../payments/",
      { { "Idempotency-Key", "k" } }, "{}", false, CLASSIFY_PROTECT, 0, "/v1/payments", "k" },
    { "require_key without a key: 400 missing-key", "POST", "/v1/strict", { { NULL, NULL } },
      "{}", false, CLASSIFY_REFUSE, PROBLEM_MISSING_KEY, "/v1/strict", NULL },
    { "key longer than key_max_length: invalid-key", "POST", "/v1/strict",
      { { "Idempotency-Key", "123456789" } }, "{}", false, CLASSIFY_REFUSE, PROBLEM_INVALID_KEY,
      "/v1/strict", NULL },
    { "two key lines: invalid-key", "POST", "/v1/payments",
      { { "Idempotency-Key", "a" }, { "Idempotency-Key", "b" } }, "{}", false, CLASSIFY_REFUSE,
      PROBLEM_INVALID_KEY, "/v1/payments", NULL },
    { "empty key: invalid-key", "POST", "/v1/payments", { { "Idempotency-Key", "" } }, "{}",
      false, CLASSIFY_REFUSE, PROBLEM_INVALID_KEY, "/v1/payments", NULL },
    { "bare key with a comma (two lines folded?): invalid-key", "POST", "/v1/payments",
      { { "Idempotency-Key", "t4, t5" } }, "{}", false, CLASSIFY_REFUSE, PROBLEM_INVALID_KEY,
      "/v1/payments", NULL },
    { "comma inside an sf-string: one key", "POST", "/v1/payments",
      { { "Idempotency-Key", " \"t4, t5\"" } }, "{}", false, CLASSIFY_PROTECT, 0,
      "/v1/payments", "t4, t5" },
    { "scope header on two lines: invalid-key", "POST", "/v1/payments",
      { { "Idempotency-Key", "k" }, { "Authorization", "Bearer a" },
        { "Authorization", "Bearer b" } }, "{}", false, CLASSIFY_REFUSE, PROBLEM_INVALID_KEY,
      "/v1/payments", NULL },
    { "bare key with an inner space: protect", "POST", "/v1/payments",
      { { "Idempotency-Key", "a b" } }, "{}", false, CLASSIFY_PROTECT, 0, "/v1/payments",
      "a b" },
    { "body over the limit: 413", "POST", "/v1/payments", { { "Idempotency-Key", "k" } },
      "0123456789012345678901234567890123456789012345678901234567890123456789", false,
      CLASSIFY_REFUSE, PROBLEM_BODY_TOO_LARGE, "/v1/payments", NULL },
    { "a path that cannot be normalised: 400 invalid-target", "POST", "/v1%2Fpayments",
      { { "Idempotency-Key", "k" } }, "{}", false, CLASSIFY_REFUSE, PROBLEM_INVALID_TARGET, NULL,
      NULL },
    { "backslash spelling matches the route", "POST", "/v1\\payments",
      { { "Idempotency-Key", "k" } }, "{}", false, CLASSIFY_PROTECT, 0, "/v1/payments", "k" },
    { "invalid target: 400", "POST", "/v1/payments", { { "Idempotency-Key", "k" } }, "{}", true,
      CLASSIFY_REFUSE, PROBLEM_INVALID_TARGET, NULL, NULL },
    { "webhook without its event id header: missing-key", "POST", "/hooks/gh",
      { { NULL, NULL } }, "{}", false, CLASSIFY_REFUSE, PROBLEM_MISSING_KEY, "/hooks/gh", NULL },
    { "another method on a webhook route: 405", "PUT", "/hooks/gh",
      { { "X-GitHub-Delivery", "d-1" } }, "{}", false, CLASSIFY_REFUSE,
      PROBLEM_METHOD_NOT_ALLOWED, "/hooks/gh", NULL },
    { "a target with a space is refused by the request view, not here", "POST",
      "/v1/payments", { { "Idempotency-Key", "k" } }, "{}", true, CLASSIFY_REFUSE,
      PROBLEM_INVALID_TARGET, NULL, NULL },
    { "webhook event id from a header", "POST", "/hooks/gh",
      { { "X-GitHub-Delivery", "d-1" } }, "{}", false, CLASSIFY_PROTECT, 0, "/hooks/gh", "d-1" },
    { "webhook event id from the JSON body", "POST", "/hooks/json", { { NULL, NULL } },
      "{\"id\":\"evt_1\"}", false, CLASSIFY_PROTECT, 0, "/hooks/json", "evt_1" },
    { "JSON body without the id: missing-key", "POST", "/hooks/json", { { NULL, NULL } },
      "{\"x\":1}", false, CLASSIFY_REFUSE, PROBLEM_MISSING_KEY, "/hooks/json", NULL },
    { "JSON id not a string: invalid-key", "POST", "/hooks/json", { { NULL, NULL } },
      "{\"id\":7}", false, CLASSIFY_REFUSE, PROBLEM_INVALID_KEY, "/hooks/json", NULL },
};

/*
 * The key and scope rules (scope_required, key_min_length, key_pattern) and
 * key_from on ordinary protected routes (docs/client-contract.md#key-rules,
 * #the-key-in-the-body): the verdict, the problem, and a word of the detail,
 * which names the rule and never the key.
 */
#define UUID "0c8a3e5e-5d2f-4b9e-9a57-3f2d1c0b9a88"
static const struct {
    const char *name;
    const char *method, *path;
    struct header headers[3];
    const char *body;
    enum classify_verdict want;
    enum problem problem;           /* REFUSE */
    const char *detail;             /* REFUSE: a word of the detail */
    const char *key;                /* PROTECT */
} rule_cases[] = {
    { .name = "key_min_length: a shorter key is invalid-key naming the rule", .method = "POST",
      .path = "/v2/rules", .headers = { { "Idempotency-Key", "short-1" } },
      .want = CLASSIFY_REFUSE, .problem = PROBLEM_INVALID_KEY,
      .detail = "shorter than this route's key_min_length (8 bytes)" },
    { .name = "key_min_length counts the key after unquoting", .method = "POST",
      .path = "/v2/rules", .headers = { { "Idempotency-Key", "\"short-1\"" } },
      .want = CLASSIFY_REFUSE, .problem = PROBLEM_INVALID_KEY, .detail = "key_min_length" },
    { .name = "key_pattern: a key that does not match is invalid-key naming the rule",
      .method = "POST", .path = "/v2/rules", .headers = { { "Idempotency-Key", "order-4242" } },
      .want = CLASSIFY_REFUSE, .problem = PROBLEM_INVALID_KEY,
      .detail = "does not match this route's key_pattern" },
    { .name = "key_pattern: the whole key must match, not a part", .method = "POST",
      .path = "/v2/rules", .headers = { { "Idempotency-Key", "x" UUID } },
      .want = CLASSIFY_REFUSE, .problem = PROBLEM_INVALID_KEY, .detail = "key_pattern" },
    { .name = "key_pattern: nor a key with a match inside", .method = "POST",
      .path = "/v2/rules", .headers = { { "Idempotency-Key", "short-12x" } },
      .want = CLASSIFY_REFUSE, .problem = PROBLEM_INVALID_KEY, .detail = "key_pattern" },
    { .name = "key_pattern: a UUID key is protected", .method = "POST", .path = "/v2/rules",
      .headers = { { "Idempotency-Key", UUID } }, .want = CLASSIFY_PROTECT, .key = UUID },
    { .name = "key_pattern: either alternative, whole", .method = "POST", .path = "/v2/rules",
      .headers = { { "Idempotency-Key", "short-12" } }, .want = CLASSIFY_PROTECT,
      .key = "short-12" },
    { .name = "key_pattern: an sf-string key is matched unquoted", .method = "POST",
      .path = "/v2/rules", .headers = { { "Idempotency-Key", "\"" UUID "\"" } },
      .want = CLASSIFY_PROTECT, .key = UUID },
    { .name = "key rules: no key stays unprotected", .method = "POST", .path = "/v2/rules",
      .want = CLASSIFY_UNPROTECTED },
    { .name = "scope_required: no scope header is missing-scope naming it", .method = "POST",
      .path = "/v2/tenant", .headers = { { "Idempotency-Key", "k-1" } },
      .want = CLASSIFY_REFUSE, .problem = PROBLEM_MISSING_SCOPE, .detail = "X-Account-Id" },
    { .name = "scope_required: an empty scope header is missing-scope", .method = "POST",
      .path = "/v2/tenant", .headers = { { "Idempotency-Key", "k-1" }, { "X-Account-Id", "" } },
      .want = CLASSIFY_REFUSE, .problem = PROBLEM_MISSING_SCOPE, .detail = "scope_required" },
    { .name = "scope_required: spaces only are empty", .method = "POST", .path = "/v2/tenant",
      .headers = { { "Idempotency-Key", "k-1" }, { "X-Account-Id", " \t " } },
      .want = CLASSIFY_REFUSE, .problem = PROBLEM_MISSING_SCOPE, .detail = "X-Account-Id" },
    { .name = "scope_required: a scope header twice is still invalid-key", .method = "POST",
      .path = "/v2/tenant", .headers = { { "Idempotency-Key", "k-1" }, { "X-Account-Id", "a" },
      { "X-Account-Id", "b" } }, .want = CLASSIFY_REFUSE, .problem = PROBLEM_INVALID_KEY,
      .detail = "more than once" },
    { .name = "scope_required: with the header, protected", .method = "POST",
      .path = "/v2/tenant", .headers = { { "Idempotency-Key", "k-1" }, { "X-Account-Id", "a" } },
      .want = CLASSIFY_PROTECT, .key = "k-1" },
    { .name = "scope_required: no key, no scope: unprotected as before", .method = "POST",
      .path = "/v2/tenant", .want = CLASSIFY_UNPROTECTED },
    { .name = "key_from json: the key from the body", .method = "POST", .path = "/v2/orders",
      .body = "{\"reference\":\"ref-1\",\"amount\":5}", .want = CLASSIFY_PROTECT,
      .key = "ref-1" },
    { .name = "key_from json: a JSON body without the member is unprotected", .method = "POST",
      .path = "/v2/orders", .body = "{\"amount\":5}", .want = CLASSIFY_UNPROTECTED },
    { .name = "key_from json: an empty body has no key", .method = "POST", .path = "/v2/orders",
      .body = "", .want = CLASSIFY_UNPROTECTED },
    { .name = "key_from json: a body that is not JSON is refused, never unprotected",
      .method = "POST", .path = "/v2/orders", .body = "reference=ref-1&amount=5",
      .want = CLASSIFY_REFUSE, .problem = PROBLEM_INVALID_KEY, .detail = "json:/reference" },
    { .name = "key_from json: a member repeated is refused", .method = "POST",
      .path = "/v2/orders", .body = "{\"reference\":\"a\",\"reference\":\"b\"}",
      .want = CLASSIFY_REFUSE, .problem = PROBLEM_INVALID_KEY,
      .detail = "cannot be read as one JSON document (not JSON, a member name written twice" },
    { .name = "key_from json: an integer past 64 bits beside the key is read", .method = "POST",
      .path = "/v2/orders", .body = "{\"reference\":\"ord-1\",\"n\":99999999999999999999}",
      .want = CLASSIFY_PROTECT },
    { .name = "key_from json: a number beyond a double is refused, saying so", .method = "POST",
      .path = "/v2/orders", .body = "{\"reference\":\"ord-1\",\"n\":1e400}",
      .want = CLASSIFY_REFUSE, .problem = PROBLEM_INVALID_KEY,
      .detail = "a number beyond a double" },
    { .name = "key_from json: a key that is not a string is invalid-key", .method = "POST",
      .path = "/v2/orders", .body = "{\"reference\":42}", .want = CLASSIFY_REFUSE,
      .problem = PROBLEM_INVALID_KEY, .detail = "idempotency key in the JSON body" },
    { .name = "key_from json: a key header without the member is missing-key", .method = "POST",
      .path = "/v2/orders", .headers = { { "Idempotency-Key", "k-1" } },
      .body = "{\"amount\":5}", .want = CLASSIFY_REFUSE, .problem = PROBLEM_MISSING_KEY,
      .detail = "not from the Idempotency-Key header" },
    { .name = "key_from json: the key header is not read beside the member", .method = "POST",
      .path = "/v2/orders", .headers = { { "Idempotency-Key", "k-1" } },
      .body = "{\"reference\":\"ref-2\"}", .want = CLASSIFY_PROTECT, .key = "ref-2" },
    { .name = "key_from json: another method passes through (no 405)", .method = "GET",
      .path = "/v2/orders/1", .want = CLASSIFY_PASS_THROUGH },
    { .name = "key_from json with require_key: no member is missing-key", .method = "POST",
      .path = "/v2/transfers", .body = "{\"amount\":5}", .want = CLASSIFY_REFUSE,
      .problem = PROBLEM_MISSING_KEY, .detail = "requires an idempotency key in the JSON body" },
    { .name = "key_from header: the key from that header", .method = "POST",
      .path = "/v2/legacy", .headers = { { "X-Reference", "\"L-1\"" } },
      .want = CLASSIFY_PROTECT, .key = "L-1" },
    { .name = "key_from header: without any key header, unprotected (not a webhook's 400)",
      .method = "POST", .path = "/v2/legacy", .want = CLASSIFY_UNPROTECTED },
    { .name = "key_from header: Idempotency-Key instead of its header is missing-key",
      .method = "POST", .path = "/v2/legacy", .headers = { { "Idempotency-Key", "k" } },
      .want = CLASSIFY_REFUSE, .problem = PROBLEM_MISSING_KEY,
      .detail = "from the X-Reference header, not from Idempotency-Key" },
    { .name = "webhook json route: a body that is not JSON is missing-key as before",
      .method = "POST", .path = "/hooks/json", .body = "id=evt_1", .want = CLASSIFY_REFUSE,
      .problem = PROBLEM_MISSING_KEY, .detail = "no event id" },
};

static void run_rule_cases(const struct config *cfg)
{
    for (size_t i = 0; i < sizeof(rule_cases) / sizeof(rule_cases[0]); i++) {
        struct evkeyvalq headers;
        struct classify_input in;
        struct classify_result out;
        char key[CLASSIFY_KEY_MAX];
        const char *body = rule_cases[i].body;
        bool ok;

        TAILQ_INIT(&headers);
        for (size_t h = 0; h < 3 && rule_cases[i].headers[h].name != NULL; h++)
            evhttp_add_header(&headers, rule_cases[i].headers[h].name,
                              rule_cases[i].headers[h].value);
        in = (struct classify_input){
            .method = rule_cases[i].method, .path = rule_cases[i].path, .headers = &headers,
            .body = body, .body_len = body != NULL ? strlen(body) : 0, .now_s = 1700000000,
        };
        classify_request(cfg, &in, key, sizeof(key), &out);
        ok = out.verdict == rule_cases[i].want &&
             (rule_cases[i].key == NULL ||
              (out.key_len == strlen(rule_cases[i].key) && strcmp(key, rule_cases[i].key) == 0));
        if (rule_cases[i].want == CLASSIFY_REFUSE)
            ok = ok && out.problem == rule_cases[i].problem && out.status == 400 &&
                 out.detail != NULL && strstr(out.detail, rule_cases[i].detail) != NULL;
        /* the detail names the rule, never the request's key */
        for (size_t h = 0; h < 3 && rule_cases[i].headers[h].name != NULL && out.detail; h++)
            if (strcmp(rule_cases[i].headers[h].name, "Idempotency-Key") == 0 &&
                strlen(rule_cases[i].headers[h].value) > 2)
                ok = ok && strstr(out.detail, rule_cases[i].headers[h].value) == NULL;
        UNIT_CHECK(rule_cases[i].name, ok, "verdict %d problem %d key_len %zu detail %s",
                   (int)out.verdict, (int)out.problem, out.key_len,
                   out.detail != NULL ? out.detail : "(none)");
        evhttp_clear_headers(&headers);
    }
}

/* Whether out has verdict want, the route named route (NULL: none) and, when key is set, that key. */
static bool classified(const struct classify_result *out, const char *parsed,
                       enum classify_verdict want, const char *route, const char *key)
{
    return out->verdict == want &&
           (route == NULL ? out->route == NULL
                          : out->route != NULL && strcmp(out->route->path, route) == 0) &&
           (key == NULL || (out->key_len == strlen(key) && strcmp(parsed, key) == 0));
}

/*
 * classify_lookup: the key an operator holds, as a request with it would be
 * read (no body, no signature, no limits), for the record-id lookup.
 */
static const struct {
    const char *name;
    const char *method, *path, *key;
    struct header headers[2];
    enum classify_verdict want;
    const char *route;              /* matched route path, NULL for none */
    const char *parsed;             /* PROTECT: the key as the route reads it */
} lookups[] = {
    { "lookup: a header key", "POST", "/v1/payments/1", "k-1", { { NULL, NULL } },
      CLASSIFY_PROTECT, "/v1/payments", "k-1" },
    { "lookup: any method the route protects", NULL, "/v1/payments", "k-1", { { NULL, NULL } },
      CLASSIFY_PROTECT, "/v1/payments", "k-1" },
    { "lookup: an sf-string key is read as a request's", NULL, "/v1/payments", "\"k-1\"",
      { { NULL, NULL } }, CLASSIFY_PROTECT, "/v1/payments", "k-1" },
    { "lookup: no route", NULL, "/v2/x", "k", { { NULL, NULL } }, CLASSIFY_PASS_THROUGH, NULL,
      NULL },
    { "lookup: a method the route does not protect", "GET", "/v1/payments", "k",
      { { NULL, NULL } }, CLASSIFY_PASS_THROUGH, "/v1/payments", NULL },
    { "lookup: a key over key_max_length", NULL, "/v1/strict", "123456789", { { NULL, NULL } },
      CLASSIFY_REFUSE, "/v1/strict", NULL },
    { "lookup: a folded key", NULL, "/v1/payments", "a, b", { { NULL, NULL } },
      CLASSIFY_REFUSE, "/v1/payments", NULL },
    { "lookup: a scope header twice", NULL, "/v1/payments", "k",
      { { "Authorization", "Bearer a" }, { "Authorization", "Bearer b" } }, CLASSIFY_REFUSE,
      "/v1/payments", NULL },
    { "lookup: a webhook header event id", NULL, "/hooks/gh", "d-1", { { NULL, NULL } },
      CLASSIFY_PROTECT, "/hooks/gh", "d-1" },
    { "lookup: a JSON event id is the key as it stands", NULL, "/hooks/json", "evt_1",
      { { NULL, NULL } }, CLASSIFY_PROTECT, "/hooks/json", "evt_1" },
    { "lookup: a JSON event id is not unquoted", NULL, "/hooks/json", "\"evt_1\"",
      { { NULL, NULL } }, CLASSIFY_REFUSE, "/hooks/json", NULL },
    { "lookup: an empty JSON event id", NULL, "/hooks/json", "", { { NULL, NULL } },
      CLASSIFY_REFUSE, "/hooks/json", NULL },
    { "lookup: a key under key_min_length", NULL, "/v2/rules", "short-1", { { NULL, NULL } },
      CLASSIFY_REFUSE, "/v2/rules", NULL },
    { "lookup: a key outside key_pattern", NULL, "/v2/rules", "order-4242", { { NULL, NULL } },
      CLASSIFY_REFUSE, "/v2/rules", NULL },
    { "lookup: a key the rules take", NULL, "/v2/rules", UUID, { { NULL, NULL } },
      CLASSIFY_PROTECT, "/v2/rules", UUID },
    { "lookup: scope_required without the scope header", NULL, "/v2/tenant", "k",
      { { NULL, NULL } }, CLASSIFY_REFUSE, "/v2/tenant", NULL },
    { "lookup: scope_required with it", NULL, "/v2/tenant", "k", { { "X-Account-Id", "a" } },
      CLASSIFY_PROTECT, "/v2/tenant", "k" },
    { "lookup: key_from json on an ordinary route takes the key as it stands", NULL,
      "/v2/orders", "ref-1", { { NULL, NULL } }, CLASSIFY_PROTECT, "/v2/orders", "ref-1" },
};

/*
 * classify_streams: the head alone decides a pass, so the body may stream;
 * a route keyed from the body never does, and a scope_required route
 * without a key streams as any keyless request.
 */
static void run_stream_cases(const struct config *cfg)
{
    static const struct {
        const char *name, *path;
        bool streams;
        enum classify_verdict want;
    } streams[] = {
        { "streams: key_from json reads the body whole", "/v2/orders", false, 0 },
        { "streams: scope_required without a key streams", "/v2/tenant", true,
          CLASSIFY_UNPROTECTED },
        { "streams: key_from header without it streams", "/v2/legacy", true,
          CLASSIFY_UNPROTECTED },
    };
    for (size_t i = 0; i < sizeof(streams) / sizeof(streams[0]); i++) {
        struct evkeyvalq headers;
        struct classify_result out;
        char key[CLASSIFY_KEY_MAX];
        struct classify_input in = { .method = "POST", .path = streams[i].path,
                                     .headers = &headers, .now_s = 1700000000 };
        bool got;

        TAILQ_INIT(&headers);
        got = classify_streams(cfg, &in, key, sizeof(key), &out);
        UNIT_CHECK(streams[i].name, got == streams[i].streams &&
                   (!got || out.verdict == streams[i].want), "streams %d verdict %d", (int)got,
                   (int)out.verdict);
    }
    UNIT_CHECK("route of a path before classifying",
               classify_route_of(cfg, "/v2//orders/1") != NULL &&
               strcmp(classify_route_of(cfg, "/v2//orders/1")->path, "/v2/orders") == 0 &&
               classify_route_of(cfg, "/nowhere") == NULL &&
               classify_route_of(cfg, "/v1%2Fpayments") == NULL, "wrong route");
}

static void run_lookup_cases(const struct config *cfg)
{
    for (size_t i = 0; i < sizeof(lookups) / sizeof(lookups[0]); i++) {
        struct evkeyvalq headers;
        struct classify_result out;
        char key[CLASSIFY_KEY_MAX];

        TAILQ_INIT(&headers);
        for (size_t h = 0; h < 2 && lookups[i].headers[h].name != NULL; h++)
            evhttp_add_header(&headers, lookups[i].headers[h].name, lookups[i].headers[h].value);
        classify_lookup(cfg, lookups[i].method, lookups[i].path, &headers, lookups[i].key, key,
                        sizeof(key), &out);
        UNIT_CHECK(lookups[i].name,
                   classified(&out, key, lookups[i].want, lookups[i].route, lookups[i].parsed),
                   "verdict %d route %s key_len %zu", (int)out.verdict,
                   out.route != NULL ? out.route->path : "(none)", out.key_len);
        evhttp_clear_headers(&headers);
    }
}

int main(void)
{
    struct config cfg;
    char err[512];

    if (config_load_string(&cfg, config_yaml, strlen(config_yaml), "test", err,
                           sizeof(err)) != 0) {
        printf("FAIL config: %s\n", err);
        return 1;
    }
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct evkeyvalq headers;
        struct classify_input in;
        struct classify_result out;
        char key[CLASSIFY_KEY_MAX];
        bool ok;

        TAILQ_INIT(&headers);
        for (size_t h = 0; h < 3 && cases[i].headers[h].name != NULL; h++)
            evhttp_add_header(&headers, cases[i].headers[h].name, cases[i].headers[h].value);
        in = (struct classify_input){
            .method = cases[i].method, .path = cases[i].path,
            .invalid_target = cases[i].invalid_target, .headers = &headers,
            .body = cases[i].body, .body_len = cases[i].body ? strlen(cases[i].body) : 0,
            .now_s = 1700000000,
        };
        classify_request(&cfg, &in, key, sizeof(key), &out);
        ok = classified(&out, key, cases[i].want, cases[i].route, cases[i].key) &&
             (cases[i].want != CLASSIFY_REFUSE || out.problem == cases[i].problem);
        UNIT_CHECK(cases[i].name, ok, "verdict %d problem %d route %s key_len %zu",
                   (int)out.verdict, (int)out.problem,
                   out.route != NULL ? out.route->path : "(none)", out.key_len);
        evhttp_clear_headers(&headers);
    }
    /*
     * A queued delivery stores its forwarded fields (README "Webhook inbox"):
     * 128 of them are queued; one more is 431 before anything is claimed.
     * Fields it never stores (hop-by-hop, Content-Length, Idempotency-Key)
     * do not count; a direct route takes any number.
     */
    static const struct {
        const char *name, *path;
        size_t fields;
        enum classify_verdict want;
    } many[] = {
        { "queued delivery with 128 stored fields: protect", "/hooks/queued", 128,
          CLASSIFY_PROTECT },
        { "queued delivery with 129 stored fields: 431", "/hooks/queued", 129,
          CLASSIFY_REFUSE },
        { "direct delivery with 4100 fields: protect", "/hooks/gh", 4100, CLASSIFY_PROTECT },
    };
    for (size_t i = 0; i < sizeof(many) / sizeof(many[0]); i++) {
        struct evkeyvalq headers;
        struct classify_result out;
        char key[CLASSIFY_KEY_MAX], name[32];
        struct classify_input in = { .method = "POST", .path = many[i].path,
                                     .headers = &headers, .body = "{}", .body_len = 2,
                                     .now_s = 1700000000 };

        TAILQ_INIT(&headers);
        evhttp_add_header(&headers, "X-GitHub-Delivery", "d-1"); /* stored: the first field */
        for (size_t h = 1; h < many[i].fields; h++) {
            snprintf(name, sizeof(name), "X-Pad-%zu", h);
            evhttp_add_header(&headers, name, "v");
        }
        evhttp_add_header(&headers, "Connection", "keep-alive");
        evhttp_add_header(&headers, "Content-Length", "2");
        evhttp_add_header(&headers, "Idempotency-Key", "ignored");
        classify_request(&cfg, &in, key, sizeof(key), &out);
        UNIT_CHECK(many[i].name,
                   out.verdict == many[i].want &&
                       (many[i].want != CLASSIFY_REFUSE ||
                        (out.problem == PROBLEM_TOO_MANY_HEADER_FIELDS && out.status == 431)),
                   "verdict %d problem %d status %d", (int)out.verdict, (int)out.problem,
                   out.status);
        evhttp_clear_headers(&headers);
    }
    run_lookup_cases(&cfg);
    run_rule_cases(&cfg);
    run_stream_cases(&cfg);
    config_deinit(&cfg);
    UNIT_DONE();
}
