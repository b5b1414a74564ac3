/*
 * main.c - command line (README "Command line"), signals, the worker threads.
 */
#include <getopt.h>
#include <pthread.h>
#include <sys/resource.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "clock.h"
#include "config.h"
#include "fingerprint.h"
#include "log.h"
#include "upstream.h"
#include "worker.h"

/* Room for the shadowed-route warnings of a config (one line each, truncated past this). */
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
            "       idempotency-proxy -h            this help\n");
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
 * Routes an earlier route shadows (config_route_warnings): a line each on
 * stderr for -t (to_stderr), else a log warning each. The config still loads.
 */
static void main_warn_routes(const struct config *cfg, const char *file, bool to_stderr)
{
    char *text = malloc(MAIN_WARNINGS_MAX), *line, *save = NULL;

    if (text == NULL)
        return;
    config_route_warnings(cfg, file, text, MAIN_WARNINGS_MAX);
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        if (to_stderr)
            fprintf(stderr, "idempotency-proxy: %s\n", line);
        else
            log_msg(LOG_WARN, "%s", line);
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

    (void)sig;
    (void)what;
    if (m->stopping) {
        log_msg(LOG_WARN, "SIGHUP while draining: ignored");
        return;
    }
    log_msg(LOG_INFO, "SIGHUP: reloading %s", m->file);
    worker_pool_reload(&m->pool, m->file);
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
        main_warn_routes(cfg, file, true);
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
    main_warn_routes(cfg, file, false);
    event_set_log_callback(main_on_libevent_log);
    main_raise_fd_limit();
    if (upstream_global_init() != 0) { /* once, before any thread */
        fprintf(stderr, "idempotency-proxy: cannot initialise libcurl\n");
        config_unref(cfg);
        return 1;
    }
    memset(&m, 0, sizeof(m));
    m.file = file;
    if (worker_pool_init(&m.pool, cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "idempotency-proxy: %s\n", err);
        config_unref(cfg);
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
        log_msg(LOG_INFO, "listening on %s:%u with %u worker%s, upstream %s, %zu route%s",
                cfg->listen.host, cfg->listen.port, m.pool.n, m.pool.n == 1 ? "" : "s",
                cfg->upstream_url, cfg->n_routes, cfg->n_routes == 1 ? "" : "s");
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
    fingerprint_thread_end();
    log_thread_end();
    upstream_global_cleanup();
    return rc;
}
