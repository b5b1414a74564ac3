/*
 * admin.h - the admin listener (CONTRACT 9): health and readiness probes.
 */
#ifndef IDEM_ADMIN_H
#define IDEM_ADMIN_H

struct evhttp_request;

/*
 * evhttp callback of the admin listener; arg is the struct worker.
 * GET /healthz -> 200 while the process runs; GET /readyz -> 200 when Redis
 * is connected and an upstream is configured, else 503; anything else 404.
 */
void admin_handle(struct evhttp_request *req, void *arg);

#endif
