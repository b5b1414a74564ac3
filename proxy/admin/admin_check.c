/*
 * admin_check.c - the rules an operator's change of a record is held to,
 * with no I/O: what a record holds (admin_hold_of), the name of its state,
 * an operator's reason, and the If-Match precondition on the record's
 * entity tag (record_etag).
 */
#include "admin_int.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "http_server.h"
#include "record.h"
#include "record_id.h"

enum admin_hold admin_hold_of(const struct record *rec, uint64_t now_ms)
{
    switch (rec->state) {
    case RECORD_CLAIMED:
        return now_ms < rec->lease_deadline_ms ? ADMIN_HOLD_IN_FLIGHT : ADMIN_HOLD_CLAIM;
    case RECORD_UNKNOWN:
        return ADMIN_HOLD_UNKNOWN;
    case RECORD_RESOLVED:
        return ADMIN_HOLD_RESOLVED;
    case RECORD_DONE:
    case RECORD_TOMBSTONE:
        break;
    }
    return ADMIN_HOLD_ANSWERED;
}

const char *admin_state_name(enum record_state st)
{
    switch (st) {
    case RECORD_CLAIMED: return "claimed";
    case RECORD_DONE: return "done";
    case RECORD_UNKNOWN: return "outcome-unknown";
    case RECORD_TOMBSTONE: return "not-replayable";
    case RECORD_RESOLVED: return "resolved";
    }
    return "invalid";
}

int admin_reason_check(const char *reason, size_t len, char *why, size_t whylen)
{
    json_t *utf8;

    if (len == 0) {
        snprintf(why, whylen, "\"reason\" is empty: say why (a ticket, what the upstream "
                 "showed), for the audit trail");
        return -1;
    }
    if (len > ADMIN_REASON_MAX) {
        snprintf(why, whylen, "\"reason\" is longer than %d bytes", ADMIN_REASON_MAX);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)reason[i];

        /* C0, DEL, and C1 (U+0080..U+009F: 0xC2 0x80..0x9F in UTF-8) */
        if (ch < 0x20 || ch == 0x7f ||
            (ch == 0xc2 && i + 1 < len && (unsigned char)reason[i + 1] >= 0x80 &&
             (unsigned char)reason[i + 1] <= 0x9f)) {
            snprintf(why, whylen, "\"reason\" holds a control character (a line break, a "
                     "tab...): one line of text");
            return -1;
        }
        /*
         * U+2028, U+2029 (line and paragraph separators) and the bidirectional
         * embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069): a
         * reader of the audit trail would see another line, or the text reordered
         */
        if (ch == 0xe2 && i + 2 < len &&
            (((unsigned char)reason[i + 1] == 0x80 && (unsigned char)reason[i + 2] >= 0xa8 &&
              (unsigned char)reason[i + 2] <= 0xae) ||
             ((unsigned char)reason[i + 1] == 0x81 && (unsigned char)reason[i + 2] >= 0xa6 &&
              (unsigned char)reason[i + 2] <= 0xa9))) {
            snprintf(why, whylen, "\"reason\" holds a line separator or a bidirectional "
                     "control (U+2028, U+2029, U+202A..U+202E, U+2066..U+2069): one line of "
                     "text, read as written");
            return -1;
        }
    }
    utf8 = json_stringn(reason, len); /* NULL: not UTF-8 */
    if (utf8 == NULL) {
        snprintf(why, whylen, "\"reason\" is not UTF-8 text");
        return -1;
    }
    json_decref(utf8);
    return 0;
}

/*
 * The next member of an If-Match list at *p (RFC 9110 section 13.1.1:
 * 1#entity-tag or "*"; entity-tag of section 8.8.3: [W/] DQUOTE *etagc
 * DQUOTE, etagc %x21 / %x23-7E / obs-text, so a tag may hold a comma),
 * after the OWS and empty members before it (section 5.6.1); *p moves past
 * it and its comma. 1 when it is "*", 2 when it is an entity tag that
 * matches etag by the strong comparison (section 8.8.3.2: a weak tag never
 * does), 0 for another entity tag, 3 at the end of the list, -1 when it is
 * not one.
 */
static int admin_if_match_next(const char **p, const char *etag)
{
    const char *m = *p, *end;
    bool weak = false;
    int r;

    while (*m == ' ' || *m == '\t' || *m == ',')
        m++;
    if (*m == '\0') {
        *p = m;
        return 3;
    }
    if (*m == '*') {
        end = m + 1;
        r = 1;
    } else {
        if (m[0] == 'W' && m[1] == '/') {
            weak = true;
            m += 2;
        }
        if (*m != '"')
            return -1;
        end = m + 1;
        while (*end != '"' && *end != '\0') {
            if ((unsigned char)*end < 0x21 || *end == 0x7f)
                return -1;
            end++;
        }
        if (*end != '"')
            return -1;
        end++;
        r = !weak && (size_t)(end - m) == strlen(etag) && memcmp(m, etag, (size_t)(end - m)) == 0
                ? 2 : 0;
    }
    while (*end == ' ' || *end == '\t')
        end++;
    if (*end != ',' && *end != '\0')
        return -1;
    *p = end;
    return r;
}

enum admin_if_match admin_if_match(struct http_req *req, const char *etag)
{
    const struct evkeyval *h;
    bool any = false, given = false, matched = false;

    TAILQ_FOREACH(h, http_server_input_headers(req), next) {
        const char *p = h->value;
        int r;

        if (strcasecmp(h->key, "If-Match") != 0)
            continue;
        given = true;
        while ((r = admin_if_match_next(&p, etag)) != 3) {
            if (r < 0)
                return ADMIN_IF_MATCH_MALFORMED;
            any |= r == 1;
            matched |= r == 2;
        }
    }
    if (!given)
        return ADMIN_IF_MATCH_NONE;
    if (matched)
        return ADMIN_IF_MATCH_OK;
    return any ? ADMIN_IF_MATCH_ANY : ADMIN_IF_MATCH_STALE;
}

bool admin_if_match_valid(struct http_req *req)
{
    return admin_if_match(req, "\"\"") != ADMIN_IF_MATCH_MALFORMED;
}

json_t *admin_body_json(struct http_req *req, char *why, size_t len)
{
    struct evbuffer *in = http_server_body(req);
    size_t n = evbuffer_get_length(in);
    const char *text = n > 0 ? (const char *)evbuffer_pullup(in, -1) : "";
    json_error_t error;
    json_t *doc = json_loadb(text, n, JSON_REJECT_DUPLICATES, &error);

    if (doc != NULL && json_is_object(doc))
        return doc;
    snprintf(why, len, "the body must be a JSON object%s%.100s", doc == NULL ? ": " : "",
             doc == NULL ? error.text : "");
    json_decref(doc);
    return NULL;
}

int admin_json_members(const json_t *doc, const char *const *allowed, char *why, size_t len)
{
    const char *member;
    json_t *value;

    json_object_foreach((json_t *)doc, member, value) {
        size_t i = 0;

        while (allowed[i] != NULL && strcmp(allowed[i], member) != 0)
            i++;
        if (allowed[i] == NULL) {
            snprintf(why, len, "unknown member \"%.64s\"", member);
            return -1;
        }
    }
    return 0;
}

int admin_json_reason(const json_t *doc, char *out, char *why, size_t len)
{
    const json_t *reason = json_object_get(doc, "reason");

    if (reason == NULL || !json_is_string(reason)) {
        snprintf(why, len, "\"reason\" is %s: a string that says why (a ticket, what the "
                 "upstream showed), for the audit trail",
                 reason == NULL ? "missing" : "not a string");
        return -1;
    }
    if (admin_reason_check(json_string_value(reason), json_string_length(reason), why, len) != 0)
        return -1;
    memcpy(out, json_string_value(reason), json_string_length(reason) + 1);
    return 0;
}

bool admin_record_id_ok(const char *id, size_t len)
{
    return len == RECORD_ID_HEX_LEN && strspn(id, "0123456789abcdef") >= RECORD_ID_HEX_LEN;
}
