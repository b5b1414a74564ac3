/*
 * config_int.h - what the files of the config module share and nothing
 * outside it includes (but its unit test, which walks the schema): the
 * schema's types (a key, its kind, flags, reload class and comparison), the
 * tables, the loader's state, the passes, the message and node helpers
 * (config_node.c), the typed setters that config_set.c implements and
 * config_schema.c's key tables name, and the reload comparisons and their
 * walk (config_compare.c).
 *
 * Ownership rule of every setter: the pass that runs a setter expands the
 * scalar itself (config_scalar: ${VAR}, null as "") and lends the text in
 * *text; a setter that keeps the string takes it by setting *text = NULL;
 * the pass always frees *text afterwards. So a setter never frees the text
 * and an error is simply `return config_error(...)`.
 */
#ifndef IDEM_CONFIG_INT_H
#define IDEM_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <yaml.h>

#include "config.h"
#include "config_value.h"

struct config_loader;
struct config_key;
struct config_section;

#define CONFIG_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/*
 * Converts one expanded value into the field of obj that key names (obj is
 * the struct config, a struct route_policy or a struct route, as the key's
 * table says); node is where the value sits, for the message. Takes *text
 * (sets it NULL) when it keeps the string. Returns 0, or -1 after
 * config_error. For a list key it runs once per item.
 */
typedef int config_setter(struct config_loader *ld, const struct config_key *key,
                          yaml_node_t *node, char **text, void *obj);

/*
 * A list key's start, before its setter runs per item: checks the count n
 * of items of list and resets the field. Returns 0, or -1 after config_error.
 */
typedef int config_list_begin(struct config_loader *ld, const struct config_key *key,
                              yaml_node_t *list, size_t n, void *obj);

/* What kind of YAML node a key takes; checked in pass 1. */
enum config_kind {
    CONFIG_SCALAR,          /* one value */
    CONFIG_LIST,            /* a list of values; null counts as [] */
    CONFIG_SCALAR_OR_LIST,  /* one value or a list of values (secret) */
    CONFIG_SECTION,         /* a mapping with its own key table; null counts as {} */
    CONFIG_ROUTES,          /* a list of route mappings; null counts as [] */
};

#define CONFIG_ROUTE_ONLY 0x1u  /* in a route, not in defaults: (the webhook keys, and keys
                                   whose default is a top-level key) */
#define CONFIG_POSITIVE   0x2u  /* durations: 0 is an error */
#define CONFIG_EMPTY_OFF  0x4u  /* endpoints: "" disables the listener */
#define CONFIG_NONEMPTY   0x8u  /* strings: "" is an error */
#define CONFIG_UNSET_EMPTY 0x10u /* an unset ${VAR} reads as "" (documented optional values);
                                    elsewhere it is an error that names VAR */

/*
 * Whether key's value changed between a and b, the objects its table's
 * offsets point into (struct config, route_policy, route, delivery_policy),
 * both borrowed: true when it did. cls is the class being checked: a key's
 * own comparison ignores it; a BY_KEYS key's (the routes) checks the keys of
 * that class under it. May set *what to static words for the log line
 * ("the scope_headers of a route"); else the reload check names the key.
 * Pure (config_compare.c).
 */
typedef bool config_compare(const struct config_key *key, enum config_reload cls, const void *a,
                            const void *b, const char **what);

struct config_key {
    const char *name;
    enum config_kind kind;
    config_setter *set;                    /* NULL: a section the passes walk */
    size_t offset;                         /* of the field, for generic setters and
                                              comparisons; of the section's object
                                              for a section */
    unsigned flags;
    const struct config_section *section;  /* CONFIG_SECTION, CONFIG_ROUTES */
    const struct config_enum *names;       /* config_set_enum: the allowed values */
    config_list_begin *begin;              /* CONFIG_LIST, CONFIG_SCALAR_OR_LIST */
    enum config_reload reload;             /* what a SIGHUP does with a change (config.h) */
    config_compare *compare;               /* how a reload compares the key: set for every
                                              RESTART and IDENTITY key (the schema's
                                              RESTART(cmp) and IDENTITY(cmp) set both);
                                              NULL for a LIVE key, and for a BY_KEYS
                                              section, whose keys are compared instead */
};

/* A mapping of the configuration and the keys it takes. */
struct config_section {
    const char *name;                      /* in messages: "in NAME" */
    const struct config_key *tables[2];    /* a route takes path + policy keys */
    unsigned exclude;                      /* key flags not allowed here */
};

/*
 * The schema (config_schema.c). Each table ends with { NULL }; the passes
 * name the tables of the sections they apply.
 */
extern const struct config_key config_root_keys[], config_upstream_keys[], config_redis_keys[],
    config_redis_tls_keys[], config_redis_sentinel_keys[], config_redis_cluster_keys[],
    config_redis_reassert_keys[],
    config_limits_keys[], config_errors_keys[], config_route_errors_keys[], config_log_keys[],
    config_encryption_keys[],
    config_admin_keys[],
    config_policy_keys[],
    config_route_keys[], config_delivery_keys[], config_delivery_backoff_keys[],
    config_delivery_sign_keys[];

/* The top level, where pass 1 starts. */
extern const struct config_section config_root_section;

/*
 * The sections searched when a key is unknown, to say where it belongs
 * instead (config_n_sections of them).
 */
extern const struct config_section *const config_sections[];
extern const size_t config_n_sections;

/* The built-in defaults as a YAML document (NUL-terminated), applied in pass 3. */
extern const char config_builtin_yaml[];

/* One parsed YAML text: the user's file or the built-in defaults. */
struct config_doc {
    const char *name;                      /* the FILE of "FILE:LINE:" */
    yaml_document_t yaml;
    bool loaded;
    yaml_node_t *root;                     /* a mapping; NULL for an empty file */
    bool wipe;                             /* holds secrets (a keyring): config_doc_parse
                                              wipes libyaml's buffers before freeing them */
};

struct config_loader {
    struct config *cfg;
    char *err;
    size_t errlen;
    struct config_doc user;
    struct config_doc builtin;
    struct config_doc *cur;                /* the document being read */
    /* pass 2/3: which keys are set, one bit per index in their table */
    uint32_t set_root, set_upstream, set_redis, set_redis_tls, set_limits, set_defaults;
    uint32_t set_redis_sentinel, set_redis_cluster, set_redis_reassert;
    uint32_t set_errors, set_log, set_encryption, set_admin;
    uint32_t set_defaults_errors;          /* defaults.errors (config_route_errors_keys) */
    uint32_t *set_routes;                  /* one mask per route */
    yaml_node_t **route_nodes;             /* each route's mapping, for lines */
    char *redis_url_username;              /* from redis://USER:PASSWORD@; owned */
    char *redis_url_password;              /* from redis://[USER]:PASSWORD@; owned */
};

/*
 * Writes "FILE:LINE: message" into ld->err (ld->errlen bytes, truncated to
 * fit), FILE being the document being read and LINE node's (1-based); just
 * "FILE: message" when node is NULL. Returns -1, for `return config_error(...)`.
 */
int config_error(struct config_loader *ld, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* config_error(ld, node, "out of memory"); returns -1. */
int config_oom(struct config_loader *ld, const yaml_node_t *node);

/* YAML's null (`~`, `null`, or nothing after the colon). */
bool config_is_null(const yaml_node_t *node);

/*
 * Reads FILE whole into *text (malloc'd, not NUL-terminated; caller frees)
 * and its length in bytes into *len. Returns 0, or -1 with "FILE: what"
 * in err (errlen bytes) and nothing to free (config_file.c).
 */
int config_file_read(const char *file, char **text, size_t *len, char *err, size_t errlen);

/*
 * config_file_read of a file the configuration names (a secret, the
 * operators, the admin token) of at most max bytes: a larger one (or a
 * device that never ends) is "FILE: larger than MAX bytes" in err, read no
 * further than that; anything but a regular file (a FIFO, a device, a
 * socket, a directory) is refused without waiting for it (a reload must
 * never stop the worker it runs on).
 * The buffer of a failed read is wiped before it is freed (it may hold a
 * secret). Same returns (config_file.c).
 */
int config_file_read_max(const char *file, size_t max, char **text, size_t *len, char *err,
                         size_t errlen);

/*
 * Builds doc (its name and wipe set, the rest zeroed) from text (len bytes,
 * borrowed) with libyaml, line marks kept; doc->root is NULL for an empty
 * or null document, and doc->loaded says yaml_document_delete is due. A
 * syntax error or a second document is an error with its line. Returns 0,
 * or -1 after config_error (config_file.c).
 */
int config_doc_parse(struct config_loader *ld, struct config_doc *doc, const char *text,
                     size_t len);

/* The node of index in doc (libyaml's numbering); NULL when there is none. */
yaml_node_t *config_node(struct config_doc *doc, int index);

/* The value of key name in mapping map; NULL when absent, null, or map is NULL. */
yaml_node_t *config_lookup(struct config_doc *doc, yaml_node_t *map, const char *name);

/*
 * Where a check of two keys of map points its error: name's value, else
 * other's, else map itself (the user's file, so a default is named by its
 * section). Borrowed from doc.
 */
yaml_node_t *config_blame(struct config_doc *doc, yaml_node_t *map, const char *name,
                          const char *other);

/*
 * The pair of key name in mapping map (borrowed from doc), its value null
 * or not; NULL when absent or map is NULL (config_node.c).
 */
yaml_node_pair_t *config_lookup_pair(struct config_doc *doc, yaml_node_t *map, const char *name);

/* Items of a list, or of one scalar seen as a list of one; null is []. */
size_t config_items(const yaml_node_t *node);

/* Item i (< config_items) of node in the document being read. */
yaml_node_t *config_item(struct config_loader *ld, yaml_node_t *node, size_t i);

/*
 * The scalar's text, malloc'd (caller frees), with each ${NAME} replaced by
 * getenv(NAME); null reads as "". An unset NAME is an error naming it
 * unless key (NULL: none) has CONFIG_UNSET_EMPTY. NULL after config_error.
 */
char *config_scalar(struct config_loader *ld, const struct config_key *key, yaml_node_t *node);

/* ---- the passes, in the order config_load_string runs them ---- */

/*
 * Pass 1 (config_structure.c): every mapping of doc holds known keys only,
 * none twice, each value of the kind its table says; a route has a path.
 * Returns 0, or -1 after config_error.
 */
int config_check_structure(struct config_loader *ld, struct config_doc *doc);

/*
 * Pass 2 (config_apply.c): runs the setter of every key of table that map
 * (in doc) holds and *set does not have yet, and marks it; obj is the
 * struct the table's offsets point into. Keys of other tables (a route's
 * path, sections) are left to their own calls. Returns 0, or -1 after
 * config_error.
 */
int config_apply_mapping(struct config_loader *ld, struct config_doc *doc, yaml_node_t *map,
                         const struct config_key *table, void *obj, uint32_t *set);

/*
 * config_apply_mapping for every section but the routes: pass 2 with the
 * user's file, pass 3 with the built-in defaults. Returns 0, or -1.
 */
int config_apply_doc(struct config_loader *ld, struct config_doc *doc);

/*
 * Pass 2 of `routes:`: allocates cfg->routes and applies each route's own
 * keys (its delivery starting from the delivery defaults); what a route
 * leaves unset is inherited in pass 3. Returns 0, or -1 after config_error.
 */
int config_apply_routes(struct config_loader *ld);

/* The index of name in table, or -1 (the bit of the key in a set mask). */
int config_key_index(const struct config_key *table, const char *name);

/*
 * Pass 3 (config_finish.c): the built-in defaults for every key still
 * unset, inheritance, and every cross-field check. Returns 0, or -1 after
 * config_error.
 */
int config_finish(struct config_loader *ld);

/*
 * Pass 3 of the redis section, after the built-in defaults (config_redis.c):
 * the credentials (keys over the URL's), redis.sentinel complete (master
 * and addresses), and redis.tls (with rediss:// or redis.sentinel.tls, a
 * client certificate with its key, every file readable). Returns 0, or -1
 * after config_error.
 */
int config_finish_redis(struct config_loader *ld);

/*
 * Pass 3 of the encryption section (config_keyring.c): with
 * encryption.keyring set, read that file (YAML, `keys: [{id, secret}]`)
 * into cfg->keyring; its errors name KEYRING:LINE, as config errors do, and
 * one that cannot be opened names the config's line of the key. Returns 0,
 * or -1 after config_error.
 */
int config_finish_keyring(struct config_loader *ld);

/*
 * Whether every key of mapping map (in ld->cur) is one of names
 * (NULL-terminated) and none is written twice; what names map in the
 * messages and allowed lists the names for them. Returns 0, or -1 after
 * config_error naming the key's line (config_keyring.c; the keyring and the
 * operators file use it).
 */
int config_map_only(struct config_loader *ld, yaml_node_t *map, const char *const *names,
                    const char *what, const char *allowed);

/*
 * Pass 3 of the admin section (config_operators.c): with
 * admin.operators_file set, read that file (YAML, `operators: [{name,
 * token_sha256, rights}]`) into cfg->operators; with admin.token_file set,
 * add its token as the operator `token` with every right. Errors name
 * OPERATORS:LINE as config errors name FILE:LINE; a file that cannot be
 * read names the config's line of the key. Returns 0, or -1 after
 * config_error.
 */
int config_finish_operators(struct config_loader *ld);

/*
 * The comparisons of one field type, of the field at key->offset (config_compare.c):
 * a string (NULL and "" differ), bool, uint64_t (durations, ms; times, unix ms),
 * size_t (bytes), int (enums, statuses), unsigned (counts), struct endpoint, and
 * struct endpoint_list (the same addresses in the same order). A row names the one
 * of the type its setter fills; the setters of a URL fill several fields, and their
 * rows point .offset at the URL as written, from which the others are derived.
 */
config_compare config_changed_string, config_changed_bool, config_changed_u64,
    config_changed_size, config_changed_int, config_changed_unsigned, config_changed_endpoint,
    config_changed_endpoints;

/* The comparisons of the keys whose field no field type's comparison reads (config_compare.c). */
config_compare config_changed_key_source, config_changed_scope_headers, config_changed_routes,
    config_changed_inherited, config_changed_delivery_rate;

/* The first change of a key of the class a walk looks for. */
struct config_change {
    const struct config_key *key;           /* the key whose value changed */
    const struct config_section *section;   /* the section it sits in */
    const char *top;                        /* the top-level key it sits under */
    const char *what;                       /* its comparison's words, or NULL */
    bool at_top;                            /* key is a top-level key itself */
};

/*
 * The first key of class cls in table t of sec whose value differs between
 * a and b (the objects that table's offsets point into, borrowed),
 * descending into the sections under it: true with *ch set when there is
 * one. A key of that class without a comparison counts as changed: a
 * reload that cannot be classified is refused (the schema's RESTART(cmp)
 * and IDENTITY(cmp), and test_config_reload, keep such a key out of it).
 * top is the top-level key the table sits under (NULL for the top level
 * itself). Pure (config_compare.c).
 */
bool config_walk(const struct config_section *sec, size_t t, enum config_reload cls, const void *a,
                 const void *b, const char *top, struct config_change *ch);

/* Takes the pass's text: the caller then finds *text NULL and frees nothing (config_set.c). */
char *config_take(char **text);

/* Frees the n strings of list and sets n to 0: a list key starts afresh (config_set.c). */
void config_free_strings(char **list, size_t *n);

/* The typed setters (config_set.c), named by the key tables of config_schema.c. */
config_setter config_set_endpoint, config_set_upstream_url, config_set_redis_url,
    config_set_duration, config_set_size, config_set_workers, config_set_connections, config_set_string,
    config_set_key_prefix, config_set_bool, config_set_route_path, config_set_key_header,
    config_set_method, config_set_key_length, config_set_enum, config_set_scope_header,
    config_set_release_status, config_set_key_from, config_set_secret,
    config_set_sentinel_master, config_set_sentinel_address,
    config_set_cluster_address, config_set_token_file, config_set_record_id_header,
    config_set_held_refresh;

/*
 * log.audit: "stdout", "stderr", or a file this process may write (or, when
 * it does not exist, create in its directory): checked with access(2), so a
 * load creates nothing; log_audit_open opens it (config_operators.c).
 */
config_setter config_set_audit_log;

/* redis.min_replicas (config_replicas.c). */
config_setter config_set_min_replicas;

/*
 * The rules a route puts on its keys (config_key_rules.c): key_min_length
 * (1..CONFIG_MAX_KEY_LENGTH bytes) and key_pattern (a POSIX extended
 * regular expression the whole key must match, compiled here once with
 * regcomp; a pattern regcomp refuses, or one with a back-reference, is an
 * error with the line and regerror's words).
 */
config_setter config_set_key_pattern;

/*
 * Pass 3 of a policy (defaults:, or a route after inheritance;
 * config_key_rules.c): key_min_length at most key_max_length, and
 * scope_required only with scope_headers. map is the policy's mapping in
 * the user's file (NULL is fine), for the line. Returns 0, or -1 after
 * config_error.
 */
int config_check_key_rules(struct config_loader *ld, const struct route_policy *policy,
                           yaml_node_t *map);

/* Frees policy's key_pattern and its compiled key_regex (config_key_rules.c); NULL is fine. */
void config_key_pattern_free(struct route_policy *policy);

/* delivery.max_attempts / delivery.concurrency, and delivery.ack_status (config_set.c). */
config_setter config_set_delivery_count, config_set_ack_status;

/* encryption.accept_plaintext_until: RFC 3339 in UTC, `YYYY-MM-DDTHH:MM:SSZ`, as unix ms (config_keyring.c). */
config_setter config_set_rfc3339;

/* delivery.sign.secret (a list of at most two) and delivery.rate (`N/s`, `N/min`) (config_set.c). */
config_setter config_set_sign_secret, config_set_delivery_rate;
config_list_begin config_begin_sign_secrets;

/* Longest secret file (redis.password_file, secret_file, delivery.sign.secret_file), bytes. */
#define CONFIG_SECRET_FILE_MAX 4096

/*
 * The secrets read from files (config_secret.c; CONTRACT 16): each file is
 * read whole by every load (start, `-t`, SIGHUP), one trailing newline (LF
 * or CRLF) trimmed; empty, unreadable, larger than CONFIG_SECRET_FILE_MAX,
 * with a NUL byte or a second line is an error naming the file and the
 * key's line. The secret goes where the inline key (`password`, `secret`)
 * puts its own: redis.password_file and redis.sentinel.password_file fill
 * the string at key->offset; a route's secret_file its secrets, checked
 * against verify in pass 3 (config_finish.c); delivery.sign.secret_file
 * the signing secrets, each checked as delivery.sign.secret's.
 */
config_setter config_set_password_file, config_set_secret_file, config_set_sign_secret_file;
config_list_begin config_begin_secret_files, config_begin_sign_secret_files;

/*
 * Pass 3: map (a mapping of the user's file, NULL is fine) must not hold
 * both the key name (`password`, `secret`) and name_file, null values
 * included: one source per secret. section ("redis", "redis.sentinel",
 * "delivery.sign", "" for a route) words the message. Returns 0, or -1
 * after config_error naming name_file's line (config_secret.c).
 */
int config_check_secret_source(struct config_loader *ld, yaml_node_t *map, const char *section,
                               const char *name);

/*
 * Pass 3: with redis.min_replicas > 0, redis.replica_timeout must be at most
 * half of redis.timeout (WAIT holds the connection); redis (may be NULL)
 * is the section's node, for the line. Returns 0, or -1 after config_error
 * (config_replicas.c).
 */
int config_check_replicas(struct config_loader *ld, yaml_node_t *redis);

/*
 * fingerprint_ignore (config_fingerprint.c): its start (at most
 * CONFIG_MAX_FINGERPRINT_IGNORE items) and one item, a JSON Pointer; and the
 * pass-3 check of a policy (defaults: or a route whose mapping is map):
 * fingerprint_ignore only with fingerprint: json. Returns 0, or -1 after
 * config_error naming the line.
 */
config_list_begin config_begin_fingerprint_ignore;
config_setter config_set_fingerprint_ignore;
int config_check_fingerprint(struct config_loader *ld, const struct route_policy *policy,
                             yaml_node_t *map);

/* The starts of the list keys (config_set.c). */
config_list_begin config_begin_methods, config_begin_scope_headers,
    config_begin_release_statuses, config_begin_secrets, config_begin_sentinel_addresses,
    config_begin_cluster_addresses;

#endif
