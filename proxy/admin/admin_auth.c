/*
 * admin_auth.c - who may use the admin listener (CONTRACT sections 13 and
 * 16): the bearer token (RFC 6750) of a named operator, the right each
 * request needs, and a bound on failed authentications per client address.
 */
#include "admin_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "clock.h"
#include "config.h"
#include "exchange.h"
#include "headers.h"
#include "hex.h"
#include "http_server.h"
#include "log.h"
#include "metrics.h"
#include "problem.h"

/* RFC 6750 section 3: the realm names the protection space; the error says why a token failed. */
#define ADMIN_AUTH_CHALLENGE "Bearer realm=\"idempotency-proxy admin\""

/*
 * Client addresses whose failures are counted at once. A new address takes
 * a free or ended window, else the live one with the fewest failures that
 * is not over the bound; when every window is over it, the failures of every
 * address not in the table share one more window (ADMIN_THROTTLE_OTHERS),
 * so that no number of addresses lifts a throttle before its time.
 */
#define ADMIN_THROTTLE_SLOTS 256
#define ADMIN_THROTTLE_OTHERS "*"

/* One client address's wrong tokens in its current window. */
struct admin_throttle_slot {
    char client[64];                /* "" : a free slot */
    uint64_t since_ms;              /* the window's start, ms since the epoch */
    unsigned failures;
};

struct admin_throttle {
    struct admin_throttle_slot slot[ADMIN_THROTTLE_SLOTS];
    struct admin_throttle_slot others;  /* every address the table has no room for */
};

void admin_env_deinit(struct admin_env *env)
{
    free(env->throttle);
    env->throttle = NULL;
}

/* client as one address: an IPv4 address mapped into IPv6 (::ffff:a.b.c.d) as a.b.c.d. */
static const char *admin_throttle_key(const char *client)
{
    return strncasecmp(client, "::ffff:", 7) == 0 && strchr(client + 7, '.') != NULL
               ? client + 7 : client;
}

static bool admin_throttle_live(const struct admin_throttle_slot *s, uint64_t now_ms)
{
    return s->client[0] != '\0' && now_ms - s->since_ms < ADMIN_AUTH_WINDOW_MS;
}

/* client's window at now_ms: its own, or the others' when the table had no room for it; or NULL. */
static struct admin_throttle_slot *admin_throttle_find(struct admin_throttle *t,
                                                       const char *client, uint64_t now_ms)
{
    if (t == NULL || client[0] == '\0')
        return NULL;
    client = admin_throttle_key(client);
    for (size_t i = 0; i < ADMIN_THROTTLE_SLOTS; i++) {
        if (admin_throttle_live(&t->slot[i], now_ms) && strcmp(t->slot[i].client, client) == 0)
            return &t->slot[i];
    }
    return admin_throttle_live(&t->others, now_ms) ? &t->others : NULL;
}

/* The window a new address takes at now_ms (see ADMIN_THROTTLE_SLOTS). */
static struct admin_throttle_slot *admin_throttle_room(struct admin_throttle *t,
                                                       uint64_t now_ms)
{
    struct admin_throttle_slot *best = NULL;

    for (size_t i = 0; i < ADMIN_THROTTLE_SLOTS; i++) {
        struct admin_throttle_slot *c = &t->slot[i];

        if (!admin_throttle_live(c, now_ms))
            return c;
        if (c->failures < ADMIN_AUTH_FAILURES_MAX && (best == NULL || c->failures < best->failures))
            best = c;
    }
    return best != NULL ? best : &t->others;
}

/* Count one wrong token of client at now_ms. */
static void admin_throttle_count(struct admin_env *env, const char *client, uint64_t now_ms)
{
    struct admin_throttle_slot *s;

    if (client[0] == '\0')
        return;
    if (env->throttle == NULL && (env->throttle = calloc(1, sizeof(*env->throttle))) == NULL)
        return; /* out of memory: the failure is refused and audited all the same */
    s = admin_throttle_find(env->throttle, client, now_ms);
    if (s == NULL) {
        s = admin_throttle_room(env->throttle, now_ms);
        snprintf(s->client, sizeof(s->client), "%s",
                 s == &env->throttle->others ? ADMIN_THROTTLE_OTHERS
                                             : admin_throttle_key(client));
        s->since_ms = now_ms;
        s->failures = 0;
    }
    s->failures++;
}

/* Answer req with the problem p (401, 403 or 429), detail (borrowed) and the fields it needs. */
static void admin_auth_answer(struct http_req *req, enum problem p, const char *detail,
                              const char *challenge, long long retry_after_s)
{
    struct evkeyvalq *out = http_server_output_headers(req);
    struct evbuffer *body = evbuffer_new();
    size_t len = 0;
    char *text = problem_json(p, problem_status(p), detail, &len), retry[24];

    if (challenge != NULL)
        evhttp_add_header(out, "WWW-Authenticate", challenge);
    if (retry_after_s > 0) {
        snprintf(retry, sizeof(retry), "%lld", retry_after_s);
        evhttp_add_header(out, "Retry-After", retry);
    }
    evhttp_add_header(out, "Content-Type", PROBLEM_CONTENT_TYPE);
    evhttp_add_header(out, "Cache-Control", "no-store");
    if (body != NULL && text != NULL)
        evbuffer_add(body, text, len);
    http_server_reply(req, problem_status(p), NULL, body);
    free(text);
    if (body != NULL)
        evbuffer_free(body);
}

/* A 401: counted, audited, warned of (never the token); a wrong token is one more failure of its client. */
static void admin_auth_refuse(struct admin_env *env, struct http_req *req,
                              const struct admin_op *op, struct admin_actor *actor,
                              enum bearer_verdict v, uint64_t now_ms)
{
    const char *detail = v == BEARER_MISSING
                             ? "this admin endpoint needs Authorization: Bearer <token>, the "
                               "token of an operator (admin.operators_file) or of "
                               "admin.token_file"
                             : "the bearer token is not an operator's (admin.operators_file) "
                               "nor admin.token_file's";

    metrics_count(env->metrics, v == BEARER_MISSING ? METRICS_ADMIN_UNAUTHORIZED_MISSING
                                                    : METRICS_ADMIN_UNAUTHORIZED_INVALID);
    log_msg(LOG_WARN, "admin: 401 from %s: %s",
            actor->client[0] != '\0' ? actor->client : "(gone)",
            v == BEARER_MISSING ? "no bearer token" : "a bearer token of no operator");
    if (v == BEARER_INVALID)
        admin_throttle_count(env, actor->client, now_ms);
    admin_audit(req, actor, op->action, op->record_id[0] != '\0' ? op->record_id : NULL, NULL,
                NULL, 401);
    admin_auth_answer(req, PROBLEM_ADMIN_UNAUTHORIZED, detail,
                      v == BEARER_MISSING ? ADMIN_AUTH_CHALLENGE
                                          : ADMIN_AUTH_CHALLENGE ", error=\"invalid_token\"", 0);
}

/* Whether actor's client is over its failures: then answered 429, audited and counted. */
static bool admin_auth_throttled(struct admin_env *env, struct http_req *req,
                                 const struct admin_op *op, struct admin_actor *actor,
                                 uint64_t now_ms)
{
    struct admin_throttle_slot *s = admin_throttle_find(env->throttle, actor->client, now_ms);
    char detail[200];
    long long wait_s;

    if (s == NULL || s->failures < ADMIN_AUTH_FAILURES_MAX)
        return false;
    wait_s = (long long)((s->since_ms + ADMIN_AUTH_WINDOW_MS - now_ms + 999) / 1000);
    snprintf(detail, sizeof(detail), "%u wrong tokens from this address within %d s: its "
             "requests are refused without a token check for %lld s more",
             s->failures, ADMIN_AUTH_WINDOW_MS / 1000, wait_s);
    metrics_count(env->metrics, METRICS_ADMIN_THROTTLED);
    admin_audit(req, actor, op->action, op->record_id[0] != '\0' ? op->record_id : NULL, NULL,
                NULL, 429);
    admin_auth_answer(req, PROBLEM_ADMIN_THROTTLED, detail, NULL, wait_s);
    return true;
}

bool admin_auth_allowed(const struct admin_env *env, struct http_req *req,
                        struct admin_actor *actor, unsigned right, const char *action,
                        const char *record_id)
{
    char detail[200];

    actor->right = right;
    if ((actor->rights & right) == right)
        return true;
    snprintf(detail, sizeof(detail), "operator '%s' does not hold the right '%s' this request "
             "needs (admin.operators_file); nothing was done", actor->name,
             admin_right_name(right));
    metrics_count(env->metrics, METRICS_ADMIN_FORBIDDEN);
    log_msg(LOG_WARN, "admin: 403 for operator %s from %s: %s needs the right %s", actor->name,
            actor->client[0] != '\0' ? actor->client : "(gone)", action,
            admin_right_name(right));
    admin_audit(req, actor, action, record_id, NULL, NULL, 403);
    admin_auth_answer(req, PROBLEM_ADMIN_FORBIDDEN, detail, NULL, 0);
    return false;
}

bool admin_auth_check(struct admin_env *env, struct http_req *req, const struct admin_op *op,
                      struct admin_actor *actor)
{
    const struct config *cfg = exchange_set_conf(env->set);
    const struct config_operator *who;
    unsigned char digest[BEARER_DIGEST_LEN];
    char sha256[2 * BEARER_DIGEST_LEN + 1];
    uint64_t now_ms = clock_now_ms();
    const char *value;
    enum bearer_verdict v;
    int lines;

    memset(actor, 0, sizeof(*actor));
    snprintf(actor->client, sizeof(actor->client), "%s", http_server_peer(req));
    snprintf(actor->token, sizeof(actor->token), "-");
    actor->right = op->right;
    if (cfg->n_operators == 0) {
        actor->rights = CONFIG_RIGHTS_ALL;
        return true;
    }
    if (admin_auth_throttled(env, req, op, actor, now_ms))
        return false;
    value = header_find_all(http_server_input_headers(req), "Authorization", &lines);
    v = bearer_sent(value, lines, digest);
    if (v == BEARER_OK) {
        hex_lower(digest, sizeof(digest), sha256);
        who = config_operator_find(cfg, sha256);
        /* a wrong token is named by its fingerprint: an old one rotated out, or a guess */
        memcpy(actor->token, sha256, BEARER_FINGERPRINT_LEN);
        actor->token[BEARER_FINGERPRINT_LEN] = '\0';
        if (who == NULL)
            v = BEARER_INVALID;
    }
    if (v != BEARER_OK) {
        admin_auth_refuse(env, req, op, actor, v, now_ms);
        return false;
    }
    snprintf(actor->name, sizeof(actor->name), "%s", who->name);
    actor->rights = who->rights;
    return admin_auth_allowed(env, req, actor, op->right, op->action,
                              op->record_id[0] != '\0' ? op->record_id : NULL);
}
