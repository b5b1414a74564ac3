/*
 * cli_records.c - the record verbs of `idempotency-proxy admin`, each one or
 * more exchanges with the admin listener's /records endpoints
 * (docs/operations.md#admin-listener, CONTRACT section 15):
 *
 *   list     GET /records[?state=S]&limit=N[&cursor=C], every page
 *   show     GET /records/<id>, with its ETag
 *   lookup   GET /records/lookup?path=&key=[&method=][&header=]...
 *   resolve  PUT /records/<id> {status, headers, body_base64, reason} [If-Match]
 *   purge    DELETE /records/<id>?reason=[&confirm=re-execute]
 *   extend   POST /records/<id>/extend {seconds, reason}
 *   bulk     POST /records/bulk {action, state, route, older_than_seconds, reason,
 *            dry_run, [confirm], [status, headers, body_base64]}
 *
 * The JSON is built with jansson and the body's base64 by OpenSSL
 * (EVP_EncodeBlock); query values are percent-encoded by libevent.
 */
#include "cli_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

/* A page of the listing at most (the endpoint's own bound). */
#define CLI_LIST_PAGE_MAX 1000
/* The largest body --body-file reads, bytes (the proxy refuses more than max_stored_response). */
#define CLI_BODY_MAX (64u << 20)
#define CLI_TARGET_MAX 8192
/* A cursor of the walk at most, bytes (the endpoints' are "NODE-SCAN-SKIP", a few dozen). */
#define CLI_CURSOR_MAX 512

/* Now, in ms since the epoch, for a record's age. */
static long long cli_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "&name=value" (value percent-encoded) appended to target; "?" first when there is none yet. */
static int cli_query(char *target, const char *name, const char *value)
{
    size_t used = strlen(target);

    if (used + strlen(name) + 3 >= CLI_TARGET_MAX)
        return -1;
    snprintf(target + used, CLI_TARGET_MAX - used, "%s%s=", strchr(target, '?') ? "&" : "?",
             name);
    return cli_http_escape(target, CLI_TARGET_MAX, value);
}

/* ---- list ------------------------------------------------------------------ */

static void cli_list_human(const json_t *doc, const struct cli_answer *a, void *arg)
{
    const json_t *records = json_object_get(doc, "records"), *entry;
    bool more = json_is_string(json_object_get(doc, "next_cursor"));
    const long long *limit = arg;
    long long now = cli_now_ms();
    int widths[5] = { 32, 15, 5, 8, 0 };
    char id[160], route[256], state[64], age[32], ttl[32];
    const char *cells[5];
    size_t i;

    (void)a;
    json_array_foreach(records, i, entry) {
        cli_print_cell(json_object_get(entry, "route"), route, sizeof(route));
        if ((int)strlen(route) > widths[2])
            widths[2] = (int)strlen(route);
    }
    if (json_array_size(records) > 0) {
        const char *head[5] = { "RECORD ID", "STATE", "ROUTE", "AGE", "EXPIRES IN" };

        cli_print_row(widths, 5, head);
    }
    json_array_foreach(records, i, entry) {
        const json_t *created = json_object_get(entry, "created_ms");
        const json_t *ttl_ms = json_object_get(entry, "ttl_ms");

        cli_print_cell(json_object_get(entry, "route"), route, sizeof(route));
        cli_print_cell(json_object_get(entry, "state"), state, sizeof(state));
        /* a time from the future (or before 1970) has no age */
        cli_print_span(json_is_integer(created) && json_integer_value(created) >= 0 &&
                       json_integer_value(created) <= now
                           ? now - (long long)json_integer_value(created) : -1, age, sizeof(age));
        cli_print_span(json_is_integer(ttl_ms) ? (long long)json_integer_value(ttl_ms) : -1,
                       ttl, sizeof(ttl));
        cli_print_cell(json_object_get(entry, "record_id"), id, sizeof(id));
        cells[0] = id;
        cells[1] = state;
        cells[2] = route;
        cells[3] = age;
        cells[4] = ttl;
        cli_print_row(widths, 5, cells);
    }
    printf("%zu held record%s%s\n", json_array_size(records),
           json_array_size(records) == 1 ? "" : "s",
           more && *limit != CLI_UNSET ? " (stopped at --limit: more may follow)" : "");
}

/* Whether a listed entry is of the route asked for (all without --route). */
static bool cli_list_wanted(const struct cli_opts *o, const json_t *entry)
{
    const json_t *route = json_object_get(entry, "route");

    return o->route == NULL || (json_is_string(route) &&
                                strcmp(json_string_value(route), o->route) == 0);
}

/*
 * Whether next (a next_cursor the walk was given) was given before; if not,
 * it is kept in seen. A walk whose cursor comes round again would go round
 * for ever: SCAN's cursors do not (a failover during the walk may make it
 * so: list again).
 */
static bool cli_walk_repeats(json_t *seen, const char *next)
{
    if (json_object_get(seen, next) != NULL)
        return true;
    json_object_set_new(seen, next, json_true());
    return false;
}

/*
 * Every page, following next_cursor to the end or to --limit; the pages'
 * entries make one document of the endpoint's shape, the last cursor read
 * as its next_cursor (null: the walk is over). At most o->max_calls pages,
 * and never a cursor twice: a walk stopped so prints what it listed, then
 * why on stderr, and is CLI_REFUSED.
 */
static int cli_list(const struct cli_opts *o, struct cli_client *c)
{
    json_t *all = json_array(), *seen = json_object(), *doc = NULL, *entry;
    const json_t *records, *next;
    struct cli_answer a;
    char target[CLI_TARGET_MAX], limit[32], cursor[CLI_CURSOR_MAX] = "", stopped[160] = "";
    long long page, calls = 0;
    int rc = CLI_DONE;
    size_t i;

    if (all == NULL || seen == NULL) {
        cli_print_error("out of memory");
        json_decref(all);
        json_decref(seen);
        return CLI_REFUSED;
    }
    for (;; calls++) {
        if (calls == o->max_calls) {
            snprintf(stopped, sizeof(stopped), "GET /records: stopped after %lld calls "
                     "(--max-calls) with the walk not over", calls);
            break;
        }
        page = o->limit == CLI_UNSET || o->route != NULL
                   ? CLI_LIST_PAGE_MAX
                   : o->limit - (long long)json_array_size(all);
        snprintf(limit, sizeof(limit), "%lld", page < CLI_LIST_PAGE_MAX ? page : CLI_LIST_PAGE_MAX);
        snprintf(target, sizeof(target), "/records");
        if ((o->state != NULL && cli_query(target, "state", o->state) != 0) ||
            cli_query(target, "limit", limit) != 0 ||
            (cursor[0] != '\0' && cli_query(target, "cursor", cursor) != 0)) {
            cli_print_error("the listing's query is too long");
            rc = CLI_USAGE;
            break;
        }
        rc = cli_http_call(c, "GET", target, NULL, NULL, false, &a);
        if (rc != CLI_DONE) {
            cli_answer_deinit(&a);
            break;
        }
        if (a.status < 200 || a.status > 299) {
            rc = cli_print_answer(o, &a, NULL, NULL, 0, NULL);
            cli_answer_deinit(&a);
            break;
        }
        records = json_object_get(a.doc, "records");
        next = json_object_get(a.doc, "next_cursor");
        if (a.status != 200 || !json_is_array(records) ||
            !(json_is_null(next) || json_is_string(next)) ||
            (json_is_string(next) && json_string_length(next) >= sizeof(cursor))) {
            cli_print_error("GET /records answered %ld without the listing's records and "
                            "next_cursor: is it the admin listener?", a.status);
            cli_answer_deinit(&a);
            rc = CLI_UNREACHABLE;
            break;
        }
        json_array_foreach(records, i, entry) {
            if (o->limit != CLI_UNSET && (long long)json_array_size(all) >= o->limit)
                break;
            if (cli_list_wanted(o, entry))
                json_array_append(all, entry);
        }
        snprintf(cursor, sizeof(cursor), "%s", json_is_string(next) ? json_string_value(next) : "");
        if (doc == NULL) {
            doc = a.doc; /* the first page's document carries the whole listing */
            a.doc = NULL;
        }
        cli_answer_deinit(&a);
        if (cursor[0] == '\0' || (o->limit != CLI_UNSET &&
                                  (long long)json_array_size(all) >= o->limit))
            break;
        if (cli_walk_repeats(seen, cursor)) {
            snprintf(stopped, sizeof(stopped), "GET /records answered a next_cursor it gave "
                     "before, so the walk would not end: stopped there (list again)");
            break;
        }
    }
    if (rc == CLI_DONE && doc != NULL) {
        json_object_set(doc, "records", all);
        json_object_set_new(doc, "next_cursor", cursor[0] != '\0' ? json_string(cursor)
                                                                  : json_null());
        memset(&a, 0, sizeof(a));
        a.status = 200;
        a.doc = doc;
        doc = NULL;
        rc = cli_print_answer(o, &a, cli_list_human, (void *)&o->limit, 0, NULL);
        cli_answer_deinit(&a);
    }
    if (stopped[0] != '\0') {
        cli_print_error("%s; printed: the records listed until then", stopped);
        rc = CLI_REFUSED;
    }
    json_decref(doc);
    json_decref(all);
    json_decref(seen);
    return rc;
}

/* ---- show, lookup and the answers of changes ------------------------------- */

/* A document as `name: value` lines, and the ETag when the answer has one. */
static void cli_fields_human(const json_t *doc, const struct cli_answer *a, void *arg)
{
    char etag[4 * sizeof(a->etag)];

    (void)arg;
    cli_print_fields(doc);
    if (a->etag[0] != '\0' && json_object_get(doc, "etag") == NULL) {
        cli_print_clean(etag, sizeof(etag), a->etag, strlen(a->etag));
        printf("etag: %s\n", etag);
    }
}

/* One exchange whose answer is printed as fields. */
static int cli_one(const struct cli_opts *o, struct cli_client *c, const char *method,
                   const char *target, const json_t *body, const char *if_match,
                   long hint_status, const char *hint)
{
    struct cli_answer a;
    int rc = cli_http_call(c, method, target, body, if_match, strcmp(method, "GET") != 0, &a);

    if (rc == CLI_DONE)
        rc = cli_print_answer(o, &a, cli_fields_human, NULL, hint_status, hint);
    cli_answer_deinit(&a);
    return rc;
}

/* As fields, and a note for each scope header not given (as `record-id` notes them). */
static void cli_lookup_human(const json_t *doc, const struct cli_answer *a, void *arg)
{
    const json_t *absent = json_object_get(doc, "absent_scope_headers"), *name;
    char clean[256];
    size_t i;

    cli_fields_human(doc, a, arg);
    json_array_foreach(absent, i, name) {
        if (!json_is_string(name))
            continue;
        cli_print_cell(name, clean, sizeof(clean));
        cli_print_error("note: the route scopes keys by %s, and no --header gave it: this is "
                        "the record of a request without that header", clean);
    }
}

static int cli_lookup(const struct cli_opts *o, struct cli_client *c)
{
    char target[CLI_TARGET_MAX] = "/records/lookup", line[CLI_TARGET_MAX];
    const struct evkeyval *h;
    struct cli_answer a;
    int rc;

    if (cli_query(target, "path", o->path) != 0 || cli_query(target, "key", o->key) != 0 ||
        (o->method != NULL && cli_query(target, "method", o->method) != 0))
        goto too_long;
    TAILQ_FOREACH(h, &o->headers, next) {
        snprintf(line, sizeof(line), "%s: %s", h->key, h->value);
        if (cli_query(target, "header", line) != 0)
            goto too_long;
    }
    rc = cli_http_call(c, "GET", target, NULL, NULL, false, &a);
    if (rc == CLI_DONE)
        rc = cli_print_answer(o, &a, cli_lookup_human, NULL, 0, NULL);
    cli_answer_deinit(&a);
    return rc;
too_long:
    cli_print_error("the lookup's query is longer than %d bytes", CLI_TARGET_MAX);
    return CLI_USAGE;
}

/* ---- the answer of a resolve ------------------------------------------------ */

/* opt F ("-": stdin), whole, into *out (malloc'd); 0, or -1 after the usage line. */
static int cli_file_read(const char *opt, const char *path, unsigned char **out, size_t *len)
{
    FILE *fp = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    unsigned char *buf = NULL, *grown;
    size_t used = 0, cap = 0, n;

    if (fp == NULL) {
        cli_print_error("%s %s: cannot open: %s", opt, path, strerror(errno));
        return -1;
    }
    do {
        if (used == cap) {
            cap = cap == 0 ? 65536 : cap * 2;
            grown = cap <= CLI_BODY_MAX + 1 ? realloc(buf, cap) : NULL;
            if (grown == NULL) {
                cli_print_error("%s %s: %s", opt, path, cap > CLI_BODY_MAX + 1
                                ? "larger than 64 MiB" : "out of memory");
                goto failed;
            }
            buf = grown;
        }
        n = fread(buf + used, 1, cap - used, fp);
        used += n;
    } while (n > 0);
    if (ferror(fp)) {
        cli_print_error("%s %s: cannot read: %s", opt, path, strerror(errno));
        goto failed;
    }
    if (fp != stdin)
        fclose(fp);
    *out = buf;
    *len = used;
    return 0;
failed:
    if (fp != stdin)
        fclose(fp);
    free(buf);
    return -1;
}

/*
 * The answer members of PUT /records/<id> into doc: status, headers as
 * [name, value] pairs in the order given, body_base64 (RFC 4648 section 4,
 * padded, one line: EVP_EncodeBlock). 0, or a CLI exit status after its line.
 */
static int cli_answer_members(const struct cli_opts *o, json_t *doc)
{
    const struct evkeyval *h;
    unsigned char *body = NULL, *b64 = NULL;
    size_t len;
    json_t *headers = json_array();
    int rc = CLI_REFUSED;

    if (o->body_file != NULL) {
        if (cli_file_read("--body-file", o->body_file, &body, &len) != 0) {
            json_decref(headers);
            return CLI_USAGE;
        }
        if (len == 0) {
            /* a stdin that ran dry, a file not yet written: never an empty answer unasked */
            cli_print_error("--body-file %s: empty; the answer of an empty body is given with "
                            "--body ''", o->body_file);
            free(body);
            json_decref(headers);
            return CLI_USAGE;
        }
    } else {
        len = strlen(o->body);
    }
    if (len > CLI_BODY_MAX || headers == NULL ||
        (b64 = malloc(4 * ((len + 2) / 3) + 1)) == NULL)
        goto done;
    EVP_EncodeBlock(b64, body != NULL ? body : (const unsigned char *)o->body, (int)len);
    TAILQ_FOREACH(h, &o->headers, next)
        if (json_array_append_new(headers, json_pack("[ss]", h->key, h->value)) != 0)
            goto done;
    if (json_object_set_new(doc, "status", json_integer(o->status)) != 0 ||
        json_object_set(doc, "headers", headers) != 0 ||
        json_object_set_new(doc, "body_base64", json_string((const char *)b64)) != 0)
        goto done;
    rc = 0;
done:
    if (rc != 0)
        cli_print_error("out of memory");
    json_decref(headers);
    free(body);
    free(b64);
    return rc;
}

static int cli_resolve(const struct cli_opts *o, struct cli_client *c)
{
    char target[128];
    json_t *doc = json_object();
    int rc = doc != NULL ? cli_answer_members(o, doc) : CLI_REFUSED;

    if (rc == 0 && json_object_set_new(doc, "reason", json_string(o->reason)) == 0) {
        snprintf(target, sizeof(target), "/records/%s", o->id);
        rc = cli_one(o, c, "PUT", target, doc, o->if_match, 428,
                     "the record holds an operator's resolution: give --if-match with the "
                     "etag that show prints");
    } else if (rc == 0) {
        cli_print_error("out of memory");
        rc = CLI_REFUSED;
    }
    json_decref(doc);
    return rc;
}

static int cli_purge(const struct cli_opts *o, struct cli_client *c)
{
    char target[CLI_TARGET_MAX];

    snprintf(target, sizeof(target), "/records/%s", o->id);
    if (cli_query(target, "reason", o->reason) != 0 ||
        (o->confirm != NULL && cli_query(target, "confirm", o->confirm) != 0)) {
        cli_print_error("--reason is too long");
        return CLI_USAGE;
    }
    return cli_one(o, c, "DELETE", target, NULL, NULL, 0, NULL);
}

static int cli_extend(const struct cli_opts *o, struct cli_client *c)
{
    char target[128];
    json_t *doc = json_pack("{s:I, s:s}", "seconds", (json_int_t)o->seconds, "reason",
                            o->reason);
    int rc;

    if (doc == NULL) {
        cli_print_error("out of memory");
        return CLI_REFUSED;
    }
    snprintf(target, sizeof(target), "/records/%s/extend", o->id);
    rc = cli_one(o, c, "POST", target, doc, o->if_match, 0, NULL);
    json_decref(doc);
    return rc;
}

/* ---- bulk -------------------------------------------------------------------- */

static void cli_bulk_human(const json_t *doc, const struct cli_answer *a, void *arg)
{
    const json_t *records = json_object_get(doc, "records"), *entry;
    const json_t *matched = json_object_get(doc, "matched"), *changed = json_object_get(doc,
                                                                                      "changed");
    const bool *dry_run = arg;
    int widths[4] = { 32, 15, 5, 0 };
    char cells_text[4][256];
    const char *cells[4] = { cells_text[0], cells_text[1], cells_text[2], cells_text[3] };
    const char *head[4] = { "RECORD ID", "STATE", "ROUTE", "RESULT" };
    size_t i;

    (void)a;
    json_array_foreach(records, i, entry) {
        cli_print_cell(json_object_get(entry, "route"), cells_text[2], sizeof(cells_text[2]));
        if ((int)strlen(cells_text[2]) > widths[2])
            widths[2] = (int)strlen(cells_text[2]);
    }
    if (json_array_size(records) > 0)
        cli_print_row(widths, 4, head);
    json_array_foreach(records, i, entry) {
        cli_print_cell(json_object_get(entry, "record_id"), cells_text[0], sizeof(cells_text[0]));
        cli_print_cell(json_object_get(entry, "state"), cells_text[1], sizeof(cells_text[1]));
        cli_print_cell(json_object_get(entry, "route"), cells_text[2], sizeof(cells_text[2]));
        cli_print_cell(json_object_get(entry, "result"), cells_text[3], sizeof(cells_text[3]));
        cli_print_row(widths, 4, cells);
    }
    if (*dry_run && json_is_integer(json_object_get(doc, "as_of_ms")))
        printf("as_of_ms: %lld\n", (long long)json_integer_value(json_object_get(doc,
                                                                              "as_of_ms")));
    if (*dry_run)
        printf("dry run: %lld record%s; nothing was changed (--apply --only-from FILE, FILE "
               "this output, changes exactly these)\n",
               (long long)json_integer_value(matched),
               json_integer_value(matched) == 1 ? " matches" : "s match");
    else
        printf("%lld record%s matched, %lld changed\n", (long long)json_integer_value(matched),
               json_integer_value(matched) == 1 ? "" : "s",
               (long long)json_integer_value(changed));
}

/* The request of a bulk verb without its cursor; NULL after the line on stderr. */
/*
 * --only-from F: the record ids of a dry run's output (the first field of
 * each line that is one: the table's rows; a plain list of ids works too)
 * into doc's "record_ids", and its "as_of_ms: N" line into
 * "created_before_ms", so that --apply changes only what was reviewed (an
 * id held again since, by a new attempt, is not).
 * 0, or a CLI exit status after its line.
 */
static int cli_only_from(const char *path, json_t *doc)
{
    unsigned char *text;
    size_t len;
    json_t *ids = json_array();
    char *line, *save = NULL;
    int rc = CLI_USAGE;

    if (ids == NULL || cli_file_read("--only-from", path, &text, &len) != 0) {
        json_decref(ids);
        return CLI_USAGE;
    }
    text = realloc(text, len + 1);
    if (text == NULL)
        goto done;
    text[len] = '\0';
    for (line = strtok_r((char *)text, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        size_t n = strcspn(line, " \t\r");
        char *end;

        /* the dry run's time: a record claimed since (a new attempt under a reviewed id) is
           left alone */
        if (strncmp(line, "as_of_ms: ", 10) == 0) {
            long long ms = strtoll(line + 10, &end, 10);

            if (ms > 0 && (*end == '\0' || *end == '\r') &&
                json_object_set_new(doc, "created_before_ms", json_integer(ms)) != 0)
                goto done;
            continue;
        }

        if (n == 32 && strspn(line, "0123456789abcdef") >= 32 &&
            json_array_append_new(ids, json_stringn(line, 32)) != 0)
            goto done;
    }
    if (json_array_size(ids) == 0 || json_array_size(ids) > 1000) {
        cli_print_error("--only-from %s: %zu record ids (a dry run's output, or one id a line; "
                        "1..1000)", path, json_array_size(ids));
        goto done;
    }
    rc = json_object_set(doc, "record_ids", ids) != 0 ? CLI_REFUSED : 0;
done:
    free(text);
    json_decref(ids);
    return rc;
}

static json_t *cli_bulk_request(const struct cli_opts *o, int *rc)
{
    json_t *doc = json_pack("{s:s, s:b}", "action", o->action, "dry_run", !o->apply);

    *rc = CLI_REFUSED;
    if (doc == NULL ||
        (o->state != NULL && json_object_set_new(doc, "state", json_string(o->state)) != 0) ||
        (o->route != NULL && json_object_set_new(doc, "route", json_string(o->route)) != 0) ||
        (o->older_than != CLI_UNSET &&
         json_object_set_new(doc, "older_than_seconds", json_integer(o->older_than)) != 0) ||
        (o->reason != NULL && json_object_set_new(doc, "reason", json_string(o->reason)) != 0) ||
        (o->confirm != NULL && json_object_set_new(doc, "confirm", json_string(o->confirm)) != 0)) {
        cli_print_error("out of memory");
        json_decref(doc);
        return NULL;
    }
    /* a resolve's dry run may come without its answer (cli_args.c checks --apply has one) */
    if (strcmp(o->action, "resolve") == 0 && o->status != CLI_UNSET &&
        (*rc = cli_answer_members(o, doc)) != 0) {
        json_decref(doc);
        return NULL;
    }
    if (o->only_from != NULL && (*rc = cli_only_from(o->only_from, doc)) != 0) {
        json_decref(doc);
        return NULL;
    }
    *rc = CLI_DONE;
    return doc;
}

/* A page's matched, changed and records added to the walk's (into). False: not a bulk answer. */
static bool cli_bulk_add(json_t *into, const json_t *page)
{
    const json_t *records = json_object_get(page, "records");
    const char *counts[2] = { "matched", "changed" };
    json_int_t sum[2];

    if (!json_is_array(records))
        return false;
    for (size_t i = 0; i < 2; i++)
        if (__builtin_add_overflow(json_integer_value(json_object_get(into, counts[i])),
                                   json_integer_value(json_object_get(page, counts[i])),
                                   &sum[i]))
            return false;
    for (size_t i = 0; i < 2; i++)
        json_object_set_new(into, counts[i], json_integer(sum[i]));
    return json_array_extend(json_object_get(into, "records"), (json_t *)records) == 0;
}

/* How many of a walk's records have the result "error": Redis failed on them (looked at first). */
/*
 * --only-from's reviewed ids that the apply did not change (no entry in the
 * walk's records): each printed on stderr, one a line; their count.
 */
static size_t cli_bulk_skipped(const json_t *ids, const json_t *walk)
{
    const json_t *id, *entry;
    size_t i, j, n = 0;

    json_array_foreach(ids, i, id) {
        bool found = false;

        json_array_foreach(json_object_get(walk, "records"), j, entry)
            if (json_equal(json_object_get(entry, "record_id"), id)) {
                found = true;
                break;
            }
        if (!found) {
            fprintf(stderr, "idempotency-proxy: admin: not changed: %s\n", json_string_value(id));
            n++;
        }
    }
    return n;
}

static size_t cli_bulk_errors(const json_t *walk)
{
    const json_t *entry;
    size_t i, n = 0;

    json_array_foreach(json_object_get(walk, "records"), i, entry) {
        const char *result = json_string_value(json_object_get(entry, "result"));

        n += result != NULL && (strcmp(result, "error") == 0 || strcmp(result, "unknown") == 0);
    }
    return n;
}

/*
 * Every call the walk takes: one call changes (or, in a dry run, lists)
 * at most a bounded number of records and answers next_cursor, and the
 * next call goes on from there until it is null. The pages make one
 * document of the endpoint's shape, next_cursor where the walk stopped. A
 * walk that stops early prints what the calls before (and a refused
 * call's partial answer) did, then why: a refusal (cli_print_refusal's
 * status), no answer or not a bulk change's (CLI_UNREACHABLE, or with
 * --apply CLI_UNKNOWN), a cursor given twice or o->max_calls calls
 * (CLI_REFUSED). With --apply, a record whose result is "error" makes it
 * CLI_UNKNOWN: the proxy could not tell whether it was changed.
 */
static int cli_bulk(const struct cli_opts *o, struct cli_client *c)
{
    bool dry_run = !o->apply;
    json_t *request = NULL, *walk = NULL, *seen = json_object();
    const json_t *next;
    struct cli_answer a, failed;
    char stopped[160] = "";
    long long calls;
    size_t errors = 0, skipped = 0;
    int rc;

    memset(&failed, 0, sizeof(failed));
    request = cli_bulk_request(o, &rc);
    walk = json_pack("{s:s, s:b, s:I, s:I, s:[], s:n}", "action", o->action, "dry_run", dry_run,
                     "matched", (json_int_t)0, "changed", (json_int_t)0, "records",
                     "next_cursor");
    if (request == NULL || walk == NULL || seen == NULL) {
        if (request != NULL)
            cli_print_error("out of memory");
        json_decref(request);
        json_decref(walk);
        json_decref(seen);
        return rc != CLI_DONE ? rc : CLI_REFUSED;
    }
    for (calls = 0;; calls++) {
        if (calls == o->max_calls) {
            snprintf(stopped, sizeof(stopped), "POST /records/bulk: stopped after %lld calls "
                     "(--max-calls) with the walk not over", calls);
            break;
        }
        rc = cli_http_call(c, "POST", "/records/bulk", request, NULL, o->apply, &a);
        if (rc != CLI_DONE) {
            cli_answer_deinit(&a);
            break;
        }
        if (a.status < 200 || a.status > 299) {
            cli_bulk_add(walk, a.doc); /* a refusal may say what it did before it failed */
            failed = a; /* its refusal is printed after what was done */
            break;
        }
        next = json_object_get(a.doc, "next_cursor");
        if (a.status != 200 || !(json_is_null(next) || json_is_string(next)) ||
            (json_is_string(next) && json_string_length(next) >= CLI_CURSOR_MAX) ||
            !cli_bulk_add(walk, a.doc)) {
            cli_print_error("POST /records/bulk answered %ld without a bulk change's records "
                            "and next_cursor: is it the admin listener?%s", a.status, o->apply
                            ? " The change may or may not have been made: look before sending "
                              "it again" : "");
            cli_answer_deinit(&a);
            rc = o->apply ? CLI_UNKNOWN : CLI_UNREACHABLE;
            break;
        }
        json_object_set(walk, "next_cursor", (json_t *)next);
        /* the walk's as_of_ms: its first call's (a record claimed since was not reviewed) */
        if (json_object_get(walk, "as_of_ms") == NULL &&
            json_is_integer(json_object_get(a.doc, "as_of_ms")))
            json_object_set(walk, "as_of_ms", json_object_get(a.doc, "as_of_ms"));
        if (json_is_null(next)) {
            cli_answer_deinit(&a);
            break;
        }
        if (cli_walk_repeats(seen, json_string_value(next))) {
            snprintf(stopped, sizeof(stopped), "POST /records/bulk answered a next_cursor it "
                     "gave before, so the walk would not end: stopped there");
            cli_answer_deinit(&a);
            break;
        }
        json_object_set(request, "cursor", (json_t *)next);
        cli_answer_deinit(&a);
    }
    if (failed.status != 0 && json_array_size(json_object_get(walk, "records")) == 0) {
        rc = cli_print_answer(o, &failed, NULL, NULL, 0, NULL); /* nothing was done */
    } else if (rc == CLI_DONE || json_array_size(json_object_get(walk, "records")) > 0) {
        /* what was done, even when a later call failed */
        errors = o->apply ? cli_bulk_errors(walk) : 0;
        skipped = o->apply && rc == CLI_DONE && failed.status == 0 && stopped[0] == '\0'
                      ? cli_bulk_skipped(json_object_get(request, "record_ids"), walk) : 0;
        memset(&a, 0, sizeof(a));
        a.status = 200;
        a.doc = walk;
        walk = NULL;
        if (cli_print_answer(o, &a, cli_bulk_human, &dry_run, 0, NULL) != CLI_DONE &&
            rc == CLI_DONE)
            rc = CLI_REFUSED;
        cli_answer_deinit(&a);
        if (failed.status != 0)
            rc = cli_print_refusal(&failed, 0, NULL);
    }
    if (stopped[0] != '\0') {
        cli_print_error("%s; printed: the records the calls until then %s", stopped,
                        o->apply ? "changed (or tried to: their result)" : "listed");
        rc = CLI_REFUSED;
    }
    if (skipped > 0) {
        cli_print_error("%zu reviewed record%s not changed: %s no longer %s the dry run's "
                        "filters (changed, held again by a new attempt, or gone since): look at "
                        "%s (show ID); the ids are above", skipped, skipped == 1 ? " was" : "s were",
                        skipped == 1 ? "it" : "they", skipped == 1 ? "matches" : "match",
                        skipped == 1 ? "it" : "each");
        rc = CLI_REFUSED;
    }
    if (errors > 0) {
        cli_print_error("%zu record%s the result error: Redis failed, and the proxy could not "
                        "tell whether %s changed: show %s before sending the change again",
                        errors, errors == 1 ? " has" : "s have", errors == 1 ? "it was"
                        : "they were", errors == 1 ? "it" : "each");
        rc = CLI_UNKNOWN;
    }
    cli_answer_deinit(&failed);
    json_decref(request);
    json_decref(walk);
    json_decref(seen);
    return rc;
}

int cli_records_run(const struct cli_opts *o, struct cli_client *c)
{
    char target[128];

    switch (o->verb) {
    case CLI_LIST: return cli_list(o, c);
    case CLI_SHOW:
        snprintf(target, sizeof(target), "/records/%s", o->id);
        return cli_one(o, c, "GET", target, NULL, NULL, 0, NULL);
    case CLI_LOOKUP: return cli_lookup(o, c);
    case CLI_RESOLVE: return cli_resolve(o, c);
    case CLI_PURGE: return cli_purge(o, c);
    case CLI_EXTEND: return cli_extend(o, c);
    case CLI_BULK: return cli_bulk(o, c);
    case CLI_INBOX: break;
    }
    return CLI_USAGE;
}
