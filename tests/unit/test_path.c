/* Route-matching path normalisation: every spelling of a path lands on one form, or is refused. */
#include <stdlib.h>
#include <string.h>

#include "path.h"
#include "unit.h"

static const struct {
    const char *name, *raw, *want;
    enum path_status st;
} cases[] = {
    { "plain path unchanged", "/v1/payments", "/v1/payments", PATH_OK },
    { "root", "/", "/", PATH_OK },
    { "empty", "", "/", PATH_OK },
    { "double slashes collapse", "//v1//payments", "/v1/payments", PATH_OK },
    { "trailing slash dropped", "/webhooks/stripe/", "/webhooks/stripe", PATH_OK },
    { "dot segments", "/v1/./payments", "/v1/payments", PATH_OK },
    { "dot-dot resolves", "/v1/x/../payments", "/v1/payments", PATH_OK },
    { "dot-dot above root stays at root", "/../../v1/payments", "/v1/payments", PATH_OK },
    { "dot-dot of the first segment", "/a/../b", "/b", PATH_OK },
    { "percent-encoded letters decode", "/%761/payment%73", "/v1/payments", PATH_OK },
    { "encoded dot segments resolve", "/v1/x/%2e%2E/payments", "/v1/payments", PATH_OK },
    { "case folds", "/V1/Payments", "/v1/payments", PATH_OK },
    { "matrix parameters dropped", "/webhooks/stripe;x=1", "/webhooks/stripe", PATH_OK },
    /* WHATWG URL parsers read '\' as '/' in http(s) URLs */
    { "backslash is a separator", "/v1\\payments", "/v1/payments", PATH_OK },
    { "backslash webhook", "/webhooks\\stripe", "/webhooks/stripe", PATH_OK },
    { "leading backslash", "\\v1\\payments\\", "/v1/payments", PATH_OK },
    { "backslash dot-dot", "/v1\\x\\..\\payments", "/v1/payments", PATH_OK },
    { "mixed slashes collapse", "/\\/v1/\\payments", "/v1/payments", PATH_OK },
    { "valid UTF-8 kept", "/caf%C3%A9", "/caf\xc3\xa9", PATH_OK },
    { "four-byte UTF-8 kept", "/%F0%9F%92%B3", "/\xf0\x9f\x92\xb3", PATH_OK },
    { "lone percent kept", "/v1/100%", "/v1/100%", PATH_OK },
    /* refused: the upstream may read these as another path */
    { "encoded slash refused", "/v1%2Fpayments", "/", PATH_ENCODED_SLASH },
    { "encoded slash lower case refused", "/v1%2fpayments", "/", PATH_ENCODED_SLASH },
    { "encoded backslash refused", "/v1%5Cpayments", "/", PATH_ENCODED_SLASH },
    { "encoded backslash lower case refused", "/v1%5cpayments", "/", PATH_ENCODED_SLASH },
    { "encoded NUL refused", "/v1/pay%00ments", "/", PATH_ENCODED_DELIMITER },
    { "encoded question mark refused", "/v1/payments%3F", "/", PATH_ENCODED_DELIMITER },
    { "encoded hash refused", "/v1/payments%23x", "/", PATH_ENCODED_DELIMITER },
    { "encoded tab refused", "/v1/pay%09ments", "/", PATH_ENCODED_DELIMITER },
    { "encoded LF refused", "/v1/payments%0A", "/", PATH_ENCODED_DELIMITER },
    { "encoded DEL refused", "/v1/payments%7F", "/", PATH_ENCODED_DELIMITER },
    { "raw control character refused", "/v1/pay\x01ments", "/", PATH_ENCODED_DELIMITER },
    { "overlong slash refused", "/v1%C0%AFpayments", "/", PATH_BAD_UTF8 },
    { "overlong dot refused", "/v1/%C0%AE%C0%AE/payments", "/", PATH_BAD_UTF8 },
    { "three-byte overlong refused", "/v1/%E0%80%AF", "/", PATH_BAD_UTF8 },
    { "surrogate refused", "/v1/%ED%A0%80", "/", PATH_BAD_UTF8 },
    { "above U+10FFFF refused", "/v1/%F4%90%80%80", "/", PATH_BAD_UTF8 },
    { "lone continuation byte refused", "/v1/%80payments", "/", PATH_BAD_UTF8 },
    { "truncated sequence refused", "/v1/payments%C3", "/", PATH_BAD_UTF8 },
    { "raw Latin-1 byte refused", "/v1/caf\xe9", "/", PATH_BAD_UTF8 },
};

int main(void)
{
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[256];
        enum path_status st = path_normalize(cases[i].raw, out, sizeof(out));
        UNIT_CHECK(cases[i].name, st == cases[i].st && strcmp(out, cases[i].want) == 0,
                   "got %d \"%s\", want %d \"%s\"", (int)st, out, (int)cases[i].st,
                   cases[i].want);
    }
    {
        char small[8];
        UNIT_CHECK("too long for the buffer", path_normalize("/v1/payments", small,
                                                             sizeof(small)) == PATH_TOO_LONG &&
                                                  strcmp(small, "/") == 0, "fit");
    }
    {
        /* the size from path_normalized_size always fits, however long the path */
        static const char *const raws[] = { "", "a", "/", "a/b", "\\a\\b", "/v1/payments/" };
        for (size_t i = 0; i < sizeof(raws) / sizeof(raws[0]); i++) {
            size_t size = path_normalized_size(raws[i]);
            char *out = malloc(size);
            UNIT_CHECK("normalised size fits", out != NULL &&
                       path_normalize(raws[i], out, size) == PATH_OK, "\"%s\"", raws[i]);
            free(out);
        }
    }
    {
        /* /aaaa...(4,100)/../v1/payments: longer than any fixed 4 KiB buffer */
        size_t n = 4100;
        char *raw = malloc(n + 32), *out;
        memset(raw, 'a', n + 32);
        raw[0] = '/';
        strcpy(raw + n + 1, "/../v1/payments");
        out = malloc(path_normalized_size(raw));
        UNIT_CHECK("long segment resolved away", out != NULL &&
                   path_normalize(raw, out, path_normalized_size(raw)) == PATH_OK &&
                   strcmp(out, "/v1/payments") == 0, "got \"%s\"", out ? out : "");
        free(out);
        free(raw);
    }
    UNIT_DONE();
}
