/*
 * config_file.c - the configuration file as text and as a libyaml document:
 * reading FILE into memory (config_file_read) and parsing one document with
 * its line marks (config_doc_parse, for the user's file and the built-in
 * defaults). The passes over the document are config.c's.
 */
#include "config_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

/* ---- one YAML document ---------------------------------------------------- */

/* The 1-based line of byte offset in text (len bytes). */
static size_t config_line_at(const char *text, size_t len, size_t offset)
{
    size_t line = 1;

    for (size_t i = 0; i < offset && i < len; i++) {
        if (text[i] == '\n')
            line++;
    }
    return line;
}

/* libyaml's error as "FILE:LINE: YAML syntax error: ..." in ld->err; returns -1. */
static int config_syntax_error(struct config_loader *ld, const yaml_parser_t *parser,
                               const char *text, size_t len)
{
    size_t line;

    if (parser->error == YAML_MEMORY_ERROR)
        return config_oom(ld, NULL);
    if (ld->err == NULL || ld->errlen == 0)
        return -1;
    /* a reader error (bad UTF-8, control character) has an offset, not a mark */
    if (parser->error == YAML_READER_ERROR)
        line = config_line_at(text, len, parser->problem_offset);
    else
        line = parser->problem_mark.line + 1;
    if (parser->context != NULL)
        snprintf(ld->err, ld->errlen, "%s:%zu: YAML syntax error: %s %s that starts at line %zu",
                 ld->cur->name, line, parser->problem ? parser->problem : "",
                 parser->context, (size_t)parser->context_mark.line + 1);
    else
        snprintf(ld->err, ld->errlen, "%s:%zu: YAML syntax error: %s", ld->cur->name, line,
                 parser->problem ? parser->problem : "unknown problem");
    return -1;
}

/*
 * libyaml keeps a copy of the text in its buffers and frees them unwiped;
 * for a document with secrets they are wiped first. (Its scanner's own
 * short-lived strings are out of reach: wiping is best effort.)
 */
static void config_parser_delete(yaml_parser_t *parser, bool wipe)
{
    if (wipe) {
        if (parser->buffer.start != NULL)
            OPENSSL_cleanse(parser->buffer.start,
                            (size_t)(parser->buffer.end - parser->buffer.start));
        if (parser->raw_buffer.start != NULL)
            OPENSSL_cleanse(parser->raw_buffer.start,
                            (size_t)(parser->raw_buffer.end - parser->raw_buffer.start));
    }
    yaml_parser_delete(parser);
}

int config_doc_parse(struct config_loader *ld, struct config_doc *doc, const char *text,
                     size_t len)
{
    yaml_parser_t parser;
    yaml_document_t extra;
    yaml_node_t *root, *extra_root;

    ld->cur = doc;
    if (!yaml_parser_initialize(&parser))
        return config_oom(ld, NULL);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc->yaml)) {
        config_syntax_error(ld, &parser, text, len);
        goto failed;
    }
    doc->loaded = true;
    root = yaml_document_get_root_node(&doc->yaml);
    if (root != NULL) {
        if (!yaml_parser_load(&parser, &extra)) {
            config_syntax_error(ld, &parser, text, len);
            goto failed;
        }
        extra_root = yaml_document_get_root_node(&extra);
        if (extra_root != NULL)
            config_error(ld, extra_root, "a second YAML document; a configuration file holds one");
        yaml_document_delete(&extra);
        if (extra_root != NULL)
            goto failed;
        doc->root = config_is_null(root) ? NULL : root;
    }
    config_parser_delete(&parser, doc->wipe);
    return 0;
failed:
    config_parser_delete(&parser, doc->wipe);
    return -1;
}

/* ---- the file ------------------------------------------------------------ */

/*
 * file opened for reading; side: a file the configuration names (a secret,
 * the operators), opened without waiting and refused unless it is a regular
 * file (a symbolic link to one is): a reload runs on a worker that carries
 * requests, and a FIFO without a writer or a terminal would stop it for
 * ever. NULL with err set.
 */
static FILE *config_file_open(const char *file, bool side, char *err, size_t errlen)
{
    struct stat st;
    FILE *fp;
    int fd, flags;

    if (!side) {
        if ((fp = fopen(file, "rb")) == NULL)
            snprintf(err, errlen, "%s: cannot open: %s", file, strerror(errno));
        return fp;
    }
    fd = open(file, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", file, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file (a FIFO, a device, a socket or a "
                 "directory): the proxy reads it at every reload, and must not wait for it",
                 file);
        close(fd);
        return NULL;
    }
    flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 ||
        (fp = fdopen(fd, "rb")) == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", file, strerror(errno));
        close(fd);
        return NULL;
    }
    return fp;
}

static int config_file_read_from(const char *file, bool side, size_t max, char **text,
                                 size_t *len, char *err, size_t errlen);

int config_file_read(const char *file, char **text, size_t *len, char *err, size_t errlen)
{
    return config_file_read_from(file, false, SIZE_MAX, text, len, err, errlen);
}

int config_file_read_max(const char *file, size_t max, char **text, size_t *len, char *err,
                         size_t errlen)
{
    return config_file_read_from(file, true, max, text, len, err, errlen);
}

static int config_file_read_from(const char *file, bool side, size_t max, char **text,
                                 size_t *len, char *err, size_t errlen)
{
    FILE *fp;
    char *buf = NULL;
    size_t used = 0, cap = 0;

    fp = config_file_open(file, side, err, errlen);
    if (fp == NULL)
        return -1;
    for (;;) {
        size_t n;

        if (used == cap) {
            char *grown = realloc(buf, cap ? cap * 2 : 4096);

            if (grown == NULL) {
                snprintf(err, errlen, "%s: out of memory", file);
                goto failed;
            }
            buf = grown;
            cap = cap ? cap * 2 : 4096;
        }
        n = fread(buf + used, 1, cap - used, fp);
        used += n;
        if (n == 0)
            break;
        if (used > max) { /* a device or a wrong file: never read it all */
            snprintf(err, errlen, "%s: larger than %zu bytes", file, max);
            goto failed;
        }
    }
    if (ferror(fp)) {
        snprintf(err, errlen, "%s: cannot read: %s", file, strerror(errno));
        goto failed;
    }
    fclose(fp);
    *text = buf;
    *len = used;
    return 0;
failed:
    fclose(fp);
    if (buf != NULL) /* it may hold a secret */
        OPENSSL_cleanse(buf, cap);
    free(buf);
    return -1;
}
