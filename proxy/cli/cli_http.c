/*
 * cli_http.c - the operator CLI's side of the admin listener: its address
 * (admin_listen of the configuration, or --admin), the bearer token
 * (admin.token_file, or --token-file: read from the file, kept in memory,
 * sent only as `Authorization: Bearer` by libcurl's CURLAUTH_BEARER, wiped
 * at the end), and one HTTP exchange at a time over libcurl's easy API.
 *
 * This is the second room of libcurl in proxy/ (the first is upstream/,
 * the proxy's own client on the worker's loop): a blocking client of one
 * command, no event loop. It never follows a redirect (the token goes to
 * the admin listener only), ignores the proxy environment variables (the
 * listener is local; an HTTP_PROXY of the pod must not see the token), and
 * writes no file: no cookie jar, no .netrc, no HOME needed.
 */
#include "cli_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <curl/curl.h>
#include <event2/http.h>
#include <openssl/crypto.h>

#include "config.h"

/* The largest answer read, bytes: a bulk change's list of thousands of records fits. */
#define CLI_ANSWER_MAX (256u << 20)
/* Connecting may take at most this long, ms (within the exchange's own timeout). */
#define CLI_CONNECT_TIMEOUT_MS 10000

/* A listener bound to every address is reached on the loopback of its family. */
static const char *cli_http_reach(const char *host)
{
    if (strcmp(host, "0.0.0.0") == 0)
        return "127.0.0.1";
    if (strcmp(host, "::") == 0)
        return "::1";
    return host;
}

/*
 * The token of path into c->token, checked as the proxy checks it
 * (bearer_token_set: trailing line breaks trimmed, a b64token of 32 to
 * 1024 characters). "-" reads the first line of stdin, a byte at a time,
 * so that the rest stays for --body-file - or --only-from - (kubectl exec -i
 * passes one stdin). Read with read(2) into a stack buffer that is wiped, so
 * no stdio buffer keeps a copy. 0, or -1 with the reason in err.
 */
static int cli_http_read_token(struct cli_client *c, const char *path, char *err, size_t errlen)
{
    char buf[BEARER_TOKEN_MAX_LEN + 3];
    struct bearer_token digest;
    size_t len = 0;
    const char *bad;
    ssize_t n;
    bool line = strcmp(path, "-") == 0;
    int fd = line ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        snprintf(err, errlen, "the admin token file %s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    while (len < sizeof(buf) && (len == 0 || !line || buf[len - 1] != '\n') &&
           (n = read(fd, buf + len, line ? 1 : sizeof(buf) - len)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "the admin token file %s: cannot read: %s", path,
                     strerror(errno));
            if (!line)
                close(fd);
            OPENSSL_cleanse(buf, sizeof(buf));
            return -1;
        }
        len += (size_t)n;
    }
    if (!line)
        close(fd);
    bad = len == sizeof(buf) ? "the token is longer than 1024 characters"
                             : bearer_token_set(&digest, buf, len);
    if (bad == NULL) {
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            len--;
        memcpy(c->token, buf, len);
        c->token[len] = '\0';
    } else {
        snprintf(err, errlen, "the admin token file %s: %s", path, bad);
    }
    OPENSSL_cleanse(buf, sizeof(buf));
    OPENSSL_cleanse(&digest, sizeof(digest));
    return bad == NULL ? 0 : -1;
}

int cli_http_open(struct cli_client *c, const struct config *cfg, const char *admin_url,
                  const char *token_file, long long timeout_s, char *err, size_t errlen)
{
    const char *host, *token_path = token_file != NULL ? token_file : cfg->admin_token_file;
    size_t len;
    int n;

    memset(c, 0, sizeof(*c));
    c->timeout_ms = timeout_s * 1000;
    if (admin_url != NULL) {
        len = strlen(admin_url);
        while (len > 0 && admin_url[len - 1] == '/')
            len--;
        if ((strncmp(admin_url, "http://", 7) != 0 && strncmp(admin_url, "https://", 8) != 0) ||
            strpbrk(admin_url, "?# \t\r\n") != NULL || len >= sizeof(c->base)) {
            snprintf(err, errlen, "--admin takes http://HOST:PORT, the admin listener's address");
            return CLI_USAGE;
        }
        memcpy(c->base, admin_url, len);
        c->base[len] = '\0';
    } else {
        if (cfg->admin_listen.host == NULL) {
            snprintf(err, errlen, "the configuration has no admin listener (admin_listen is "
                     "\"\"): give --admin URL");
            return CLI_USAGE;
        }
        host = cli_http_reach(cfg->admin_listen.host);
        n = snprintf(c->base, sizeof(c->base), strchr(host, ':') != NULL ? "http://[%s]:%u"
                                                                         : "http://%s:%u",
                     host, (unsigned)cfg->admin_listen.port);
        if (n < 0 || (size_t)n >= sizeof(c->base)) {
            snprintf(err, errlen, "admin_listen's host is too long for a URL");
            return CLI_USAGE;
        }
    }
    if (token_path == NULL && cfg->admin_operators_file != NULL) {
        snprintf(err, errlen, "the admin listener takes the tokens of named operators "
                 "(admin.operators_file): give the file that holds yours with --token-file");
        return CLI_USAGE;
    }
    if (token_path != NULL && cli_http_read_token(c, token_path, err, errlen) != 0)
        return CLI_USAGE;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, errlen, "cannot initialise libcurl");
        return CLI_USAGE;
    }
    c->curl_ready = true;
    c->easy = curl_easy_init();
    if (c->easy == NULL) {
        snprintf(err, errlen, "cannot initialise libcurl");
        return CLI_USAGE;
    }
    return CLI_DONE;
}

void cli_http_close(struct cli_client *c)
{
    OPENSSL_cleanse(c->token, sizeof(c->token));
    if (c->easy != NULL)
        curl_easy_cleanup(c->easy);
    c->easy = NULL;
    if (c->curl_ready)
        curl_global_cleanup();
    c->curl_ready = false;
}

void cli_answer_deinit(struct cli_answer *a)
{
    free(a->body);
    json_decref(a->doc);
    memset(a, 0, sizeof(*a));
}

int cli_http_escape(char *buf, size_t size, const char *value)
{
    char *encoded = evhttp_uriencode(value, -1, 0);
    size_t used = strlen(buf);
    int rc = -1;

    if (encoded != NULL && used + strlen(encoded) < size) {
        memcpy(buf + used, encoded, strlen(encoded) + 1);
        rc = 0;
    }
    free(encoded);
    return rc;
}

/* libcurl's write callback: the answer's body, at most CLI_ANSWER_MAX bytes. */
static size_t cli_http_on_data(char *data, size_t size, size_t nmemb, void *arg)
{
    struct cli_answer *a = arg;
    size_t n = size * nmemb;
    char *grown;

    if (n > CLI_ANSWER_MAX - a->len)
        return 0; /* libcurl stops with CURLE_WRITE_ERROR */
    grown = realloc(a->body, a->len + n + 1);
    if (grown == NULL)
        return 0;
    a->body = grown;
    memcpy(a->body + a->len, data, n);
    a->len += n;
    a->body[a->len] = '\0';
    return n;
}

/* Whether content_type (NULL: none) is JSON: application/json or application/problem+json. */
static bool cli_http_is_json(const char *content_type)
{
    return content_type != NULL &&
           (strncasecmp(content_type, "application/json", 16) == 0 ||
            strncasecmp(content_type, "application/problem+json", 24) == 0);
}

/* The answer's status, ETag and document, once libcurl has it whole. */
static int cli_http_take(struct cli_client *c, const char *method, struct cli_answer *a)
{
    struct curl_header *etag = NULL;
    char *content_type = NULL;
    json_error_t jerr;

    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &a->status);
    curl_easy_getinfo(c->easy, CURLINFO_CONTENT_TYPE, &content_type);
    if (curl_easy_header(c->easy, "ETag", 0, CURLH_HEADER, -1, &etag) == CURLHE_OK &&
        strlen(etag->value) < sizeof(a->etag))
        snprintf(a->etag, sizeof(a->etag), "%s", etag->value);
    /* a string with \u0000 is still JSON: its text is printed escaped (cli_print_clean) */
    if (cli_http_is_json(content_type) && a->body != NULL)
        a->doc = json_loadb(a->body, a->len, JSON_ALLOW_NUL, &jerr);
    if (a->status >= 200 && a->status < 300 && a->doc == NULL) {
        cli_print_error("%s %s answered %ld without a JSON document: is it the admin listener?%s",
                        method, c->base, a->status, a->change
                        ? " The change may or may not have been made: look before sending it "
                          "again" : "");
        return a->change ? CLI_UNKNOWN : CLI_UNREACHABLE;
    }
    return CLI_DONE;
}

/* Append one field line (copied) to *fields; 0, or -1 out of memory (*fields kept). */
static int cli_http_field(struct curl_slist **fields, const char *line)
{
    struct curl_slist *grown = curl_slist_append(*fields, line);

    if (grown == NULL)
        return -1;
    *fields = grown;
    return 0;
}

int cli_http_call(struct cli_client *c, const char *method, const char *target,
                  const json_t *body, const char *if_match, bool change, struct cli_answer *a)
{
    char errbuf[CURL_ERROR_SIZE] = "", *url = NULL, *payload = NULL, line[320];
    struct curl_slist *fields = NULL;
    CURL *e = c->easy;
    CURLcode rc;
    int out = CLI_UNREACHABLE;

    memset(a, 0, sizeof(*a));
    a->change = change;
    if (asprintf(&url, "%s%s", c->base, target) < 0) {
        url = NULL;
        goto oom;
    }
    if (body != NULL && (payload = json_dumps(body, JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL)
        goto oom;
    if (cli_http_field(&fields, "Accept: application/json") != 0 ||
        (payload != NULL && cli_http_field(&fields, "Content-Type: application/json") != 0) ||
        /* no 100-continue round trip: the listener reads a small body at once */
        (payload != NULL && cli_http_field(&fields, "Expect:") != 0))
        goto oom;
    if (if_match != NULL) {
        /* show prints the tag quoted; pasted without its quotes it is the same tag */
        bool bare = if_match[0] != '"' && strncmp(if_match, "W/", 2) != 0 &&
                    strcmp(if_match, "*") != 0;
        snprintf(line, sizeof(line), bare ? "If-Match: \"%s\"" : "If-Match: %s", if_match);
        if (cli_http_field(&fields, line) != 0)
            goto oom;
    }
    curl_easy_reset(e);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PROXY, "");
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)c->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(c->timeout_ms < CLI_CONNECT_TIMEOUT_MS ? c->timeout_ms
                                                                   : CLI_CONNECT_TIMEOUT_MS));
    curl_easy_setopt(e, CURLOPT_USERAGENT, "idempotency-proxy-admin/" IDEM_VERSION);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, fields);
    if (c->token[0] != '\0') {
        curl_easy_setopt(e, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
        curl_easy_setopt(e, CURLOPT_XOAUTH2_BEARER, c->token);
    }
    if (strcmp(method, "POST") == 0 || payload != NULL) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, payload != NULL ? payload : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)(payload != NULL ? strlen(payload) : 0));
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, cli_http_on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, a);
    rc = curl_easy_perform(e);
    if (rc == CURLE_OK) {
        out = cli_http_take(c, method, a);
    } else {
        /* a request that may have been sent may have been carried out */
        bool unsent = rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
                      rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL;
        const char *why = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc);
        char clean[4 * CURL_ERROR_SIZE];

        /* libcurl's error may quote what the server sent */
        cli_print_clean(clean, sizeof(clean), why, strlen(why));
        cli_print_error("%s %s: no answer: %s%s", method, c->base, clean,
                        change && !unsent ? "; the change may or may not have been made: look "
                                            "before sending it again" : "");
        if (change && !unsent)
            out = CLI_UNKNOWN;
    }
    goto done;
oom:
    cli_print_error("out of memory");
done:
    curl_easy_setopt(e, CURLOPT_XOAUTH2_BEARER, NULL);
    curl_slist_free_all(fields);
    free(payload);
    free(url);
    return out;
}
