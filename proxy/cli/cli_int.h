/*
 * cli_int.h - what the files of the operator CLI (`idempotency-proxy admin`)
 * share and nothing outside them includes. Calls run one way: cli.c (the
 * entry) calls cli_args.c, cli_http.c, cli_records.c and cli_inbox.c;
 * cli_records.c and cli_inbox.c call cli_http.c; every one of them calls
 * cli_print.c, which calls no other CLI file.
 *
 *   cli.c          the subcommand: options, the configuration, the verb
 *   cli_args.c     the command line into struct cli_opts; the usage text
 *   cli_http.c     the admin listener's address and token; one HTTP exchange
 *                  with it (libcurl's easy API)
 *   cli_records.c  list, show, lookup, resolve, purge, extend, bulk
 *   cli_inbox.c    inbox list, dead, pause, resume, redeliver, delete
 *   cli_print.c    the answers: --json as sent, tables and `name: value`
 *                  lines, the one line on stderr of a refusal
 *
 * The contract is docs/operations.md#the-operator-cli (CONTRACT section 15).
 */
#ifndef IDEM_CLI_INT_H
#define IDEM_CLI_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/queue.h>

#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "bearer.h"

struct config;

/* The exit statuses, as docs/operations.md#the-operator-cli documents them. */
enum cli_exit {
    CLI_DONE = 0,           /* the proxy did it (2xx) */
    CLI_REFUSED = 1,        /* the proxy refused it, or there is no such record (4xx, 5xx);
                             * or a walk of list or bulk that would not end */
    CLI_USAGE = 2,          /* the command cannot be run as given: options, FILE, token */
    CLI_UNREACHABLE = 3,    /* the admin listener could not be reached (nothing was sent), or
                             * a read got no answer, or not one the listener gives */
    CLI_UNKNOWN = 4,        /* a change was sent and the proxy could not tell whether it was
                             * made: a 502, 503 or 504, no whole answer, or not one it gives */
};

enum cli_verb {
    CLI_LIST, CLI_SHOW, CLI_LOOKUP, CLI_RESOLVE, CLI_PURGE, CLI_EXTEND, CLI_BULK, CLI_INBOX,
};

enum cli_inbox_verb {
    CLI_INBOX_LIST, CLI_INBOX_DEAD, CLI_INBOX_PAUSE, CLI_INBOX_RESUME, CLI_INBOX_REDELIVER,
    CLI_INBOX_DELETE,
};

/* A count option not given. */
#define CLI_UNSET (-1LL)

/*
 * The command line, parsed. Strings are borrowed from argv; headers are
 * copies (cli_args_deinit frees them).
 */
struct cli_opts {
    const char *file;           /* -c: the proxy's configuration */
    const char *admin_url;      /* --admin: http://host:port instead of admin_listen */
    const char *token_file;     /* --token-file: instead of admin.token_file */
    bool json;                  /* --json: the endpoint's JSON document on stdout */
    long long timeout_s;        /* --timeout: seconds one exchange may take */
    long long max_calls;        /* --max-calls: the exchanges a walk of list or bulk takes */
    enum cli_verb verb;
    enum cli_inbox_verb inbox_verb;
    const char *id;             /* a record id, or a dead letter's id */
    const char *inbox_route;    /* inbox: ROUTE, a path as written or its `admin` string */
    const char *state, *route, *path, *key, *method, *reason, *if_match, *confirm;
    const char *body, *body_file, *action, *match_reason, *before;
    const char *only_from;          /* bulk --only-from F ("-": stdin): the reviewed ids */
    long long limit, status, seconds, older_than;   /* CLI_UNSET when not given */
    bool dry_run, apply, all;
    struct evkeyvalq headers;   /* --header 'Name: value', in order */
};

/* The admin listener as one client sees it. */
struct cli_client {
    char base[300];             /* http://host:port, no trailing '/' */
    char token[BEARER_TOKEN_MAX_LEN + 1]; /* "" when the listener takes none; wiped at close */
    long long timeout_ms;       /* one exchange, connect included */
    void *easy;                 /* the libcurl handle, kept for keep-alive */
    bool curl_ready;            /* curl_global_init done: cli_http_close undoes it */
};

/* One answer of the admin listener, all owned (cli_answer_deinit). */
struct cli_answer {
    long status;                /* HTTP status */
    bool change;                /* the request may change something: its outcome matters */
    char *body;                 /* the bytes sent, NUL-terminated; len bytes */
    size_t len;
    json_t *doc;                /* the body parsed when the answer is JSON, else NULL */
    char etag[256];             /* the ETag field, "" for none */
};

/* ---- cli_args.c ---- */

/*
 * Parse argv (argv[0] is "admin") into o, which cli_args_deinit frees.
 * Returns CLI_DONE with o set; CLI_USAGE after a line on stderr saying what
 * is wrong; or -1 after printing the help on stdout (--help: exit 0).
 */
int cli_args_parse(struct cli_opts *o, int argc, char **argv);

void cli_args_deinit(struct cli_opts *o);

/* The help: the verbs, their options and the exit statuses, on out. */
void cli_args_usage(FILE *out);

/* ---- cli_http.c ---- */

/*
 * Make c from cfg: the address of admin_listen (0.0.0.0 and [::] are
 * reached on 127.0.0.1 and [::1]) or admin_url, and the token of
 * admin.token_file or token_file (read now, kept in c, never printed; none
 * when the configuration has no token file and none is given). Returns
 * CLI_DONE, or CLI_USAGE with the reason in err (errlen bytes): no admin
 * listener, a URL that is not http://, a token file that cannot be read or
 * holds no token. c needs cli_http_close either way.
 */
int cli_http_open(struct cli_client *c, const struct config *cfg, const char *admin_url,
                  const char *token_file, long long timeout_s, char *err, size_t errlen);

/* Wipe the token, close the connection. */
void cli_http_close(struct cli_client *c);

/*
 * One exchange: method (static) on c->base + target (path and query,
 * percent-encoded: never printed, a lookup's holds a key), with body as its
 * JSON (borrowed; NULL: none) and If-Match: if_match (NULL: none); change
 * says whether the request may change anything (kept in a->change). Returns
 * CLI_DONE with *a filled, whatever its status. Else a line on stderr and:
 * CLI_UNREACHABLE when nothing was sent (no connection), or, for a read, no
 * whole answer or a 2xx answer that is not JSON; CLI_UNKNOWN for the same
 * after a change may have been sent (the line says it may or may not have
 * been made).
 */
int cli_http_call(struct cli_client *c, const char *method, const char *target,
                  const json_t *body, const char *if_match, bool change, struct cli_answer *a);

void cli_answer_deinit(struct cli_answer *a);

/*
 * value percent-encoded for a path segment or a query value (every byte but
 * RFC 3986 unreserved), appended to buf of size bytes. Returns 0, or -1 when
 * it does not fit or memory runs out.
 */
int cli_http_escape(char *buf, size_t size, const char *value);

/* ---- cli_records.c ---- */

/*
 * Run a record verb (list, show, lookup, resolve, purge, extend, bulk) of o
 * against c: its exchanges, its output. Returns the exit status.
 */
int cli_records_run(const struct cli_opts *o, struct cli_client *c);

/* ---- cli_inbox.c ---- */

/* Run an inbox verb of o against c (docs/webhooks.md#the-inboxs-admin-endpoints). */
int cli_inbox_run(const struct cli_opts *o, struct cli_client *c);

/* ---- cli_print.c ---- */

/* How a verb prints its answer's document without --json (borrowed). */
typedef void (*cli_human_fn)(const json_t *doc, const struct cli_answer *a, void *arg);

/*
 * The end of a verb: a 2xx answer printed (with --json its document,
 * cli_print_json; else by human, or as fields when human is NULL) and
 * CLI_DONE; any other status as cli_print_refusal's line plus, with
 * --json, the document on stdout, and cli_print_refusal's status. hint
 * (NULL: none) is added to the line for the status it names (hint_status).
 */
int cli_print_answer(const struct cli_opts *o, const struct cli_answer *a, cli_human_fn human,
                     void *arg, long hint_status, const char *hint);

/*
 * The one line on stderr of a refusal: the status, then the problem's
 * title and detail (RFC 9457), or the admin listener's {"error"}, or the
 * first line of a text answer, its control characters escaped
 * (cli_print_clean); hint added for hint_status. Returns CLI_UNKNOWN for a
 * 502, 503 or 504 to a change (the line says to look before sending it
 * again), else CLI_REFUSED.
 */
int cli_print_refusal(const struct cli_answer *a, long hint_status, const char *hint);

/*
 * doc as one line of JSON on stdout (compact, members in order); a DEL or
 * C1 control character in a string, which jansson writes as it is, as a
 * \u escape, as jansson writes the C0 ones. -1 out of memory, else 0.
 */
int cli_print_json(const json_t *doc);

/*
 * text (len bytes, NULs included) into out (size bytes, NUL-terminated) for
 * a terminal: every C0 control character, DEL, C1 control character (as
 * UTF-8, or a lone byte) and byte that is not part of well-formed UTF-8
 * (RFC 3629) as \xHH (a C1 one by its code point: U+009B is \x9b); the
 * rest as it is. Cut short at a whole character or escape when out is full.
 * Returns the bytes written (without the NUL).
 */
size_t cli_print_clean(char *out, size_t size, const char *text, size_t len);

/* doc's members as `name: value` lines, times and TTLs also in words. */
void cli_print_fields(const json_t *doc);

/* One line of a table: the cells left-aligned in columns of the widths given. */
void cli_print_row(const int *widths, size_t n, const char *const *cells);

/* ms as a short span: 950ms, 42s, 3m07s, 5h02m, 2d04h. Into buf (size bytes). */
void cli_print_span(long long ms, char *buf, size_t size);

/*
 * A JSON member as text for a cell: a string as is, null "-", else compact
 * JSON; its control characters escaped (cli_print_clean).
 */
void cli_print_cell(const json_t *value, char *buf, size_t size);

/* A usage or local failure: "idempotency-proxy: admin: " and the text, on stderr. */
void cli_print_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
