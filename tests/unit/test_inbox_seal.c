/*
 * A queued delivery's header fields and body sealed into its stream entry
 * (inbox_seal.h): round trip byte for byte (binary body, only the fields
 * header_is_queued keeps), nothing of them in the value, bound (ID2) to the
 * route name as written (with its '*'), the event id, method, target and
 * record id, a changed byte, a key not in the keyring, no keyring; an ID1
 * value (0.4.0) opens only when the caller accepts it.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "inbox_seal.h"
#include "seal.h"
#include "unit.h"

static struct keyring *make_keyring(const char *id, unsigned char fill)
{
    char err[128];
    unsigned char secret[KEYRING_SECRET_LEN];
    struct keyring *kr = keyring_create(err, sizeof(err));

    memset(secret, fill, sizeof(secret));
    if (kr == NULL || keyring_add(kr, id, strlen(id), secret) != KEYRING_ADDED)
        abort();
    return kr;
}

static const struct inbox_seal_bind stripe = { "/webhooks/stripe", "/webhooks/stripe", "evt_1",
                                               "POST", "/webhooks/stripe?x=1", "rid-1" };

static int opens_as(const struct keyring *kr, const struct inbox_seal_bind *b, bool id1,
                    const char *value, size_t len, struct evkeyvalq *out, char **body,
                    size_t *body_len, char *key_id)
{
    TAILQ_INIT(out);
    *body = NULL;
    return inbox_seal_open(kr, b, id1, value, len, out, body, body_len, key_id);
}

/* value opened as b with one of its bound strings changed (which: 0 route name .. 5 record). */
static int opens_changed(const struct keyring *kr, int which, const char *to, const char *value,
                         size_t len, char *key_id)
{
    struct inbox_seal_bind b = stripe;
    struct evkeyvalq out;
    char *body = NULL;
    size_t body_len = 0;
    int r;

    const char **field[] = { &b.route_name, &b.route_path, &b.event, &b.method, &b.target,
                             &b.record };
    *field[which] = to;
    r = opens_as(kr, &b, false, value, len, &out, &body, &body_len, key_id);
    evhttp_clear_headers(&out);
    free(body);
    return r;
}

static int opens(const struct keyring *kr, const char *route, const char *event,
                 const char *value, size_t len, struct evkeyvalq *out, char **body,
                 size_t *body_len, char *key_id)
{
    struct inbox_seal_bind b = stripe;

    b.route_name = route;
    b.route_path = route;
    b.event = event;
    return opens_as(kr, &b, false, value, len, out, body, body_len, key_id);
}

int main(void)
{
    struct keyring *kr = make_keyring("2026-12", 1), *other = make_keyring("2026-09", 2);
    struct evkeyvalq in, out;
    const char body[] = "{\"id\":\"evt_1\",\"note\":\"MARKER-body\"}\0\xff binary";
    size_t body_len = sizeof(body) - 1, len = 0, got_len = 0;
    char *value = NULL, *got = NULL, key_id[KEYRING_ID_MAX + 1];
    int r;

    TAILQ_INIT(&in);
    evhttp_add_header(&in, "Stripe-Signature", "t=1,v1=MARKER-signature");
    evhttp_add_header(&in, "Content-Type", "application/json");
    evhttp_add_header(&in, "Connection", "keep-alive"); /* hop-by-hop: not queued */
    UNIT_CHECK("seals", inbox_seal(kr, &stripe, &in, body, body_len, &value, &len) == 0 &&
                            value != NULL, "failed");
    UNIT_CHECK("nothing of the fields or the body in the value",
               memmem(value, len, "MARKER", 6) == NULL && memmem(value, len, "Stripe", 6) == NULL,
               "plaintext in the value");
    r = opens(kr, "/webhooks/stripe", "evt_1", value, len, &out, &got, &got_len, key_id);
    UNIT_CHECK("opens byte for byte",
               r == SEAL_OK && got_len == body_len && memcmp(got, body, body_len) == 0 &&
                   strcmp(key_id, "2026-12") == 0 &&
                   strcmp(evhttp_find_header(&out, "Stripe-Signature"), "t=1,v1=MARKER-signature") == 0 &&
                   strcmp(evhttp_find_header(&out, "Content-Type"), "application/json") == 0 &&
                   evhttp_find_header(&out, "Connection") == NULL,
               "r=%d", r);
    evhttp_clear_headers(&out);
    free(got);
    r = opens(kr, "/webhooks/github", "evt_1", value, len, &out, &got, &got_len, key_id);
    UNIT_CHECK("another route does not open it", r == SEAL_UNREADABLE && TAILQ_EMPTY(&out) &&
               got == NULL, "r=%d", r);
    r = opens(kr, "/webhooks/stripe", "evt_2", value, len, &out, &got, &got_len, key_id);
    UNIT_CHECK("another event id does not open it", r == SEAL_UNREADABLE && got == NULL, "r=%d", r);
    UNIT_CHECK("the prefix route of the same path does not open it",
               opens_changed(kr, 0, "/webhooks/stripe*", value, len, key_id) == SEAL_UNREADABLE,
               "opened");
    UNIT_CHECK("another method does not open it",
               opens_changed(kr, 3, "PUT", value, len, key_id) == SEAL_UNREADABLE, "opened");
    UNIT_CHECK("another target does not open it",
               opens_changed(kr, 4, "/internal/refund", value, len, key_id) == SEAL_UNREADABLE,
               "opened");
    UNIT_CHECK("another record id does not open it",
               opens_changed(kr, 5, "rid-2", value, len, key_id) == SEAL_UNREADABLE, "opened");
    UNIT_CHECK("the route path alone (ID1's binding) is not what ID2 binds",
               opens_changed(kr, 1, "/elsewhere", value, len, key_id) == SEAL_OK, "refused");
    value[len - 1] ^= 1;
    r = opens(kr, "/webhooks/stripe", "evt_1", value, len, &out, &got, &got_len, key_id);
    UNIT_CHECK("a changed byte does not open", r == SEAL_UNREADABLE && got == NULL, "r=%d", r);
    value[len - 1] ^= 1;
    r = opens(other, "/webhooks/stripe", "evt_1", value, len, &out, &got, &got_len, key_id);
    UNIT_CHECK("a keyring without its key: key unavailable",
               r == SEAL_KEY_UNAVAILABLE && strcmp(key_id, "2026-12") == 0 && got == NULL,
               "r=%d %s", r, key_id);
    r = opens(NULL, "/webhooks/stripe", "evt_1", value, len, &out, &got, &got_len, key_id);
    UNIT_CHECK("no keyring: key unavailable",
               r == SEAL_KEY_UNAVAILABLE && strcmp(key_id, "2026-12") == 0, "r=%d", r);
    free(value);
    value = NULL;
    {
        struct inbox_seal_bind w = { "/w", "/w", "e", "POST", "/w", "r" };
        UNIT_CHECK("an empty body and no fields",
                   inbox_seal(kr, &w, &out, NULL, 0, &value, &len) == 0, "failed");
        r = opens_as(kr, &w, false, value, len, &out, &got, &got_len, key_id);
        UNIT_CHECK("... open empty", r == SEAL_OK && got_len == 0 && TAILQ_EMPTY(&out),
                   "r=%d", r);
        free(got);
        free(value);
    }
    {
        /* an ID1 value as 0.4.0 sealed it: no fields, body "B", bound to path and event only */
        const unsigned char plain[] = { 0, 0, 0, 0, 'B' };
        struct kdf_bytes aad[4] = { { "delivery", 8 }, { "/webhooks/stripe", 16 },
                                    { "evt_1", 5 }, { "ID1", 3 } };
        size_t total = seal_size(kr, sizeof(plain)), id1_len = 0;
        unsigned char *id1 = malloc(total);

        UNIT_CHECK("an ID1 value is made",
                   id1 != NULL && seal_value(kr, aad, 4, plain, sizeof(plain), id1, total,
                                             &id1_len) == 0, "failed");
        r = opens_as(kr, &stripe, false, (const char *)id1, id1_len, &out, &got, &got_len,
                     key_id);
        UNIT_CHECK("ID1 is refused unless accepted", r == SEAL_UNREADABLE && got == NULL,
                   "r=%d", r);
        r = opens_as(kr, &stripe, true, (const char *)id1, id1_len, &out, &got, &got_len,
                     key_id);
        UNIT_CHECK("ID1 opens when accepted", r == SEAL_OK && got_len == 1 && got[0] == 'B',
                   "r=%d", r);
        free(got);
        free(id1);
    }
    evhttp_clear_headers(&in);
    keyring_unref(kr);
    keyring_unref(other);
    seal_thread_forget();
    UNIT_DONE();
}
