/*
 * cli.c - `idempotency-proxy admin`: the command line (cli_args.c), the
 * configuration loaded by the proxy's own loader (config_create: the same
 * checks, the same admin.token_file), the admin listener and its token
 * (cli_http.c), then the verb (cli_records.c, cli_inbox.c).
 */
#include "cli.h"
#include "cli_int.h"

#include <stdio.h>

#include "config.h"

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
