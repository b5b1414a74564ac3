/*
 * The Lua scripts (proxy/store/store_script.c, the records'; proxy/inbox/inbox_store.c,
 * the inbox's, registered with store_script_register): every script is a
 * plain constant sent as it is, never passed through a format function, so
 * a Lua '%' pattern reaches Redis unchanged; its EVALSHA digest is the SHA1
 * of exactly that text.
 */
#include <string.h>

#include <openssl/sha.h>

#include "inbox_store.h"
#include "store_int.h"
#include "unit.h"

/* Whether sha is the hex SHA1 of text. */
static bool sha_of(const char *text, const char *sha)
{
    char want[STORE_SCRIPT_SHA_LEN + 1];
    unsigned char d[SHA_DIGEST_LENGTH];

    SHA1((const unsigned char *)text, strlen(text), d);
    for (int j = 0; j < SHA_DIGEST_LENGTH; j++)
        snprintf(&want[2 * j], 3, "%02x", d[j]);
    return strcmp(sha, want) == 0;
}

static void run_registry(void)
{
    int missing = 0, bad_digest = 0;

    for (int i = 0; i < SCRIPT_COUNT; i++) {
        const char *text = store_script_text((enum store_record_script)i);
        char sha[STORE_SCRIPT_SHA_LEN + 1];

        if (text == NULL || text[0] == '\0') {
            missing++;
            continue;
        }
        store_script_digest(text, sha);
        if (!sha_of(text, sha))
            bad_digest++;
    }
    for (int i = 0; i < INBOX_SCRIPT_COUNT; i++) {
        const struct store_script *script = inbox_store_script((enum inbox_script)i);

        if (script->text == NULL || script->text[0] == '\0') {
            missing++;
            continue;
        }
        if (!sha_of(script->text, script->sha))
            bad_digest++;
    }
    UNIT_CHECK("every script has its text", missing == 0, "%d without", missing);
    UNIT_CHECK("every digest is the SHA1 of the text sent", bad_digest == 0, "%d differ",
               bad_digest);
}

static void run_no_format(void)
{
    const struct store_script *script = inbox_store_script(INBOX_SCRIPT_PROMOTE);
    const char *promote = script->text;
    const char *release = store_script_text(SCRIPT_RELEASE);

    UNIT_CHECK("the inbox's scripts are registered once, not copied",
               inbox_store_script(INBOX_SCRIPT_PROMOTE) == script &&
                   inbox_store_script(INBOX_SCRIPT_PROMOTE)->text == promote,
               "inbox_store_script returned a copy");
    UNIT_CHECK("a Lua '%' pattern reaches Redis as one '%' (no format function read it)",
               strstr(promote, "string.format('%.0f'") != NULL && strstr(promote, "%%") == NULL,
               "promote script: %s", promote);
    UNIT_CHECK("the owner test is in the records' scripts as text, no placeholder left",
               strstr(release, "string.sub(v, 4, 4) ~= 'C' or string.sub(v, 5, 36) ~= ARGV[1]") !=
                       NULL &&
                   strstr(release, "%s") == NULL,
               "release script: %s", release);
}

int main(void)
{
    run_registry();
    run_no_format();
    UNIT_DONE();
}
