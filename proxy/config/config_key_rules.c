/*
 * config_key_rules.c - the rules a route puts on its idempotency keys
 * (docs/client-contract.md#key-rules): key_pattern's setter (pass 2;
 * key_min_length shares config_set_key_length with key_max_length) and the
 * checks of key_min_length, key_pattern and scope_required once a policy is
 * whole (pass 3). The matching itself is classify.c's.
 *
 * key_pattern is a POSIX extended regular expression (regcomp, REG_EXTENDED)
 * that the whole key must match. It is compiled once, here, as
 * "^(PATTERN)$" with REG_NOSUB, so that `a|b` cannot become `^a|b$` (a key
 * that merely ends in b). The added group must hold all of PATTERN: glibc
 * reads a ')' without its '(' as a literal, so `a)|x(b)` compiles alone and
 * would close the group early ("^(a)|x(b))$" matches any key that starts
 * with a). So PATTERN must compile alone, and "(" PATTERN must not (its
 * '(' left open, REG_EPAREN): then no ')' of PATTERN can close the group.
 * Back-references (\1 to \9, a GNU extension in extended syntax) are
 * refused: they are the one construct with which glibc's matcher
 * backtracks, at a cost that grows exponentially with the key's length;
 * without them it runs as an automaton over the key, so a key of
 * key_max_length bytes (at most CONFIG_MAX_KEY_LENGTH) bounds the work.
 */
#include "config_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void config_key_pattern_free(struct route_policy *policy)
{
    if (policy->key_regex != NULL) {
        regfree(policy->key_regex);
        free(policy->key_regex);
        policy->key_regex = NULL;
    }
    free(policy->key_pattern);
    policy->key_pattern = NULL;
}

/* Whether pattern has a back-reference: a backslash, then a digit 1 to 9. */
static bool config_has_back_reference(const char *pattern)
{
    for (const char *p = pattern; *p != '\0'; p++) {
        if (*p != '\\' || p[1] == '\0')
            continue;
        if (p[1] >= '1' && p[1] <= '9')
            return true;
        p++; /* an escaped character, a backslash included, is read as one */
    }
    return false;
}

/* regcomp's refusal of pattern in key's words; -1 after config_error. */
static int config_regex_error(struct config_loader *ld, const struct config_key *key,
                              yaml_node_t *node, const char *pattern, int rc, regex_t *re)
{
    char why[160];

    regerror(rc, re, why, sizeof(why));
    return config_error(ld, node, "bad %s '%s': %s (a POSIX extended regular expression, e.g. "
                        "'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}')",
                        key->name, pattern, why);
}

int config_set_key_pattern(struct config_loader *ld, const struct config_key *key,
                           yaml_node_t *node, char **text, void *obj)
{
    struct route_policy *policy = obj;
    regex_t *re;
    char *anchored;
    int rc;

    if ((*text)[0] == '\0')
        return config_error(ld, node, "%s may not be empty: leave it out for no pattern",
                            key->name);
    if (config_has_back_reference(*text))
        return config_error(ld, node, "bad %s '%s': back-references (\\1 to \\9) are not "
                            "allowed: matching them costs time exponential in the key's "
                            "length", key->name, *text);
    re = malloc(sizeof(*re));
    anchored = malloc(strlen(*text) + sizeof("^()$"));
    if (re == NULL || anchored == NULL) {
        free(re);
        free(anchored);
        return config_oom(ld, node);
    }
    rc = regcomp(re, *text, REG_EXTENDED | REG_NOSUB);
    if (rc == 0) {
        regfree(re);
        sprintf(anchored, "(%s", *text); /* must leave its '(' open: see the top */
        rc = regcomp(re, anchored, REG_EXTENDED | REG_NOSUB);
        if (rc == 0) {
            regfree(re);
            free(re);
            free(anchored);
            return config_error(ld, node, "bad %s '%s': a ')' without its '(' (write \\) for "
                                "a literal one) would end the pattern early and leave the rest "
                                "of the key unchecked", key->name, *text);
        }
        if (rc == REG_EPAREN) {
            sprintf(anchored, "^(%s)$", *text);
            rc = regcomp(re, anchored, REG_EXTENDED | REG_NOSUB);
        }
    }
    free(anchored);
    if (rc != 0) {
        config_regex_error(ld, key, node, *text, rc, re);
        free(re);
        return -1;
    }
    config_key_pattern_free(policy);
    policy->key_regex = re;
    policy->key_pattern = config_take(text);
    return 0;
}

int config_check_key_rules(struct config_loader *ld, const struct route_policy *policy,
                           yaml_node_t *map)
{
    ld->cur = &ld->user;
    if (policy->key_min_length > policy->key_max_length)
        return config_error(ld, config_blame(&ld->user, map, "key_min_length", "key_max_length"),
                            "key_min_length (%zu) must not be more than key_max_length (%zu)",
                            policy->key_min_length, policy->key_max_length);
    if (policy->scope_required && policy->n_scope_headers == 0)
        return config_error(ld, config_blame(&ld->user, map, "scope_headers", "scope_required"),
                            "scope_required needs scope_headers: name the headers every "
                            "protected request must send, e.g. scope_headers: [X-Account-Id]");
    return 0;
}
