/*
 * admin.c - the admin listener's endpoints: the probes and the metrics
 * (probe.c), open to every client unless health_listen serves them, and
 * behind the operator's token and right (admin_auth.c) the records, the
 * record lookup and the inbox, each request with its audit line. See
 * admin_int.h for the files.
 */
#include "admin_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "http_server.h"
#include "config.h"
#include "exchange.h"
#include "inbox.h"
#include "probe.h"

#define ADMIN_RECORDS_PATH "/records/"
#define ADMIN_LOOKUP_PATH "/records/lookup"
#define ADMIN_LIST_PATH "/records"
#define ADMIN_INBOX_PATH "/inbox"
#define ADMIN_BULK_PATH "/records/bulk"
#define ADMIN_EXTEND_SUFFIX "/extend"

/* The request's path, "" when its target has none. */
static const char *admin_path(struct http_req *req)
{
    const char *path = evhttp_uri_get_path(http_server_uri(req));

    return path != NULL ? path : "";
}

/*
 * The inbox change rest (the path after /inbox) names, for cmd: a
 * route-wide one (POST /<route>/pause, /resume, /dead/redeliver) or one of a
 * dead letter (POST /<route>/dead/<id>/redeliver, DELETE /<route>/dead/<id>),
 * with the right it needs into *right and, when route or id is not NULL,
 * the route (decoded, malloc'd) and the dead letter's id (malloc'd; NULL
 * when longer than 64 bytes: two numbers, which the inbox checks). NULL when
 * rest names no change: the inbox answers it (a read, a 404 or a 405).
 */
static const char *admin_inbox_action(enum evhttp_cmd_type cmd, const char *rest,
                                      unsigned *right, char **route, char **id)
{
    const char *slash = rest[0] == '/' ? strchr(rest + 1, '/') : NULL;
    const char *dead = rest[0] == '/' ? strstr(rest + 1, "/dead/") : NULL;
    const char *action = NULL, *end = slash;
    size_t id_len = 0;
    char *encoded;

    if (cmd == EVHTTP_REQ_POST && slash != NULL) {
        if (strcmp(slash, "/pause") == 0)
            action = "inbox-pause";
        else if (strcmp(slash, "/resume") == 0)
            action = "inbox-resume";
        else if (strcmp(slash, "/dead/redeliver") == 0)
            action = "bulk-redeliver";
    }
    if (action == NULL && (cmd == EVHTTP_REQ_POST || cmd == EVHTTP_REQ_DELETE) && dead != NULL) {
        bool redeliver;

        id_len = strcspn(dead + 6, "/");
        redeliver = strcmp(dead + 6 + id_len, "/redeliver") == 0;
        if (id_len == 0 || (cmd == EVHTTP_REQ_POST) != redeliver ||
            (!redeliver && dead[6 + id_len] != '\0'))
            return NULL; /* not an action: the inbox answers 404 or 405 and changes nothing */
        action = redeliver ? "redeliver" : "dead-letter-delete";
        end = dead;
    }
    if (action == NULL)
        return NULL;
    *right = strcmp(action, "dead-letter-delete") == 0 ? CONFIG_RIGHT_PURGE
                                                       : CONFIG_RIGHT_RESOLVE;
    if (route != NULL) {
        encoded = strndup(rest + 1, (size_t)(end - rest - 1));
        *route = encoded != NULL ? evhttp_uridecode(encoded, 0, NULL) : NULL;
        free(encoded);
    }
    if (id != NULL)
        *id = id_len > 0 && id_len <= 64 ? strndup(dead + 6, id_len) : NULL;
    return action;
}

/* The route an inbox read names (GET /inbox/<route>...), decoded and malloc'd; NULL for none. */
static char *admin_inbox_route(const char *rest)
{
    size_t len = rest[0] == '/' ? strcspn(rest + 1, "/") : 0;
    char *encoded, *route;

    if (len == 0)
        return NULL;
    encoded = strndup(rest + 1, len);
    route = encoded != NULL ? evhttp_uridecode(encoded, 0, NULL) : NULL;
    free(encoded);
    return route;
}

/* The most body bytes req may carry: a resolve's answer (one, or a bulk one), or a few KiB. */
static size_t admin_body_limit(const struct admin_env *env, struct http_req *req)
{
    const char *path = admin_path(req);

    if ((http_server_command(req) == EVHTTP_REQ_PUT &&
         strncmp(path, ADMIN_RECORDS_PATH, strlen(ADMIN_RECORDS_PATH)) == 0) ||
        (http_server_command(req) == EVHTTP_REQ_POST && strcmp(path, ADMIN_BULK_PATH) == 0))
        return env->resolve_body_limit;
    return ADMIN_MAX_BODY;
}

/* Whether path is /records/<something>/extend; *id_len: the bytes of <something>. */
static bool admin_extend_path(const char *path, size_t *id_len)
{
    size_t n = strlen(path), pre = strlen(ADMIN_RECORDS_PATH), suf = strlen(ADMIN_EXTEND_SUFFIX);

    if (n <= pre + suf || strncmp(path, ADMIN_RECORDS_PATH, pre) != 0 ||
        strcmp(path + n - suf, ADMIN_EXTEND_SUFFIX) != 0)
        return false;
    *id_len = n - pre - suf;
    return true;
}

/* admin_classify's work on the method and the path alone. */
static struct admin_op admin_classify_path(enum evhttp_cmd_type cmd, const char *path)
{
    size_t id_len;
    unsigned right;

    if (strcmp(path, ADMIN_LOOKUP_PATH) == 0)
        return (struct admin_op){ "lookup", CONFIG_RIGHT_READ, false, "" };
    if (strcmp(path, ADMIN_LIST_PATH) == 0)
        return (struct admin_op){ "list", CONFIG_RIGHT_READ, false, "" };
    /* another method there is no change: a 405, on record as "none" */
    if (strcmp(path, ADMIN_BULK_PATH) == 0)
        return cmd == EVHTTP_REQ_POST ? (struct admin_op){ "bulk", CONFIG_RIGHT_READ, true, "" }
                                      : (struct admin_op){ "none", CONFIG_RIGHT_READ, false, "" };
    if (admin_extend_path(path, &id_len))
        return cmd == EVHTTP_REQ_POST
                   ? (struct admin_op){ "extend", CONFIG_RIGHT_RESOLVE, true, "" }
                   : (struct admin_op){ "none", CONFIG_RIGHT_READ, false, "" };
    if (strncmp(path, ADMIN_RECORDS_PATH, strlen(ADMIN_RECORDS_PATH)) == 0) {
        if (cmd == EVHTTP_REQ_PUT)
            return (struct admin_op){ "resolve", CONFIG_RIGHT_RESOLVE, true, "" };
        if (cmd == EVHTTP_REQ_DELETE)
            return (struct admin_op){ "purge", CONFIG_RIGHT_PURGE, true, "" };
        return (struct admin_op){ "show", CONFIG_RIGHT_READ, false, "" };
    }
    if (strcmp(path, ADMIN_INBOX_PATH) == 0 ||
        strncmp(path, ADMIN_INBOX_PATH "/", strlen(ADMIN_INBOX_PATH) + 1) == 0) {
        const char *action = admin_inbox_action(cmd, path + strlen(ADMIN_INBOX_PATH), &right,
                                                NULL, NULL);

        if (action != NULL)
            return (struct admin_op){ action, right, true, "" };
        return (struct admin_op){ "inbox", CONFIG_RIGHT_READ, false, "" };
    }
    return (struct admin_op){ "none", CONFIG_RIGHT_READ, false, "" };
}

/*
 * What req does (CONTRACT section 16: the right each request needs),
 * from its method and path, before its body is read, with the record its
 * path names when that is a record id. A bulk change needs read here; its
 * action's right is checked once its body says which (admin_bulk).
 */
static struct admin_op admin_classify(struct http_req *req)
{
    const char *path = admin_path(req);
    struct admin_op op = admin_classify_path(http_server_command(req), path);
    const char *id;
    size_t id_len;

    if (strncmp(path, ADMIN_RECORDS_PATH, strlen(ADMIN_RECORDS_PATH)) != 0)
        return op;
    id = path + strlen(ADMIN_RECORDS_PATH);
    id_len = strcspn(id, "/");
    if (admin_record_id_ok(id, id_len)) {
        memcpy(op.record_id, id, id_len);
        op.record_id[id_len] = '\0';
    }
    return op;
}

void admin_too_large(struct http_req *req, void *arg)
{
    struct admin_env *env = arg;
    struct admin_actor actor;
    struct admin_op op;
    char detail[160];

    /* the token and the right first, then the refusal is on record like any request's */
    if (!(env->probes && probe_path(admin_path(req)))) {
        op = admin_classify(req);
        if (!admin_auth_check(env, req, &op, &actor))
            return;
        admin_audit(req, &actor, op.action, op.record_id[0] != '\0' ? op.record_id : NULL, NULL,
                    NULL, 413);
    }
    snprintf(detail, sizeof(detail), "the admin listener takes a body of at most %zu bytes here",
             admin_body_limit(env, req));
    admin_reply_problem(req, PROBLEM_BODY_TOO_LARGE, detail);
}

void admin_head(struct http_req *req, void *arg)
{
    struct admin_env *env = arg;
    size_t limit = admin_body_limit(env, req);
    long long announced = http_server_content_length(req);
    struct admin_op op;
    struct admin_actor actor;

    if (announced > 0 && (unsigned long long)announced > limit) {
        admin_too_large(req, arg); /* which checks the token first */
        return;
    }
    /* the token and the right first: without them, not even the size of the body is anyone's business */
    if (!(env->probes && probe_path(admin_path(req)))) {
        op = admin_classify(req);
        if (!admin_auth_check(env, req, &op, &actor))
            return;
    }
    http_server_accept_body(req, limit);
}

/*
 * The audit line of a request whose handler writes none (op.self_audited
 * false): a read, a 404, a 405, once its answer is out.
 */
static void admin_audit_request(struct http_req *req, const struct admin_actor *actor,
                                const struct admin_op *op, const char *path)
{
    const char *id = op->record_id[0] != '\0' ? op->record_id : NULL;
    char *route = NULL;

    if (strcmp(op->action, "inbox") == 0) {
        route = admin_inbox_route(path + strlen(ADMIN_INBOX_PATH));
    }
    admin_audit_on_answer(req, actor, op->action, id, NULL, route);
    free(route);
}

void admin_handle(struct http_req *req, void *arg)
{
    struct admin_env *env = arg;
    const char *path = admin_path(req);
    struct admin_actor actor;
    struct admin_op op;
    size_t id_len;

    if (env->probes && probe_answer(&env->probe, req))
        return;
    op = admin_classify(req);
    if (!admin_auth_check(env, req, &op, &actor))
        return;
    if (!op.self_audited)
        admin_audit_request(req, &actor, &op, path);
    if (strcmp(path, ADMIN_LOOKUP_PATH) == 0) {
        admin_lookup(env, req);
    } else if (strcmp(path, ADMIN_LIST_PATH) == 0) {
        admin_list(env, req);
    } else if (strcmp(path, ADMIN_BULK_PATH) == 0) {
        admin_bulk(env, req, &actor);
    } else if (admin_extend_path(path, &id_len)) {
        admin_extend(env, req, path + strlen(ADMIN_RECORDS_PATH), id_len, &actor);
    } else if (strncmp(path, ADMIN_RECORDS_PATH, strlen(ADMIN_RECORDS_PATH)) == 0) {
        admin_records(env, req, path + strlen(ADMIN_RECORDS_PATH), &actor);
    } else if (strcmp(path, ADMIN_INBOX_PATH) == 0 ||
               strncmp(path, ADMIN_INBOX_PATH "/", strlen(ADMIN_INBOX_PATH) + 1) == 0) {
        if (op.self_audited) {
            char *route = NULL, *id = NULL;
            unsigned right;

            admin_inbox_action(http_server_command(req), path + strlen(ADMIN_INBOX_PATH),
                               &right, &route, &id);
            admin_audit_on_answer(req, &actor, op.action, NULL, id, route);
            free(route);
            free(id);
        }
        inbox_admin(req, env->store, exchange_set_conf(env->set),
                    path + strlen(ADMIN_INBOX_PATH));
    } else if (http_server_command(req) == EVHTTP_REQ_POST ||
               http_server_command(req) == EVHTTP_REQ_DELETE ||
               http_server_command(req) == EVHTTP_REQ_PUT) {
        admin_reply_text(req, 405, "method not allowed\n");
    } else {
        admin_reply_text(req, 404, "not found\n");
    }
}
