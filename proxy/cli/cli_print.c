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

/*
 * The length of the well-formed UTF-8 sequence at p (left bytes there), 1
 * for ASCII; 0 when it is not one (RFC 3629 section 4: no overlong form,
 * no surrogate, nothing past U+10FFFF).
 */
static size_t cli_print_utf8_len(const unsigned char *p, size_t left)
{
    unsigned char lo = 0x80, hi = 0xbf;
    size_t n;

    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        n = 2;
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        n = 3;
        lo = p[0] == 0xe0 ? 0xa0 : 0x80;
        hi = p[0] == 0xed ? 0x9f : 0xbf;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        n = 4;
        lo = p[0] == 0xf0 ? 0x90 : 0x80;
        hi = p[0] == 0xf4 ? 0x8f : 0xbf;
    } else {
        return 0;
    }
    if (left < n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return n;
}

size_t cli_print_clean(char *out, size_t size, const char *text, size_t len)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t used = 0, i = 0, n;
    char escape[5];

    if (size == 0)
        return 0;
    while (i < len) {
        n = cli_print_utf8_len(p + i, len - i);
        if (n == 1 && (p[i] < 0x20 || p[i] == 0x7f))
            snprintf(escape, sizeof(escape), "\\x%02x", p[i]);
        else if (n == 0)
            snprintf(escape, sizeof(escape), "\\x%02x", p[i]);
        else if (n == 2 && p[i] == 0xc2 && p[i + 1] <= 0x9f) /* U+0080..U+009F */
            snprintf(escape, sizeof(escape), "\\x%02x", p[i + 1]);
        else
            escape[0] = '\0';
        if (escape[0] != '\0') {
            if (used + 4 >= size)
                break;
            memcpy(out + used, escape, 4);
            used += 4;
            i += n == 0 ? 1 : n;
        } else {
            if (used + n >= size)
                break;
            memcpy(out + used, p + i, n);
            used += n;
            i += n;
        }
    }
    out[used] = '\0';
    return used;
}

void cli_print_cell(const json_t *value, char *buf, size_t size)
{
    char *text;

    if (value == NULL || json_is_null(value)) {
        snprintf(buf, size, "-");
    } else if (json_is_string(value)) {
        cli_print_clean(buf, size, json_string_value(value), json_string_length(value));
    } else {
        /* a string inside may hold DEL or C1 characters: jansson writes them as they are */
        text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
        cli_print_clean(buf, size, text != NULL ? text : "?", text != NULL ? strlen(text) : 1);
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
    char text[4096], clean[1024];

    json_object_foreach((json_t *)doc, name, value) {
        cli_print_value(name, value, text, sizeof(text));
        cli_print_clean(clean, sizeof(clean), name, strlen(name));
        printf("%s: %s\n", clean, text);
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

/* Whether a is a 502, 503 or 504 to a change: the proxy (or a gateway) could not tell. */
static bool cli_print_unsure(const struct cli_answer *a)
{
    return a->change && (a->status == 502 || a->status == 503 || a->status == 504);
}

int cli_print_refusal(const struct cli_answer *a, long hint_status, const char *hint)
{
    const json_t *title = json_object_get(a->doc, "title");
    const json_t *detail = json_object_get(a->doc, "detail");
    const json_t *error = json_object_get(a->doc, "error");
    const char *tail = hint != NULL && a->status == hint_status ? hint : NULL;
    char line[1024];
    size_t used = 0;

    line[0] = '\0';
    if (json_is_string(title) || json_is_string(detail)) {
        if (json_is_string(title))
            used = cli_print_clean(line, sizeof(line), json_string_value(title),
                                   json_string_length(title));
        if (json_is_string(title) && json_is_string(detail) && used + 2 < sizeof(line)) {
            memcpy(line + used, ": ", 3);
            used += 2;
        }
        if (json_is_string(detail))
            cli_print_clean(line + used, sizeof(line) - used, json_string_value(detail),
                            json_string_length(detail));
    } else if (json_is_string(error)) {
        cli_print_clean(line, sizeof(line), json_string_value(error), json_string_length(error));
    } else if (a->body != NULL) {
        cli_print_clean(line, sizeof(line), a->body, strcspn(a->body, "\r\n"));
    }
    cli_print_error("refused (%ld): %s%s%s%s", a->status, line[0] != '\0' ? line
                                                                         : "no reason given",
                    tail != NULL ? "; " : "", tail != NULL ? tail : "",
                    cli_print_unsure(a) ? " (exit 4: whatever a 5xx says, look before sending "
                                          "the change again)" : "");
    return cli_print_unsure(a) ? CLI_UNKNOWN : CLI_REFUSED;
}

int cli_print_json(const json_t *doc)
{
    char *text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    const unsigned char *p;

    if (text == NULL)
        return -1;
    /*
     * jansson's output is UTF-8 whose only bytes past ASCII are in strings: a
     * 0x7f is DEL, and 0xc2 (a lead byte) then 0x80..0x9f is a C1 character.
     */
    for (p = (const unsigned char *)text; *p != '\0'; p++) {
        if (*p == 0x7f) {
            fputs("\\u007F", stdout);
        } else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            printf("\\u00%02X", p[1]);
            p++;
        } else {
            putchar(*p);
        }
    }
    putchar('\n');
    free(text);
    return 0;
}

int cli_print_answer(const struct cli_opts *o, const struct cli_answer *a, cli_human_fn human,
                     void *arg, long hint_status, const char *hint)
{
    bool ok = a->status >= 200 && a->status < 300;
    int rc = CLI_DONE;

    if (o->json && a->doc != NULL) {
        if (cli_print_json(a->doc) != 0) {
            cli_print_error("out of memory");
            return CLI_REFUSED;
        }
    } else if (ok && human != NULL) {
        human(a->doc, a, arg);
    } else if (ok) {
        cli_print_fields(a->doc);
    }
    if (!ok)
        rc = cli_print_refusal(a, hint_status, hint);
    fflush(stdout);
    return rc;
}
