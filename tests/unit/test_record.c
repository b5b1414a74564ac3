/* The record codec: round trips, binary bodies, the fixed offsets Lua relies on, bad input. */
#include <stdlib.h>
#include <string.h>

#include "record.h"
#include "seal.h"
#include "unit.h"

static void record_base(struct record *r, enum record_state st)
{
    memset(r, 0, sizeof(*r));
    r->state = st;
    memcpy(r->owner, "0123456789abcdef0123456789abcdef", 33);
    memcpy(r->fingerprint, "fedcba9876543210fedcba9876543210", 33);
    r->lease_deadline_ms = 1764444444444ull;
    r->created_ms = 1764444440000ull;
}

static int record_same(const struct record *a, const struct record *b)
{
    if (a->state != b->state || strcmp(a->owner, b->owner) || strcmp(a->fingerprint, b->fingerprint) ||
        a->lease_deadline_ms != b->lease_deadline_ms || a->created_ms != b->created_ms ||
        a->completed_ms != b->completed_ms || a->status != b->status ||
        a->n_headers != b->n_headers || a->body_len != b->body_len ||
        (a->body_len && memcmp(a->body, b->body, a->body_len)))
        return 0;
    for (size_t i = 0; i < a->n_headers; i++)
        if (a->headers[i].name_len != b->headers[i].name_len ||
            a->headers[i].value_len != b->headers[i].value_len ||
            memcmp(a->headers[i].name, b->headers[i].name, a->headers[i].name_len) ||
            memcmp(a->headers[i].value, b->headers[i].value, a->headers[i].value_len))
            return 0;
    return 1;
}

static void round_trip(const char *name, const struct record *in)
{
    size_t size = record_encoded_size(in);
    char *buf = malloc(size);
    struct record out;
    size_t n = record_encode(in, buf);

    UNIT_CHECK(name, n == size && record_decode(buf, n, &out) == 0 && record_same(in, &out),
               "round trip differs (n=%zu size=%zu)", n, size);
    free(buf);
}

static bool basis_same(const struct fingerprint_basis *a, const struct fingerprint_basis *b)
{
    return canonical_basis_equal(a, b);
}

/* r as a json record ignoring /ts and /items/0/nonce, or as a form record. */
static void record_json(struct record *r, enum record_state st)
{
    record_base(r, st);
    r->basis.mode = FINGERPRINT_JSON;
    r->basis.ignore.n = 2;
    r->basis.ignore.pointer[0] = "/ts";
    r->basis.ignore.len[0] = 3;
    r->basis.ignore.pointer[1] = "/items/0/nonce";
    r->basis.ignore.len[1] = 14;
}

/* The head of value (len bytes) with byte at changed to c, decoded into *out: 0 or -1. */
static int decode_changed(const char *value, size_t len, size_t at, char c, char *copy,
                          struct record *out)
{
    memcpy(copy, value, len);
    copy[at] = c;
    return record_decode(copy, len, out);
}

/* IR3: a fingerprint made from a canonical body keeps its mode and ignore list in the head. */
/* A keyring of one key "k1" whose 32 bytes are all fill (the caller unrefs it); checked. */
static struct keyring *keyring_k1(unsigned char fill)
{
    char err[128] = "";
    unsigned char secret[KEYRING_SECRET_LEN];
    struct keyring *kr = keyring_create(err, sizeof(err));

    memset(secret, fill, sizeof(secret));
    UNIT_CHECK("a keyring of k1", kr != NULL && keyring_add(kr, "k1", 2, secret) == KEYRING_ADDED,
               "%s", err);
    return kr;
}

static void run_ir3(void)
{
    struct record r, out;
    char buf[4096], copy[4096];
    size_t n;

    record_json(&r, RECORD_CLAIMED);
    strcpy(r.key_id, "2026-12");
    record_set_route(&r, "/v1/payments");
    n = record_encode(&r, buf);
    UNIT_CHECK("a json claim is IR3: mode, list length, then key id, route, list",
               n == RECORD_HEAD3_LEN + 7 + 12 + (3 + 3) + (3 + 14) && n == record_encoded_size(&r) &&
                   memcmp(buf, "IR3C", 4) == 0 && memcmp(buf + RECORD_HEAD2_LEN, "J0023", 5) == 0 &&
                   memcmp(buf + RECORD_HEAD3_LEN, "2026-12/v1/payments003/ts014/items/0/nonce",
                          n - RECORD_HEAD3_LEN) == 0,
               "n=%zu head %.*s", n, (int)(n > 116 ? n - 116 : 0), buf + 116);
    UNIT_CHECK("IR3 keeps state and owner where the scripts read them",
               buf[RECORD_STATE_OFFSET] == 'C' &&
                   memcmp(buf + RECORD_OWNER_OFFSET, r.owner, RECORD_OWNER_LEN) == 0, "moved");
    UNIT_CHECK("a json claim round trip: mode and pointers",
               record_decode(buf, n, &out) == 0 && out.version == 3 && record_same(&r, &out) &&
                   basis_same(&r.basis, &out.basis) && strcmp(out.key_id, "2026-12") == 0 &&
                   out.route_len == 12 && out.head_len == n,
               "mode %d n %zu", out.basis.mode, out.basis.ignore.n);

    record_json(&r, RECORD_DONE);
    r.status = 201;
    r.n_headers = 1;
    r.headers[0] = (struct record_field){ "Content-Type", 12, "application/json", 16 };
    r.body = "{\"id\":\"ord_3\"}";
    r.body_len = strlen(r.body);
    n = record_encode(&r, buf);
    UNIT_CHECK("a json answer round trip",
               n > 0 && record_decode(buf, n, &out) == 0 && out.version == 3 &&
                   record_same(&r, &out) && basis_same(&r.basis, &out.basis),
               "n=%zu", n);

    record_base(&r, RECORD_DONE);
    r.basis.mode = FINGERPRINT_FORM;
    r.status = 200;
    n = record_encode(&r, buf);
    UNIT_CHECK("a form answer is IR3 with an empty list",
               n > 0 && memcmp(buf, "IR3D", 4) == 0 &&
                   memcmp(buf + RECORD_HEAD2_LEN, "F0000", 5) == 0 &&
                   record_decode(buf, n, &out) == 0 && out.basis.mode == FINGERPRINT_FORM &&
                   out.basis.ignore.n == 0 && record_same(&r, &out),
               "n=%zu", n);
    r.basis.ignore.n = 1;
    r.basis.ignore.pointer[0] = "/a";
    r.basis.ignore.len[0] = 2;
    UNIT_CHECK("an ignore list beside form is not encoded", record_encode(&r, buf) == 0,
               "encoded");

    /* request and none write IR2 exactly as before IR3, so an earlier release reads them */
    {
        char plain[512], none[512];
        size_t a, b;

        record_base(&r, RECORD_DONE);
        r.status = 201;
        a = record_encode(&r, plain);
        r.basis.mode = FINGERPRINT_NONE;
        b = record_encode(&r, none);
        UNIT_CHECK("request and none records are IR2, byte for byte as before",
                   a > 0 && a == b && memcmp(plain, none, a) == 0 && memcmp(plain, "IR2D", 4) == 0 &&
                       record_decode(none, b, &out) == 0 && out.version == 2 &&
                       out.basis.mode == FINGERPRINT_REQUEST && out.basis.ignore.n == 0,
                   "a=%zu b=%zu", a, b);
    }

    /* what does not decode: every field of the extension checked, fail closed */
    record_json(&r, RECORD_CLAIMED);
    n = record_encode(&r, buf);
    UNIT_CHECK("an unknown mode letter refused",
               decode_changed(buf, n, RECORD_HEAD2_LEN, 'R', copy, &out) != 0, "decoded");
    UNIT_CHECK("a list length that is not digits refused",
               decode_changed(buf, n, RECORD_HEAD2_LEN + 2, 'x', copy, &out) != 0, "decoded");
    UNIT_CHECK("a list longer than the value refused",
               decode_changed(buf, n, RECORD_HEAD2_LEN + 3, '9', copy, &out) != 0, "decoded");
    /* the list is "003/ts014/items/0/nonce": the second length made 015 runs past it */
    UNIT_CHECK("a pointer whose length runs past the list refused",
               decode_changed(buf, n, RECORD_HEAD3_LEN + 8, '5', copy, &out) != 0, "decoded");
    UNIT_CHECK("a pointer that does not start with '/' refused",
               decode_changed(buf, n, RECORD_HEAD3_LEN + 3, 'x', copy, &out) != 0, "decoded");
    UNIT_CHECK("a list beside form refused",
               decode_changed(buf, n, RECORD_HEAD2_LEN, 'F', copy, &out) != 0, "decoded");
    UNIT_CHECK("an IR3 value cut inside its fixed head refused",
               record_decode(buf, RECORD_HEAD3_LEN - 1, &out) != 0, "decoded");
    UNIT_CHECK("an IR3 claim with bytes after its list refused",
               (memcpy(copy, buf, n), copy[n] = 'x', record_decode(copy, n + 1, &out) != 0),
               "decoded");

    /* the sealed answer is bound to the head: another mode or list does not open */
    {
        char *plain = NULL, key_id[KEYRING_ID_MAX + 1];
        struct keyring *kr = keyring_k1(9);
        size_t len = 0;
        char *value;

        record_json(&r, RECORD_DONE);
        r.status = 201;
        r.body = "sealed-json-answer";
        r.body_len = strlen(r.body);
        value = record_encode_alloc(&r, kr, "idem:{ir3}", &len);
        UNIT_CHECK("a sealed IR3 record opens",
                   value != NULL && memmem(value, len, "sealed-json-answer", 18) == NULL &&
                       record_decode(value, len, &out) == 0 && out.version == 3 &&
                       record_open(&out, kr, "idem:{ir3}", &plain, key_id) == SEAL_OK &&
                       record_same(&r, &out) && basis_same(&r.basis, &out.basis),
                   "len %zu", len);
        record_plain_free(plain, out.sealed_len);
        plain = NULL;
        /* "/ts" -> "/tt": still a well-formed list, no longer the one sealed with */
        UNIT_CHECK("a changed ignore pointer does not open",
                   value != NULL && len < sizeof(copy) &&
                       decode_changed(value, len, RECORD_HEAD3_LEN + 5, 't', copy, &out) == 0 &&
                       record_open(&out, kr, "idem:{ir3}", &plain, key_id) == SEAL_UNREADABLE,
                   "opened");
        record_json(&r, RECORD_DONE);
        r.basis.ignore.n = 0; /* a list-less json record, its mode letter then changed to F */
        r.status = 201;
        free(value);
        value = record_encode_alloc(&r, kr, "idem:{ir3}", &len);
        UNIT_CHECK("a changed mode does not open",
                   value != NULL && len < sizeof(copy) &&
                       decode_changed(value, len, RECORD_HEAD2_LEN, 'F', copy, &out) == 0 &&
                       out.basis.mode == FINGERPRINT_FORM &&
                       record_open(&out, kr, "idem:{ir3}", &plain, key_id) == SEAL_UNREADABLE,
                   "opened");
        free(value);
        keyring_unref(kr);
    }
}

int main(void)
{
    struct record r, out;
    char buf[4096];
    unsigned char bin[256];

    record_base(&r, RECORD_CLAIMED);
    round_trip("claim round trip", &r);
    UNIT_CHECK("claim is just the head", record_encoded_size(&r) == RECORD_HEAD2_LEN, "%zu",
               record_encoded_size(&r));
    record_encode(&r, buf);
    UNIT_CHECK("state at offset 3 for Lua", buf[3] == 'C', "%c", buf[3]);
    UNIT_CHECK("owner at offset 4 for Lua", memcmp(buf + RECORD_OWNER_OFFSET, r.owner, 32) == 0,
               "misplaced");

    record_base(&r, RECORD_DONE);
    r.status = 201;
    r.completed_ms = 1764444441234ull;
    r.n_headers = 2;
    r.headers[0] = (struct record_field){ "Content-Type", 12, "application/json", 16 };
    r.headers[1] = (struct record_field){ "X-Empty", 7, "", 0 };
    r.body = "{\"id\":\"ord_1\"}";
    r.body_len = strlen(r.body);
    round_trip("done record with headers round trip", &r);

    for (int i = 0; i < 256; i++)
        bin[i] = (unsigned char)i;
    r.body = (const char *)bin;
    r.body_len = sizeof(bin);
    round_trip("binary body byte for byte", &r);

    record_base(&r, RECORD_RESOLVED);
    r.status = 201;
    r.completed_ms = 1764444449999ull;
    r.n_headers = 1;
    r.headers[0] = (struct record_field){ "Content-Type", 12, "application/json", 16 };
    r.body = "{\"id\":\"ord_2\"}";
    r.body_len = strlen(r.body);
    round_trip("resolved record round trip", &r);
    UNIT_CHECK("resolved is R at the state offset",
               record_encode(&r, buf) > 0 && buf[RECORD_STATE_OFFSET] == 'R', "%c",
               buf[RECORD_STATE_OFFSET]);
    {
        char a[RECORD_ETAG_LEN + 1], b[RECORD_ETAG_LEN + 1], c[RECORD_ETAG_LEN + 1];
        size_t len = record_encode(&r, buf);

        record_etag(buf, len, a);
        record_etag(buf, len, b);
        buf[len - 1] ^= 1; /* one bit of the body */
        record_etag(buf, len, c);
        UNIT_CHECK("an entity tag: quoted 32 hex, stable, any change changes it",
                   strlen(a) == RECORD_ETAG_LEN && a[0] == '"' && a[RECORD_ETAG_LEN - 1] == '"' &&
                       strspn(a + 1, "0123456789abcdef") == 32 && strcmp(a, b) == 0 &&
                       strcmp(a, c) != 0,
                   "%s %s %s", a, b, c);
    }

    record_base(&r, RECORD_UNKNOWN);
    round_trip("outcome unknown round trip", &r);
    record_base(&r, RECORD_TOMBSTONE);
    r.status = 200;
    round_trip("tombstone keeps the status", &r);

    record_base(&r, RECORD_DONE);
    r.status = 1000;
    UNIT_CHECK("status out of range refused", record_encode(&r, buf) == 0, "encoded");
    record_base(&r, RECORD_DONE);
    r.status = 7;
    r.created_ms = 0;
    r.completed_ms = 9999999999999999ull;
    round_trip("zero and the widest time round trip", &r);
    UNIT_CHECK("times are zero-padded decimals at their offsets",
               record_encode(&r, buf) > 0 && memcmp(buf + 84, "0000000000000000", 16) == 0 &&
                   memcmp(buf + 100, "9999999999999999", 16) == 0 && memcmp(buf + 116, "P0000000", 8) == 0 &&
                   memcmp(buf + RECORD_HEAD2_LEN, "007", 3) == 0,
               "head %.58s", buf + 68);
    r.completed_ms = 10000000000000000ull;
    UNIT_CHECK("a time wider than 16 digits refused", record_encode(&r, buf) == 0, "encoded");
    record_base(&r, RECORD_DONE);
    strcpy(r.owner, "short");
    UNIT_CHECK("bad owner token refused", record_encode(&r, buf) == 0, "encoded");
    record_base(&r, (enum record_state)'X');
    UNIT_CHECK("bad state refused", record_encode(&r, buf) == 0, "encoded");

    record_base(&r, RECORD_DONE);
    r.n_headers = 1;
    r.headers[0] = (struct record_field){ "A", 1, "b", 1 };
    size_t n = record_encode(&r, buf);
    UNIT_CHECK("truncated record refused", record_decode(buf, n - 1, &out) != 0, "decoded");
    UNIT_CHECK("short record refused", record_decode(buf, 10, &out) != 0, "decoded");
    buf[0] = 'X';
    UNIT_CHECK("bad magic refused", record_decode(buf, n, &out) != 0, "decoded");
    buf[0] = 'I';
    buf[70] = 'x';
    UNIT_CHECK("non-digit timestamp refused", record_decode(buf, n, &out) != 0, "decoded");

    /* store.c's Lua scripts read state and owner at these offsets of the stored value */
    record_base(&r, RECORD_CLAIMED);
    n = record_encode(&r, buf);
    UNIT_CHECK("state and owner at the offsets the scripts read",
               n > 0 && buf[RECORD_STATE_OFFSET] == 'C' &&
                   memcmp(buf + RECORD_OWNER_OFFSET, r.owner, RECORD_OWNER_LEN) == 0,
               "head %.40s", buf);

    /* IR2: the key id of the fingerprint and the route name, in plaintext in the head */
    record_base(&r, RECORD_DONE);
    r.status = 201;
    strcpy(r.key_id, "2026-12");
    record_set_route(&r, "/v1/payments");
    r.body = "secret-body";
    r.body_len = 11;
    n = record_encode(&r, buf);
    UNIT_CHECK("key id and route round trip",
               n > 0 && record_decode(buf, n, &out) == 0 && out.version == 2 &&
                   strcmp(out.key_id, "2026-12") == 0 && out.route_len == 12 &&
                   memcmp(out.route, "/v1/payments", 12) == 0 && record_same(&r, &out) &&
                   out.sealed == NULL,
               "n=%zu", n);

    /* IR1, as 0.1-0.4 wrote it, still decodes: status and count in its head */
    {
        static const char ir1[] = "IR1D0123456789abcdef0123456789abcdef"
                                  "fedcba9876543210fedcba9876543210"
                                  "0000000000000000" "0000001764444440" "0000001764444441"
                                  "200" "00001" "\0\1A" "\0\0\0\1b" "hello";
        UNIT_CHECK("an IR1 record decodes",
                   record_decode(ir1, sizeof(ir1) - 1, &out) == 0 && out.version == 1 &&
                       out.state == RECORD_DONE && out.status == 200 && out.n_headers == 1 &&
                       out.headers[0].name_len == 1 && out.body_len == 5 &&
                       memcmp(out.body, "hello", 5) == 0 && out.key_id[0] == '\0' &&
                       out.route_len == 0,
                   "status %d", out.status);
    }

    run_ir3();

    /* a sealed answer: nothing of it in the value, opens only under its Redis key */
    {
        char *plain = NULL, key_id[KEYRING_ID_MAX + 1];
        struct keyring *kr = keyring_k1(7);
        size_t len = 0;
        char *value;

        value = record_encode_alloc(&r, kr, "idem:{abc}", &len);
        UNIT_CHECK("sealed record encodes", value != NULL && memmem(value, len, "secret-body", 11) == NULL &&
                   record_decode(value, len, &out) == 0 && out.sealed != NULL && out.status == 0,
                   "len %zu", len);
        UNIT_CHECK("sealed record opens",
                   record_open(&out, kr, "idem:{abc}", &plain, key_id) == SEAL_OK &&
                       record_same(&r, &out) && strcmp(key_id, "k1") == 0,
                   "key id %s", key_id);
        record_plain_free(plain, out.sealed_len);
        record_decode(value, len, &out);
        UNIT_CHECK("another Redis key does not open it",
                   record_open(&out, kr, "idem:{abd}", &plain, key_id) == SEAL_UNREADABLE &&
                       plain == NULL, "opened");
        value[len - 1] ^= 1;
        record_decode(value, len, &out);
        UNIT_CHECK("a changed byte does not open",
                   record_open(&out, kr, "idem:{abc}", &plain, key_id) == SEAL_UNREADABLE,
                   "opened");
        value[len - 1] ^= 1;
        value[90] = value[90] == '1' ? '2' : '1'; /* a created time changed in the head */
        record_decode(value, len, &out);
        UNIT_CHECK("a changed head does not open",
                   record_open(&out, kr, "idem:{abc}", &plain, key_id) == SEAL_UNREADABLE,
                   "opened");
        record_decode(value, len, &out);
        UNIT_CHECK("no keyring: key unavailable",
                   record_open(&out, NULL, "idem:{abc}", &plain, key_id) == SEAL_KEY_UNAVAILABLE &&
                       strcmp(key_id, "k1") == 0, "%s", key_id);
        free(value);
        keyring_unref(kr);
    }
    UNIT_DONE();
}
