/*
 * config_operators.c - pass 3 of the admin section (config.c): the file
 * admin.operators_file names, read with libyaml and the node reader of
 * config_node.c, so its errors name OPERATORS:LINE as the config's name
 * FILE:LINE (CONTRACT section 16):
 *
 *   operators:
 *     - name: alice                   # 1..64 of [A-Za-z0-9._@+-], unique
 *       token_sha256: 9f86d08...      # the SHA-256 of her bearer token, 64 hex digits
 *       rights: [read, resolve]       # read | resolve | purge; resolve and purge read too
 *
 * The file holds no token, only each token's digest: it may be read by
 * whoever deploys the proxy without giving anyone a way in. It is read at
 * every load, so a SIGHUP that removes an operator locks the token out at
 * the next request. Values are taken as written: no ${VAR} expansion.
 *
 * Also log.audit, where the admin requests' audit lines go.
 */
#include "config_int.h"
#include "hex.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

/* Largest operators file, bytes: 256 operators take about 40 KiB. */
#define CONFIG_OPERATORS_FILE_MAX (256 * 1024)

/* Where an error in an empty file points: its first line. */
static const yaml_node_t config_operators_top;

static const struct {
    const char *name;
    unsigned bits;
} config_rights[] = {
    { "read", CONFIG_RIGHT_READ },
    { "resolve", CONFIG_RIGHT_RESOLVE | CONFIG_RIGHT_READ },
    { "purge", CONFIG_RIGHT_PURGE | CONFIG_RIGHT_READ },
};

/* A name is 1..CONFIG_OPERATOR_NAME_MAX of A-Z a-z 0-9 . _ @ + -: it goes into every audit line. */
static bool config_operator_name_ok(const char *name, size_t len)
{
    if (len == 0 || len > CONFIG_OPERATOR_NAME_MAX || strlen(name) != len)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '@' || c == '+' || c == '-'))
            return false;
    }
    return true;
}

/* token_sha256 of node into out (65 bytes), lowercased: exactly 64 hex digits. */
static int config_operator_digest(struct config_loader *ld, yaml_node_t *node, const char *name,
                                  char *out)
{
    const char *text = (const char *)node->data.scalar.value;
    size_t len = node->data.scalar.length;

    if (node->type != YAML_SCALAR_NODE)
        return config_error(ld, node, "the token_sha256 of operator '%s' must be a single value",
                            name);
    if (len != 64 || strlen(text) != len ||
        strspn(text, "0123456789abcdefABCDEF") != len)
        return config_error(ld, node, "the token_sha256 of operator '%s' is not 64 hex digits "
                            "(%zu characters); write the SHA-256 of the token, e.g. "
                            "printf '%%s' \"$TOKEN\" | sha256sum", name, len);
    for (size_t i = 0; i < len; i++)
        out[i] = text[i] >= 'A' && text[i] <= 'F' ? (char)(text[i] - 'A' + 'a') : text[i];
    out[len] = '\0';
    return 0;
}

/* rights of node (a list of read, resolve, purge; at least one, none twice) into *bits. */
static int config_operator_rights(struct config_loader *ld, yaml_node_t *node, const char *name,
                                  unsigned *bits)
{
    size_t n = node->type == YAML_SEQUENCE_NODE ? config_items(node) : 0;
    unsigned named = 0;

    if (node->type != YAML_SEQUENCE_NODE || n == 0)
        return config_error(ld, node, "the rights of operator '%s' must be a list of read, "
                            "resolve or purge, e.g. [read, resolve]", name);
    *bits = 0;
    for (size_t i = 0; i < n; i++) {
        yaml_node_t *item = config_item(ld, node, i);
        size_t r;

        if (item->type != YAML_SCALAR_NODE)
            return config_error(ld, item, "a right is read, resolve or purge");
        for (r = 0; r < sizeof(config_rights) / sizeof(config_rights[0]); r++) {
            if (strcmp((const char *)item->data.scalar.value, config_rights[r].name) == 0)
                break;
        }
        if (r == sizeof(config_rights) / sizeof(config_rights[0]))
            return config_error(ld, item, "unknown right '%.64s' of operator '%s' (rights: "
                                "read, resolve, purge)", (const char *)item->data.scalar.value,
                                name);
        if (named & (1u << r))
            return config_error(ld, item, "right '%s' of operator '%s' is listed twice",
                                config_rights[r].name, name);
        named |= 1u << r;
        *bits |= config_rights[r].bits;
    }
    return 0;
}

/* One item of operators into ops[*n]; lines[i]: each operator's line so far. */
static int config_operator_item(struct config_loader *ld, yaml_node_t *item,
                                struct config_operator *ops, size_t *n, size_t *lines)
{
    static const char *const names[] = { "name", "token_sha256", "rights", NULL };
    struct config_operator *op = &ops[*n];
    yaml_node_t *namen, *digestn, *rightsn;
    const char *name;

    if (item->type != YAML_MAPPING_NODE)
        return config_error(ld, item, "each item of operators must be a mapping (- name: ..., "
                            "token_sha256: ..., rights: [...])");
    if (config_map_only(ld, item, names, "an operator", "name, token_sha256, rights") < 0)
        return -1;
    namen = config_lookup(ld->cur, item, "name");
    digestn = config_lookup(ld->cur, item, "token_sha256");
    rightsn = config_lookup(ld->cur, item, "rights");
    if (namen == NULL || digestn == NULL || rightsn == NULL)
        return config_error(ld, item, "an operator needs a name, a token_sha256 and rights");
    if (namen->type != YAML_SCALAR_NODE ||
        !config_operator_name_ok((const char *)namen->data.scalar.value,
                                 namen->data.scalar.length))
        return config_error(ld, namen, "an operator's name is 1 to %d characters of A-Z a-z "
                            "0-9 . _ @ + - (it names the operator in every audit line)",
                            CONFIG_OPERATOR_NAME_MAX);
    name = (const char *)namen->data.scalar.value;
    if (strcmp(name, "token") == 0)
        return config_error(ld, namen, "the name 'token' is kept for admin.token_file's "
                            "operator (the audit trail names that shared token so): give "
                            "this operator a name of their own");
    memcpy(op->name, name, namen->data.scalar.length + 1);
    if (config_operator_digest(ld, digestn, name, op->token_sha256) < 0 ||
        config_operator_rights(ld, rightsn, name, &op->rights) < 0)
        return -1;
    for (size_t i = 0; i < *n; i++) {
        if (strcmp(ops[i].name, op->name) == 0)
            return config_error(ld, namen, "duplicate operator '%s' (first at line %zu)", name,
                                lines[i]);
        if (strcmp(ops[i].token_sha256, op->token_sha256) == 0)
            return config_error(ld, digestn, "operator '%s' has the token of operator '%s' "
                                "(line %zu): each operator needs a token of their own, or the "
                                "audit trail cannot tell them apart", name, ops[i].name,
                                lines[i]);
    }
    lines[*n] = (size_t)namen->start_mark.line + 1;
    (*n)++;
    return 0;
}

/* The document's operators into ops (CONFIG_OPERATORS_MAX of room), *n of them. */
static int config_operators_list(struct config_loader *ld, struct config_doc *doc,
                                 struct config_operator *ops, size_t *n)
{
    static const char *const names[] = { "operators", NULL };
    static const char want[] = "write operators: [{name: ..., token_sha256: ..., rights: [...]}]";
    yaml_node_t *root = doc->root, *list;
    size_t lines[CONFIG_OPERATORS_MAX], items;

    if (root == NULL)
        return config_error(ld, &config_operators_top, "the operators file is empty: %s", want);
    if (root->type != YAML_MAPPING_NODE)
        return config_error(ld, root, "an operators file is a mapping: %s", want);
    if (config_map_only(ld, root, names, "the operators file", "operators") < 0)
        return -1;
    list = config_lookup(doc, root, "operators");
    if (list == NULL || list->type != YAML_SEQUENCE_NODE || config_items(list) == 0)
        return config_error(ld, list != NULL ? list : root, "the operators file names no "
                            "operator: %s", want);
    items = config_items(list);
    if (items > CONFIG_OPERATORS_MAX)
        return config_error(ld, config_item(ld, list, CONFIG_OPERATORS_MAX), "more than %d "
                            "operators", CONFIG_OPERATORS_MAX);
    for (size_t i = 0; i < items; i++) {
        if (config_operator_item(ld, config_item(ld, list, i), ops, n, lines) < 0)
            return -1;
    }
    return 0;
}

/* admin.operators_file into ops, *n of them. */
static int config_operators_read(struct config_loader *ld, struct config_operator *ops,
                                 size_t *n)
{
    struct config *cfg = ld->cfg;
    struct config_doc doc = { .name = cfg->admin_operators_file };
    yaml_node_t *where = config_lookup(&ld->user, config_lookup(&ld->user, ld->user.root,
                                                                "admin"), "operators_file");
    char *text, why[600];
    size_t len;
    int rc;

    if (config_file_read_max(cfg->admin_operators_file, CONFIG_OPERATORS_FILE_MAX, &text, &len,
                             why, sizeof(why)) < 0)
        return config_error(ld, where, "admin.operators_file: %s", why);
    rc = config_doc_parse(ld, &doc, text, len);
    free(text);
    if (rc == 0) {
        ld->cur = &doc;
        rc = config_operators_list(ld, &doc, ops, n);
    }
    if (doc.loaded)
        yaml_document_delete(&doc.yaml);
    ld->cur = &ld->user;
    return rc;
}

int config_finish_operators(struct config_loader *ld)
{
    struct config *cfg = ld->cfg;
    struct config_operator *ops;
    size_t n = 0;

    if (cfg->admin_operators_file == NULL && cfg->admin_token_file == NULL)
        return 0;
    ops = calloc(CONFIG_OPERATORS_MAX + 1, sizeof(*ops));
    if (ops == NULL)
        return config_oom(ld, NULL);
    if (cfg->admin_operators_file != NULL && config_operators_read(ld, ops, &n) < 0) {
        free(ops);
        return -1;
    }
    if (cfg->admin_token_file != NULL) {
        struct config_operator *op = &ops[n];
        yaml_node_t *where = config_lookup(&ld->user, config_lookup(&ld->user, ld->user.root,
                                                                    "admin"), "token_file");

        snprintf(op->name, sizeof(op->name), "token");
        hex_lower(cfg->admin_token.digest, sizeof(cfg->admin_token.digest), op->token_sha256);
        op->rights = CONFIG_RIGHTS_ALL;
        for (size_t i = 0; i < n; i++) {
            if (strcmp(ops[i].token_sha256, op->token_sha256) == 0) {
                config_error(ld, where, "admin.token_file is the operator 'token' with every "
                             "right, and admin.operators_file gives its token to '%s' "
                             "already; give each token to one operator only", ops[i].name);
                free(ops);
                return -1;
            }
        }
        n++;
    }
    cfg->operators = ops;
    cfg->n_operators = n;
    return 0;
}

const struct config_operator *config_operator_find(const struct config *cfg,
                                                   const char *token_sha256)
{
    const struct config_operator *found = NULL;

    for (size_t i = 0; i < cfg->n_operators; i++) {
        if (CRYPTO_memcmp(cfg->operators[i].token_sha256, token_sha256, 64) == 0)
            found = &cfg->operators[i];
    }
    return found;
}

int config_set_audit_log(struct config_loader *ld, const struct config_key *key,
                         yaml_node_t *node, char **text, void *obj)
{
    char **field = (char **)((char *)obj + key->offset);
    char *dir, *slash;
    struct stat st;
    int ok;

    if ((*text)[0] == '\0')
        return config_error(ld, node, "log.%s may not be empty: stdout, stderr, or the file "
                            "the audit lines are appended to", key->name);
    if (strcmp(*text, "stdout") != 0 && strcmp(*text, "stderr") != 0) {
        /* checked, not opened: `-t` and the operator CLI read this file too, and create nothing */
        if (stat(*text, &st) == 0 && !S_ISREG(st.st_mode)) {
            return config_error(ld, node, "log.%s: %s is not a regular file (a FIFO or a "
                                "device could stop the threads that write audit lines)",
                                key->name, *text);
        } else if (access(*text, F_OK) == 0) {
            ok = access(*text, W_OK);
        } else {
            if ((dir = strdup(*text)) == NULL)
                return config_oom(ld, node);
            slash = strrchr(dir, '/');
            if (slash == dir)
                slash[1] = '\0';
            else if (slash != NULL)
                *slash = '\0';
            ok = access(slash != NULL ? dir : ".", W_OK | X_OK);
            free(dir);
        }
        if (ok != 0)
            return config_error(ld, node, "log.%s: cannot append to %s: %s", key->name, *text,
                                strerror(errno));
    }
    free(*field);
    *field = *text; /* taken: the loader frees what is left in *text */
    *text = NULL;
    return 0;
}
