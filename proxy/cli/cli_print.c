/*
 * cli_print.c - what `idempotency-proxy admin` prints: with --json the
 * endpoint's JSON document as it came (one document on stdout), else a
 * table or `name: value` lines; a refusal as one line on stderr with the
 * problem's title and detail (or the admin listener's error). Never a
 * token or a key: the answers hold neither, and nothing else is printed.
 */
#include "cli_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void cli_print_error(const char *fmt, ...)
{
    va_list ap;

    fputs("idempotency-proxy: admin: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void cli_print_span(long long ms, char *buf, size_t size)
{
    long long s = ms / 1000;

    if (ms < 0)
        snprintf(buf, size, "-");
    else if (ms < 1000)
        snprintf(buf, size, "%lldms", ms);
    else if (s < 60)
        snprintf(buf, size, "%llds", s);
    else if (s < 3600)
        snprintf(buf, size, "%lldm%02llds", s / 60, s % 60);
    else if (s < 86400)
        snprintf(buf, size, "%lldh%02lldm", s / 3600, s % 3600 / 60);
    else
        snprintf(buf, size, "%lldd%02lldh", s / 86400, s % 86400 / 3600);
}

void cli_print_cell(const json_t *value, char *buf, size_t size)
{
    char *text;

    if (value == NULL || json_is_null(value)) {
        snprintf(buf, size, "-");
    } else if (json_is_string(value)) {
        snprintf(buf, size, "%s", json_string_value(value));
    } else {
        text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
        snprintf(buf, size, "%s", text != NULL ? text : "?");
        free(text);
    }
}

/* A time in ms since the epoch as UTC, "2026-01-31 09:30:00 UTC"; "" for 0 or less. */
static void cli_print_time(long long ms, char *buf, size_t size)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    buf[0] = '\0';
    if (ms > 0 && gmtime_r(&t, &tm) != NULL)
        strftime(buf, size, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

/*
 * A member's value with words beside the number: a *_ms time since the
 * epoch (after 2001) as UTC, a *ttl_ms or *age_ms as a span.
 */
static void cli_print_value(const char *name, const json_t *value, char *buf, size_t size)
{
    size_t len = strlen(name), used;
    long long ms;

    cli_print_cell(value, buf, size);
    if (!json_is_integer(value) || len < 3 || strcmp(name + len - 3, "_ms") != 0)
        return;
    ms = (long long)json_integer_value(value);
    used = strlen(buf);
    if (len >= 6 && (strcmp(name + len - 6, "ttl_ms") == 0 || strcmp(name + len - 6, "age_ms") == 0)) {
        char span[32];

        cli_print_span(ms, span, sizeof(span));
        snprintf(buf + used, size - used, " (%s)", span);
    } else if (ms > 1000000000000LL) {
        char when[64];

        cli_print_time(ms, when, sizeof(when));
        snprintf(buf + used, size - used, " (%s)", when);
    }
}

void cli_print_fields(const json_t *doc)
{
    const char *name;
    json_t *value;
    char text[4096];

    json_object_foreach((json_t *)doc, name, value) {
        cli_print_value(name, value, text, sizeof(text));
        printf("%s: %s\n", name, text);
    }
}

void cli_print_row(const int *widths, size_t n, const char *const *cells)
{
    for (size_t i = 0; i < n; i++) {
        if (i + 1 == n)
            printf("%s\n", cells[i]);
        else
            printf("%-*s  ", widths[i], cells[i]);
    }
}

void cli_print_refusal(const struct cli_answer *a, long hint_status, const char *hint)
{
    const json_t *title = json_object_get(a->doc, "title");
    const json_t *detail = json_object_get(a->doc, "detail");
    const json_t *error = json_object_get(a->doc, "error");
    const char *tail = hint != NULL && a->status == hint_status ? hint : NULL;
    char line[512];

    if (json_is_string(title) || json_is_string(detail)) {
        snprintf(line, sizeof(line), "%s%s%s", json_is_string(title) ? json_string_value(title)
                                                                       : "",
                 json_is_string(title) && json_is_string(detail) ? ": " : "",
                 json_is_string(detail) ? json_string_value(detail) : "");
    } else if (json_is_string(error)) {
        snprintf(line, sizeof(line), "%s", json_string_value(error));
    } else {
        snprintf(line, sizeof(line), "%.*s", (int)strcspn(a->body != NULL ? a->body : "",
                                                            "\r\n"),
                 a->body != NULL ? a->body : "");
    }
    cli_print_error("refused (%ld): %s%s%s", a->status, line[0] != '\0' ? line : "no reason given",
                    tail != NULL ? "; " : "", tail != NULL ? tail : "");
}

int cli_print_answer(const struct cli_opts *o, const struct cli_answer *a, cli_human_fn human,
                     void *arg, long hint_status, const char *hint)
{
    bool ok = a->status >= 200 && a->status < 300;
    char *text;

    if (o->json && a->doc != NULL) {
        text = json_dumps(a->doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (text == NULL) {
            cli_print_error("out of memory");
            return CLI_REFUSED;
        }
        printf("%s\n", text);
        free(text);
    } else if (ok) {
        human(a->doc, a, arg);
    }
    if (!ok)
        cli_print_refusal(a, hint_status, hint);
    fflush(stdout);
    return ok ? CLI_DONE : CLI_REFUSED;
}
