/*
 * cli.h - `idempotency-proxy admin -c FILE VERB ...`, the operator CLI: it
 * loads FILE as the proxy does (admin.token_file included; no Redis) and
 * talks to that configuration's admin listener with its token
 * (docs/operations.md#the-operator-cli; CONTRACT section 15).
 */
#ifndef IDEM_CLI_H
#define IDEM_CLI_H

/*
 * Run the subcommand: argv[0] is "admin", argc counts it. Prints the
 * answer on stdout (with --json the endpoint's JSON document as it came),
 * a refusal or an error as one line on stderr; never the token or a key,
 * and the server's text with its control characters escaped; writes no
 * file. Returns the exit status: 0 done, 1 refused by the proxy or not
 * found (or a walk of list or bulk that does not end), 2 usage error (or
 * FILE or the token file does not load), 3 the admin listener could not be
 * reached (nothing sent) or gave a read no whole answer, 4 a change was
 * sent and the proxy could not tell whether it was made (enum cli_exit).
 */
int cli_admin_main(int argc, char **argv);

#endif
