/*
 * main.c - the command line (-c FILE, -t, -V, -h, record-id, admin, problems), signals,
 * the worker threads.
 */
#include <getopt.h>
#include <pthread.h>
#include <sys/resource.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "cli.h"
#include "clock.h"
#include "config.h"
#include "fingerprint.h"
#include "record_id.h"
#include "log.h"
#include "meter.h"
#include "lookup.h"
#include "problem.h"
#include "keyring.h"
#include "seal.h"
#include "upstream.h"
#include "worker.h"

/* Room for the warnings of a config: shadowed routes, the keyring (one line each, truncated past this). */
#define MAIN_WARNINGS_MAX 8192

/* Longest a SIGTERM drain waits for in-flight exchanges beyond the upstream timeout. */
#define MAIN_DRAIN_SLACK_MS 5000

struct main_state {
    const char *file;
    struct worker_pool pool;
    bool stopping;
};

static void main_usage(FILE *out)
{
    fprintf(out,
            "usage: idempotency-proxy -c FILE       run with the YAML configuration FILE\n"
            "       idempotency-proxy -t -c FILE    check FILE and exit (0 ok, 1 error)\n"
            "       idempotency-proxy -V            print the version\n"
            "       idempotency-proxy -h            this help\n"
            "       idempotency-proxy record-id -c FILE --path PATH --key KEY [--method M]\n"
            "                         [--header 'Name: value' ...]\n"
            "                                       print the record id and Redis key FILE\n"
            "                                       gives that request (JSON)\n"
            "       idempotency-proxy admin -c FILE [--json] VERB ...\n"
            "                                       the operator CLI: list, show, lookup, resolve,\n"
            "                                       purge, extend, bulk, inbox (admin --help)\n"
            "       idempotency-proxy problems      print the problem types this binary answers\n"
            "                                       with, one JSON object a line\n");
}

/*
 * `problems`: every cause the proxy answers with (problem.h), one JSON
 * object a line on stdout, in the enum's order: type, code, title, status
 * (the default; key-reuse-mismatch may be answered 422 by mismatch_status),
 * stripe_type and stripe_should_retry (docs/client-contract.md#the-stripe-format).
 * What tests/integration/test_openapi.py compares docs/openapi.yaml with.
 * Exits 0, 1 (out of memory) or 2 (usage).
 */
static int main_problems(int argc, char **argv)
{
    char type[96], *text;

    (void)argv;
    if (argc != 1) {
        main_usage(stderr);
        return 2;
    }
    for (int i = 0; i < PROBLEM_COUNT; i++) {
        enum problem p = (enum problem)i;
        json_t *doc;

        snprintf(type, sizeof(type), PROBLEM_TYPE_PREFIX "%s", problem_slug(p));
        doc = json_pack("{s:s, s:s, s:s, s:i, s:s, s:b}", "type", type, "code", problem_slug(p),
                        "title", problem_title(p), "status", problem_status(p), "stripe_type",
                        problem_stripe_type(p), "stripe_should_retry", problem_retryable(p));
        text = doc != NULL ? json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(doc);
        if (text == NULL) {
            fprintf(stderr, "idempotency-proxy: out of memory\n");
            return 1;
        }
        printf("%s\n", text);
        free(text);
    }
    return 0;
}

/*
 * `record-id`: the record a request maps to under FILE (lookup.h), as one
 * JSON line on stdout; a note on stderr for each scope header not given.
 * Exits 0, 1 (the config does not load, or no record: the reason on
 * stderr) or 2 (usage).
 */
static int main_record_id(int argc, char **argv)
{
    static const struct option options[] = {
        { "path", required_argument, NULL, 'p' }, { "key", required_argument, NULL, 'k' },
        { "method", required_argument, NULL, 'm' }, { "header", required_argument, NULL, 'H' },
        { NULL, 0, NULL, 0 },
    };
    const char *file = NULL, *path = NULL, *key = NULL, *method = NULL, *why;
    struct evkeyvalq headers;
    struct lookup_result r;
    struct config *cfg = NULL;
    char err[1024], *text = NULL;
    json_t *doc = NULL;
    int opt, rc = 1;

    TAILQ_INIT(&headers);
    optind = 1;
    while ((opt = getopt_long(argc, argv, "c:", options, NULL)) != -1) {
        switch (opt) {
        case 'c': file = optarg; break;
        case 'p': path = optarg; break;
        case 'k': key = optarg; break;
        case 'm': method = optarg; break;
        case 'H':
            if (lookup_add_header(&headers, optarg, &why) != 0) {
                fprintf(stderr, "idempotency-proxy: --header '%s': %s\n", optarg, why);
                rc = 2;
                goto done;
            }
            break;
        default: rc = 2; goto done;
        }
    }
    if (file == NULL || path == NULL || key == NULL || optind != argc) {
        main_usage(stderr);
        rc = 2;
        goto done;
    }
    cfg = config_create(file, err, sizeof(err));
    if (cfg == NULL) {
        fprintf(stderr, "idempotency-proxy: %s\n", err);
        goto done;
    }
    if (lookup_record(cfg, method, path, &headers, key, &r, err, sizeof(err)) != 0) {
        fprintf(stderr, "idempotency-proxy: %s\n", err);
        goto done;
    }
    for (size_t i = 0; i < r.n_absent; i++)
        fprintf(stderr, "idempotency-proxy: note: the route scopes keys by %s, and no --header "
                "gave it: this is the record of a request without that header\n", r.absent[i]);
    doc = lookup_json(&r);
    text = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;
    if (text == NULL) {
        fprintf(stderr, "idempotency-proxy: out of memory\n");
        goto done;
    }
    printf("%s\n", text);
    rc = 0;
done:
    free(text);
    json_decref(doc);
    config_unref(cfg);
    evhttp_clear_headers(&headers);
    record_id_thread_end();
    return rc;
}

/* Every connection is a descriptor: take the hard limit, not the 1024 soft default. */
static void main_raise_fd_limit(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            log_msg(LOG_WARN, "cannot raise the open-file limit: %s", strerror(errno));
    }
}

/* libevent's own messages go to our log, with our levels. */
static void main_on_libevent_log(int severity, const char *msg)
{
    enum log_level level = severity >= EVENT_LOG_ERR    ? LOG_ERROR
                           : severity == EVENT_LOG_WARN ? LOG_WARN
                           : severity == EVENT_LOG_MSG  ? LOG_INFO
                                                        : LOG_DEBUG;

    log_msg(level, "libevent: %s", msg);
}

/*
 * What the config loads with but an operator should hear of: routes an
 * earlier route shadows (config_route_warnings), a keyring any user may
 * read or whose keys are not locked in memory (config_keyring_warnings). A
 * line each on stderr for -t (to_stderr), else a log warning each.
 */
static void main_warn_config(const struct config *cfg, const char *file, bool to_stderr)
{
    char *text = malloc(MAIN_WARNINGS_MAX), *line, *save = NULL;
    size_t used;

    if (text == NULL)
        return;
    config_route_warnings(cfg, file, text, MAIN_WARNINGS_MAX);
    used = strlen(text);
    config_keyring_warnings(cfg, text + used, MAIN_WARNINGS_MAX - used);
    if (!to_stderr) {
        log_lines(LOG_WARN, text);
    } else {
        for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
            fprintf(stderr, "idempotency-proxy: %s\n", line);
    }
    free(text);
}

static void main_on_stop_signal(evutil_socket_t sig, short what, void *arg)
{
    struct main_state *m = arg;
    unsigned in_flight, unsent, unreleased;

    (void)what;
    if (m->stopping)
        return;
    m->stopping = true;
    in_flight = worker_pool_in_flight(&m->pool, &unsent, &unreleased);
    log_msg(LOG_INFO, "%s: draining %u requests in flight, %u answers being written, %u claims "
            "to release", sig == SIGTERM ? "SIGTERM" : "SIGINT", in_flight, unsent, unreleased);
    worker_pool_drain(&m->pool, MAIN_DRAIN_SLACK_MS);
}

static void main_on_flush_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    log_flush();
}

static void main_on_reload_signal(evutil_socket_t sig, short what, void *arg)
{
    struct main_state *m = arg;
    char err[300];

    (void)sig;
    (void)what;
    if (m->stopping) {
        log_msg(LOG_WARN, "SIGHUP while draining: ignored");
        return;
    }
    log_msg(LOG_INFO, "SIGHUP: reloading %s", m->file);
    /* refused or not, a SIGHUP reopens the audit file: logrotate moved it away */
    if (worker_pool_reload(&m->pool, m->file) != 0 && log_audit_reopen(err, sizeof(err)) != 0)
        log_msg(LOG_ERROR, "log.audit: %s; the audit lines go to the file open before", err);
}

int main(int argc, char **argv)
{
    const char *file = NULL;
    bool test_only = false;
    struct config *cfg;
    struct main_state m;
    struct event_base *base;
    struct event *sigterm, *sigint, *sighup, *flush;
    struct timeval flush_interval = clock_ms_to_timeval(LOG_FLUSH_INTERVAL_MS);
    sigset_t stop_and_reload;
    char err[1024];
    int opt, rc = 0;

    meter_install(); /* before any thread or jansson call (meter.h) */
    if (argc > 1 && strcmp(argv[1], "record-id") == 0)
        return main_record_id(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "admin") == 0)
        return cli_admin_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "problems") == 0)
        return main_problems(argc - 1, argv + 1);
    while ((opt = getopt(argc, argv, "c:tVh")) != -1) {
        switch (opt) {
        case 'c': file = optarg; break;
        case 't': test_only = true; break;
        case 'V': printf("idempotency-proxy %s\n", IDEM_VERSION); return 0;
        case 'h': main_usage(stdout); return 0;
        default: main_usage(stderr); return 2;
        }
    }
    if (file == NULL || optind != argc) {
        main_usage(stderr);
        return 2;
    }
    cfg = config_create(file, err, sizeof(err));
    if (cfg == NULL) {
        fprintf(stderr, "idempotency-proxy: %s\n", err);
        return 1;
    }
    if (test_only) {
        main_warn_config(cfg, file, true);
        printf("configuration OK\n");
        config_unref(cfg);
        return 0;
    }

    signal(SIGPIPE, SIG_IGN);
    /*
     * The listeners accept from worker_pool_init on, so a supervisor may
     * signal from then: hold SIGTERM, SIGINT and SIGHUP pending until the
     * event loop handles them (their default action would kill us).
     */
    sigemptyset(&stop_and_reload);
    sigaddset(&stop_and_reload, SIGTERM);
    sigaddset(&stop_and_reload, SIGINT);
    sigaddset(&stop_and_reload, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop_and_reload, NULL);
    log_init();
    main_warn_config(cfg, file, false);
    event_set_log_callback(main_on_libevent_log);
    main_raise_fd_limit();
    if (upstream_global_init() != 0) { /* once, before any thread */
        fprintf(stderr, "idempotency-proxy: cannot initialise libcurl\n");
        config_unref(cfg);
        return 1;
    }
    memset(&m, 0, sizeof(m));
    m.file = file;
    if (log_audit_open(cfg->audit_log, err, sizeof(err)) != 0) {
        fprintf(stderr, "idempotency-proxy: log.audit: %s\n", err);
        config_unref(cfg);
        upstream_global_cleanup();
        return 1;
    }
    if (worker_pool_init(&m.pool, cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "idempotency-proxy: %s\n", err);
        config_unref(cfg);
        log_audit_close();
        upstream_global_cleanup();
        return 1;
    }
    base = m.pool.workers[0].base;
    sigterm = evsignal_new(base, SIGTERM, main_on_stop_signal, &m);
    sigint = evsignal_new(base, SIGINT, main_on_stop_signal, &m);
    sighup = evsignal_new(base, SIGHUP, main_on_reload_signal, &m);
    event_add(sigterm, NULL);
    event_add(sigint, NULL);
    event_add(sighup, NULL);
    flush = event_new(base, -1, EV_PERSIST, main_on_flush_tick, NULL);
    event_add(flush, &flush_interval);
    if (worker_pool_start(&m.pool, err, sizeof(err)) != 0) {
        fprintf(stderr, "idempotency-proxy: %s\n", err);
        rc = 1;
    } else {
        /* after the startup errors, which are one line each */
        config_keyring_describe(cfg, err, sizeof(err));
        log_msg(LOG_INFO, "%s", err);
        keyring_note_core_dumps();
        log_msg(LOG_INFO, "listening on %s:%u with %u worker%s, upstream %s, %zu route%s",
                cfg->listen.host, cfg->listen.port, m.pool.serving, m.pool.serving == 1 ? "" : "s",
                cfg->upstream_url, cfg->n_routes, cfg->n_routes == 1 ? "" : "s");
        if (cfg->health_listen.host != NULL)
            log_msg(LOG_INFO, "health listener on %s port %u: /healthz, /readyz and /metrics, "
                    "no token; the admin listener serves none of them",
                    cfg->health_listen.host, cfg->health_listen.port);
        if (cfg->admin_listen.host != NULL && cfg->admin_operators_file != NULL)
            log_msg(LOG_INFO, "admin listener on %s port %u: every endpoint%s needs the bearer "
                    "token of an operator: %zu, named in %s%s%s", cfg->admin_listen.host,
                    cfg->admin_listen.port, cfg->health_listen.host != NULL ? "" :
                    " but /healthz, /readyz and /metrics", cfg->n_operators,
                    cfg->admin_operators_file, cfg->admin_token_file != NULL ?
                    " and as `token` in " : "", cfg->admin_token_file != NULL ?
                    cfg->admin_token_file : "");
        else if (cfg->admin_listen.host != NULL && cfg->admin_token_file != NULL)
            log_msg(LOG_INFO, "admin listener on %s port %u: every endpoint%s needs the bearer "
                    "token of %s (fingerprint %s)", cfg->admin_listen.host,
                    cfg->admin_listen.port, cfg->health_listen.host != NULL ? "" :
                    " but /healthz, /readyz and /metrics", cfg->admin_token_file,
                    cfg->admin_token.fingerprint);
        else if (cfg->admin_listen.host != NULL)
            log_msg(LOG_INFO, "admin listener on %s port %u (loopback, neither "
                    "admin.operators_file nor admin.token_file): its endpoints take no token",
                    cfg->admin_listen.host, cfg->admin_listen.port);
        pthread_sigmask(SIG_UNBLOCK, &stop_and_reload, NULL); /* the workers inherited them blocked */
        event_base_dispatch(base);
    }
    config_unref(cfg); /* the workers hold their own references */
    worker_pool_join(&m.pool);
    if (rc == 0)
        log_msg(LOG_INFO, "all workers stopped; exiting");

    event_free(sigterm);
    event_free(sigint);
    event_free(sighup);
    event_free(flush);
    log_flush();
    worker_pool_deinit(&m.pool);
    record_id_thread_end();
    seal_thread_forget();
    log_thread_end();
    log_audit_close();
    upstream_global_cleanup();
    return rc;
}
