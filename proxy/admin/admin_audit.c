/*
 * admin_audit.c - the audit trail of the admin listener (CONTRACT section
 * 16): one line per admin request, reads included, and per item a bulk
 * change acted on (log_audit), whatever its outcome, naming the operator
 * and the right used.
 */
#include "admin_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>

#include "http_server.h"
#include "log.h"

const char *admin_right_name(unsigned right)
{
    switch (right) {
    case CONFIG_RIGHT_READ: return "read";
    case CONFIG_RIGHT_RESOLVE: return "resolve";
    case CONFIG_RIGHT_PURGE: return "purge";
    default: return "-";
    }
}

const char *admin_audit_result(int status)
{
    if (status == 0)
        return "unknown";
    if (status >= 200 && status < 300)
        return "ok";
    if (status == 401)
        return "unauthorized";
    if (status == 403)
        return "forbidden";
    if (status == 429)
        return "throttled";
    if (status == 404)
        return "not-found";
    if (status == 409 || status == 412)
        return "conflict";
    if (status >= 400 && status < 500)
        return "refused";
    return "error";
}

/*
 * The line, for client (NULL: the actor's, taken as the request came, or
 * else req's now).
 */
static void admin_audit_line(struct http_req *req, const char *client,
                             const struct admin_actor *actor, const char *action,
                             const char *record_id, const char *dead_letter_id, const char *route,
                             const char *result, int status, int recorded_status,
                             const char *reason)
{
    char addr[64];

    if (client == NULL && actor->client[0] != '\0') {
        client = actor->client;
    } else if (client == NULL) {
        snprintf(addr, sizeof(addr), "%s", http_server_peer(req));
        client = addr;
    }
    log_audit(&(struct audit_entry){
        .action = action, .record_id = record_id, .dead_letter_id = dead_letter_id,
        .route = route, .client = client, .token = actor->token, .result = result,
        .status = status, .recorded_status = recorded_status, .reason = reason,
        .operator = actor->name[0] != '\0' ? actor->name : NULL,
        .right = admin_right_name(actor->right),
    });
}

void admin_audit(struct http_req *req, const struct admin_actor *actor, const char *action,
                 const char *record_id, const char *dead_letter_id, const char *route,
                 int status)
{
    admin_audit_line(req, NULL, actor, action, record_id, dead_letter_id, route,
                     admin_audit_result(status), status, 0, NULL);
}

void admin_audit_record(struct http_req *req, const struct admin_actor *actor,
                        const char *action, const char *record_id, const char *route,
                        const char *reason, int status, int recorded_status)
{
    admin_audit_line(req, NULL, actor, action, record_id, NULL, route,
                     admin_audit_result(status), status, recorded_status, reason);
}

/* An action another module answers: what its line needs once the answer is out. */
struct admin_audit_pending {
    struct admin_actor actor;
    const char *action;                 /* static */
    char *record_id, *dead_letter_id, *route; /* owned, or NULL */
    char client[64];
};

static void admin_audit_pending_free(struct admin_audit_pending *p)
{
    free(p->record_id);
    free(p->dead_letter_id);
    free(p->route);
    free(p);
}

/*
 * The answer was written: its status is the action's outcome. Or the
 * connection failed first: the action may have happened, and nobody saw
 * its outcome.
 */
static void admin_audit_on_done(struct http_req *req, bool written, void *arg)
{
    struct admin_audit_pending *p = arg;
    int status = http_server_status(req);

    admin_audit_line(req, p->client, &p->actor, p->action, p->record_id, p->dead_letter_id,
                     p->route,
                     written ? admin_audit_result(status) : "unknown", written ? status : 0, 0,
                     NULL);
    admin_audit_pending_free(p);
}

/* s copied into *to; false when s is set and out of memory. */
static bool admin_audit_copy(char **to, const char *s)
{
    *to = s != NULL ? strdup(s) : NULL;
    return s == NULL || *to != NULL;
}

void admin_audit_on_answer(struct http_req *req, const struct admin_actor *actor,
                           const char *action, const char *record_id,
                           const char *dead_letter_id, const char *route)
{
    struct admin_audit_pending *p = calloc(1, sizeof(*p));
    bool copied = p != NULL;

    if (p != NULL) {
        p->actor = *actor;
        p->action = action;
        copied = admin_audit_copy(&p->record_id, record_id) &
                 admin_audit_copy(&p->dead_letter_id, dead_letter_id) &
                 admin_audit_copy(&p->route, route);
        snprintf(p->client, sizeof(p->client), "%s", http_server_peer(req));
    }
    if (!copied) {
        /* no way to wait for the outcome: the attempt is on record all the same */
        admin_audit_line(req, NULL, actor, action, record_id, dead_letter_id, route, "unknown",
                         0, 0, NULL);
        if (p != NULL)
            admin_audit_pending_free(p);
        return;
    }
    http_server_on_done(req, admin_audit_on_done, p);
}
