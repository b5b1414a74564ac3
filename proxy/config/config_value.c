/*
 * config_value.c - the value parsers of the configuration loader
 * (config_value.h), and the public ones of config.h that read a single value:
 * config_parse_duration_ms, config_parse_size, config_method_bit,
 * config_workers. No YAML and no messages: the loader (config_set.c and the
 * passes) words every error; only config_workers asks the system.
 */
#include "config.h"
#include "config_value.h"
#include "headers.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/http.h>

#define CONFIG_REDIS_PORT 6379

/* A unit suffix and how many of the base unit (ms, bytes) it stands for. */
struct config_unit {
    const char *name;
    uint64_t factor;
};

const struct config_enum config_method_names[] = {
    { "GET", METHOD_GET }, { "HEAD", METHOD_HEAD }, { "POST", METHOD_POST },
    { "PUT", METHOD_PUT }, { "PATCH", METHOD_PATCH }, { "DELETE", METHOD_DELETE },
    { "OPTIONS", METHOD_OPTIONS }, { NULL, 0 },
};
static const struct config_unit config_duration_units[] = {
    { "ms", 1 }, { "s", 1000 }, { "m", 60 * 1000 }, { "h", 60 * 60 * 1000 },
    { "d", 24 * 60 * 60 * 1000 }, { NULL, 0 },
};
static const struct config_unit config_size_units[] = {
    { "B", 1 }, { "KiB", 1024 }, { "MiB", 1024 * 1024 }, { "GiB", 1024 * 1024 * 1024 },
    { NULL, 0 },
};

static const char config_upstream_expected[] =
    "expected http://host[:port][/path], https://host[:port][/path] or unix:/path/to.sock";
static const char config_redis_expected[] =
    "expected redis://[[user]:password@]host:port/db, rediss://... (TLS) or unix:/path/to.sock";

/* ---- enums and messages ------------------------------------------------ */

int config_enum_value(const struct config_enum *names, const char *text, int *out)
{
    for (; names->name != NULL; names++) {
        if (strcmp(text, names->name) == 0) {
            *out = names->value;
            return 0;
        }
    }
    return -1;
}

void config_list_append(char *buf, size_t len, const char *s)
{
    size_t used = strlen(buf);

    if (used < len)
        snprintf(buf + used, len - used, "%s%s", used ? ", " : "", s);
}

void config_enum_list(const struct config_enum *names, char *buf, size_t len)
{
    buf[0] = '\0';
    for (; names->name != NULL; names++)
        config_list_append(buf, len, names->name);
}

/* value in the largest of units (n entries, smallest first) that divides it; zero as "0<zero>". */
static void config_format_unit(uint64_t value, const struct config_unit *units, size_t n,
                               const char *zero, char *buf, size_t len)
{
    const struct config_unit *u = &units[n - 1];

    for (; value != 0 && u > units; u--) {
        if (value % u->factor == 0)
            break;
    }
    snprintf(buf, len, "%" PRIu64 "%s", value / u->factor, value == 0 ? zero : u->name);
}

void config_format_duration(uint64_t ms, char *buf, size_t len)
{
    config_format_unit(ms, config_duration_units,
                       sizeof(config_duration_units) / sizeof(config_duration_units[0]) - 1, "s",
                       buf, len);
}

void config_format_size(size_t bytes, char *buf, size_t len)
{
    config_format_unit(bytes, config_size_units,
                       sizeof(config_size_units) / sizeof(config_size_units[0]) - 1, "B", buf,
                       len);
}

/* ---- strings ----------------------------------------------------------- */

char *config_strndup(const char *s, size_t n)
{
    char *copy = malloc(n + 1);

    if (copy != NULL) {
        memcpy(copy, s, n);
        copy[n] = '\0';
    }
    return copy;
}

char *config_printf_dup(const char *fmt, ...)
{
    va_list ap;
    int n;
    char *out;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    out = malloc((size_t)n + 1);
    if (out == NULL)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(out, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return out;
}

bool config_same_string(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static bool config_is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool config_is_env_char(char c)
{
    return config_is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

bool config_is_token(const char *s)
{
    return header_name_valid(s);
}

bool config_is_json_pointer(const char *s)
{
    if (*s != '/')
        return false;
    for (; *s != '\0'; s++) {
        if (*s == '~' && s[1] != '0' && s[1] != '1')
            return false;
    }
    return true;
}

/* Appends n bytes of s to the malloc'd string *out of *len bytes; -1 when out of memory. */
static int config_append(char **out, size_t *len, const char *s, size_t n)
{
    char *grown = realloc(*out, *len + n + 1);

    if (grown == NULL)
        return -1;
    memcpy(grown + *len, s, n);
    *len += n;
    grown[*len] = '\0';
    *out = grown;
    return 0;
}

/* One ${NAME} at dollar: its value appended to *out; *end is past the '}'. */
static enum config_expand_status config_expand_one(const char *dollar, bool unset_empty,
                                                   char **out, size_t *len, const char **end,
                                                   const char **name, size_t *name_len)
{
    const char *start = dollar + 2, *stop, *value;
    char *var;

    for (stop = start; config_is_env_char(*stop); stop++)
        ;
    if (stop == start || *stop != '}' || config_is_digit(*start))
        return CONFIG_EXPAND_BAD_SYNTAX;
    var = config_strndup(start, (size_t)(stop - start));
    if (var == NULL)
        return CONFIG_EXPAND_NOMEM;
    value = getenv(var);
    free(var);
    if (value == NULL && !unset_empty) {
        *name = start;
        *name_len = (size_t)(stop - start);
        return CONFIG_EXPAND_UNSET;
    }
    if (value == NULL)
        value = "";
    *end = stop + 1;
    return config_append(out, len, value, strlen(value)) < 0 ? CONFIG_EXPAND_NOMEM
                                                             : CONFIG_EXPAND_OK;
}

enum config_expand_status config_expand_env(const char *text, bool unset_empty, char **out,
                                            const char **name, size_t *name_len)
{
    enum config_expand_status st = CONFIG_EXPAND_OK;
    size_t len = 0;

    *out = NULL;
    while (st == CONFIG_EXPAND_OK) {
        const char *dollar = strstr(text, "${");

        if (dollar == NULL) {
            if (config_append(out, &len, text, strlen(text)) == 0)
                return CONFIG_EXPAND_OK;
            st = CONFIG_EXPAND_NOMEM;
        } else if (config_append(out, &len, text, (size_t)(dollar - text)) < 0) {
            st = CONFIG_EXPAND_NOMEM;
        } else {
            st = config_expand_one(dollar, unset_empty, out, &len, &text, name, name_len);
        }
    }
    free(*out);
    *out = NULL;
    return st;
}

char *config_record_source(const struct route_policy *policy, const char *route_match,
                           bool prefix)
{
    char *source, *scoped;

    if (policy->key_from == KEY_FROM_JSON)
        source = config_printf_dup("json:%s", policy->key_json_pointer);
    else if ((source = config_printf_dup("header:%s", policy->key_header)) != NULL)
        for (char *c = source; *c != '\0'; c++)
            if (*c >= 'A' && *c <= 'Z')
                *c = (char)(*c - 'A' + 'a');
    if (source == NULL || !policy->webhook)
        return source;
    scoped = config_printf_dup("%s route:%s%s", source, route_match, prefix ? "*" : "");
    free(source);
    return scoped;
}

/* ---- numbers ----------------------------------------------------------- */

int config_parse_uint(const char *text, uint64_t max, uint64_t *out)
{
    uint64_t n = 0;

    if (*text == '\0')
        return -1;
    for (; *text != '\0'; text++) {
        unsigned d = (unsigned)(*text - '0');

        if (!config_is_digit(*text) || n > (max - d) / 10)
            return -1;
        n = n * 10 + d;
    }
    *out = n;
    return 0;
}

/* "<digits><unit>" with a unit from units; -1 on anything else or above max. */
static int config_parse_unit(const char *text, const struct config_unit *units,
                             uint64_t max, uint64_t *out)
{
    size_t digits;
    uint64_t n = 0;

    if (text == NULL)
        return -1;
    digits = strspn(text, "0123456789");
    if (digits == 0)
        return -1;
    for (size_t i = 0; i < digits; i++) {
        unsigned d = (unsigned)(text[i] - '0');

        if (n > (UINT64_MAX - d) / 10)
            return -1;
        n = n * 10 + d;
    }
    for (; units->name != NULL; units++) {
        if (strcmp(text + digits, units->name) != 0)
            continue;
        if (n > max / units->factor)
            return -1;
        *out = n * units->factor;
        return 0;
    }
    return -1;
}

int config_parse_duration_ms(const char *text, uint64_t *out_ms)
{
    return config_parse_unit(text, config_duration_units, CONFIG_MAX_DURATION_MS, out_ms);
}

int config_parse_size(const char *text, size_t *out_bytes)
{
    uint64_t bytes;

    if (config_parse_unit(text, config_size_units, SIZE_MAX, &bytes) < 0)
        return -1;
    *out_bytes = (size_t)bytes;
    return 0;
}

unsigned config_method_bit(const char *name)
{
    int bit;

    return config_enum_value(config_method_names, name, &bit) == 0 ? (unsigned)bit : 0;
}

unsigned config_workers(const struct config *cfg)
{
    cpu_set_t cpus;
    int n;

    if (cfg->workers > 0)
        return cfg->workers;
    if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0)
        return 1;
    n = CPU_COUNT(&cpus);
    return n < 1 ? 1 : n > CONFIG_MAX_WORKERS ? CONFIG_MAX_WORKERS : (unsigned)n;
}

size_t config_answer_reservation(const struct config *cfg)
{
    return cfg->max_stored_response < CONFIG_ANSWER_RESERVATION_MAX
               ? cfg->max_stored_response
               : CONFIG_ANSWER_RESERVATION_MAX;
}

/* ---- addresses and URLs ------------------------------------------------ */

static bool config_is_wildcard(const char *host)
{
    return strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0;
}

bool config_endpoints_clash(const struct endpoint *a, const struct endpoint *b)
{
    return a->host != NULL && b->host != NULL && a->port == b->port &&
           (strcmp(a->host, b->host) == 0 || config_is_wildcard(a->host) ||
            config_is_wildcard(b->host));
}

bool config_endpoint_is_loopback(const struct endpoint *ep)
{
    struct in_addr v4;
    struct in6_addr v6;

    if (ep->host == NULL)
        return false;
    if (inet_pton(AF_INET, ep->host, &v4) == 1)
        return (ntohl(v4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, ep->host, &v6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&v6) ||
               (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
    return false; /* a name: what it resolves to is the resolver's, not the file's */
}

/* Strips the brackets of an IPv6 literal ("[::1]" -> "::1"); malloc'd. */
static char *config_host_dup(const char *host)
{
    size_t len = strlen(host);

    if (len >= 2 && host[0] == '[' && host[len - 1] == ']')
        return config_strndup(host + 1, len - 2);
    return strdup(host);
}

const char *config_endpoint_split(const char *text, char **host, uint16_t *port)
{
    char *url = config_printf_dup("http://%s", text);
    struct evhttp_uri *uri = url ? evhttp_uri_parse(url) : NULL;
    const char *why = NULL;
    const char *h;
    int p;

    if (url == NULL)
        return "out of memory";
    h = uri ? evhttp_uri_get_host(uri) : NULL;
    p = uri ? evhttp_uri_get_port(uri) : -1;
    if (h == NULL || h[0] == '\0' || p < 1 || p > 65535 ||
        evhttp_uri_get_userinfo(uri) != NULL || evhttp_uri_get_path(uri)[0] != '\0' ||
        evhttp_uri_get_query(uri) != NULL || evhttp_uri_get_fragment(uri) != NULL)
        why = "expected host:port with a port from 1 to 65535";
    else if ((*host = config_host_dup(h)) == NULL)
        why = "out of memory";
    else
        *port = (uint16_t)p;
    if (uri != NULL)
        evhttp_uri_free(uri);
    free(url);
    return why;
}

/* config_upstream_parse once libevent has split the URL; may leave partial results. */
static const char *config_upstream_split(const struct evhttp_uri *uri, char **base,
                                         char **unix_path)
{
    const char *scheme = evhttp_uri_get_scheme(uri);
    const char *host = evhttp_uri_get_host(uri);
    const char *path = evhttp_uri_get_path(uri);
    int port = evhttp_uri_get_port(uri);
    const char *expected = config_upstream_expected;

    if (scheme == NULL || evhttp_uri_get_query(uri) != NULL || evhttp_uri_get_fragment(uri) != NULL)
        return expected;
    if (evhttp_uri_get_userinfo(uri) != NULL)
        return "credentials in the upstream url are not supported";
    if (strcasecmp(scheme, "unix") == 0) {
        if ((host != NULL && host[0] != '\0') || port != -1 || path[0] != '/' || path[1] == '\0')
            return expected;
        *unix_path = strdup(path);
        *base = strdup("http://localhost");
    } else if (strcasecmp(scheme, "http") == 0 || strcasecmp(scheme, "https") == 0) {
        bool tls = strcasecmp(scheme, "https") == 0;
        size_t path_len = strlen(path);

        if (host == NULL || host[0] == '\0' || port == 0)
            return expected;
        if (port == -1)
            port = tls ? 443 : 80;
        while (path_len > 0 && path[path_len - 1] == '/')
            path_len--;
        *base = config_printf_dup("%s://%s:%d%.*s", tls ? "https" : "http", host, port,
                                  (int)path_len, path);
    } else {
        return expected;
    }
    if (*base == NULL || (strcasecmp(scheme, "unix") == 0 && *unix_path == NULL))
        return "out of memory";
    return NULL;
}

const char *config_upstream_parse(const char *url, char **base, char **unix_path)
{
    struct evhttp_uri *uri = evhttp_uri_parse(url);
    const char *why;

    *base = NULL;
    *unix_path = NULL;
    if (uri == NULL)
        return config_upstream_expected;
    why = config_upstream_split(uri, base, unix_path);
    evhttp_uri_free(uri);
    if (why != NULL) {
        free(*base);
        free(*unix_path);
        *base = NULL;
        *unix_path = NULL;
    }
    return why;
}

/*
 * USER:PASSWORD, :PASSWORD or USER (still percent-encoded) into t->username
 * and t->password, decoded; an empty user name is none.
 */
static const char *config_redis_userinfo(const char *userinfo, struct config_redis_target *t)
{
    const char *colon = strchr(userinfo, ':');
    size_t user_len = colon != NULL ? (size_t)(colon - userinfo) : strlen(userinfo);

    if (user_len > 0) {
        char *raw = strndup(userinfo, user_len);

        t->username = raw != NULL ? evhttp_uridecode(raw, 0, NULL) : NULL;
        free(raw);
        if (t->username == NULL)
            return "out of memory";
    }
    if (colon != NULL) {
        t->password = evhttp_uridecode(colon + 1, 0, NULL);
        if (t->password == NULL)
            return "out of memory";
    }
    return NULL;
}

/* config_redis_parse once libevent has split the URL; may leave partial results in *t. */
static const char *config_redis_split(const struct evhttp_uri *uri, struct config_redis_target *t)
{
    const char *scheme = evhttp_uri_get_scheme(uri);
    const char *host = evhttp_uri_get_host(uri);
    const char *userinfo = evhttp_uri_get_userinfo(uri);
    const char *path = evhttp_uri_get_path(uri);
    int port = evhttp_uri_get_port(uri);
    const char *expected = config_redis_expected;
    uint64_t db = 0;

    if (scheme == NULL || evhttp_uri_get_query(uri) != NULL || evhttp_uri_get_fragment(uri) != NULL)
        return expected;
    if (strcasecmp(scheme, "unix") == 0) {
        if ((host != NULL && host[0] != '\0') || userinfo != NULL || port != -1 ||
            path[0] != '/' || path[1] == '\0')
            return expected;
        t->unix_path = strdup(path);
        return t->unix_path ? NULL : "out of memory";
    }
    t->tls = strcasecmp(scheme, "rediss") == 0;
    if ((!t->tls && strcasecmp(scheme, "redis") != 0) || host == NULL || host[0] == '\0' ||
        port == 0)
        return expected;
    if (path[0] == '/' && path[1] != '\0' && config_parse_uint(path + 1, INT_MAX, &db) < 0)
        return "the database after the '/' must be a number";
    t->db = (int)db;
    t->port = port == -1 ? CONFIG_REDIS_PORT : (uint16_t)port;
    t->host = config_host_dup(host);
    if (t->host == NULL)
        return "out of memory";
    return userinfo != NULL ? config_redis_userinfo(userinfo, t) : NULL;
}

const char *config_redis_parse(const char *url, struct config_redis_target *t)
{
    struct evhttp_uri *uri = evhttp_uri_parse(url);
    const char *why;

    memset(t, 0, sizeof(*t));
    if (uri == NULL)
        return config_redis_expected;
    why = config_redis_split(uri, t);
    evhttp_uri_free(uri);
    if (why != NULL) {
        free(t->host);
        free(t->unix_path);
        free(t->username);
        free(t->password);
        memset(t, 0, sizeof(*t));
    }
    return why;
}

size_t config_stream_window(const struct config *cfg)
{
    size_t quarter = cfg->max_buffered / 4;

    return cfg->stream_window < quarter ? cfg->stream_window : quarter > 0 ? quarter : 1;
}
