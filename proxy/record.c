/*
 * record.c - the record codec, and the records an exchange writes. Pure: no
 * I/O; only record_encode_alloc allocates.
 */
#include "record.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "headers.h"

static const char record_magic[3] = { 'I', 'R', '1' };

static bool record_state_valid(int c)
{
    return c == RECORD_CLAIMED || c == RECORD_DONE || c == RECORD_UNKNOWN || c == RECORD_TOMBSTONE;
}

size_t record_encoded_size(const struct record *rec)
{
    size_t n = RECORD_HEAD_LEN + rec->body_len;

    for (size_t i = 0; i < rec->n_headers; i++)
        n += 2 + rec->headers[i].name_len + 4 + rec->headers[i].value_len;
    return n;
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

size_t record_encode(const struct record *rec, char *out)
{
    char *p = out;

    if (!record_state_valid(rec->state) || rec->n_headers > RECORD_MAX_HEADERS ||
        rec->status < 0 || rec->status > 999 || !record_hex_token_valid(rec->owner, 32) ||
        !record_hex_token_valid(rec->fingerprint, 32))
        return 0;
    memcpy(p, record_magic, 3);
    p[RECORD_STATE_OFFSET] = (char)rec->state;
    memcpy(p + RECORD_OWNER_OFFSET, rec->owner, RECORD_OWNER_LEN);
    memcpy(p + 36, rec->fingerprint, 32);
    if (!record_put_decimal(p + 68, 16, rec->lease_deadline_ms) ||
        !record_put_decimal(p + 84, 16, rec->created_ms) ||
        !record_put_decimal(p + 100, 16, rec->completed_ms) ||
        !record_put_decimal(p + 116, 3, (uint64_t)rec->status) ||
        !record_put_decimal(p + 119, 5, rec->n_headers))
        return 0;
    p += RECORD_HEAD_LEN;
    for (size_t i = 0; i < rec->n_headers; i++) {
        const struct record_field *f = &rec->headers[i];
        if (f->name_len > UINT16_MAX || f->value_len > UINT32_MAX)
            return 0;
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
    p += rec->body_len;
    return (size_t)(p - out);
}

int record_decode(const char *buf, size_t len, struct record *rec)
{
    const unsigned char *u = (const unsigned char *)buf;
    uint64_t status, n_headers;
    size_t off;

    memset(rec, 0, sizeof(*rec));
    if (len < RECORD_HEAD_LEN || memcmp(buf, record_magic, 3) != 0 || !record_state_valid(buf[RECORD_STATE_OFFSET]))
        return -1;
    rec->state = (enum record_state)buf[RECORD_STATE_OFFSET];
    memcpy(rec->owner, buf + RECORD_OWNER_OFFSET, RECORD_OWNER_LEN);
    memcpy(rec->fingerprint, buf + 36, 32);
    if (!record_hex_token_valid(rec->owner, 32) || !record_hex_token_valid(rec->fingerprint, 32))
        return -1;
    if (!record_get_decimal(buf + 68, 16, &rec->lease_deadline_ms) ||
        !record_get_decimal(buf + 84, 16, &rec->created_ms) ||
        !record_get_decimal(buf + 100, 16, &rec->completed_ms) ||
        !record_get_decimal(buf + 116, 3, &status) ||
        !record_get_decimal(buf + 119, 5, &n_headers) || n_headers > RECORD_MAX_HEADERS)
        return -1;
    rec->status = (int)status;
    rec->n_headers = (size_t)n_headers;
    off = RECORD_HEAD_LEN;
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

void record_init(struct record *rec, enum record_state state, const char *owner,
                 const char *fingerprint, uint64_t created_ms)
{
    memset(rec, 0, sizeof(*rec));
    rec->state = state;
    memcpy(rec->owner, owner, sizeof(rec->owner) - 1);
    memcpy(rec->fingerprint, fingerprint, sizeof(rec->fingerprint) - 1);
    rec->created_ms = created_ms;
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

char *record_encode_alloc(const struct record *rec, size_t *len)
{
    char *buf = malloc(record_encoded_size(rec));

    if (buf == NULL)
        return NULL;
    *len = record_encode(rec, buf);
    if (*len == 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
