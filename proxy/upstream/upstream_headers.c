/*
 * upstream_headers.c - the header fields a request carries upstream, as
 * the curl list upstream_call.c sends: the client's, found in one pass, and the
 * ones the proxy adds or withholds.
 */
#include "upstream_headers.h"

#include <stdbool.h>
#include <sys/queue.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/keyvalq_struct.h>

#include "headers.h"

/*
 * Append one raw header line; after a failed allocation *failed stays set and
 * the list is returned unchanged. "Name:" alone tells curl not to send a
 * field it would add itself.
 */
static struct curl_slist *upstream_header_line(struct curl_slist *list, const char *line,
                                               bool *failed)
{
    struct curl_slist *next = *failed ? NULL : curl_slist_append(list, line);

    if (next == NULL)
        *failed = true;
    return next != NULL ? next : list;
}

/* "Name: value"; "Name;" sends an empty value. Lines up to 1 KiB are built on the stack. */
static struct curl_slist *upstream_header_add(struct curl_slist *list, const char *name,
                                              const char *value, bool *failed)
{
    size_t name_len = strlen(name), value_len = strlen(value);
    size_t need = name_len + 2 + value_len + 1;
    char small[1024], *line;

    if (*failed)
        return list;
    line = need <= sizeof(small) ? small : malloc(need);
    if (line == NULL) {
        *failed = true;
        return list;
    }
    memcpy(line, name, name_len);
    if (value_len == 0) {
        memcpy(line + name_len, ";", 2);
    } else {
        memcpy(line + name_len, ": ", 2);
        memcpy(line + name_len + 2, value, value_len + 1);
    }
    list = upstream_header_line(list, line, failed);
    if (line != small)
        free(line);
    return list;
}

/*
 * The request fields upstream_request_headers looks up, found in one pass
 * (evhttp_find_header would scan the list once for each).
 */
struct upstream_client_fields {
    const char *connection, *accept, *content_type; /* the first of each, or NULL */
    size_t xff_lines, xff_bytes;    /* X-Forwarded-For: how many lines, their values' bytes */
};

static void upstream_client_fields(const struct evkeyvalq *headers, struct upstream_client_fields *f)
{
    const struct evkeyval *h;

    *f = (struct upstream_client_fields){ 0 };
    TAILQ_FOREACH(h, headers, next) {
        switch (strlen(h->key)) { /* a length check before each comparison */
        case 6:
            if (strcasecmp(h->key, "Accept") == 0)
                f->accept = f->accept != NULL ? f->accept : h->value;
            break;
        case 10:
            if (strcasecmp(h->key, "Connection") == 0)
                f->connection = f->connection != NULL ? f->connection : h->value;
            break;
        case 12:
            if (strcasecmp(h->key, "Content-Type") == 0)
                f->content_type = f->content_type != NULL ? f->content_type : h->value;
            break;
        case 15:
            if (strcasecmp(h->key, "X-Forwarded-For") == 0) {
                f->xff_lines++;
                f->xff_bytes += strlen(h->value);
            }
            break;
        }
    }
}

struct curl_slist *upstream_request_headers(const struct evkeyvalq *headers,
                                                   const char *client_addr, bool has_body,
                                                   bool *failed)
{
    struct curl_slist *list = NULL;
    struct upstream_client_fields f;
    struct evkeyval *h;

    upstream_client_fields(headers, &f);
    TAILQ_FOREACH(h, headers, next) {
        if (!header_is_forwarded(h->key) || header_named_by_connection(f.connection, h->key) ||
            strcasecmp(h->key, "X-Forwarded-For") == 0)
            continue;
        list = upstream_header_add(list, h->key, h->value, failed);
    }
    if (client_addr != NULL || f.xff_lines > 0) {
        /*
         * every earlier X-Forwarded-For line, in order, then the client
         * (RFC 9110 5.3: field lines combine with ", "); on the stack unless long
         */
        size_t addr = client_addr != NULL ? strlen(client_addr) : 0;
        size_t need = f.xff_bytes + 2 * f.xff_lines + addr + 1, used = 0;
        char small[512], *value = need <= sizeof(small) ? small : malloc(need);
        if (value == NULL) {
            *failed = true;
        } else {
            TAILQ_FOREACH(h, headers, next) {
                if (strlen(h->key) != 15 || strcasecmp(h->key, "X-Forwarded-For") != 0)
                    continue;
                used += (size_t)sprintf(value + used, "%s%s", used > 0 ? ", " : "", h->value);
            }
            if (client_addr != NULL)
                used += (size_t)sprintf(value + used, "%s%s", used > 0 ? ", " : "", client_addr);
            list = upstream_header_add(list, "X-Forwarded-For", value, failed);
            if (value != small)
                free(value);
        }
    }
    /* Stop curl from adding fields the client did not send. */
    list = upstream_header_line(list, "Expect:", failed);
    if (f.accept == NULL)
        list = upstream_header_line(list, "Accept:", failed);
    if (has_body && f.content_type == NULL)
        list = upstream_header_line(list, "Content-Type:", failed);
    return list;
}
