/*
 * cli_inbox.c - the inbox verbs of `idempotency-proxy admin`, on the admin
 * listener's /inbox endpoints (docs/webhooks.md#the-inboxs-admin-endpoints):
 *
 *   inbox [list]                    GET /inbox
 *   inbox dead ROUTE                GET /inbox/<route>/dead
 *   inbox pause ROUTE               POST /inbox/<route>/pause
 *   inbox resume ROUTE              POST /inbox/<route>/resume
 *   inbox redeliver ROUTE ID        POST /inbox/<route>/dead/<id>/redeliver
 *   inbox redeliver ROUTE --all     POST /inbox/<route>/dead/redeliver[?reason=&before=]
 *   inbox delete ROUTE ID           DELETE /inbox/<route>/dead/<id>
 *
 * ROUTE is the route's path as written (percent-encoded here, as GET /inbox
 * shows it in `admin`) or that `admin` string itself.
 */
#include "cli_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CLI_INBOX_TARGET_MAX 2048

/* "/inbox/<route>" into target: a path as written is percent-encoded, an `admin` string kept. */
static int cli_inbox_route(const char *route, char *target, size_t size)
{
    snprintf(target, size, "/inbox/");
    if (route[0] == '/')
        return cli_http_escape(target, size, route);
    if (strspn(route, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789%-._~") !=
        strlen(route) || route[0] == '\0' || strlen(target) + strlen(route) >= size)
        return -1;
    memcpy(target + strlen(target), route, strlen(route) + 1);
    return 0;
}

static void cli_inbox_list_human(const json_t *doc, const struct cli_answer *a, void *arg)
{
    const json_t *routes = json_object_get(doc, "routes"), *r;
    int widths[7] = { 5, 6, 8, 10, 8, 5, 0 };
    const char *head[7] = { "ROUTE", "DEPTH", "PENDING", "SCHEDULED", "OLDEST", "DEAD",
                            "PAUSED" };
    char text[7][256];
    const char *cells[7];
    size_t i;

    (void)a;
    (void)arg;
    if (json_array_size(routes) == 0) {
        printf("no queued routes\n");
        return;
    }
    json_array_foreach(routes, i, r) {
        cli_print_cell(json_object_get(r, "route"), text[0], sizeof(text[0]));
        if ((int)strlen(text[0]) > widths[0])
            widths[0] = (int)strlen(text[0]);
    }
    cli_print_row(widths, 7, head);
    json_array_foreach(routes, i, r) {
        const json_t *oldest = json_object_get(r, "oldest_age_s");
        static const char *const names[7] = { "route", "depth", "pending", "scheduled", NULL,
                                               "dead", "paused" };

        for (size_t k = 0; k < 7; k++) {
            if (names[k] != NULL)
                cli_print_cell(json_object_get(r, names[k]), text[k], sizeof(text[k]));
            cells[k] = text[k];
        }
        /* a number past a century is no age (nor one a long long holds in ms) */
        cli_print_span(json_is_number(oldest) && json_number_value(oldest) >= 0 &&
                       json_number_value(oldest) < 100.0 * 365 * 86400
                           ? (long long)(json_number_value(oldest) * 1000) : -1,
                       text[4], sizeof(text[4]));
        cli_print_row(widths, 7, cells);
    }
}

static void cli_inbox_dead_human(const json_t *doc, const struct cli_answer *a, void *arg)
{
    const json_t *dead = json_object_get(doc, "dead"), *d;
    int widths[5] = { 20, 20, 8, 10, 0 };
    const char *head[5] = { "ID", "EVENT", "ATTEMPTS", "DIED", "REASON" };
    char text[5][512];
    const char *cells[5] = { text[0], text[1], text[2], text[3], text[4] };
    struct timespec now;
    size_t i;

    (void)a;
    (void)arg;
    if (json_array_size(dead) == 0) {
        printf("no dead letters\n");
        return;
    }
    clock_gettime(CLOCK_REALTIME, &now);
    json_array_foreach(dead, i, d) {
        cli_print_cell(json_object_get(d, "event"), text[1], sizeof(text[1]));
        if ((int)strlen(text[1]) > widths[1])
            widths[1] = (int)strlen(text[1]);
    }
    cli_print_row(widths, 5, head);
    json_array_foreach(dead, i, d) {
        const char *died = json_string_value(json_object_get(d, "died"));
        long long at = died != NULL ? strtoll(died, NULL, 10) : -1;
        long long now_ms = (long long)now.tv_sec * 1000;
        long long ago = at >= 0 && at <= now_ms ? now_ms - at : -1;
        size_t used;

        cli_print_cell(json_object_get(d, "id"), text[0], sizeof(text[0]));
        cli_print_cell(json_object_get(d, "event"), text[1], sizeof(text[1]));
        cli_print_cell(json_object_get(d, "attempts"), text[2], sizeof(text[2]));
        cli_print_span(ago, text[3], sizeof(text[3]));
        used = strlen(text[3]);
        if (ago >= 0)
            snprintf(text[3] + used, sizeof(text[3]) - used, " ago");
        cli_print_cell(json_object_get(d, "reason"), text[4], sizeof(text[4]));
        cli_print_row(widths, 5, cells);
    }
}

static void cli_inbox_fields_human(const json_t *doc, const struct cli_answer *a, void *arg)
{
    (void)a;
    (void)arg;
    cli_print_fields(doc);
}

/* text appended to target (size bytes); 0, or -1 when it does not fit. */
static int cli_inbox_append(char *target, size_t size, const char *text)
{
    size_t used = strlen(target);

    if (used + strlen(text) >= size)
        return -1;
    memcpy(target + used, text, strlen(text) + 1);
    return 0;
}

/* The path and query of o's inbox verb into target (size bytes), and its method; 0 or -1. */
static int cli_inbox_target(const struct cli_opts *o, char *target, size_t size,
                            const char **method)
{
    bool redeliver = o->inbox_verb == CLI_INBOX_REDELIVER;

    *method = "GET";
    switch (o->inbox_verb) {
    case CLI_INBOX_LIST:
        return 0;
    case CLI_INBOX_DEAD:
        return cli_inbox_append(target, size, "/dead");
    case CLI_INBOX_PAUSE:
    case CLI_INBOX_RESUME:
        *method = "POST";
        return cli_inbox_append(target, size, o->inbox_verb == CLI_INBOX_PAUSE ? "/pause"
                                                                               : "/resume");
    case CLI_INBOX_REDELIVER:
    case CLI_INBOX_DELETE:
        *method = redeliver ? "POST" : "DELETE";
        /* an id is digits and '-' (cli_args.c): nothing to encode */
        if (cli_inbox_append(target, size, "/dead/") != 0 ||
            (o->id != NULL && cli_inbox_append(target, size, o->id) != 0) ||
            (redeliver && cli_inbox_append(target, size, o->id != NULL ? "/redeliver"
                                                                       : "redeliver") != 0))
            return -1;
        if (o->match_reason != NULL && (cli_inbox_append(target, size, "?reason=") != 0 ||
                                        cli_http_escape(target, size, o->match_reason) != 0))
            return -1;
        if (o->before != NULL &&
            (cli_inbox_append(target, size, o->match_reason != NULL ? "&before=" : "?before=")
                 != 0 || cli_http_escape(target, size, o->before) != 0))
            return -1;
        return 0;
    }
    return -1;
}

int cli_inbox_run(const struct cli_opts *o, struct cli_client *c)
{
    char target[CLI_INBOX_TARGET_MAX] = "/inbox";
    const char *method;
    cli_human_fn human = o->inbox_verb == CLI_INBOX_LIST ? cli_inbox_list_human
                         : o->inbox_verb == CLI_INBOX_DEAD ? cli_inbox_dead_human
                                                           : cli_inbox_fields_human;
    struct cli_answer a;
    int rc;

    if (o->inbox_route != NULL && cli_inbox_route(o->inbox_route, target, sizeof(target)) != 0) {
        cli_print_error("ROUTE is a queued route's path as written (/webhooks/stripe), or the "
                        "`admin` string inbox list shows; not '%s'", o->inbox_route);
        return CLI_USAGE;
    }
    if (cli_inbox_target(o, target, sizeof(target), &method) != 0) {
        cli_print_error("the request's target is longer than %d bytes", CLI_INBOX_TARGET_MAX);
        return CLI_USAGE;
    }
    rc = cli_http_call(c, method, target, NULL, NULL, strcmp(method, "GET") != 0, &a);
    if (rc == CLI_DONE)
        rc = cli_print_answer(o, &a, human, NULL, 0, NULL);
    cli_answer_deinit(&a);
    return rc;
}
