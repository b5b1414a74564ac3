/*
 * config_value.h - the value parsers of the configuration loader: what one
 * YAML value's text means (durations, sizes, numbers, addresses, URLs,
 * header names, ${VAR} expansion). Private to the config module: only
 * config*.c include it. Pure: no YAML, no messages, no state (getenv is
 * the only outside input); each parser says "no" and the loader words the
 * error with the file, line and key.
 */
#ifndef IDEM_CONFIG_VALUE_H
#define IDEM_CONFIG_VALUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"

struct endpoint;

/* One allowed spelling of an enum-valued key and the value stored for it. */
struct config_enum {
    const char *name;
    int value;
};

/* The HTTP methods `methods:` may name (RFC 9110 9.1, upper case); ends with { NULL }. */
extern const struct config_enum config_method_names[];

/*
 * The value of text among names (a { NULL }-terminated table), compared
 * case-sensitively. Returns 0 and sets *out, or -1 (*out untouched).
 */
int config_enum_value(const struct config_enum *names, const char *text, int *out);

/*
 * Writes names' spellings into buf (len bytes, truncated to fit, always
 * NUL-terminated when len > 0) as "a, b, c", for "expected one of ..." messages.
 */
void config_enum_list(const struct config_enum *names, char *buf, size_t len);

/*
 * Appends s to buf, a NUL-terminated list in a buffer of len bytes, with ", "
 * before it unless buf is empty; truncates to fit. For messages.
 */
void config_list_append(char *buf, size_t len, const char *s);

/*
 * Writes ms (milliseconds) into buf (len bytes, truncated to fit) with the
 * largest unit that divides it: 90000 -> "90s", 86400000 -> "1d", 0 -> "0s".
 */
void config_format_duration(uint64_t ms, char *buf, size_t len);

/*
 * Writes bytes into buf (len bytes, truncated to fit) with the largest unit
 * that divides it: 67108864 -> "64MiB", 1536 -> "1536B", 0 -> "0B".
 */
void config_format_size(size_t bytes, char *buf, size_t len);

/*
 * Decimal digits only, no sign, no spaces, at least one digit, value <= max.
 * Returns 0 and sets *out, or -1 (*out untouched).
 */
int config_parse_uint(const char *text, uint64_t max, uint64_t *out);

/* Whether s is an HTTP header name: a non-empty RFC 9110 section 5.6.2 token. */
bool config_is_token(const char *s);

/* Whether s is an RFC 6901 JSON Pointer: starts with '/', '~' only as ~0 or ~1. */
bool config_is_json_pointer(const char *s);

/* Whether two strings, either possibly NULL, are equal (NULL equals only NULL). */
bool config_same_string(const char *a, const char *b);

/*
 * What record ids hash as policy's key source (record_id.h):
 * "header:" and key_header lowercased (header names are case-insensitive,
 * RFC 9110 5.1), or for a route with key_from json: "json:" and the
 * pointer as written. A webhook route's source also names the route (" route:"
 * and route_match, the normalised pattern, with "*" when prefix): a provider
 * sends one event id to each endpoint it delivers to, and each endpoint's
 * delivery must reach its receiver. Malloc'd (caller frees); NULL when out
 * of memory.
 */
char *config_record_source(const struct route_policy *policy, const char *route_match,
                           bool prefix);

/*
 * Whether two listeners (host NULL: disabled, never clashes) would take one
 * port: the same port with the same host, or either host a wildcard
 * (0.0.0.0, ::).
 */
bool config_endpoints_clash(const struct endpoint *a, const struct endpoint *b);

/*
 * Whether ep's host is a literal loopback address: IPv4 127.0.0.0/8, IPv6
 * ::1 or ::ffff:127.x.y.z. A name ("localhost" too) is not: what it
 * resolves to depends on the machine's resolver, not on the file, and the
 * admin listener answers without a token only where the file alone proves
 * that no other machine can reach it. False for a disabled endpoint.
 */
bool config_endpoint_is_loopback(const struct endpoint *ep);

/* Copy of the first n bytes of s plus a NUL; malloc'd (caller frees), NULL when out of memory. */
char *config_strndup(const char *s, size_t n);

/* printf into a new string; malloc'd (caller frees), NULL when out of memory. */
char *config_printf_dup(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* What config_expand_env found. */
enum config_expand_status {
    CONFIG_EXPAND_OK,
    CONFIG_EXPAND_BAD_SYNTAX,   /* "${" not followed by NAME and '}',
                                   NAME being [A-Za-z_][A-Za-z0-9_]* */
    CONFIG_EXPAND_UNSET,        /* ${NAME} names an unset variable */
    CONFIG_EXPAND_NOMEM,
};

/*
 * text with each ${NAME} replaced by getenv(NAME), left to right; the first
 * problem found is returned. An unset NAME reads as "" when unset_empty,
 * else it is CONFIG_EXPAND_UNSET with *name and *name_len (bytes) pointing at
 * NAME inside text (borrowed). On CONFIG_EXPAND_OK *out is a new malloc'd
 * string (caller frees); on any other status *out is NULL.
 */
enum config_expand_status config_expand_env(const char *text, bool unset_empty, char **out,
                                            const char **name, size_t *name_len);

/*
 * Splits "host:port" (IPv6 in brackets) the way an http:// URL's authority
 * is split. Returns NULL and sets *host (malloc'd, brackets stripped; caller
 * frees) and *port (1..65535); or a static string saying why text is not
 * valid ("out of memory" included), with *host and *port untouched.
 */
const char *config_endpoint_split(const char *text, char **host, uint16_t *port);

/*
 * Parses upstream.url: http://host[:port][/path], https://..., or
 * unix:/path/to.sock (unix:///path too). Returns NULL and sets *base
 * (scheme://host:port[/path] without a trailing '/', or http://localhost for
 * a unix socket) and *unix_path (the socket, or NULL), both malloc'd for the
 * caller; or a static string saying why the URL is not valid, with both left
 * NULL. The reason never repeats the URL (it may carry credentials).
 */
const char *config_upstream_parse(const char *url, char **base, char **unix_path);

/* What redis.url holds once split; the strings are malloc'd and owned by the caller. */
struct config_redis_target {
    char *host;         /* NULL for a unix socket; IPv6 without brackets */
    uint16_t port;      /* 6379 when the URL has none; 0 for a unix socket */
    char *unix_path;    /* NULL for TCP */
    int db;
    bool tls;           /* rediss:// */
    char *username;     /* from redis://USER:PASSWORD@, percent-decoded; NULL when absent or "" */
    char *password;     /* from redis://[USER]:PASSWORD@, percent-decoded; NULL when absent */
};

/*
 * Parses redis.url: redis://[[user]:password@]host[:port][/db], the same
 * with rediss:// (TLS), or unix:/path. A userinfo without ':' is a user
 * name (redis://USER@host), as in redis-cli's URLs. Returns NULL and fills
 * *t (zeroed first); or a static string saying why the URL is not valid,
 * with *t zeroed again (nothing to free). The reason never repeats the URL
 * (it may hold the password).
 */
const char *config_redis_parse(const char *url, struct config_redis_target *t);

#endif
