/*
 * cli.c - `idempotency-proxy admin`: the command line (cli_args.c), the
 * configuration loaded by the proxy's own loader (config_create: the same
 * checks, the same admin.token_file), the admin listener and its token
 * (cli_http.c), then the verb (cli_records.c, cli_inbox.c).
 */
#include "cli.h"
#include "cli_int.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "route.h"

/*
 * --route names a route as the records do: its path as written in FILE,
 * without a pattern's trailing '*' (taken off here when given). A filter
 * that names none matches nothing (records of a route since removed
 * excepted): say so on stderr, with the names, rather than let "0 held
 * records" read as "nothing is held". route: o->route, in argv (writable).
 */
static bool cli_route_named(const struct config *cfg, const char *name, size_t len)
{
    for (size_t i = 0; i < cfg->n_routes; i++)
        if (cfg->routes[i].path_len == len && memcmp(cfg->routes[i].path, name, len) == 0)
            return true;
    return false;
}

static void cli_note_route(struct cli_opts *o, const struct config *cfg, char *route)
{
    size_t len;

    if (route == NULL || o->verb == CLI_INBOX)
        return;
    len = strlen(route);
    if (cli_route_named(cfg, route, len))
        return;
    /* the pattern as written in the file, "/v1/payments*": the records name "/v1/payments" */
    if (len > 1 && route[len - 1] == '*' && cli_route_named(cfg, route, len - 1)) {
        route[len - 1] = '\0';
        return;
    }
    fprintf(stderr, "idempotency-proxy: admin: note: no route of %s is named \"%s\"; records "
            "name their route by its path as written there:", o->file, o->route);
    for (size_t i = 0; i < cfg->n_routes; i++)
        fprintf(stderr, "%s \"%s\"", i == 0 ? "" : ",", cfg->routes[i].path);
    fputc('\n', stderr);
}

int cli_admin_main(int argc, char **argv)
{
    struct cli_opts o;
    struct cli_client c;
    struct config *cfg;
    char err[1024];
    int rc = cli_args_parse(&o, argc, argv);

    if (rc != CLI_DONE) {
        cli_args_deinit(&o);
        return rc < 0 ? CLI_DONE : rc;
    }
    cfg = config_create(o.file, err, sizeof(err));
    if (cfg == NULL) {
        cli_print_error("%s", err);
        cli_args_deinit(&o);
        return CLI_USAGE;
    }
    cli_note_route(&o, cfg, (char *)o.route);
    rc = cli_http_open(&c, cfg, o.admin_url, o.token_file, o.timeout_s, err, sizeof(err));
    config_unref(cfg); /* the address and the token are copied: nothing else is needed */
    if (rc != CLI_DONE)
        cli_print_error("%s", err);
    else
        rc = o.verb == CLI_INBOX ? cli_inbox_run(&o, &c) : cli_records_run(&o, &c);
    cli_http_close(&c);
    cli_args_deinit(&o);
    return rc;
}
