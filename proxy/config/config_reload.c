/*
 * config_reload.c - what a SIGHUP may change (config.h, config_reload_check):
 * one walk of the schema (config_schema.c) per refused class, the RESTART
 * keys against the boot config and the IDENTITY keys against the running
 * one (config_compare.c compares), the class of a key by its path, and the
 * record id header names a reload retires.
 * Pure: no I/O.
 */
#include "config_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "headers.h"

/* ---- the check ------------------------------------------------------------- */

/*
 * How a refusal names what changed: its comparison's words; else a RESTART
 * key by its top-level key (the part of the process built from it), an
 * IDENTITY key by its dotted path.
 */
static void config_change_name(const struct config_change *ch, enum config_reload cls, char *out,
                               size_t outlen)
{
    if (ch->what != NULL)
        snprintf(out, outlen, "%s", ch->what);
    else if (cls == CONFIG_RELOAD_RESTART || ch->at_top)
        snprintf(out, outlen, "%s", cls == CONFIG_RELOAD_RESTART ? ch->top : ch->key->name);
    else
        snprintf(out, outlen, "%s.%s", ch->section->name, ch->key->name);
}

enum config_reload config_reload_check(const struct config *boot, const struct config *running,
                                       const struct config *next, char *why, size_t whylen)
{
    struct config_change ch;
    char name[128];

    if (whylen > 0)
        why[0] = '\0';
    /* what the process was built from at startup */
    if (config_walk(&config_root_section, 0, CONFIG_RELOAD_RESTART, boot, next, NULL, &ch)) {
        config_change_name(&ch, CONFIG_RELOAD_RESTART, name, sizeof(name));
        snprintf(why, whylen, "%s changed, which needs a restart", name);
        return CONFIG_RELOAD_RESTART;
    }
    /* what records were written under: a second SIGHUP must not undo what a first kept */
    if (config_walk(&config_root_section, 0, CONFIG_RELOAD_IDENTITY, running, next, NULL, &ch)) {
        config_change_name(&ch, CONFIG_RELOAD_IDENTITY, name, sizeof(name));
        snprintf(why, whylen, "%s changed, which changes record identity (retries of earlier "
                 "keys would execute again)", name);
        return CONFIG_RELOAD_IDENTITY;
    }
    /* fail closed: an edit that drops every token must not open the admin API unnoticed */
    if (running->n_operators > 0 && next->n_operators == 0) {
        snprintf(why, whylen, "admin.operators_file and admin.token_file are both gone, which "
                 "would open the admin API to every client of its address without a token; "
                 "restart to do that on purpose");
        return CONFIG_RELOAD_RESTART;
    }
    return CONFIG_RELOAD_LIVE;
}

/* ---- classes by path ------------------------------------------------------- */

/* The class of the key at path (dotted) under sec, or CONFIG_RELOAD_UNSET. */
static enum config_reload config_section_reload(const struct config_section *sec,
                                                const char *path)
{
    const char *dot = strchr(path, '.');
    size_t len = dot != NULL ? (size_t)(dot - path) : strlen(path);

    for (size_t t = 0; t < CONFIG_ARRAY_SIZE(sec->tables) && sec->tables[t] != NULL; t++) {
        for (const struct config_key *key = sec->tables[t]; key->name != NULL; key++) {
            if (strlen(key->name) != len || strncmp(key->name, path, len) != 0 ||
                (key->flags & sec->exclude))
                continue;
            if (dot == NULL)
                return key->reload;
            return key->kind == CONFIG_SECTION ? config_section_reload(key->section, dot + 1)
                                               : CONFIG_RELOAD_UNSET;
        }
    }
    return CONFIG_RELOAD_UNSET;
}

enum config_reload config_key_reload(const char *path)
{
    enum config_reload r = config_section_reload(&config_root_section, path);

    for (const struct config_key *key = config_root_keys;
         r == CONFIG_RELOAD_UNSET && key->name != NULL; key++) {
        if (key->kind == CONFIG_ROUTES)
            r = config_section_reload(key->section, path);
    }
    return r;
}

/* ---- retired record id header names ---------------------------------------- */

/* Whether next reads name from its clients: its own record id name, a route's key or scope. */
static bool config_record_id_name_used(const struct config *next, const char *name)
{
    if (next->upstream_record_id_header != NULL &&
        header_name_alike(next->upstream_record_id_header, name))
        return true;
    for (size_t i = 0; i < next->n_routes; i++) {
        const struct route_policy *policy = &next->routes[i].policy;

        if (policy->key_from == KEY_FROM_HEADER && header_name_alike(policy->key_header, name))
            return true;
        for (size_t j = 0; j < policy->n_scope_headers; j++)
            if (header_name_alike(policy->scope_headers[j], name))
                return true;
    }
    return false;
}

int config_retire_record_id_header(struct config *next, const struct config *running)
{
    const char *from[CONFIG_RECORD_ID_RETIRED_MAX + 1], *kept[CONFIG_RECORD_ID_RETIRED_MAX + 1];
    size_t n_from = 0, n_kept = 0;
    bool retired_now;
    char **names;

    for (size_t i = 0; i < running->n_upstream_record_id_retired; i++)
        from[n_from++] = running->upstream_record_id_retired[i];
    if (running->upstream_record_id_header != NULL)
        from[n_from++] = running->upstream_record_id_header;
    /* newest first, so that a name that comes back keeps its newest place */
    for (size_t i = n_from; i-- > 0;) {
        bool seen = config_record_id_name_used(next, from[i]);

        for (size_t j = 0; j < n_kept && !seen; j++)
            seen = header_name_alike(kept[j], from[i]);
        if (!seen)
            kept[n_kept++] = from[i];
    }
    if (n_kept > CONFIG_RECORD_ID_RETIRED_MAX) /* the oldest goes */
        n_kept = CONFIG_RECORD_ID_RETIRED_MAX;
    if (n_kept == 0)
        return 0;
    /* running's own name, when kept, is the newest: from[] ends with it */
    retired_now = running->upstream_record_id_header != NULL &&
                  kept[0] == running->upstream_record_id_header;
    if ((names = calloc(n_kept, sizeof(*names))) == NULL)
        return -1;
    for (size_t i = 0; i < n_kept; i++) { /* back to oldest first */
        if ((names[i] = strdup(kept[n_kept - 1 - i])) == NULL) {
            while (i-- > 0)
                free(names[i]);
            free(names);
            return -1;
        }
    }
    next->upstream_record_id_retired = names;
    next->n_upstream_record_id_retired = n_kept;
    return retired_now ? 1 : 0;
}
