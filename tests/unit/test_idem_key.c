/* Idempotency key parsing (draft-ietf-httpapi-idempotency-key-header 2; RFC 8941 3.3.3). */
#include <string.h>

#include "idem_key.h"
#include "unit.h"

static const struct {
    const char *name;
    const char *value;
    size_t max_len;
    enum key_status want;
    const char *key;
} cases[] = {
    { "bare key", "abc", 255, KEY_OK, "abc" },
    { "quoted key is the same key", "\"abc\"", 255, KEY_OK, "abc" },
    { "keys are case-sensitive", "AbC", 255, KEY_OK, "AbC" },
    { "surrounding spaces are OWS", "  abc\t", 255, KEY_OK, "abc" },
    { "uuid", "8e03978e-40d5-43e8-bc93-6894a57f9324", 255, KEY_OK,
      "8e03978e-40d5-43e8-bc93-6894a57f9324" },
    { "escaped quote and backslash", "\"a\\\"b\\\\c\"", 255, KEY_OK, "a\"b\\c" },
    { "inner space allowed", "\"a b\"", 255, KEY_OK, "a b" },
    { "empty", "", 255, KEY_EMPTY, NULL },
    { "only spaces", "   ", 255, KEY_EMPTY, NULL },
    { "empty quoted", "\"\"", 255, KEY_EMPTY, NULL },
    { "exactly max length", "abcde", 5, KEY_OK, "abcde" },
    { "one over max length", "abcdef", 5, KEY_TOO_LONG, NULL },
    { "quoted over max length", "\"abcdef\"", 5, KEY_TOO_LONG, NULL },
    { "control character", "ab\x01" "c", 255, KEY_BAD_CHAR, NULL },
    { "DEL character", "ab\x7f", 255, KEY_BAD_CHAR, NULL },
    { "non-ASCII byte", "caf\xc3\xa9", 255, KEY_BAD_CHAR, NULL },
    { "inner tab", "a\tb", 255, KEY_BAD_CHAR, NULL },
    { "unterminated quote", "\"abc", 255, KEY_BAD_QUOTING, NULL },
    { "junk after the quote", "\"abc\"x", 255, KEY_BAD_QUOTING, NULL },
    { "sf parameters are not a key", "\"abc\";a=1", 255, KEY_BAD_QUOTING, NULL },
    { "bad escape", "\"a\\bc\"", 255, KEY_BAD_QUOTING, NULL },
    { "quote inside a bare key", "ab\"c", 255, KEY_BAD_QUOTING, NULL },
    { "control inside quotes", "\"a\x02\"", 255, KEY_BAD_CHAR, NULL },
};

int main(void)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[300];
        size_t len = 0;
        enum key_status st = key_parse(cases[i].value, cases[i].max_len, out, sizeof(out), &len);
        int ok = st == cases[i].want;
        if (ok && st == KEY_OK)
            ok = len == strlen(cases[i].key) && memcmp(out, cases[i].key, len) == 0;
        UNIT_CHECK(cases[i].name, ok, "status %d (want %d)", st, cases[i].want);
    }
    UNIT_CHECK("folded list: bare with a comma", key_is_folded_list(" t4, t5"), "not seen");
    UNIT_CHECK("folded list: a comma in quotes is one key", !key_is_folded_list(" \"t4,t5\""),
               "refused a quoted comma");
    UNIT_CHECK("folded list: no comma", !key_is_folded_list("a b"), "refused a bare key");
    {
        char out[4];
        size_t len;
        UNIT_CHECK("output buffer bound", key_parse("abcdef", 255, out, sizeof(out), &len) ==
                                              KEY_TOO_LONG, "wrote past a 4-byte buffer");
    }
    UNIT_DONE();
}
