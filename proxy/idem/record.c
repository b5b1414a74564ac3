/*
 * record.c - the record codec (IR2 and IR3, and IR1 to read), and the records an
 * exchange writes. No I/O; record_encode_alloc and record_open allocate and
 * seal or open the answer (seal.h).
 */
#include "record.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include <openssl/crypto.h>
#include <xxhash.h>

#include "headers.h"
#include "hex.h"
#include "seal.h"

static const char record_magic[3] = { 'I', 'R', '1' };
static const char record_magic2[3] = { 'I', 'R', '2' };
static const char record_magic3[3] = { 'I', 'R', '3' };

/* IR3's fingerprint modes (record.h) */
#define RECORD_MODE_JSON 'J'
#define RECORD_MODE_FORM 'F'
#define RECORD_POINTER_DIGITS 3 /* an ignore list's pointer length, decimal */

#define RECORD_ANSWER_PLAIN 'P'
#define RECORD_ANSWER_SEALED 'S'
#define RECORD_ANSWER_HEAD 8    /* status (3) and header count (5) */

static bool record_state_valid(int c)
{
    return c == RECORD_CLAIMED || c == RECORD_DONE || c == RECORD_UNKNOWN ||
           c == RECORD_TOMBSTONE || c == RECORD_RESOLVED;
}

/* Bytes of rec's answer in plaintext; 0 for a claim, which holds none. */
static size_t record_answer_size(const struct record *rec)
{
    size_t n = RECORD_ANSWER_HEAD + rec->body_len;

    if (rec->state == RECORD_CLAIMED)
        return 0;
    for (size_t i = 0; i < rec->n_headers; i++)
        n += 2 + rec->headers[i].name_len + 4 + rec->headers[i].value_len;
    return n;
}

/* Whether rec is written as IR3: a fingerprint made from a canonical body. */
static bool record_v3(const struct record *rec)
{
    return rec->basis.mode == FINGERPRINT_JSON || rec->basis.mode == FINGERPRINT_FORM;
}

/* Bytes of rec's ignore list in an IR3 head. */
static size_t record_ignore_size(const struct record *rec)
{
    size_t n = 0;

    for (size_t i = 0; i < rec->basis.ignore.n; i++)
        n += RECORD_POINTER_DIGITS + rec->basis.ignore.len[i];
    return n;
}

static size_t record_head_size(const struct record *rec)
{
    if (record_v3(rec))
        return RECORD_HEAD3_LEN + strlen(rec->key_id) + rec->route_len + record_ignore_size(rec);
    return RECORD_HEAD2_LEN + strlen(rec->key_id) + rec->route_len;
}

size_t record_encoded_size(const struct record *rec)
{
    return record_head_size(rec) + record_answer_size(rec);
}

/* Fixed-width zero-padded decimal; width digits, no NUL. False if it does not fit. */
static bool record_put_decimal(char *out, size_t width, uint64_t v)
{
    for (size_t i = width; i > 0; i--) {
        out[i - 1] = (char)('0' + v % 10);
        v /= 10;
    }
    return v == 0;
}

static bool record_get_decimal(const char *in, size_t width, uint64_t *v)
{
    uint64_t r = 0;

    for (size_t i = 0; i < width; i++) {
        if (in[i] < '0' || in[i] > '9')
            return false;
        r = r * 10 + (uint64_t)(in[i] - '0');
    }
    *v = r;
    return true;
}

static bool record_hex_token_valid(const char *s, size_t n)
{
    if (strlen(s) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* Whether rec's ignore list is one an IR3 head holds: bounded, and only beside json. */
static bool record_ignore_valid(const struct record *rec)
{
    const struct canonical_ignore *ig = &rec->basis.ignore;

    if (ig->n > CONFIG_MAX_FINGERPRINT_IGNORE ||
        (ig->n > 0 && rec->basis.mode != FINGERPRINT_JSON))
        return false;
    for (size_t i = 0; i < ig->n; i++)
        if (ig->len[i] == 0 || ig->len[i] > CONFIG_MAX_IGNORE_POINTER)
            return false;
    return true;
}

/* IR3's mode, the ignore list's length and (at list) the list; false when unencodable. */
static bool record_encode_basis(const struct record *rec, char *out, char *list)
{
    const struct canonical_ignore *ig = &rec->basis.ignore;

    _Static_assert(RECORD_IGNORE_MAX <= 9999 && CONFIG_MAX_IGNORE_POINTER <= 999,
                   "the ignore list's lengths fit their digits");
    out[RECORD_HEAD2_LEN] = rec->basis.mode == FINGERPRINT_JSON ? RECORD_MODE_JSON
                                                                : RECORD_MODE_FORM;
    if (!record_put_decimal(out + RECORD_HEAD2_LEN + 1, 4, record_ignore_size(rec)))
        return false;
    for (size_t i = 0; i < ig->n; i++) {
        if (!record_put_decimal(list, RECORD_POINTER_DIGITS, ig->len[i]))
            return false;
        memcpy(list + RECORD_POINTER_DIGITS, ig->pointer[i], ig->len[i]);
        list += RECORD_POINTER_DIGITS + ig->len[i];
    }
    return true;
}

/* The head of rec (record_head_size bytes) into out, answer flag as given; false when unencodable. */
static bool record_encode_head(const struct record *rec, char answer, char *out)
{
    size_t id_len = strlen(rec->key_id);
    size_t fixed = record_v3(rec) ? RECORD_HEAD3_LEN : RECORD_HEAD2_LEN;

    if (!record_state_valid(rec->state) || rec->n_headers > RECORD_MAX_HEADERS ||
        rec->status < 0 || rec->status > 999 || !record_hex_token_valid(rec->owner, 32) ||
        !record_hex_token_valid(rec->fingerprint, 32) ||
        (id_len > 0 && !keyring_id_valid(rec->key_id, id_len)) ||
        rec->route_len > RECORD_ROUTE_MAX || !record_ignore_valid(rec))
        return false;
    memcpy(out, record_v3(rec) ? record_magic3 : record_magic2, 3);
    out[RECORD_STATE_OFFSET] = (char)rec->state;
    memcpy(out + RECORD_OWNER_OFFSET, rec->owner, RECORD_OWNER_LEN);
    memcpy(out + 36, rec->fingerprint, 32);
    out[116] = answer;
    if (!record_put_decimal(out + 68, 16, rec->lease_deadline_ms) ||
        !record_put_decimal(out + 84, 16, rec->created_ms) ||
        !record_put_decimal(out + 100, 16, rec->completed_ms) ||
        !record_put_decimal(out + 117, 2, id_len) ||
        !record_put_decimal(out + 119, 4, rec->route_len))
        return false;
    memcpy(out + fixed, rec->key_id, id_len);
    if (rec->route_len > 0)
        memcpy(out + fixed + id_len, rec->route, rec->route_len);
    return !record_v3(rec) || record_encode_basis(rec, out, out + fixed + id_len + rec->route_len);
}

/* rec's answer (record_answer_size bytes) into out; false when a field is too long. */
static bool record_encode_answer(const struct record *rec, char *out)
{
    char *p = out;

    if (rec->state == RECORD_CLAIMED)
        return true;
    if (!record_put_decimal(p, 3, (uint64_t)rec->status) ||
        !record_put_decimal(p + 3, 5, rec->n_headers))
        return false;
    p += RECORD_ANSWER_HEAD;
    for (size_t i = 0; i < rec->n_headers; i++) {
        const struct record_field *f = &rec->headers[i];
        if (f->name_len > UINT16_MAX || f->value_len > UINT32_MAX)
            return false;
        *p++ = (char)(f->name_len >> 8);
        *p++ = (char)(f->name_len & 0xff);
        memcpy(p, f->name, f->name_len);
        p += f->name_len;
        for (int shift = 24; shift >= 0; shift -= 8)
            *p++ = (char)((f->value_len >> shift) & 0xff);
        memcpy(p, f->value, f->value_len);
        p += f->value_len;
    }
    if (rec->body_len > 0)
        memcpy(p, rec->body, rec->body_len);
    return true;
}

size_t record_encode(const struct record *rec, char *out)
{
    size_t head = record_head_size(rec);

    if (!record_encode_head(rec, RECORD_ANSWER_PLAIN, out) ||
        !record_encode_answer(rec, out + head))
        return 0;
    return head + record_answer_size(rec);
}

/*
 * The answer (status, count, headers, body) of len bytes at buf into rec;
 * pointers borrow buf. -1 when it is not one.
 */
static int record_decode_answer(const char *buf, size_t len, struct record *rec)
{
    const unsigned char *u = (const unsigned char *)buf;
    uint64_t status, n_headers;
    size_t off;

    if (len < RECORD_ANSWER_HEAD || !record_get_decimal(buf, 3, &status) ||
        !record_get_decimal(buf + 3, 5, &n_headers) || n_headers > RECORD_MAX_HEADERS)
        return -1;
    rec->status = (int)status;
    rec->n_headers = (size_t)n_headers;
    off = RECORD_ANSWER_HEAD;
    for (size_t i = 0; i < rec->n_headers; i++) {
        struct record_field *f = &rec->headers[i];
        if (len - off < 2)
            return -1;
        f->name_len = ((size_t)u[off] << 8) | u[off + 1];
        off += 2;
        if (len - off < f->name_len + 4)
            return -1;
        f->name = buf + off;
        off += f->name_len;
        f->value_len = ((size_t)u[off] << 24) | ((size_t)u[off + 1] << 16) |
                       ((size_t)u[off + 2] << 8) | u[off + 3];
        off += 4;
        if (len - off < f->value_len)
            return -1;
        f->value = buf + off;
        off += f->value_len;
    }
    rec->body = buf + off;
    rec->body_len = len - off;
    return 0;
}

/* The head fields both versions share (state, owner, fingerprint, times). */
static int record_decode_common(const char *buf, struct record *rec)
{
    rec->state = (enum record_state)buf[RECORD_STATE_OFFSET];
    memcpy(rec->owner, buf + RECORD_OWNER_OFFSET, RECORD_OWNER_LEN);
    memcpy(rec->fingerprint, buf + 36, 32);
    if (!record_hex_token_valid(rec->owner, 32) || !record_hex_token_valid(rec->fingerprint, 32) ||
        !record_get_decimal(buf + 68, 16, &rec->lease_deadline_ms) ||
        !record_get_decimal(buf + 84, 16, &rec->created_ms) ||
        !record_get_decimal(buf + 100, 16, &rec->completed_ms))
        return -1;
    return 0;
}

/*
 * IR3's ignore list (g bytes at list) into rec->basis (pointers borrow
 * list): whole pointers only, as many as a route may have, each a JSON
 * Pointer to something (never ""), and none beside form. -1 otherwise.
 */
static int record_decode_ignore(const char *list, size_t g, struct record *rec)
{
    struct canonical_ignore *ig = &rec->basis.ignore;
    size_t off = 0;

    while (off < g) {
        uint64_t n;

        if (ig->n == CONFIG_MAX_FINGERPRINT_IGNORE || rec->basis.mode != FINGERPRINT_JSON ||
            g - off < RECORD_POINTER_DIGITS ||
            !record_get_decimal(list + off, RECORD_POINTER_DIGITS, &n) || n == 0 ||
            n > CONFIG_MAX_IGNORE_POINTER || g - off - RECORD_POINTER_DIGITS < n ||
            list[off + RECORD_POINTER_DIGITS] != '/')
            return -1;
        ig->pointer[ig->n] = list + off + RECORD_POINTER_DIGITS;
        ig->len[ig->n++] = (size_t)n;
        off += RECORD_POINTER_DIGITS + (size_t)n;
    }
    return 0;
}

/* IR3's mode and ignore list's length (at buf + RECORD_HEAD2_LEN) into rec and *g; -1 if bad. */
static int record_decode_basis(const char *buf, size_t len, struct record *rec, uint64_t *g)
{
    if (len < RECORD_HEAD3_LEN || !record_get_decimal(buf + RECORD_HEAD2_LEN + 1, 4, g) ||
        *g > RECORD_IGNORE_MAX)
        return -1;
    if (buf[RECORD_HEAD2_LEN] == RECORD_MODE_JSON)
        rec->basis.mode = FINGERPRINT_JSON;
    else if (buf[RECORD_HEAD2_LEN] == RECORD_MODE_FORM)
        rec->basis.mode = FINGERPRINT_FORM;
    else
        return -1;
    return 0;
}

/* An IR2 or IR3 (version) record. */
static int record_decode_v2(const char *buf, size_t len, int version, struct record *rec)
{
    size_t fixed = version == 3 ? RECORD_HEAD3_LEN : RECORD_HEAD2_LEN;
    uint64_t id_len, route_len, g = 0;
    size_t head;

    if (len < RECORD_HEAD2_LEN || record_decode_common(buf, rec) != 0 ||
        (buf[116] != RECORD_ANSWER_PLAIN && buf[116] != RECORD_ANSWER_SEALED) ||
        !record_get_decimal(buf + 117, 2, &id_len) || id_len > KEYRING_ID_MAX ||
        !record_get_decimal(buf + 119, 4, &route_len) || route_len > RECORD_ROUTE_MAX ||
        (version == 3 && record_decode_basis(buf, len, rec, &g) != 0) ||
        len - fixed < id_len + route_len + g)
        return -1;
    if (id_len > 0 && !keyring_id_valid(buf + fixed, (size_t)id_len))
        return -1;
    rec->version = version;
    memcpy(rec->key_id, buf + fixed, (size_t)id_len);
    rec->route = buf + fixed + id_len;
    rec->route_len = (size_t)route_len;
    head = fixed + (size_t)id_len + (size_t)route_len;
    if (record_decode_ignore(buf + head, (size_t)g, rec) != 0)
        return -1;
    head += (size_t)g;
    rec->head = buf;
    rec->head_len = head;
    if (rec->state == RECORD_CLAIMED)
        return len == head ? 0 : -1;
    if (buf[116] == RECORD_ANSWER_SEALED) {
        rec->sealed = (const unsigned char *)buf + head;
        rec->sealed_len = len - head;
        return 0;
    }
    return record_decode_answer(buf + head, len - head, rec);
}

int record_decode(const char *buf, size_t len, struct record *rec)
{
    memset(rec, 0, sizeof(*rec));
    rec->route = "";
    if (len >= 3 && memcmp(buf, record_magic2, 3) == 0 &&
        record_state_valid(buf[RECORD_STATE_OFFSET]))
        return record_decode_v2(buf, len, 2, rec);
    if (len >= 3 && memcmp(buf, record_magic3, 3) == 0 &&
        record_state_valid(buf[RECORD_STATE_OFFSET]))
        return record_decode_v2(buf, len, 3, rec);
    if (len < RECORD_HEAD_LEN || memcmp(buf, record_magic, 3) != 0 ||
        !record_state_valid(buf[RECORD_STATE_OFFSET]) || record_decode_common(buf, rec) != 0)
        return -1;
    rec->version = 1;
    rec->head = buf;
    rec->head_len = RECORD_HEAD_LEN;
    /* IR1 keeps status and count in its head, in the answer's own layout */
    return record_decode_answer(buf + 116, len - 116, rec);
}

/* A sealed record's associated data: what it is, where it lives, and its head. */
static void record_aad(struct kdf_bytes *aad, const char *record_key, const char *head,
                       size_t head_len)
{
    aad[0] = (struct kdf_bytes){ "record", 6 };
    aad[1] = (struct kdf_bytes){ record_key, strlen(record_key) };
    aad[2] = (struct kdf_bytes){ head, head_len };
}

char *record_encode_alloc(const struct record *rec, const struct keyring *kr,
                          const char *record_key, size_t *len)
{
    size_t head = record_head_size(rec), answer = record_answer_size(rec), total, sealed_len;
    struct kdf_bytes aad[3];
    char *buf, *plain;

    if (kr == NULL || rec->state == RECORD_CLAIMED) {
        if ((buf = malloc(record_encoded_size(rec))) == NULL)
            return NULL;
        if ((*len = record_encode(rec, buf)) == 0) {
            free(buf);
            return NULL;
        }
        return buf;
    }
    if ((total = seal_size(kr, answer)) == 0 || (buf = malloc(head + total)) == NULL)
        return NULL;
    plain = malloc(answer);
    if (plain == NULL || !record_encode_head(rec, RECORD_ANSWER_SEALED, buf) ||
        !record_encode_answer(rec, plain)) {
        free(plain);
        free(buf);
        return NULL;
    }
    record_aad(aad, record_key, buf, head);
    if (seal_value(kr, aad, 3, plain, answer, (unsigned char *)buf + head, total,
                   &sealed_len) != 0) {
        record_plain_free(plain, answer);
        free(buf);
        return NULL;
    }
    record_plain_free(plain, answer);
    *len = head + sealed_len;
    return buf;
}

int record_open(struct record *rec, const struct keyring *kr, const char *record_key,
                char **plain, char *key_id)
{
    struct kdf_bytes aad[3];
    size_t plain_len;
    int r;

    *plain = NULL;
    key_id[0] = '\0';
    if (rec->sealed == NULL)
        return SEAL_OK;
    if (kr == NULL) {
        seal_key_id(rec->sealed, rec->sealed_len, key_id);
        keyring_count_id(key_id[0] ? key_id : NULL, strlen(key_id), KEYRING_UNAVAILABLE);
        return key_id[0] ? SEAL_KEY_UNAVAILABLE : SEAL_UNREADABLE;
    }
    if ((*plain = malloc(rec->sealed_len > 0 ? rec->sealed_len : 1)) == NULL)
        return -1;
    record_aad(aad, record_key, rec->head, rec->head_len);
    r = seal_open(kr, aad, 3, rec->sealed, rec->sealed_len, (unsigned char *)*plain,
                  rec->sealed_len, &plain_len, key_id);
    if (r == SEAL_OK && record_decode_answer(*plain, plain_len, rec) != 0)
        r = SEAL_UNREADABLE;
    if (r != SEAL_OK) {
        record_plain_free(*plain, rec->sealed_len);
        *plain = NULL;
        return r;
    }
    return SEAL_OK;
}

bool record_plaintext(const struct record *rec)
{
    return rec->version == 1 || (rec->state != RECORD_CLAIMED && rec->sealed == NULL);
}

void record_plain_free(char *plain, size_t plain_len)
{
    if (plain == NULL)
        return;
    OPENSSL_cleanse(plain, plain_len);
    free(plain);
}

void record_set_route(struct record *rec, const char *name)
{
    size_t n = strlen(name);

    rec->route = name;
    rec->route_len = n > RECORD_ROUTE_MAX ? RECORD_ROUTE_MAX : n;
}

void record_init(struct record *rec, enum record_state state, const char *owner,
                 const char *fingerprint, uint64_t created_ms)
{
    memset(rec, 0, sizeof(*rec));
    rec->state = state;
    memcpy(rec->owner, owner, sizeof(rec->owner) - 1);
    memcpy(rec->fingerprint, fingerprint, sizeof(rec->fingerprint) - 1);
    rec->created_ms = created_ms;
    rec->version = 2;
    rec->route = "";
}

enum record_state record_set_answer(struct record *rec, int status,
                                    const struct evkeyvalq *headers, const char *body,
                                    size_t body_len, size_t max_stored)
{
    const char *connection = evhttp_find_header(headers, "Connection");
    const struct evkeyval *h;

    rec->status = status;
    /* Executed, but too large to keep: retries must learn that, not execute again. */
    if (body_len > max_stored)
        rec->state = RECORD_TOMBSTONE;
    TAILQ_FOREACH(h, headers, next) {
        if (rec->state == RECORD_TOMBSTONE)
            break;
        if (!header_is_stored(h->key) || header_named_by_connection(connection, h->key))
            continue;
        /* a field the codec cannot hold makes a tombstone, never a claim left behind */
        if (rec->n_headers == RECORD_MAX_HEADERS || strlen(h->key) > UINT16_MAX ||
            strlen(h->value) > UINT32_MAX) {
            rec->state = RECORD_TOMBSTONE;
            break;
        }
        rec->headers[rec->n_headers++] = (struct record_field){
            h->key, strlen(h->key), h->value, strlen(h->value)
        };
    }
    if (rec->state == RECORD_TOMBSTONE) {
        rec->n_headers = 0;
    } else {
        rec->body = body;
        rec->body_len = body_len;
    }
    return rec->state;
}

void record_etag(const char *value, size_t len, char *out)
{
    XXH128_canonical_t canon;

    XXH128_canonicalFromHash(&canon, XXH3_128bits(value, len));
    out[0] = '"';
    hex_lower(canon.digest, sizeof(canon.digest), out + 1);
    out[RECORD_ETAG_LEN - 1] = '"';
    out[RECORD_ETAG_LEN] = '\0';
}
