/*
 * admin_auth.c - the bearer token of the admin listener (RFC 6750).
 */
#include "admin_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "config.h"
#include "exchange.h"
#include "headers.h"
#include "http_server.h"
#include "log.h"
#include "metrics.h"
#include "problem.h"

/* RFC 6750 section 3: the realm names the protection space; the error says why a token failed. */
#define ADMIN_AUTH_CHALLENGE "Bearer realm=\"idempotency-proxy admin\""

static void admin_auth_refuse(const struct admin_env *env, struct http_req *req,
                              enum bearer_verdict v)
{
    struct evkeyvalq *out = http_server_output_headers(req);
    struct evbuffer *body = evbuffer_new();
    const char *detail = v == BEARER_MISSING
                             ? "this admin endpoint needs Authorization: Bearer <token>, the "
                               "token of admin.token_file"
                             : "the bearer token is not the one admin.token_file holds";
    char client[64];
    size_t len = 0;
    char *text = problem_json(PROBLEM_ADMIN_UNAUTHORIZED, 401, detail, &len);

    snprintf(client, sizeof(client), "%s", http_server_peer(req));
    metrics_count(env->metrics, v == BEARER_MISSING ? METRICS_ADMIN_UNAUTHORIZED_MISSING
                                                    : METRICS_ADMIN_UNAUTHORIZED_INVALID);
    /* never the token: the client, and which of the two it was */
    log_msg(LOG_WARN, "admin: 401 from %s: %s", client[0] != '\0' ? client : "(gone)",
            v == BEARER_MISSING ? "no bearer token" : "a bearer token that is not admin.token_file's");
    evhttp_add_header(out, "WWW-Authenticate",
                      v == BEARER_MISSING ? ADMIN_AUTH_CHALLENGE
                                          : ADMIN_AUTH_CHALLENGE ", error=\"invalid_token\"");
    evhttp_add_header(out, "Content-Type", PROBLEM_CONTENT_TYPE);
    evhttp_add_header(out, "Cache-Control", "no-store");
    if (body != NULL && text != NULL)
        evbuffer_add(body, text, len);
    http_server_reply(req, 401, NULL, body);
    free(text);
    if (body != NULL)
        evbuffer_free(body);
}

bool admin_auth_check(const struct admin_env *env, struct http_req *req,
                      struct admin_actor *actor)
{
    const struct config *cfg = exchange_set_conf(env->set);
    const char *value;
    enum bearer_verdict v;
    int lines;

    snprintf(actor->client, sizeof(actor->client), "%s", http_server_peer(req));
    if (cfg->admin_token_file == NULL) {
        snprintf(actor->token, sizeof(actor->token), "-");
        return true;
    }
    value = header_find_all(http_server_input_headers(req), "Authorization", &lines);
    v = bearer_check(&cfg->admin_token, value, lines);
    if (v != BEARER_OK) {
        admin_auth_refuse(env, req, v);
        return false;
    }
    memcpy(actor->token, cfg->admin_token.fingerprint, sizeof(actor->token));
    return true;
}
