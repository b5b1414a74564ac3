/*
 * config_file.c - the configuration file as text and as a libyaml document:
 * reading FILE (config_load), parsing one document with its line marks
 * (config_doc_parse, for the user's file and the built-in defaults), and the
 * reference-counted heap config the worker threads share (config_create,
 * config_ref, config_unref). The passes over the document are config.c's.
 */
#include "config_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    yaml_parser_delete(&parser);
    return 0;
failed:
    yaml_parser_delete(&parser);
    return -1;
}



/* ---- the file, and the shared heap config --------------------------------- */

int config_load(struct config *cfg, const char *file, char *err, size_t errlen)
{
    FILE *fp;
    char *text = NULL;
    size_t len = 0, cap = 0;
    int rc;

    memset(cfg, 0, sizeof(*cfg));
    fp = fopen(file, "rb");
    if (fp == NULL) {
        snprintf(err, errlen, "%s: cannot open: %s", file, strerror(errno));
        return -1;
    }
    for (;;) {
        size_t n;

        if (len == cap) {
            char *grown = realloc(text, cap ? cap * 2 : 4096);

            if (grown == NULL) {
                snprintf(err, errlen, "%s: out of memory", file);
                goto failed;
            }
            text = grown;
            cap = cap ? cap * 2 : 4096;
        }
        n = fread(text + len, 1, cap - len, fp);
        len += n;
        if (n == 0)
            break;
    }
    if (ferror(fp)) {
        snprintf(err, errlen, "%s: cannot read: %s", file, strerror(errno));
        goto failed;
    }
    fclose(fp);
    rc = config_load_string(cfg, text, len, file, err, errlen);
    free(text);
    return rc;
failed:
    fclose(fp);
    free(text);
    return -1;
}

struct config *config_create(const char *file, char *err, size_t errlen)
{
    struct config *cfg = malloc(sizeof(*cfg));

    if (cfg == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (config_load(cfg, file, err, errlen) != 0) {
        free(cfg);
        return NULL;
    }
    cfg->refs = 1;
    return cfg;
}

struct config *config_ref(struct config *cfg)
{
    cfg->refs++;
    return cfg;
}

void config_unref(struct config *cfg)
{
    if (cfg == NULL || --cfg->refs > 0)
        return;
    config_deinit(cfg);
    free(cfg);
}
