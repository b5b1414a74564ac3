/*
 * inbox_seal.c - a queued delivery's header fields and body sealed in its
 * stream entry (inbox_seal.h).
 */
#include "inbox_seal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/crypto.h>

#include "headers.h"
#include "seal.h"

/*
 * The associated data of format version ID2: {"delivery", route name as
 * written, event id, method, target, record id, "ID2"}. ID1 (0.4.0) bound
 * {"delivery", route path, event id, "ID1"} only; n: how many are used.
 */
static size_t inbox_seal_aad(struct kdf_bytes *aad, const struct inbox_seal_bind *b, bool id1)
{
    aad[0] = (struct kdf_bytes){ "delivery", 8 };
    if (id1) {
        aad[1] = (struct kdf_bytes){ b->route_path, strlen(b->route_path) };
        aad[2] = (struct kdf_bytes){ b->event, strlen(b->event) };
        aad[3] = (struct kdf_bytes){ "ID1", 3 };
        return 4;
    }
    aad[1] = (struct kdf_bytes){ b->route_name, strlen(b->route_name) };
    aad[2] = (struct kdf_bytes){ b->event, strlen(b->event) };
    aad[3] = (struct kdf_bytes){ b->method, strlen(b->method) };
    aad[4] = (struct kdf_bytes){ b->target, strlen(b->target) };
    aad[5] = (struct kdf_bytes){ b->record, strlen(b->record) };
    aad[6] = (struct kdf_bytes){ "ID2", 3 };
    return 7;
}

static void inbox_put_u32(unsigned char *p, size_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)((v >> (24 - 8 * i)) & 0xff);
}

static size_t inbox_get_u32(const unsigned char *p)
{
    return ((size_t)p[0] << 24) | ((size_t)p[1] << 16) | ((size_t)p[2] << 8) | p[3];
}

int inbox_seal(const struct keyring *kr, const struct inbox_seal_bind *b,
               const struct evkeyvalq *headers, const char *body, size_t len,
               char **out, size_t *out_len)
{
    const struct evkeyval *h;
    size_t plain_len = 4 + len, n = 0, total;
    unsigned char *plain, *p;
    struct kdf_bytes aad[INBOX_SEAL_AAD_MAX];
    size_t n_aad;
    int r;

    TAILQ_FOREACH(h, headers, next) {
        size_t kl = strlen(h->key), vl = strlen(h->value);
        if (!header_is_queued(h->key))
            continue;
        if (kl > UINT16_MAX || vl > UINT32_MAX)
            return -1;
        plain_len += 2 + kl + 4 + vl;
        n++;
    }
    if ((total = seal_size(kr, plain_len)) == 0 || (plain = malloc(plain_len)) == NULL)
        return -1;
    if ((*out = malloc(total)) == NULL) {
        free(plain);
        return -1;
    }
    p = plain;
    inbox_put_u32(p, n);
    p += 4;
    TAILQ_FOREACH(h, headers, next) {
        size_t kl = strlen(h->key), vl = strlen(h->value);
        if (!header_is_queued(h->key))
            continue;
        *p++ = (unsigned char)(kl >> 8);
        *p++ = (unsigned char)(kl & 0xff);
        memcpy(p, h->key, kl);
        p += kl;
        inbox_put_u32(p, vl);
        p += 4;
        memcpy(p, h->value, vl);
        p += vl;
    }
    if (len > 0)
        memcpy(p, body, len);
    n_aad = inbox_seal_aad(aad, b, false);
    r = seal_value(kr, aad, n_aad, plain, plain_len, (unsigned char *)*out, total, out_len);
    OPENSSL_cleanse(plain, plain_len);
    free(plain);
    if (r != 0) {
        free(*out);
        *out = NULL;
    }
    return r;
}

/* The header fields and body of plain (len bytes) into headers and *body; -1 when malformed. */
static int inbox_seal_parse(const unsigned char *plain, size_t len, struct evkeyvalq *headers,
                            char **body, size_t *body_len)
{
    struct evkeyvalq fields;
    size_t off = 4, n;
    int r = -1;

    TAILQ_INIT(&fields);
    if (len < 4)
        return -1;
    n = inbox_get_u32(plain);
    for (size_t i = 0; i < n; i++) {
        size_t kl, vl;
        char *name, *value;
        if (len - off < 2)
            goto out;
        kl = ((size_t)plain[off] << 8) | plain[off + 1];
        off += 2;
        if (len - off < kl + 4)
            goto out;
        vl = inbox_get_u32(plain + off + kl);
        if (len - off - kl - 4 < vl)
            goto out;
        name = strndup((const char *)plain + off, kl);
        value = strndup((const char *)plain + off + kl + 4, vl);
        if (name == NULL || value == NULL || evhttp_add_header(&fields, name, value) != 0) {
            free(name);
            free(value);
            goto out;
        }
        free(name);
        free(value);
        off += kl + 4 + vl;
    }
    *body_len = len - off;
    if ((*body = malloc(*body_len + 1)) == NULL)
        goto out;
    memcpy(*body, plain + off, *body_len);
    (*body)[*body_len] = '\0';
    TAILQ_CONCAT(headers, &fields, next);
    r = 0;
out:
    evhttp_clear_headers(&fields);
    return r;
}

int inbox_seal_open(const struct keyring *kr, const struct inbox_seal_bind *b, bool accept_id1,
                    const char *value, size_t len, struct evkeyvalq *headers, char **body,
                    size_t *body_len, char *key_id)
{
    struct kdf_bytes aad[INBOX_SEAL_AAD_MAX];
    unsigned char *plain;
    size_t plain_len, n_aad;
    int r;

    key_id[0] = '\0';
    if (kr == NULL) {
        seal_key_id((const unsigned char *)value, len, key_id);
        keyring_count_id(key_id[0] ? key_id : NULL, strlen(key_id), KEYRING_UNAVAILABLE);
        return key_id[0] ? SEAL_KEY_UNAVAILABLE : SEAL_UNREADABLE;
    }
    if ((plain = malloc(len > 0 ? len : 1)) == NULL)
        return -1;
    n_aad = inbox_seal_aad(aad, b, false);
    r = seal_open(kr, aad, n_aad, (const unsigned char *)value, len, plain, len, &plain_len,
                  key_id);
    if (r == SEAL_UNREADABLE && accept_id1) {
        /* queued by 0.4.0, read only while encryption.accept_plaintext_until admits it */
        n_aad = inbox_seal_aad(aad, b, true);
        r = seal_open(kr, aad, n_aad, (const unsigned char *)value, len, plain, len,
                      &plain_len, key_id);
    }
    if (r == SEAL_OK && inbox_seal_parse(plain, plain_len, headers, body, body_len) != 0)
        r = SEAL_UNREADABLE;
    OPENSSL_cleanse(plain, len);
    free(plain);
    return r;
}
