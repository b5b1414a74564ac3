/*
 * The fingerprint modes (proxy/idem/canonical.h, docs/client-contract.md's
 * sections per mode): which bodies are the same request under json and
 * form and which are not, what is refused and why (never quoting the
 * body), the media types each mode reads, and the fingerprint itself:
 * method and target still count, a key id keys it, none is all zeros.
 */
#include <stdlib.h>
#include <string.h>

#include "canonical.h"
#include "fingerprint.h"
#include "keyring.h"
#include "meter.h"
#include "unit.h"

/* A body of n bytes (a literal may hold NUL). */
struct body {
    const char *bytes;
    size_t len;
};
#define B(s) { (s), sizeof(s) - 1 }

static const struct canonical_ignore no_ignore;

/* ---- json ---------------------------------------------------------------- */

/* The canonical text of body under ignore (NULL: none) into *out, a refusal's reason in why;
 * the result. */
static int json_of(struct body b, const struct canonical_ignore *ignore, char **out, size_t *len,
                   char *why)
{
    return canonical_json(b.bytes, b.len, ignore != NULL ? ignore : &no_ignore, out, len, why);
}

/* The canonical form text of body into *out, a refusal's reason in why; the result. */
static int form_of(struct body b, const struct canonical_ignore *ignore, char **out, size_t *len,
                   char *why)
{
    (void)ignore;
    return canonical_form(b.bytes, b.len, out, len, why);
}

typedef int canonical_of_fn(struct body b, const struct canonical_ignore *ignore, char **out,
                            size_t *len, char *why);

/* Whether a and b are read as the same request by of under ignore (both must read). */
static int same_under(canonical_of_fn *of, struct body a, struct body b,
                      const struct canonical_ignore *ignore)
{
    char *x = NULL, *y = NULL, why[CANONICAL_WHY_MAX];
    size_t xl = 0, yl = 0;
    int same = -1; /* neither: one did not read */

    if (of(a, ignore, &x, &xl, why) == CANONICAL_OK && of(b, ignore, &y, &yl, why) == CANONICAL_OK)
        same = xl == yl && (xl == 0 || memcmp(x, y, xl) == 0);
    free(x);
    free(y);
    return same;
}

static int json_same(struct body a, struct body b, const struct canonical_ignore *ignore)
{
    return same_under(json_of, a, b, ignore);
}

/* Two bodies and whether a mode reads them as the same request. */
struct pair_case {
    const char *name;
    struct body a, b;
    int same;
};

/* A body a mode refuses (400 invalid-body). */
struct refused_case {
    const char *name;
    struct body body;
};

/* Checks every pair and every refusal of one mode. */
static void run_cases(canonical_of_fn *of, const struct pair_case *pairs, size_t n_pairs,
                      const struct refused_case *refused, size_t n_refused)
{
    char *out = NULL, why[CANONICAL_WHY_MAX];
    size_t len = 0;

    for (size_t i = 0; i < n_pairs; i++) {
        int same = same_under(of, pairs[i].a, pairs[i].b, NULL);
        UNIT_CHECK(pairs[i].name, same == pairs[i].same, "same=%d", same);
    }
    for (size_t i = 0; i < n_refused; i++) {
        why[0] = '\0';
        int r = of(refused[i].body, NULL, &out, &len, why);
        UNIT_CHECK(refused[i].name, r == CANONICAL_INVALID_BODY && out == NULL && why[0],
                   "r=%d why=%s", r, why);
    }
}

static const struct pair_case json_pairs[] = {
    { "members reordered and whitespace changed", B("{\"b\":1,\"a\":2}"),
      B(" {\n  \"a\" : 2 ,\t\"b\": 1 }\r\n"), 1 },
    { "nested objects reordered", B("{\"a\":{\"y\":1,\"x\":[{\"d\":1,\"c\":2}]}}"),
      B("{\"a\":{\"x\":[{\"c\":2,\"d\":1}],\"y\":1}}"), 1 },
    { "\\u00e9 and a raw UTF-8 e-acute", B("{\"n\":\"\\u00e9\"}"), B("{\"n\":\"\xc3\xa9\"}"), 1 },
    { "an escaped and a raw member name", B("{\"\\u0061\":1}"), B("{\"a\":1}"), 1 },
    { "\\/ and /", B("\"a\\/b\""), B("\"a/b\""), 1 },
    { "a surrogate pair and its UTF-8", B("\"\\ud83d\\ude00\""), B("\"\xf0\x9f\x98\x80\""), 1 },
    { "1e2 and 100.0 are one double", B("1e2"), B("100.0"), 1 },
    { "0.1 and 0.10000000000000001 are one double", B("0.1"), B("0.10000000000000001"), 1 },
    { "-0 and 0 are one integer", B("-0"), B("0"), 1 },
    { "1 and 1.0 differ (an integer and a real)", B("{\"amount\":1}"), B("{\"amount\":1.0}"), 0 },
    { "0.0 and -0.0 differ", B("0.0"), B("-0.0"), 0 },
    { "integers past a double's 53 bits stay exact", B("9007199254740993"),
      B("9007199254740992"), 0 },
    { "the largest 64-bit integers stay exact", B("9223372036854775807"),
      B("9223372036854775806"), 0 },
    { "array order counts", B("[1,2]"), B("[2,1]"), 0 },
    { "case counts", B("\"a\""), B("\"A\""), 0 },
    { "a string with \\u0000 differs from one cut there", B("\"a\\u0000b\""), B("\"a\""), 0 },
    { "null and the empty string differ", B("null"), B("\"\""), 0 },
    { "{} and [] differ", B("{}"), B("[]"), 0 },
    { "the empty body and \"\" differ", B(""), B("\"\""), 0 },
    { "the empty body and {} differ", B(""), B("{}"), 0 },
    { "a changed value differs", B("{\"amount\":100}"), B("{\"amount\":101}"), 0 },
    { "a missing member differs", B("{\"a\":1,\"b\":null}"), B("{\"a\":1}"), 0 },
};

static const struct refused_case json_refused[] = {
    { "a repeated member name", B("{\"a\":1,\"a\":2}") },
    { "a repeated member name, once escaped", B("{\"a\":1,\"\\u0061\":2}") },
    { "a repeated member name, deep inside", B("[{\"x\":{\"k\":1,\"k\":1}}]") },
    { "an integer above the signed 64-bit range", B("9223372036854775808") },
    { "an integer below the signed 64-bit range", B("{\"n\":-9223372036854775809}") },
    { "a number beyond a double", B("[1e400]") },
    { "a member name with \\u0000", B("{\"a\\u0000\":1}") },
    { "cut short", B("{\"a\":1") },
    { "text after the value", B("{\"a\":1} {}") },
    { "single quotes", B("{'a':1}") },
    { "NaN", B("NaN") },
    { "a trailing comma", B("[1,]") },
    { "raw bytes that are not UTF-8", B("\"\xff\"") },
    { "a lone surrogate", B("\"\\ud800\"") },
    { "a raw control character in a string", B("\"a\tb\"") },
    { "a form body", B("a=1&b=2") },
};

static void run_json(void)
{
    char *out = NULL, why[CANONICAL_WHY_MAX];
    size_t len = 0;
    int r;

    run_cases(json_of, json_pairs, sizeof(json_pairs) / sizeof(json_pairs[0]), json_refused,
              sizeof(json_refused) / sizeof(json_refused[0]));
    {
        /* deeper than jansson's 2048 levels: refused, not a crash */
        static char deep[3001];
        memset(deep, '[', 3000);
        r = canonical_json(deep, 3000, &no_ignore, &out, &len, why);
        UNIT_CHECK("nesting deeper than 2048 refused", r == CANONICAL_INVALID_BODY &&
                   strstr(why, "2048") != NULL, "r=%d why=%s", r, why);
        /* the documented edge: every value is a level, so 2048 arrays nest, and a 1 in them not */
        static const struct {
            const char *name;
            size_t arrays;
            const char *inner;
            int want;
        } edges[] = {
            { "2048 empty arrays nested are read", 2048, "", CANONICAL_OK },
            { "a number inside 2047 arrays (level 2048) is read", 2047, "1", CANONICAL_OK },
            { "a number inside 2048 arrays (level 2049) is refused", 2048, "1",
              CANONICAL_INVALID_BODY },
        };
        static char edge[2 * 2048 + 2];
        for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
            size_t n = edges[i].arrays, k = strlen(edges[i].inner);

            memset(edge, '[', n);
            memcpy(edge + n, edges[i].inner, k);
            memset(edge + n + k, ']', n);
            r = canonical_json(edge, 2 * n + k, &no_ignore, &out, &len, why);
            UNIT_CHECK(edges[i].name, r == edges[i].want &&
                       (r == CANONICAL_OK || strstr(why, "level 3") != NULL),
                       "r=%d why=%s", r, why);
            free(out);
            out = NULL;
        }
    }
    r = canonical_json("{\"card\":\"4242SECRET\",", 21, &no_ignore, &out, &len, why);
    UNIT_CHECK("why names what failed and where, never the body's bytes",
               r == CANONICAL_INVALID_BODY && strstr(why, "SECRET") == NULL &&
                   strstr(why, "4242") == NULL && strstr(why, "not JSON") != NULL &&
                   strstr(why, "at byte") != NULL, "%s", why);
    r = canonical_json("{\"a\":1,\"a\":2}", 13, &no_ignore, &out, &len, why);
    UNIT_CHECK("a repeated name is named as such", r == CANONICAL_INVALID_BODY &&
               strstr(why, "repeats a member name") != NULL, "%s", why);

    /* the text itself: sorted by the names' UTF-8 bytes, compact, 17 digits, raw UTF-8 */
    {
        static const char in[] = "{\"b\":[1,{\"d\":0.5,\"c\":\"\\u00e9\\t\"}],\"a\":1.0,"
                                 "\"\\u00e9\":true,\"Z\":0.1,\"\":null}";
        static const char want[] = "{\"\":null,\"Z\":0.10000000000000001,\"a\":1.0,"
                                   "\"b\":[1,{\"c\":\"\xc3\xa9\\t\",\"d\":0.5}],\"\xc3\xa9\":true}";

        r = canonical_json(in, sizeof(in) - 1, &no_ignore, &out, &len, why);
        UNIT_CHECK("the canonical text", r == CANONICAL_OK && len == sizeof(want) - 1 &&
                   memcmp(out, want, len) == 0, "%.*s", (int)len, out != NULL ? out : "");
        free(out);
    }
    r = canonical_json(NULL, 0, &no_ignore, &out, &len, why);
    UNIT_CHECK("an empty body is the empty canonical text", r == CANONICAL_OK && out == NULL &&
               len == 0, "r=%d", r);
}

/* ---- fingerprint_ignore ---------------------------------------------------- */

static struct canonical_ignore ignoring(const char *const *pointers, size_t n)
{
    struct canonical_ignore ig = { .n = n };

    for (size_t i = 0; i < n; i++) {
        ig.pointer[i] = pointers[i];
        ig.len[i] = strlen(pointers[i]);
    }
    return ig;
}

static void run_ignore(void)
{
    static const char *const ts[] = { "/ts", "/items/0/nonce" };
    static const char *const elem[] = { "/items/0" };
    static const char *const nothing[] = { "/missing", "/a/b", "/items/9", "/items/-",
                                           "/items/01", "/n/x" };
    static const char *const escaped[] = { "/a~1b", "/m~0n", "/" };
    static const char *const twice[] = { "/x", "/x/y" };
    struct canonical_ignore ig = ignoring(ts, 2);

    UNIT_CHECK("an ignored member changed",
               json_same((struct body)B("{\"a\":1,\"ts\":1700000000}"),
                         (struct body)B("{\"ts\":1700000999,\"a\":1}"), &ig) == 1, "differ");
    UNIT_CHECK("an ignored member absent", json_same((struct body)B("{\"a\":1,\"ts\":5}"),
                                                     (struct body)B("{\"a\":1}"), &ig) == 1,
               "differ");
    UNIT_CHECK("an ignored member inside an array's element",
               json_same((struct body)B("{\"items\":[{\"nonce\":\"x\",\"sku\":7}]}"),
                         (struct body)B("{\"items\":[{\"sku\":7,\"nonce\":\"y\"}]}"), &ig) == 1,
               "differ");
    UNIT_CHECK("a member not ignored still counts",
               json_same((struct body)B("{\"a\":1,\"ts\":5}"), (struct body)B("{\"a\":2,\"ts\":5}"),
                         &ig) == 0, "same");
    ig = ignoring(elem, 1);
    UNIT_CHECK("an ignored element becomes null: its value does not count",
               json_same((struct body)B("{\"items\":[1,2]}"), (struct body)B("{\"items\":[9,2]}"),
                         &ig) == 1, "differ");
    UNIT_CHECK("an ignored element keeps its place: the others do not move",
               json_same((struct body)B("{\"items\":[1,2]}"), (struct body)B("{\"items\":[2]}"),
                         &ig) == 0, "same");
    UNIT_CHECK("an ignored element reads as null", json_same((struct body)B("{\"items\":[null,2]}"),
                                                             (struct body)B("{\"items\":[5,2]}"),
                                                             &ig) == 1, "differ");
    ig = ignoring(nothing, sizeof(nothing) / sizeof(nothing[0]));
    UNIT_CHECK("pointers that name nothing change nothing",
               json_same((struct body)B("{\"a\":1,\"n\":5,\"items\":[1,2]}"),
                         (struct body)B("{\"a\":1,\"n\":5,\"items\":[1,2]}"), &ig) == 1 &&
                   json_same((struct body)B("{\"a\":1,\"n\":5,\"items\":[1,2]}"),
                             (struct body)B("{\"a\":1,\"n\":6,\"items\":[1,2]}"), &ig) == 0,
               "changed something");
    ig = ignoring(escaped, 3);
    UNIT_CHECK("~1 and ~0 name '/' and '~'; \"/\" names the member \"\"",
               json_same((struct body)B("{\"a/b\":1,\"m~n\":2,\"\":3,\"k\":4}"),
                         (struct body)B("{\"a/b\":9,\"m~n\":9,\"\":9,\"k\":4}"), &ig) == 1,
               "differ");
    ig = ignoring(twice, 2);
    UNIT_CHECK("a pointer under one already taken out changes nothing more",
               json_same((struct body)B("{\"x\":{\"y\":1},\"z\":2}"), (struct body)B("{\"z\":2}"),
                         &ig) == 1, "differ");
    UNIT_CHECK("a top-level scalar: nothing to leave out",
               json_same((struct body)B("5"), (struct body)B("5"), &ig) == 1 &&
                   json_same((struct body)B("5"), (struct body)B("6"), &ig) == 0, "wrong");
}

/* ---- form ------------------------------------------------------------------ */

static const struct pair_case form_pairs[] = {
    { "parameters reordered", B("b=2&a=1"), B("a=1&b=2"), 1 },
    { "%41 and A", B("a=%41"), B("a=A"), 1 },
    { "%4a and %4A and J", B("a=%4a&b=%4A"), B("a=J&b=J"), 1 },
    { "+ and %20", B("a=x+y"), B("a=x%20y"), 1 },
    { "a name decoded too", B("%61=1"), B("a=1"), 1 },
    { "empty pairs dropped", B("&a=1&&b=2&"), B("a=1&b=2"), 1 },
    { "a name alone is an empty value", B("a"), B("a="), 1 },
    { "the first '=' splits", B("a=b=c"), B("a=b%3Dc"), 1 },
    { "raw UTF-8 and its escapes", B("\xc3\xa9=1"), B("%C3%A9=1"), 1 },
    { "repeated names keep their order (stable)", B("a=2&b=1&a=1"), B("b=1&a=2&a=1"), 1 },
    { "repeated names in another order differ", B("a[]=1&a[]=2"), B("a[]=2&a[]=1"), 0 },
    { "a changed value differs", B("amount=100"), B("amount=101"), 0 },
    { "%2B is a plus, + a space", B("a=%2B"), B("a=+"), 0 },
    { "%26 is part of a value, & splits", B("a=%26b"), B("a=&b"), 0 },
    { "%00 is kept", B("a=%00"), B("a="), 0 },
    { "lengths keep the pairs apart", B("a=1&b=2"), B("ab=12"), 0 },
    { "a value is not a name", B("a=b"), B("b=a"), 0 },
    { "the empty body and an empty pair", B(""), B("&"), 1 },
    { "the empty body and a name", B(""), B("a"), 0 },
};

static const struct refused_case form_refused[] = {
    { "%zz", B("a=%zz") },
    { "% with one hex digit", B("a=%4") },
    { "% at the end", B("a=1%") },
    { "an invalid escape in a name", B("%g1=1") },
    { "a raw NUL byte", B("a=1\0b=2") },
    { "%ff is not UTF-8", B("a=%ff") },
    { "an overlong form (%C0%AF)", B("a=%C0%AF") },
    { "a surrogate (%ED%A0%80)", B("a=%ED%A0%80") },
    { "a raw byte that is not UTF-8", B("a=\xff") },
};

static void run_form(void)
{
    char *out = NULL, why[CANONICAL_WHY_MAX];
    size_t len = 0;
    int r;

    run_cases(form_of, form_pairs, sizeof(form_pairs) / sizeof(form_pairs[0]), form_refused,
              sizeof(form_refused) / sizeof(form_refused[0]));
    r = canonical_form("b=%C3%A9&a", 10, &out, &len, why);
    UNIT_CHECK("the canonical form: sorted pairs, each part length-prefixed",
               r == CANONICAL_OK && len == 8 + 1 + 8 + 1 + 2 &&
                   memcmp(out, "\0\0\0\1a\0\0\0\0\0\0\0\1b\0\0\0\2\xc3\xa9", len) == 0,
               "len %zu", len);
    free(out);
}

/* ---- media types and the fingerprint --------------------------------------- */

static void run_media_types(void)
{
    static const struct {
        enum fingerprint_mode mode;
        const char *type;
        bool ok;
    } cases[] = {
        { FINGERPRINT_JSON, "application/json", true },
        { FINGERPRINT_JSON, "Application/JSON; charset=utf-8", true },
        { FINGERPRINT_JSON, " application/vnd.api+json ", true },
        { FINGERPRINT_JSON, "application/merge-patch+JSON;x=1", true },
        { FINGERPRINT_JSON, "text/json", false },
        { FINGERPRINT_JSON, "application/json-seq", false },
        { FINGERPRINT_JSON, "application/jsonx", false },
        { FINGERPRINT_JSON, "application/+json", false },
        { FINGERPRINT_JSON, "application/a/b+json", false },
        { FINGERPRINT_JSON, "application/x-www-form-urlencoded", false },
        { FINGERPRINT_JSON, "", false },
        { FINGERPRINT_JSON, NULL, false },
        { FINGERPRINT_FORM, "application/x-www-form-urlencoded", true },
        { FINGERPRINT_FORM, "application/x-www-form-urlencoded; charset=UTF-8", true },
        { FINGERPRINT_FORM, "multipart/form-data; boundary=x", false },
        { FINGERPRINT_FORM, "application/json", false },
        { FINGERPRINT_FORM, NULL, false },
        { FINGERPRINT_REQUEST, NULL, true },
        { FINGERPRINT_NONE, "text/plain", true },
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char name[160];
        snprintf(name, sizeof(name), "%s reads %s: %s", canonical_mode_name(cases[i].mode),
                 cases[i].type != NULL ? cases[i].type : "(none)", cases[i].ok ? "yes" : "no");
        UNIT_CHECK(name, canonical_media_type(cases[i].mode, cases[i].type) == cases[i].ok,
                   "wrong");
    }
}

/* rq as a POST of body to target with content_type (one field, or none when NULL). */
static struct canonical_request post(const char *target, const char *content_type,
                                     const char *body)
{
    return (struct canonical_request){
        .method = "POST", .target = target, .content_type = content_type,
        .content_type_lines = content_type != NULL, .body = body,
        .body_len = body != NULL ? strlen(body) : 0,
    };
}

static int fp(const struct keyring *kr, const char *key_id, enum fingerprint_mode mode,
              struct canonical_request rq, char *hex)
{
    struct fingerprint_basis basis = { .mode = mode };
    char why[CANONICAL_WHY_MAX];

    return canonical_fingerprint(kr, key_id, &basis, &rq, hex, why);
}

static void run_fingerprint(void)
{
    char a[FINGERPRINT_HEX_LEN + 1], b[FINGERPRINT_HEX_LEN + 1], raw[FINGERPRINT_HEX_LEN + 1];
    char why[CANONICAL_WHY_MAX], err[128];
    struct canonical_request rq;
    struct fingerprint_basis json = { .mode = FINGERPRINT_JSON };
    const char *body = "{\"amount\":100,\"currency\":\"eur\"}";
    unsigned char s1[KEYRING_SECRET_LEN], s2[KEYRING_SECRET_LEN];
    struct keyring *kr = keyring_create(err, sizeof(err));
    int r;

    UNIT_CHECK("json: reordered bodies, one fingerprint",
               fp(NULL, NULL, FINGERPRINT_JSON, post("/v1/p", "application/json", body), a) ==
                       CANONICAL_OK &&
                   fp(NULL, NULL, FINGERPRINT_JSON,
                      post("/v1/p", "application/json", "{ \"currency\":\"eur\", \"amount\":100 }"),
                      b) == CANONICAL_OK &&
                   strcmp(a, b) == 0 && strlen(a) == FINGERPRINT_HEX_LEN,
               "%s %s", a, b);
    UNIT_CHECK("json: the target still counts",
               fp(NULL, NULL, FINGERPRINT_JSON, post("/v1/q", "application/json", body), b) ==
                       CANONICAL_OK && strcmp(a, b) != 0, "same");
    rq = post("/v1/p", "application/json", body);
    rq.method = "PATCH";
    UNIT_CHECK("json: the method still counts",
               canonical_fingerprint(NULL, NULL, &json, &rq, b, why) == CANONICAL_OK &&
                   strcmp(a, b) != 0, "same");
    UNIT_CHECK("json: a body without a Content-Type refused",
               fp(NULL, NULL, FINGERPRINT_JSON, post("/v1/p", NULL, body), b) ==
                   CANONICAL_INVALID_BODY && b[0] == '\0', "r ok");
    UNIT_CHECK("json: a text/plain body refused",
               fp(NULL, NULL, FINGERPRINT_JSON, post("/v1/p", "text/plain", body), b) ==
                   CANONICAL_INVALID_BODY, "r ok");
    rq = post("/v1/p", "application/json", body);
    rq.content_type_lines = 2;
    r = canonical_fingerprint(NULL, NULL, &json, &rq, b, why);
    UNIT_CHECK("json: two Content-Type fields refused",
               r == CANONICAL_INVALID_BODY && strstr(why, "more than one") != NULL, "%s", why);
    UNIT_CHECK("json: an empty body needs no Content-Type (a capture)",
               fp(NULL, NULL, FINGERPRINT_JSON, post("/v1/p", NULL, NULL), b) == CANONICAL_OK &&
                   fp(NULL, NULL, FINGERPRINT_JSON, post("/v1/p", "application/json", "\"\""), a) ==
                       CANONICAL_OK && strcmp(a, b) != 0,
               "r or same");
    UNIT_CHECK("form: reordered parameters, one fingerprint",
               fp(NULL, NULL, FINGERPRINT_FORM,
                  post("/v1/p", "application/x-www-form-urlencoded", "b=2&a=%41"), a) ==
                       CANONICAL_OK &&
                   fp(NULL, NULL, FINGERPRINT_FORM,
                      post("/v1/p", "application/x-www-form-urlencoded", "a=A&b=2"), b) ==
                       CANONICAL_OK && strcmp(a, b) == 0, "%s %s", a, b);
    UNIT_CHECK("form: a JSON body refused",
               fp(NULL, NULL, FINGERPRINT_FORM, post("/v1/p", "application/json", body), b) ==
                   CANONICAL_INVALID_BODY, "r ok");
    UNIT_CHECK("request: the raw bytes, as fingerprint_request",
               fp(NULL, NULL, FINGERPRINT_REQUEST, post("/v1/p", NULL, body), a) == CANONICAL_OK &&
                   (fingerprint_request("POST", "/v1/p", body, strlen(body), raw), 1) &&
                   strcmp(a, raw) == 0, "%s %s", a, raw);
    UNIT_CHECK("request: any body, any type",
               fp(NULL, NULL, FINGERPRINT_REQUEST, post("/v1/p", "text/plain", "{not json"), a) ==
                   CANONICAL_OK, "refused");
    UNIT_CHECK("none: all zeros, whatever the body",
               fp(NULL, NULL, FINGERPRINT_NONE, post("/v1/p", "text/plain", "{not json"), a) ==
                       CANONICAL_OK && strspn(a, "0") == FINGERPRINT_HEX_LEN, "%s", a);

    /* keyed: under the keyring's first key unless told which; "" unkeyed */
    memset(s1, 1, sizeof(s1));
    memset(s2, 2, sizeof(s2));
    UNIT_CHECK("keyring", kr != NULL && keyring_add(kr, "k1", 2, s1) == KEYRING_ADDED &&
               keyring_add(kr, "k2", 2, s2) == KEYRING_ADDED, "%s", err);
    rq = post("/v1/p", "application/json", body);
    fp(NULL, NULL, FINGERPRINT_JSON, rq, raw);
    UNIT_CHECK("keyed json: the encrypting key by default, as named, another key differs",
               fp(kr, NULL, FINGERPRINT_JSON, rq, a) == CANONICAL_OK &&
                   fp(kr, "k1", FINGERPRINT_JSON, rq, b) == CANONICAL_OK && strcmp(a, b) == 0 &&
                   strcmp(a, raw) != 0 &&
                   fp(kr, "k2", FINGERPRINT_JSON, rq, b) == CANONICAL_OK && strcmp(a, b) != 0,
               "%s %s", a, b);
    UNIT_CHECK("keyed json: \"\" is unkeyed", fp(kr, "", FINGERPRINT_JSON, rq, a) == CANONICAL_OK &&
               strcmp(a, raw) == 0, "%s %s", a, raw);
    UNIT_CHECK("keyed: a key id not in the keyring, or no keyring",
               fp(kr, "k3", FINGERPRINT_JSON, rq, a) == CANONICAL_KEY_UNAVAILABLE &&
                   fp(NULL, "k1", FINGERPRINT_JSON, rq, a) == CANONICAL_KEY_UNAVAILABLE &&
                   fp(NULL, "k1", FINGERPRINT_REQUEST, rq, a) == CANONICAL_KEY_UNAVAILABLE &&
                   a[0] == '\0', "available");
    keyring_unref(kr);
}

static void run_basis(void)
{
    struct route_policy policy = { .fingerprint = FINGERPRINT_JSON };
    char p0[] = "/ts", p1[] = "/nonce";
    struct fingerprint_basis a, b;

    policy.fingerprint_ignore[0] = p0;
    policy.fingerprint_ignore[1] = p1;
    policy.n_fingerprint_ignore = 2;
    canonical_basis_of(&a, &policy);
    b = a;
    UNIT_CHECK("a basis from a policy", a.mode == FINGERPRINT_JSON && a.ignore.n == 2 &&
               a.ignore.len[1] == 6 && canonical_basis_equal(&a, &b), "n %zu", a.ignore.n);
    b.ignore.pointer[0] = p1;
    b.ignore.len[0] = 6;
    b.ignore.pointer[1] = p0;
    b.ignore.len[1] = 3;
    UNIT_CHECK("another order of the list is another basis", !canonical_basis_equal(&a, &b),
               "equal");
    b.ignore.n = 0;
    a.ignore.n = 0;
    b.mode = FINGERPRINT_FORM;
    UNIT_CHECK("another mode is another basis", !canonical_basis_equal(&a, &b), "equal");
    policy.fingerprint = FINGERPRINT_REQUEST;
    canonical_basis_of(&a, &policy);
    UNIT_CHECK("a list means nothing beside request", a.ignore.n == 0, "n %zu", a.ignore.n);
}

/*
 * The parsed form is counted (meter.h): a body of empty objects, whose
 * jansson tree is tens of times its bytes, stops at the meter's cap instead
 * of growing, in both modes, and leaves nothing behind.
 */
static void run_metered(void)
{
    enum { N = 20000 };
    char *body = malloc(3 * N + 2), *out = NULL, why[CANONICAL_WHY_MAX];
    struct canonical_ignore no_ignore = { 0 };
    struct budget b;
    struct mem_meter m;
    enum meter_refusal refused;
    size_t len = 0, n = 0;
    int r;

    body[n++] = '[';
    for (int i = 0; i < N; i++) {
        memcpy(body + n, "{},", 3);
        n += 3;
    }
    body[n - 1] = ']';
    budget_init(&b, 64u * 1024 * 1024);
    meter_begin(&m, &b, 256u * 1024);
    r = canonical_json(body, n, &no_ignore, &out, &len, why);
    refused = meter_end(&m);
    UNIT_CHECK("a json body whose tree passes the meter's cap is refused, not parsed on",
               r == CANONICAL_FAILED && out == NULL && refused == METER_OVER_CAP &&
               budget_used(&b) == 0, "r %d, refused %d, used %zu", r, (int)refused,
               budget_used(&b));
    meter_begin(&m, &b, 16u * 1024 * 1024);
    r = canonical_json(body, n, &no_ignore, &out, &len, why);
    refused = meter_end(&m);
    UNIT_CHECK("under a cap it fits, the same body is read", r == CANONICAL_OK &&
               len == n && refused == METER_FITS && budget_used(&b) == 0,
               "r %d, len %zu", r, len);
    free(out);
    memset(body, '&', n);
    meter_begin(&m, &b, 64u * 1024);
    r = canonical_form(body, n, &out, &len, why);
    refused = meter_end(&m);
    UNIT_CHECK("a form body whose pairs pass the meter's cap is refused before it is split",
               r == CANONICAL_FAILED && refused == METER_OVER_CAP, "r %d", r);
    free(body);
}

int main(void)
{
    meter_install();
    run_json();
    run_ignore();
    run_form();
    run_media_types();
    run_fingerprint();
    run_basis();
    run_metered();
    UNIT_DONE();
}
