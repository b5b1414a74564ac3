/*
 * main.c - command line (CONTRACT 2), signals, the event loop.
 */
#include <getopt.h>
#include <sys/resource.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <event2/event.h>

#include "config.h"
#include "log.h"
#include "server.h"
#include "upstream.h"

/* Longest a SIGTERM drain waits for in-flight exchanges beyond the upstream timeout. */
#define MAIN_DRAIN_SLACK_MS 5000

struct main_state {
    const char *file;
    struct event_base *base;
    struct worker worker;
    struct event *drain_timer;
    uint64_t drain_deadline_ms;
};

static void main_usage(FILE *out)
{
    fprintf(out,
            "usage: idempotency-proxy -c FILE       run with the YAML configuration FILE\n"
            "       idempotency-proxy -t -c FILE    check FILE and exit (0 ok, 1 error)\n"
            "       idempotency-proxy -V            print the version\n"
            "       idempotency-proxy -h            this help\n");
}

/*
 * epoll with libevent's changelist: curl and evhttp switch a socket's events
 * several times per request; the changelist folds those into at most one
 * epoll_ctl per socket per loop iteration.
 */
static struct event_base *main_event_base_new(void)
{
    struct event_config *ec = event_config_new();
    struct event_base *base;

    if (ec == NULL)
        return NULL;
    event_config_set_flag(ec, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    base = event_base_new_with_config(ec);
    event_config_free(ec);
    return base;
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

static void main_on_drain_tick(evutil_socket_t fd, short what, void *arg)
{
    struct main_state *m = arg;

    (void)fd;
    (void)what;
    if (m->worker.active == 0 && m->worker.unflushed == 0) {
        log_msg(LOG_INFO, "drained; exiting");
        event_base_loopexit(m->base, NULL);
    } else if (worker_now_ms() >= m->drain_deadline_ms) {
        log_msg(LOG_WARN, "drain time is up with %u requests in flight, %u answers unsent; exiting",
                m->worker.active, m->worker.unflushed);
        event_base_loopexit(m->base, NULL);
    }
}

static void main_on_stop_signal(evutil_socket_t sig, short what, void *arg)
{
    struct main_state *m = arg;
    struct timeval tick = { 0, 50 * 1000 };

    (void)what;
    if (m->drain_timer != NULL)
        return;
    log_msg(LOG_INFO, "%s: draining %u requests in flight", sig == SIGTERM ? "SIGTERM" : "SIGINT",
            m->worker.active);
    worker_stop_accepting(&m->worker);
    m->drain_deadline_ms =
        worker_now_ms() + m->worker.boot->cfg.upstream_timeout_ms + MAIN_DRAIN_SLACK_MS;
    m->drain_timer = event_new(m->base, -1, EV_PERSIST, main_on_drain_tick, m);
    event_add(m->drain_timer, &tick);
    main_on_drain_tick(-1, 0, m);
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
    log_msg(LOG_INFO, "SIGHUP: reloading %s", m->file);
    worker_reload(&m->worker, m->file);
}

int main(int argc, char **argv)
{
    const char *file = NULL;
    bool test_only = false;
    struct worker_config *wc;
    struct main_state m;
    struct event *sigterm, *sigint, *sighup, *flush;
    struct timeval flush_interval = { 0, LOG_FLUSH_INTERVAL_MS * 1000 };
    char err[1024];
    int opt;

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
    wc = worker_config_load(file, err, sizeof(err));
    if (wc == NULL) {
        fprintf(stderr, "idempotency-proxy: %s\n", err);
        return 1;
    }
    if (test_only) {
        printf("configuration OK\n");
        worker_config_put(wc);
        return 0;
    }

    signal(SIGPIPE, SIG_IGN);
    log_init();
    event_set_log_callback(main_on_libevent_log);
    main_raise_fd_limit();
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "idempotency-proxy: cannot initialise libcurl\n");
        return 1;
    }
    memset(&m, 0, sizeof(m));
    m.file = file;
    m.base = main_event_base_new();
    if (m.base == NULL || worker_init(&m.worker, m.base, wc, err, sizeof(err)) != 0) {
        fprintf(stderr, "idempotency-proxy: %s\n", m.base == NULL ? "cannot create the event loop" : err);
        if (m.base != NULL)
            event_base_free(m.base);
        worker_config_put(wc);
        curl_global_cleanup();
        return 1;
    }
    sigterm = evsignal_new(m.base, SIGTERM, main_on_stop_signal, &m);
    sigint = evsignal_new(m.base, SIGINT, main_on_stop_signal, &m);
    sighup = evsignal_new(m.base, SIGHUP, main_on_reload_signal, &m);
    event_add(sigterm, NULL);
    event_add(sigint, NULL);
    event_add(sighup, NULL);
    flush = event_new(m.base, -1, EV_PERSIST, main_on_flush_tick, NULL);
    event_add(flush, &flush_interval);
    log_msg(LOG_INFO, "listening on %s:%u, upstream %s, %zu routes", wc->cfg.listen.host,
            wc->cfg.listen.port, wc->cfg.upstream_url, wc->cfg.n_routes);
    worker_config_put(wc); /* the worker holds its own references */

    event_base_dispatch(m.base);

    event_free(sigterm);
    event_free(sigint);
    event_free(sighup);
    event_free(flush);
    log_flush();
    if (m.drain_timer != NULL)
        event_free(m.drain_timer);
    worker_deinit(&m.worker);
    event_base_free(m.base);
    curl_global_cleanup();
    return 0;
}
