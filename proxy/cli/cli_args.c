/*
 * cli_args.c - `idempotency-proxy admin`'s command line: the options (before
 * or after the verb: getopt_long permutes them), which verb takes which,
 * the positional arguments, and the help text. Everything wrong here is a
 * usage error (exit 2) before the configuration is even read.
 */
#include "cli_int.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>

#include "lookup.h"

#define CLI_RECORD_ID_LEN 32
/* --timeout at most: a bulk change of many records is one exchange; an hour bounds a hang. */
#define CLI_TIMEOUT_MAX_S 3600
#define CLI_TIMEOUT_DEFAULT_S 60
/*
 * The calls a walk of list or bulk takes at most by default: a listing's
 * call passes over at least 8,000 record keys unless its page is full, a
 * bulk change's 128,000 (docs/operations.md); more is a walk that does not
 * end.
 */
#define CLI_MAX_CALLS_DEFAULT 10000
#define CLI_MAX_CALLS_MAX 10000000

/* Which verbs take an option: one bit per enum cli_verb. */
#define V(verb) (1u << (verb))
#define V_ALL 0xffffu

enum cli_opt {
    OPT_CONFIG = 'c', OPT_HELP = 'h',
    OPT_ADMIN = 256, OPT_TOKEN_FILE, OPT_JSON, OPT_TIMEOUT, OPT_STATE, OPT_ROUTE, OPT_LIMIT,
    OPT_PATH, OPT_KEY, OPT_HEADER, OPT_METHOD, OPT_STATUS, OPT_BODY, OPT_BODY_FILE, OPT_REASON,
    OPT_IF_MATCH, OPT_CONFIRM, OPT_SECONDS, OPT_ACTION, OPT_OLDER_THAN, OPT_DRY_RUN, OPT_APPLY,
    OPT_ALL, OPT_MATCH_REASON, OPT_BEFORE, OPT_MAX_CALLS, OPT_ONLY_FROM, OPT_END,
};

static const struct option cli_options[] = {
    { "config", required_argument, NULL, OPT_CONFIG },
    { "help", no_argument, NULL, OPT_HELP },
    { "admin", required_argument, NULL, OPT_ADMIN },
    { "token-file", required_argument, NULL, OPT_TOKEN_FILE },
    { "json", no_argument, NULL, OPT_JSON },
    { "timeout", required_argument, NULL, OPT_TIMEOUT },
    { "state", required_argument, NULL, OPT_STATE },
    { "route", required_argument, NULL, OPT_ROUTE },
    { "limit", required_argument, NULL, OPT_LIMIT },
    { "path", required_argument, NULL, OPT_PATH },
    { "key", required_argument, NULL, OPT_KEY },
    { "header", required_argument, NULL, OPT_HEADER },
    { "method", required_argument, NULL, OPT_METHOD },
    { "status", required_argument, NULL, OPT_STATUS },
    { "body", required_argument, NULL, OPT_BODY },
    { "body-file", required_argument, NULL, OPT_BODY_FILE },
    { "reason", required_argument, NULL, OPT_REASON },
    { "if-match", required_argument, NULL, OPT_IF_MATCH },
    { "confirm", required_argument, NULL, OPT_CONFIRM },
    { "seconds", required_argument, NULL, OPT_SECONDS },
    { "action", required_argument, NULL, OPT_ACTION },
    { "older-than", required_argument, NULL, OPT_OLDER_THAN },
    { "dry-run", no_argument, NULL, OPT_DRY_RUN },
    { "apply", no_argument, NULL, OPT_APPLY },
    { "only-from", required_argument, NULL, OPT_ONLY_FROM },
    { "all", no_argument, NULL, OPT_ALL },
    { "match-reason", required_argument, NULL, OPT_MATCH_REASON },
    { "before", required_argument, NULL, OPT_BEFORE },
    { "max-calls", required_argument, NULL, OPT_MAX_CALLS },
    { NULL, 0, NULL, 0 },
};

/* The verbs each option belongs to; the common ones belong to all. */
static unsigned cli_option_verbs(int opt)
{
    switch (opt) {
    case OPT_STATE: case OPT_ROUTE: return V(CLI_LIST) | V(CLI_BULK);
    case OPT_LIMIT: return V(CLI_LIST);
    case OPT_MAX_CALLS: return V(CLI_LIST) | V(CLI_BULK);
    case OPT_PATH: case OPT_KEY: case OPT_METHOD: return V(CLI_LOOKUP);
    case OPT_HEADER: return V(CLI_LOOKUP) | V(CLI_RESOLVE) | V(CLI_BULK);
    case OPT_STATUS: case OPT_BODY: case OPT_BODY_FILE: return V(CLI_RESOLVE) | V(CLI_BULK);
    case OPT_REASON: return V(CLI_RESOLVE) | V(CLI_PURGE) | V(CLI_EXTEND) | V(CLI_BULK);
    case OPT_IF_MATCH: return V(CLI_RESOLVE) | V(CLI_EXTEND);
    case OPT_CONFIRM: return V(CLI_PURGE) | V(CLI_BULK);
    case OPT_SECONDS: return V(CLI_EXTEND);
    case OPT_ACTION: case OPT_OLDER_THAN: case OPT_DRY_RUN: case OPT_APPLY: case OPT_ONLY_FROM:
        return V(CLI_BULK);
    case OPT_ALL: case OPT_MATCH_REASON: case OPT_BEFORE: return V(CLI_INBOX);
    default: return V_ALL;
    }
}

/* Whether opt takes a value (its flags may be given again: they say the same). */
static bool cli_option_takes_value(int opt)
{
    for (const struct option *d = cli_options; d->name != NULL; d++)
        if (d->val == opt)
            return d->has_arg == required_argument;
    return false;
}

/* opt as the help names it: "-c/--config", "--reason". */
static const char *cli_option_name(int opt)
{
    static char name[64];

    for (const struct option *d = cli_options; d->name != NULL; d++)
        if (d->val == opt) {
            snprintf(name, sizeof(name), "%s--%s", opt == OPT_CONFIG ? "-c/" : "", d->name);
            return name;
        }
    return "an option";
}

static const char *const cli_verb_names[] = {
    [CLI_LIST] = "list", [CLI_SHOW] = "show", [CLI_LOOKUP] = "lookup",
    [CLI_RESOLVE] = "resolve", [CLI_PURGE] = "purge", [CLI_EXTEND] = "extend",
    [CLI_BULK] = "bulk", [CLI_INBOX] = "inbox",
};

static const char *const cli_inbox_names[] = {
    [CLI_INBOX_LIST] = "list", [CLI_INBOX_DEAD] = "dead", [CLI_INBOX_PAUSE] = "pause",
    [CLI_INBOX_RESUME] = "resume", [CLI_INBOX_REDELIVER] = "redeliver",
    [CLI_INBOX_DELETE] = "delete",
};

void cli_args_usage(FILE *out)
{
    fprintf(out,
        "usage: idempotency-proxy admin -c FILE [--json] [--admin URL] [--token-file F]\n"
        "                               [--timeout SECONDS] VERB [ARGS]\n"
        "\n"
        "Talks to the admin listener of the configuration FILE (admin_listen; 0.0.0.0 and [::]\n"
        "are reached on loopback) with the token of its admin.token_file. Writes no file.\n"
        "\n"
        "verbs:\n"
        "  list [--state S] [--route R] [--limit N] [--max-calls N]\n"
        "        held records, every page (every held state without --state)\n"
        "  show ID\n"
        "        one record, and its ETag (for resolve --if-match)\n"
        "  lookup --path P --key K [--header 'Name: value']... [--method M]\n"
        "        the record a request maps to, and whether Redis holds it\n"
        "  resolve ID --status N [--header 'Name: value']... (--body S | --body-file F)\n"
        "          --reason R [--if-match ETAG]\n"
        "        record the answer the upstream gave: retries replay it\n"
        "  purge ID --reason R [--confirm re-execute]\n"
        "        delete a record: the next retry executes again\n"
        "  extend ID --seconds N --reason R [--if-match ETAG]\n"
        "        keep a held record N seconds from now\n"
        "  bulk --action resolve|purge --state S [--route R] [--older-than SECONDS]\n"
        "       [--dry-run | --apply --reason R] [--status N --header ... --body S |\n"
        "       --body-file F] [--confirm re-execute] [--max-calls N] [--only-from F]\n"
        "        every matching record; lists them only (a dry run) unless --apply;\n"
        "        --only-from F (a dry run's output, \"-\": stdin) changes only the ids it lists\n"
        "  inbox [list]                     each queued route: depth, dead letters, paused\n"
        "  inbox dead ROUTE                 the route's dead letters\n"
        "  inbox pause ROUTE                stop the route's deliveries\n"
        "  inbox resume ROUTE               start them again\n"
        "  inbox redeliver ROUTE ID         one dead letter back into the stream\n"
        "  inbox redeliver ROUTE --all [--match-reason S] [--before TIME]\n"
        "                                   every dead letter (or those matching)\n"
        "  inbox delete ROUTE ID            drop one dead letter\n"
        "\n"
        "  ID is a record id (32 hex characters); ROUTE a queued route's path as written\n"
        "  (/webhooks/stripe) or its percent-encoded form. --body-file - reads stdin.\n"
        "\n"
        "options:\n"
        "  -c, --config FILE   the proxy's configuration, loaded as the proxy loads it\n"
        "  --json              print the endpoint's JSON answer as it is, one document\n"
        "  --admin URL         http://HOST:PORT of the admin listener instead of admin_listen\n"
        "  --token-file F      your bearer token's file, needed with admin.operators_file;\n"
        "                      instead of admin.token_file. \"-\": the first line of stdin\n"
        "                      (kubectl exec -i), and --body-file - or --only-from - read\n"
        "                      the rest\n"
        "  --timeout SECONDS   how long one exchange may take (default %d)\n"
        "  --max-calls N       list, bulk: the calls of the walk at most (default %d); a walk\n"
        "                      stopped there, or whose next_cursor repeats, exits 1\n"
        "  An option that takes a value is given once (--header as often as needed).\n"
        "\n"
        "exit status: 0 done; 1 refused by the proxy, or not found (the reason on stderr),\n"
        "or a walk that does not end; 2 usage error, or FILE or the token file does not\n"
        "load (nothing sent); 3 the admin listener could not be reached (nothing sent), or\n"
        "gave a read no whole answer; 4 a change was sent and the proxy could not tell\n"
        "whether it was made (a 502, 503 or 504, or no whole answer): look with show (or\n"
        "inbox dead) before sending it again.\n",
        CLI_TIMEOUT_DEFAULT_S, CLI_MAX_CALLS_DEFAULT);
}

/* A whole number of [min, max] from text; 0, or -1 after the usage line. */
static int cli_number(const char *name, const char *text, long long min, long long max,
                      long long *out)
{
    char *end;
    long long v;

    errno = 0;
    v = strtoll(text, &end, 10);
    if (text[0] == '\0' || *end != '\0' || errno != 0 || v < min || v > max) {
        cli_print_error("--%s takes a whole number from %lld to %lld, not '%s'", name, min, max,
                        text);
        return -1;
    }
    *out = v;
    return 0;
}

/* Whether id is a record id: 32 lowercase hex characters, as the access log prints it. */
static bool cli_record_id_valid(const char *id)
{
    return strlen(id) == CLI_RECORD_ID_LEN &&
           strspn(id, "0123456789abcdef") == CLI_RECORD_ID_LEN;
}

/* Whether text has a control character (a line break would end a field or a line early). */
static bool cli_has_control(const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++)
        if (*p < 0x20 || *p == 0x7f)
            return true;
    return false;
}

/* One option's value into o; 0, or -1 after the usage line. */
static int cli_args_set(struct cli_opts *o, int opt, const char *arg)
{
    const char *why;

    switch (opt) {
    case OPT_CONFIG: o->file = arg; break;
    case OPT_ADMIN: o->admin_url = arg; break;
    case OPT_TOKEN_FILE: o->token_file = arg; break;
    case OPT_JSON: o->json = true; break;
    case OPT_TIMEOUT: return cli_number("timeout", arg, 1, CLI_TIMEOUT_MAX_S, &o->timeout_s);
    case OPT_STATE: o->state = arg; break;
    case OPT_ROUTE: o->route = arg; break;
    case OPT_LIMIT: return cli_number("limit", arg, 1, 1000000000, &o->limit);
    case OPT_PATH: o->path = arg; break;
    case OPT_KEY: o->key = arg; break;
    case OPT_METHOD: o->method = arg; break;
    case OPT_HEADER:
        if (lookup_add_header(&o->headers, arg, &why) != 0) {
            cli_print_error("--header: %s", why);
            return -1;
        }
        break;
    case OPT_STATUS: return cli_number("status", arg, 100, 999, &o->status);
    case OPT_BODY: o->body = arg; break;
    case OPT_BODY_FILE: o->body_file = arg; break;
    case OPT_REASON: o->reason = arg; break;
    case OPT_IF_MATCH: o->if_match = arg; break;
    case OPT_CONFIRM: o->confirm = arg; break;
    case OPT_SECONDS: return cli_number("seconds", arg, 1, 100LL * 365 * 86400, &o->seconds);
    case OPT_ACTION: o->action = arg; break;
    case OPT_OLDER_THAN:
        return cli_number("older-than", arg, 0, 100LL * 365 * 86400, &o->older_than);
    case OPT_DRY_RUN: o->dry_run = true; break;
    case OPT_APPLY: o->apply = true; break;
    case OPT_ONLY_FROM: o->only_from = arg; break;
    case OPT_ALL: o->all = true; break;
    case OPT_MATCH_REASON: o->match_reason = arg; break;
    case OPT_BEFORE: o->before = arg; break;
    case OPT_MAX_CALLS:
        return cli_number("max-calls", arg, 1, CLI_MAX_CALLS_MAX, &o->max_calls);
    }
    return 0;
}

/* The positional arguments of the inbox verb: [list] | dead|pause|resume ROUTE | ... */
static int cli_args_inbox(struct cli_opts *o, char **pos, int n)
{
    size_t i;
    int want;

    if (n == 0) {
        o->inbox_verb = CLI_INBOX_LIST;
        return 0;
    }
    for (i = 0; i < sizeof(cli_inbox_names) / sizeof(cli_inbox_names[0]); i++)
        if (strcmp(pos[0], cli_inbox_names[i]) == 0)
            break;
    if (i == sizeof(cli_inbox_names) / sizeof(cli_inbox_names[0])) {
        cli_print_error("inbox takes list, dead, pause, resume, redeliver or delete, not '%s'",
                        pos[0]);
        return -1;
    }
    o->inbox_verb = (enum cli_inbox_verb)i;
    want = o->inbox_verb == CLI_INBOX_LIST ? 1
         : o->inbox_verb == CLI_INBOX_DELETE ? 3
         : o->inbox_verb == CLI_INBOX_REDELIVER ? (o->all ? 2 : 3) : 2;
    if (n != want) {
        cli_print_error("inbox %s takes %s", pos[0],
                        want == 1 ? "no argument"
                        : want == 2 ? "ROUTE" : "ROUTE ID (or, for redeliver, ROUTE --all)");
        return -1;
    }
    o->inbox_route = n > 1 ? pos[1] : NULL;
    o->id = n > 2 ? pos[2] : NULL;
    if ((o->all || o->match_reason != NULL || o->before != NULL) &&
        (o->inbox_verb != CLI_INBOX_REDELIVER || !o->all)) {
        cli_print_error("--all, --match-reason and --before go with inbox redeliver ROUTE --all");
        return -1;
    }
    if (o->id != NULL && !(strspn(o->id, "0123456789-") == strlen(o->id) && o->id[0] != '\0')) {
        cli_print_error("a dead letter's id is two numbers joined by '-' (inbox dead lists "
                        "them), not '%s'", o->id);
        return -1;
    }
    return 0;
}

/* What a verb needs besides its options' own checks; 0, or -1 after the usage line. */
static int cli_args_check(struct cli_opts *o, char **pos, int n)
{
    bool takes_id = o->verb == CLI_SHOW || o->verb == CLI_RESOLVE || o->verb == CLI_PURGE ||
                    o->verb == CLI_EXTEND;
    bool answer = o->status != CLI_UNSET || o->body != NULL || o->body_file != NULL ||
                  !TAILQ_EMPTY(&o->headers);

    if (o->verb == CLI_INBOX)
        return cli_args_inbox(o, pos, n);
    if (n != (takes_id ? 1 : 0)) {
        cli_print_error("%s takes %s", cli_verb_names[o->verb], takes_id ? "one record id"
                                                                      : "no argument");
        return -1;
    }
    if (takes_id && !cli_record_id_valid(pos[0])) {
        cli_print_error("a record id is 32 lowercase hex characters (the access log's "
                        "record_id), not '%s'", pos[0]);
        return -1;
    }
    o->id = takes_id ? pos[0] : NULL;
    /* a change needs its reason; a bulk dry run changes nothing */
    if ((o->verb == CLI_RESOLVE || o->verb == CLI_PURGE || o->verb == CLI_EXTEND ||
         (o->verb == CLI_BULK && o->apply)) && (o->reason == NULL || o->reason[0] == '\0')) {
        cli_print_error("%s needs --reason: why, for the audit trail", o->verb == CLI_BULK
                        ? "bulk --apply" : cli_verb_names[o->verb]);
        return -1;
    }
    if (o->reason != NULL && cli_has_control(o->reason)) {
        cli_print_error("--reason is one line of text");
        return -1;
    }
    if (o->only_from != NULL && o->body_file != NULL && strcmp(o->only_from, "-") == 0 &&
        strcmp(o->body_file, "-") == 0) {
        cli_print_error("--only-from - and --body-file -: stdin can be only one of them");
        return -1;
    }
    if (o->confirm != NULL && strcmp(o->confirm, "re-execute") != 0) {
        cli_print_error("--confirm takes one value, re-execute: the next retry of the record "
                        "executes again");
        return -1;
    }
    if (o->if_match != NULL && (o->if_match[0] == '\0' || strlen(o->if_match) > 256 ||
                                cli_has_control(o->if_match))) {
        cli_print_error("--if-match takes the etag that show prints");
        return -1;
    }
    switch (o->verb) {
    case CLI_LOOKUP:
        if (o->path == NULL || o->key == NULL) {
            cli_print_error("lookup needs --path and --key");
            return -1;
        }
        break;
    case CLI_EXTEND:
        if (o->seconds == CLI_UNSET) {
            cli_print_error("extend needs --seconds: the record's lifetime from now");
            return -1;
        }
        break;
    case CLI_BULK:
        if (o->action == NULL || (strcmp(o->action, "resolve") != 0 &&
                                  strcmp(o->action, "purge") != 0)) {
            cli_print_error("bulk needs --action resolve or --action purge");
            return -1;
        }
        if (o->state == NULL) {
            cli_print_error("bulk needs --state: claimed, outcome-unknown or resolved");
            return -1;
        }
        if (o->dry_run && o->apply) {
            cli_print_error("--dry-run and --apply: one or the other (a dry run without either)");
            return -1;
        }
        if (strcmp(o->action, "purge") == 0 && answer) {
            cli_print_error("bulk --action purge takes no answer (--status, --header, --body)");
            return -1;
        }
        if (strcmp(o->action, "resolve") == 0 && o->confirm != NULL) {
            cli_print_error("--confirm re-execute goes with --action purge");
            return -1;
        }
        /* a dry run of a resolve lists what would change: the answer comes with --apply */
        if (strcmp(o->action, "purge") == 0 ||
            (!o->apply && o->status == CLI_UNSET && o->body == NULL && o->body_file == NULL))
            break;
        /* a bulk resolve takes resolve's answer */
        __attribute__((fallthrough));
    case CLI_RESOLVE:
        if (o->status == CLI_UNSET || (o->body == NULL) == (o->body_file == NULL)) {
            cli_print_error("%s needs --status and one of --body or --body-file (--body '' "
                            "for an empty body)", o->verb == CLI_BULK ? "bulk --action resolve"
                                                                     : "resolve");
            return -1;
        }
        break;
    default:
        break;
    }
    return 0;
}

int cli_args_parse(struct cli_opts *o, int argc, char **argv)
{
    char **pos = calloc((size_t)argc + 1, sizeof(*pos));
    bool seen[OPT_END] = { false };
    int opt, n = 0, rc = CLI_USAGE;
    size_t i;

    memset(o, 0, sizeof(*o));
    TAILQ_INIT(&o->headers);
    o->timeout_s = CLI_TIMEOUT_DEFAULT_S;
    o->max_calls = CLI_MAX_CALLS_DEFAULT;
    o->limit = o->status = o->seconds = o->older_than = CLI_UNSET;
    if (pos == NULL) {
        cli_print_error("out of memory");
        return CLI_USAGE;
    }
    optind = 1;
    opterr = 0;
    /* getopt_long permutes: the verb and its arguments may stand between the options */
    while ((opt = getopt_long(argc, argv, "c:h", cli_options, NULL)) != -1) {
        if (opt == OPT_HELP) {
            cli_args_usage(stdout);
            rc = -1;
            goto done;
        }
        if (opt == '?' || opt == ':') {
            cli_print_error("unknown option, or an option without its value: %s (admin --help)",
                            argv[optind - 1]);
            goto done;
        }
        /* two values of one option: which one was meant (-c: which cluster) is not ours to pick */
        if (seen[opt] && opt != OPT_HEADER && cli_option_takes_value(opt)) {
            cli_print_error("%s is given twice: give it once", cli_option_name(opt));
            goto done;
        }
        if (cli_args_set(o, opt, optarg) != 0)
            goto done;
        seen[opt] = true;
    }
    while (optind < argc)
        pos[n++] = argv[optind++];
    if (n == 0) {
        cli_print_error("which verb? (admin --help lists them)");
        goto done;
    }
    for (i = 0; i < sizeof(cli_verb_names) / sizeof(cli_verb_names[0]); i++)
        if (strcmp(pos[0], cli_verb_names[i]) == 0)
            break;
    if (i == sizeof(cli_verb_names) / sizeof(cli_verb_names[0])) {
        cli_print_error("no verb '%s' (admin --help lists them)", pos[0]);
        goto done;
    }
    o->verb = (enum cli_verb)i;
    for (const struct option *d = cli_options; d->name != NULL; d++) {
        if (seen[d->val] && !(cli_option_verbs(d->val) & V(o->verb))) {
            cli_print_error("%s does not take --%s", cli_verb_names[o->verb], d->name);
            goto done;
        }
    }
    if (o->file == NULL) {
        cli_print_error("-c FILE: the proxy's configuration is needed (admin --help)");
        goto done;
    }
    if (cli_args_check(o, pos + 1, n - 1) == 0)
        rc = CLI_DONE;
done:
    free(pos);
    return rc;
}

void cli_args_deinit(struct cli_opts *o)
{
    evhttp_clear_headers(&o->headers);
}
