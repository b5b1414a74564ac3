/*
 * A queued delivery's header fields and body sealed into its stream entry
 * (inbox_seal.h): round trip byte for byte (binary body, only the fields
 * header_is_queued keeps), nothing of them in the value, bound to the route
 * and the event id, a changed byte, a key not in the keyring, no keyring.
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

static int opens(const struct keyring *kr, const char *route, const char *event,
                 const char *value, size_t len, struct evkeyvalq *out, char **body,
                 size_t *body_len, char *key_id)
{
    TAILQ_INIT(out);
    *body = NULL;
    return inbox_seal_open(kr, route, event, value, len, out, body, body_len, key_id);
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
    UNIT_CHECK("seals", inbox_seal(kr, "/webhooks/stripe", "evt_1", &in, body, body_len, &value,
                                   &len) == 0 && value != NULL, "failed");
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
    UNIT_CHECK("an empty body and no fields", inbox_seal(kr, "/w", "e", &out, NULL, 0, &value,
                                                         &len) == 0, "failed");
    r = opens(kr, "/w", "e", value, len, &out, &got, &got_len, key_id);
    UNIT_CHECK("... open empty", r == SEAL_OK && got_len == 0 && TAILQ_EMPTY(&out), "r=%d", r);
    free(got);
    free(value);
    evhttp_clear_headers(&in);
    keyring_unref(kr);
    keyring_unref(other);
    seal_thread_end();
    UNIT_DONE();
}
