/*
 * admin_audit.c - the audit trail of the admin listener: one line per
 * action that may change Redis (log_audit), whatever its outcome.
 */
#include "admin_int.h"

#include <stdlib.h>
#include <string.h>

#include <event2/http.h>

#include "log.h"
#include "request.h"

const char *admin_audit_result(int status)
{
    if (status >= 200 && status < 300)
        return "ok";
    if (status == 404)
        return "not-found";
    if (status == 409)
        return "conflict";
    if (status >= 400 && status < 500)
        return "refused";
    return "error";
}

/* The line, for req's client (NULL: client, taken before the request could go). */
static void admin_audit_line(struct evhttp_request *req, const char *client,
                             const struct admin_actor *actor, const char *action,
                             const char *record_id, const char *dead_letter_id, const char *route,
                             const char *result, int status, int recorded_status)
{
    char addr[64];

    if (client == NULL) {
        request_client_addr(req, addr, sizeof(addr));
        client = addr;
    }
    log_audit(&(struct audit_entry){
        .action = action, .record_id = record_id, .dead_letter_id = dead_letter_id,
        .route = route, .client = client, .token = actor->token, .result = result,
        .status = status, .recorded_status = recorded_status,
    });
}

void admin_audit(struct evhttp_request *req, const struct admin_actor *actor, const char *action,
                 const char *record_id, const char *dead_letter_id, const char *route,
                 int status)
{
    admin_audit_line(req, NULL, actor, action, record_id, dead_letter_id, route,
                     admin_audit_result(status), status, 0);
}

void admin_audit_resolve(struct evhttp_request *req, const struct admin_actor *actor,
                         const char *record_id, const char *route, int status,
                         int recorded_status)
{
    admin_audit_line(req, NULL, actor, "resolve", record_id, NULL, route,
                     admin_audit_result(status), status, recorded_status);
}

/* An action another module answers: what its line needs once the answer is out. */
struct admin_audit_pending {
    struct evhttp_request *req;
    struct evhttp_connection *conn;     /* req's, whose close callback is ours meanwhile */
    struct admin_actor actor;
    const char *action;                 /* static */
    char *dead_letter_id, *route;       /* owned, or NULL */
    char client[64];
};

static void admin_audit_pending_free(struct admin_audit_pending *p)
{
    free(p->dead_letter_id);
    free(p->route);
    free(p);
}

static void admin_audit_pending_write(struct admin_audit_pending *p, const char *result,
                                      int status)
{
    admin_audit_line(p->req, p->client, &p->actor, p->action, NULL, p->dead_letter_id, p->route,
                     result, status, 0);
    admin_audit_pending_free(p);
}

/* evhttp wrote the answer: its status is the action's outcome. */
static void admin_audit_on_complete(struct evhttp_request *req, void *arg)
{
    struct admin_audit_pending *p = arg;
    int status = evhttp_request_get_response_code(req);

    evhttp_connection_set_closecb(p->conn, NULL, NULL);
    admin_audit_pending_write(p, admin_audit_result(status), status);
}

/*
 * The connection failed before the answer was written (evhttp frees it and
 * the request without completing it, and has overwritten the status by
 * then): the action may have happened, and nobody saw its outcome.
 */
static void admin_audit_on_close(struct evhttp_connection *conn, void *arg)
{
    struct admin_audit_pending *p = arg;

    (void)conn;
    evhttp_request_set_on_complete_cb(p->req, NULL, NULL);
    admin_audit_pending_write(p, "unknown", 0);
}

void admin_audit_on_answer(struct evhttp_request *req, const struct admin_actor *actor,
                           const char *action, const char *dead_letter_id, const char *route)
{
    struct admin_audit_pending *p = calloc(1, sizeof(*p));

    if (p != NULL) {
        p->req = req;
        p->conn = evhttp_request_get_connection(req);
        p->actor = *actor;
        p->action = action;
        p->dead_letter_id = dead_letter_id != NULL ? strdup(dead_letter_id) : NULL;
        p->route = route != NULL ? strdup(route) : NULL;
        request_client_addr(req, p->client, sizeof(p->client));
    }
    if (p == NULL || p->conn == NULL || (dead_letter_id != NULL && p->dead_letter_id == NULL) ||
        (route != NULL && p->route == NULL)) {
        /* no way to wait for the outcome: the attempt is on record all the same */
        admin_audit_line(req, NULL, actor, action, NULL, dead_letter_id, route, "unknown", 0, 0);
        if (p != NULL)
            admin_audit_pending_free(p);
        return;
    }
    evhttp_request_set_on_complete_cb(req, admin_audit_on_complete, p);
    evhttp_connection_set_closecb(p->conn, admin_audit_on_close, p);
}
