/*
 * store_verbs.c - the store's public commands: the record operations of
 * store.h (claim, get, the compare-and-set writes, PTTL) and any command or
 * registered script of another module (store_redis.h: store_command,
 * store_script_run).
 */
#include "store_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "clock.h"
#include "config.h"
#include "log.h"
#include "oom.h"
#include "record.h"

static void store_eval(struct store *s, enum store_record_script script, store_cas_cb *cb,
                       void *arg, int argc, const char **argv, size_t *argvlen)
{
    struct store_cmd *cmd = store_cmd_new(s, REPLY_CAS, arg);

    cmd->cb.cas = cb;
    cmd->claim = script == SCRIPT_TAKEOVER; /* a new claim: refused in the grace */
    cmd->script = store_script_text(script);
    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = s->script_sha[script];
    argvlen[1] = strlen(s->script_sha[script]);
    argv[2] = "1";
    argvlen[2] = 1;
    store_submit(cmd, argc, argv, argvlen);
}

/*
 * The owner token a claim's value carries (record.h's head), for the
 * journal of redis.reassert; "" when value is too short to carry one.
 */
static const char *store_value_owner(const char *value, size_t len, char *owner)
{
    owner[0] = '\0';
    if (len >= RECORD_OWNER_OFFSET + RECORD_OWNER_LEN) {
        memcpy(owner, value + RECORD_OWNER_OFFSET, RECORD_OWNER_LEN);
        owner[RECORD_OWNER_LEN] = '\0';
    }
    return owner;
}

void store_claim(struct store *s, const char *key, const char *value, size_t len,
                 uint64_t px_ms, store_value_cb *cb, void *arg)
{
    char px[24], owner[RECORD_OWNER_LEN + 1];
    int n = snprintf(px, sizeof(px), "%llu", (unsigned long long)px_ms);
    const char *argv[] = { "SET", key, value, "NX", "GET", "PX", px };
    const size_t argvlen[] = { 3, strlen(key), len, 2, 3, 2, (size_t)n };
    struct store_cmd *cmd;

    if (store_reassert_on(s)) {
        struct reassert_entry *e = store_reassert_begin(
            s, key, store_value_owner(value, len, owner), value, len, NULL, 0, px_ms, false);
        store_reassert_wrap_value(e, cb, arg);
        cb = store_reassert_on_claimed;
        arg = e;
    }
    cmd = store_cmd_new(s, REPLY_VALUE, arg);
    cmd->cb.value = cb;
    cmd->claim = true;
    store_submit(cmd, 7, argv, argvlen);
}

/* With redis.reassert: cb and arg become the journal's, which calls them once it has looked. */
static void store_journal_cas(struct store *s, const char *key, const char *owner,
                              const char *value, size_t len, const char *expected,
                              size_t expected_len, uint64_t px_ms, bool release,
                              store_cas_cb **cb, void **arg)
{
    struct reassert_entry *e;

    if (!store_reassert_on(s))
        return;
    e = store_reassert_begin(s, key, owner, value, len, expected, expected_len, px_ms, release);
    store_reassert_wrap_cas(e, *cb, *arg);
    *cb = store_reassert_on_written;
    *arg = e;
}

void store_get(struct store *s, const char *key, store_value_cb *cb, void *arg)
{
    const char *argv[] = { "GET", key };
    const size_t argvlen[] = { 3, strlen(key) };

    struct store_cmd *cmd = store_cmd_new(s, REPLY_VALUE, arg);

    cmd->cb.value = cb;
    store_submit(cmd, 2, argv, argvlen);
}

void store_replace_owned(struct store *s, const char *key, const char *owner, const char *value,
                         size_t len, uint64_t px_ms, store_cas_cb *cb, void *arg)
{
    char px[24];
    int n = snprintf(px, sizeof(px), "%llu", (unsigned long long)px_ms);
    const char *argv[] = { NULL, NULL, NULL, key, owner, value, px };
    size_t argvlen[] = { 0, 0, 0, strlen(key), strlen(owner), len, (size_t)n };

    store_journal_cas(s, key, owner, value, len, NULL, 0, px_ms, false, &cb, &arg);
    store_eval(s, SCRIPT_REPLACE, cb, arg, 7, argv, argvlen);
}

void store_release_owned(struct store *s, const char *key, const char *owner, store_cas_cb *cb,
                         void *arg)
{
    const char *argv[] = { NULL, NULL, NULL, key, owner };
    size_t argvlen[] = { 0, 0, 0, strlen(key), strlen(owner) };

    store_journal_cas(s, key, owner, "", 0, NULL, 0, 0, true, &cb, &arg);
    store_eval(s, SCRIPT_RELEASE, cb, arg, 5, argv, argvlen);
}

void store_takeover(struct store *s, const char *key, const char *expected, size_t expected_len,
                    const char *value, size_t len, uint64_t px_ms, store_cas_cb *cb, void *arg)
{
    char px[24], owner[RECORD_OWNER_LEN + 1];
    int n = snprintf(px, sizeof(px), "%llu", (unsigned long long)px_ms);
    const char *argv[] = { NULL, NULL, NULL, key, expected, value, px };
    size_t argvlen[] = { 0, 0, 0, strlen(key), expected_len, len, (size_t)n };

    /* the record it replaces: a new primary that lost the takeover still holds that one */
    store_journal_cas(s, key, store_value_owner(value, len, owner), value, len, expected,
                      expected_len, px_ms, false, &cb, &arg);
    store_eval(s, SCRIPT_TAKEOVER, cb, arg, 7, argv, argvlen);
}

void store_delete_if_unchanged(struct store *s, const char *key, const char *expected,
                               size_t expected_len, store_cas_cb *cb, void *arg)
{
    const char *argv[] = { NULL, NULL, NULL, key, expected };
    size_t argvlen[] = { 0, 0, 0, strlen(key), expected_len };

    store_eval(s, SCRIPT_DELETE_UNCHANGED, cb, arg, 5, argv, argvlen);
}

void store_replace_unchanged(struct store *s, const char *key, const char *expected,
                             size_t expected_len, const char *value, size_t len,
                             store_cas_cb *cb, void *arg)
{
    const char *argv[] = { NULL, NULL, NULL, key, expected, value };
    size_t argvlen[] = { 0, 0, 0, strlen(key), expected_len, len };

    store_eval(s, SCRIPT_RESOLVE, cb, arg, 6, argv, argvlen);
}

/* An extension waiting on its script's reply. */
struct store_extend_call {
    store_extend_cb *cb;
    void *arg;
};

/* SCRIPT_EXTEND's reply: nil (changed or gone) or {changed 0|1, ttl ms}. */
static void store_on_extended(enum store_status st, const struct store_reply *r, void *arg)
{
    struct store_extend_call *e = arg;

    if (st != STORE_OK)
        e->cb(st, false, false, 0, e->arg);
    else if (r->type == STORE_NIL)
        e->cb(STORE_OK, false, false, 0, e->arg);
    else if (r->type == STORE_ARR && r->n == 2 && r->elem[0].type == STORE_INT &&
             r->elem[1].type == STORE_INT)
        e->cb(STORE_OK, true, r->elem[0].integer == 1, r->elem[1].integer, e->arg);
    else /* not what the script sends: it may have been applied, nobody can say */
        e->cb(STORE_ERROR, false, false, 0, e->arg);
    free(e);
}

void store_extend_unchanged(struct store *s, const char *key, const char *expected,
                            size_t expected_len, uint64_t ttl_ms, store_extend_cb *cb,
                            void *arg)
{
    struct store_extend_call *e = oom_check(calloc(1, sizeof(*e)), "an extension");
    char px[24];
    int n = snprintf(px, sizeof(px), "%llu", (unsigned long long)ttl_ms);
    const char *argv[] = { "EVALSHA", s->script_sha[SCRIPT_EXTEND], "1", key, expected, px };
    const size_t argvlen[] = { 7, strlen(s->script_sha[SCRIPT_EXTEND]), 1, strlen(key),
                               expected_len, (size_t)n };

    e->cb = cb;
    e->arg = arg;
    store_any(s, store_script_text(SCRIPT_EXTEND), 0, 6, argv, argvlen, store_on_extended, e);
}

void store_pttl(struct store *s, const char *key, store_int_cb *cb, void *arg)
{
    const char *argv[] = { "PTTL", key };
    const size_t argvlen[] = { 4, strlen(key) };

    struct store_cmd *cmd = store_cmd_new(s, REPLY_INT, arg);

    cmd->cb.integer = cb;
    store_submit(cmd, 2, argv, argvlen);
}

/* key_arg: where the key is in argv (for redis.cluster's routing), 0: argv[1] or KEYS[1]. */
void store_any(struct store *s, const char *script, int key_arg, int argc, const char **argv,
               const size_t *argvlen, store_reply_cb *cb, void *arg)
{
    struct store_cmd *cmd = store_cmd_new(s, REPLY_ANY, arg);

    cmd->cb.any = cb;
    cmd->script = script;
    cmd->key_arg = key_arg;
    store_submit(cmd, argc, argv, argvlen);
}

void store_command(struct store *s, int argc, const char **argv, const size_t *argvlen,
                   store_reply_cb *cb, void *arg)
{
    store_any(s, NULL, 0, argc, argv, argvlen, cb, arg);
}

/* An EVALSHA's arguments that fit on the stack; a longer one is allocated. */
#define STORE_SCRIPT_ARGV_STACK 32

void store_script_run(struct store *s, const struct store_script *script, int nkeys,
                      const char *const *keys, int nargs, const char *const *args,
                      store_reply_cb *cb, void *arg)
{
    const char *stack_argv[STORE_SCRIPT_ARGV_STACK];
    size_t stack_argvlen[STORE_SCRIPT_ARGV_STACK];
    const char **argv = stack_argv;
    size_t *argvlen = stack_argvlen;
    int argc = 3 + nkeys + nargs;
    char numkeys[16];

    if (argc > STORE_SCRIPT_ARGV_STACK) {
        argv = oom_check(calloc((size_t)argc, sizeof(*argv)), "a script's arguments");
        argvlen = oom_check(calloc((size_t)argc, sizeof(*argvlen)), "a script's arguments");
    }
    snprintf(numkeys, sizeof(numkeys), "%d", nkeys);
    argv[0] = "EVALSHA";
    argv[1] = script->sha;
    argv[2] = numkeys;
    for (int i = 0; i < nkeys; i++)
        argv[3 + i] = keys[i];
    for (int i = 0; i < nargs; i++)
        argv[3 + nkeys + i] = args[i];
    for (int i = 0; i < argc; i++)
        argvlen[i] = strlen(argv[i]);
    store_any(s, script->text, 0, argc, argv, argvlen, cb, arg);
    if (argv != stack_argv) {
        free(argv);
        free(argvlen);
    }
}
