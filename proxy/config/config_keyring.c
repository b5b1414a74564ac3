/*
 * config_keyring.c - pass 3 of the encryption section (config.c): the file
 * encryption.keyring names, read into a keyring (keyring.h) with libyaml
 * and the node reader of config_node.c, so its errors name KEYRING:LINE as
 * the config's name FILE:LINE:
 *
 *   keys:                  # the first key encrypts; every key listed decrypts
 *     - id: 2026-12        # 1..32 of [A-Za-z0-9._-], unique; stored beside each value
 *       secret: "<base64 of exactly 32 random bytes>"
 *
 * Values are taken as written: no ${VAR} expansion. The file is the
 * secret (mounted from a Kubernetes Secret or written by a vault agent), an
 * id cannot hold a '$' and base64 has none, so an expansion could only
 * make a secret come from somewhere less guarded; a "${" in a secret is
 * named in its error.
 *
 * The secrets pass through memory that is not locked: the file's text, the
 * YAML nodes and a decoding buffer. Each is wiped as soon as the keyring
 * is built, and the file is read with read(2) into one buffer of its size,
 * so that no stdio buffer or realloc leaves a copy behind.
 */
#include "config_int.h"
#include "clock.h"
#include "keyring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

/* Largest keyring file, bytes: 16 keys take under 2 KiB. */
#define CONFIG_KEYRING_FILE_MAX (64 * 1024)

/* Longest secret as written, chars: 32 bytes are 44 in base64; room for spaces. */
#define CONFIG_KEYRING_SECRET_TEXT_MAX 128

/* Where an error in an empty keyring points: its first line. */
static const yaml_node_t config_keyring_top;

/*
 * Reads file whole into *text (malloc'd, caller wipes and frees) and *len,
 * with its mode in *mode (from the descriptor it read). Returns 0, or -1
 * with "what" (without the file's name) in why.
 */
static int config_keyring_read(const char *file, char **text, size_t *len, mode_t *mode,
                               char *why, size_t whylen)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY); /* a FIFO: no wait */
    struct stat st;
    size_t used = 0;
    char *buf;

    if (fd < 0) {
        snprintf(why, whylen, "cannot open %s: %s", file, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > CONFIG_KEYRING_FILE_MAX) {
        int error = errno;

        if (fstat(fd, &st) != 0)
            snprintf(why, whylen, "cannot read %s: %s", file, strerror(error));
        else
            snprintf(why, whylen, "cannot read %s: %s", file, S_ISREG(st.st_mode) ?
                     "larger than 64KiB" : "not a regular file");
        close(fd);
        return -1;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        snprintf(why, whylen, "out of memory");
        close(fd);
        return -1;
    }
    for (;;) {
        ssize_t n = read(fd, buf + used, (size_t)st.st_size + 1 - used);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (n > 0 && used + (size_t)n > (size_t)st.st_size)) {
            snprintf(why, whylen, "cannot read %s: %s", file,
                     n < 0 ? strerror(errno) : "it grew while being read");
            OPENSSL_cleanse(buf, used);
            free(buf);
            close(fd);
            return -1;
        }
        if (n == 0)
            break;
        used += (size_t)n;
    }
    close(fd);
    *text = buf;
    *len = used;
    *mode = st.st_mode;
    return 0;
}

int config_map_only(struct config_loader *ld, yaml_node_t *map, const char *const *names,
                    const char *what, const char *allowed)
{
    yaml_node_pair_t *start = map->data.mapping.pairs.start;

    for (yaml_node_pair_t *pair = start; pair < map->data.mapping.pairs.top; pair++) {
        yaml_node_t *knode = config_node(ld->cur, pair->key);
        const char *name;
        bool known = false;

        if (knode->type != YAML_SCALAR_NODE)
            return config_error(ld, knode, "keys in %s must be plain names", what);
        name = (const char *)knode->data.scalar.value;
        for (const char *const *n = names; *n != NULL && !known; n++)
            known = strcmp(*n, name) == 0;
        if (!known)
            return config_error(ld, knode, "unknown key '%s' in %s (allowed: %s)", name, what,
                                allowed);
        for (yaml_node_pair_t *prev = start; prev < pair; prev++) {
            yaml_node_t *pnode = config_node(ld->cur, prev->key);

            if (strcmp((const char *)pnode->data.scalar.value, name) == 0)
                return config_error(ld, knode, "duplicate key '%s' in %s (first at line %zu)",
                                    name, what, (size_t)pnode->start_mark.line + 1);
        }
    }
    return 0;
}

/*
 * The secret of key id at node: base64 (RFC 4648 section 4) of exactly
 * KEYRING_SECRET_LEN bytes, decoded by OpenSSL's EVP_DecodeUpdate and
 * EVP_DecodeFinal (which, unlike EVP_DecodeBlock, count the padding out)
 * into secret. Never echoes the text. Returns 0, or -1 after config_error.
 */
static int config_keyring_secret(struct config_loader *ld, yaml_node_t *node, const char *id,
                                 unsigned char *secret)
{
    const char *text = (const char *)node->data.scalar.value;
    size_t len = node->data.scalar.length;
    unsigned char buf[CONFIG_KEYRING_SECRET_TEXT_MAX];
    EVP_ENCODE_CTX *ctx;
    int n = 0, last = 0, rc = -1;
    bool decoded = false;

    if (node->type != YAML_SCALAR_NODE)
        return config_error(ld, node, "the secret of key '%s' must be a single value", id);
    if (len > 0 && len <= CONFIG_KEYRING_SECRET_TEXT_MAX && strlen(text) == len &&
        (ctx = EVP_ENCODE_CTX_new()) != NULL) {
        EVP_DecodeInit(ctx);
        decoded = EVP_DecodeUpdate(ctx, buf, &n, (const unsigned char *)text, (int)len) >= 0 &&
                  EVP_DecodeFinal(ctx, buf + n, &last) == 1;
        EVP_ENCODE_CTX_free(ctx);
    }
    if (decoded && n + last == KEYRING_SECRET_LEN) {
        memcpy(secret, buf, KEYRING_SECRET_LEN);
        rc = 0;
    } else if (decoded) {
        config_error(ld, node, "the secret of key '%s' is not base64 of %d bytes (it decodes "
                     "to %d bytes); make one with: openssl rand -base64 32", id,
                     KEYRING_SECRET_LEN, n + last);
    } else {
        config_error(ld, node, "the secret of key '%s' is not base64 of %d bytes%s; make one "
                     "with: openssl rand -base64 32", id, KEYRING_SECRET_LEN,
                     strstr(text, "${") != NULL ? " (a keyring takes no ${VAR}: write the "
                     "secret itself)" : "");
    }
    OPENSSL_cleanse(buf, sizeof(buf));
    return rc;
}

/* One item of keys: a mapping of id and secret, added to kr. lines[i]: each key's line so far. */
static int config_keyring_key(struct config_loader *ld, struct keyring *kr, yaml_node_t *item,
                              size_t *lines)
{
    static const char *const names[] = { "id", "secret", NULL };
    yaml_node_t *idn, *secretn;
    unsigned char secret[KEYRING_SECRET_LEN];
    const char *id;
    size_t id_len;
    int dup;
    enum keyring_add_result added;

    if (item->type != YAML_MAPPING_NODE)
        return config_error(ld, item, "each item of keys must be a mapping (- id: ..., "
                            "secret: ...)");
    if (config_map_only(ld, item, names, "a key", "id, secret") < 0)
        return -1;
    idn = config_lookup(ld->cur, item, "id");
    secretn = config_lookup(ld->cur, item, "secret");
    if (idn == NULL || secretn == NULL)
        return config_error(ld, item, "a key needs an id and a secret");
    if (idn->type != YAML_SCALAR_NODE)
        return config_error(ld, idn, "a key's id must be a single value");
    id = (const char *)idn->data.scalar.value;
    id_len = idn->data.scalar.length;
    if (!keyring_id_valid(id, id_len))
        return config_error(ld, idn, "id '%.*s' must be 1..%d characters of A-Z a-z 0-9 . _ -",
                            (int)(id_len > 64 ? 64 : id_len), id, KEYRING_ID_MAX);
    if ((dup = keyring_find(kr, id, id_len)) >= 0)
        return config_error(ld, idn, "duplicate id '%s' (first at line %zu)", id, lines[dup]);
    if (config_keyring_secret(ld, secretn, id, secret) < 0)
        return -1;
    lines[keyring_size(kr)] = (size_t)idn->start_mark.line + 1;
    added = keyring_add(kr, id, id_len, secret);
    OPENSSL_cleanse(secret, sizeof(secret));
    if (added != KEYRING_ADDED)
        return config_error(ld, idn, "cannot derive the keys of key '%s' (OpenSSL)", id);
    return 0;
}

/* The document's keys into a new keyring in ld->cfg->keyring. */
static int config_keyring_keys(struct config_loader *ld, struct config_doc *doc)
{
    static const char *const names[] = { "keys", NULL };
    static const char want[] = "write keys: [{id: ..., secret: ...}], the first key encrypts";
    yaml_node_t *root = doc->root, *keys;
    size_t lines[KEYRING_MAX_KEYS], n;
    struct keyring *kr;
    char why[256];

    if (root == NULL)
        return config_error(ld, &config_keyring_top, "the keyring is empty: %s", want);
    if (root->type != YAML_MAPPING_NODE)
        return config_error(ld, root, "a keyring is a mapping: %s", want);
    if (config_map_only(ld, root, names, "the keyring", "keys") < 0)
        return -1;
    keys = config_lookup(doc, root, "keys");
    if (keys == NULL)
        return config_error(ld, root, "the keyring has no keys: %s", want);
    if (keys->type != YAML_SEQUENCE_NODE)
        return config_error(ld, keys, "keys must be a list: %s", want);
    n = config_items(keys);
    if (n == 0)
        return config_error(ld, keys, "keys is empty: %s", want);
    if (n > KEYRING_MAX_KEYS)
        return config_error(ld, config_item(ld, keys, KEYRING_MAX_KEYS), "more than %d keys: "
                            "remove keys no value uses any more", KEYRING_MAX_KEYS);
    kr = keyring_create(why, sizeof(why));
    if (kr == NULL)
        return config_error(ld, root, "%s", why);
    for (size_t i = 0; i < n; i++) {
        if (config_keyring_key(ld, kr, config_item(ld, keys, i), lines) < 0) {
            keyring_unref(kr);
            return -1;
        }
    }
    ld->cfg->keyring = kr;
    return 0;
}

/* Wipes every scalar of doc (the secrets among them) before libyaml frees it. */
static void config_keyring_wipe(struct config_doc *doc)
{
    if (!doc->loaded)
        return;
    for (yaml_node_t *node = doc->yaml.nodes.start; node < doc->yaml.nodes.top; node++) {
        if (node->type == YAML_SCALAR_NODE)
            OPENSSL_cleanse(node->data.scalar.value, node->data.scalar.length);
    }
    yaml_document_delete(&doc->yaml);
}

int config_finish_keyring(struct config_loader *ld)
{
    struct config *cfg = ld->cfg;
    struct config_doc doc = { .name = cfg->keyring_file, .wipe = true };
    yaml_node_t *where;
    char *text, why[512];
    size_t len;
    mode_t mode;
    int rc;

    if (cfg->keyring_file == NULL)
        return 0;
    ld->cur = &ld->user;
    where = config_lookup(&ld->user, config_lookup(&ld->user, ld->user.root, "encryption"),
                          "keyring");
    if (config_keyring_read(cfg->keyring_file, &text, &len, &mode, why, sizeof(why)) < 0)
        return config_error(ld, where, "encryption.keyring: %s", why);
    cfg->keyring_world_readable = (mode & S_IROTH) != 0;
    rc = config_doc_parse(ld, &doc, text, len);
    if (rc == 0)
        rc = config_keyring_keys(ld, &doc);
    config_keyring_wipe(&doc);
    OPENSSL_cleanse(text, len);
    free(text);
    ld->cur = &ld->user;
    return rc;
}

/*
 * encryption.accept_plaintext_until: only `YYYY-MM-DDTHH:MM:SSZ` (RFC 3339
 * section 5.6, UTC, no fraction, no offset; clock_parse_utc), after 1970
 * (0 means unset), so 2026-02-30 or a 24th hour is an error, not a
 * silently normalised date.
 */
int config_set_rfc3339(struct config_loader *ld, const struct config_key *key,
                       yaml_node_t *node, char **text, void *obj)
{
    uint64_t *field = (uint64_t *)((char *)obj + key->offset);
    uint64_t ms;

    if (!clock_parse_utc(*text, &ms) || ms == 0)
        return config_error(ld, node, "bad %s '%s': expected an RFC 3339 time in UTC, "
                            "YYYY-MM-DDTHH:MM:SSZ, e.g. 2026-12-31T00:00:00Z", key->name, *text);
    *field = ms;
    snprintf(ld->cfg->accept_plaintext_until_at, sizeof(ld->cfg->accept_plaintext_until_at),
             "%s:%zu", ld->cur->name, (size_t)node->start_mark.line + 1);
    return 0;
}

bool config_accepts_plaintext(const struct config *cfg, uint64_t now_ms)
{
    return cfg->keyring == NULL || now_ms < cfg->accept_plaintext_until_ms;
}

/* The longest retention plus the longest dead_retention of cfg's routes, ms. */
static uint64_t config_longest_kept_ms(const struct config *cfg)
{
    uint64_t retention = 0, dead = 0;

    for (size_t i = 0; i < cfg->n_routes; i++) {
        const struct route_policy *p = &cfg->routes[i].policy;
        if (p->retention_ms > retention)
            retention = p->retention_ms;
        if (p->delivery.dead_retention_ms > dead)
            dead = p->delivery.dead_retention_ms;
    }
    return retention + dead;
}

/* encryption.accept_plaintext_until's warnings into out (used bytes already); lines added. */
static size_t config_plaintext_warnings(const struct config *cfg, char *out, size_t outsize,
                                        size_t *used)
{
    uint64_t until = cfg->accept_plaintext_until_ms, now = clock_now_ms();
    uint64_t kept = config_longest_kept_ms(cfg);
    const char *why;

    if (until == 0 || *used >= outsize)
        return 0;
    if (cfg->keyring == NULL)
        why = "is set without encryption.keyring: it has no effect (without a keyring "
              "plaintext is the format)";
    else if (until <= now)
        why = "is in the past: records and queued deliveries that are not sealed are refused "
              "already; remove it";
    else if (until - now > kept)
        why = "lies further ahead than the longest retention plus dead_retention of the "
              "routes: no record or delivery written before the keyring can live that long; "
              "an earlier time refuses forged plaintext sooner";
    else
        return 0;
    *used += (size_t)snprintf(out + *used, outsize - *used,
                              "%s: warning: encryption.accept_plaintext_until %s\n",
                              cfg->accept_plaintext_until_at, why);
    return 1;
}

size_t config_keyring_warnings(const struct config *cfg, char *out, size_t outsize)
{
    size_t n = 0, used = 0;
    int error;

    if (outsize > 0)
        out[0] = '\0';
    n += config_plaintext_warnings(cfg, out, outsize, &used);
    if (cfg->keyring == NULL || used >= outsize)
        return n;
    if (cfg->keyring_world_readable) {
        n++;
        used += (size_t)snprintf(out + used, outsize - used, "%s: warning: every user of this "
                                 "machine may read the keyring (mode o+r): make it 0400 or "
                                 "0440 (a Kubernetes Secret volume: defaultMode: 0440 with an "
                                 "fsGroup)\n", cfg->keyring_file);
        if (used >= outsize)
            return n;
    }
    if (!keyring_locked(cfg->keyring, &error)) {
        n++;
        snprintf(out + used, outsize - used, "%s: warning: the keyring's keys are not locked "
                 "in memory (mlock: %s), so they may be written to swap: raise the memlock "
                 "limit (ulimit -l; a keyring takes one page) or run without swap\n",
                 cfg->keyring_file, strerror(error));
    }
    return n;
}

void config_keyring_describe(const struct config *cfg, char *out, size_t outsize)
{
    int n;

    if (cfg->keyring == NULL) {
        snprintf(out, outsize, "no keyring (encryption.keyring): what is stored stays plaintext");
        return;
    }
    n = snprintf(out, outsize, "keyring %s: ", cfg->keyring_file);
    if (n >= 0 && (size_t)n < outsize)
        keyring_describe(cfg->keyring, out + n, outsize - (size_t)n);
}
