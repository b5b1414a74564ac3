/*
 * json_text.h - a jansson document as the compact text the proxy stores or
 * sends (problem details, the census's result).
 */
#ifndef IDEM_JSON_TEXT_H
#define IDEM_JSON_TEXT_H

#include <stddef.h>

#include <jansson.h>

/*
 * doc as compact JSON (RFC 8259, jansson's JSON_COMPACT), malloc'd (the
 * caller frees it), its length in bytes in *len. Steals doc (NULL: none).
 * NULL when doc is NULL or out of memory; *len is then left alone.
 */
char *json_text(json_t *doc, size_t *len);

/*
 * json_text written with jansson's encoding flags (JSON_COMPACT,
 * JSON_SORT_KEYS, JSON_REAL_PRECISION(n), ...): the text never holds a raw
 * NUL (jansson escapes one in a string as \u0000), so *len is its length.
 * Allocated through jansson's allocator (json_set_alloc_funcs). Steals doc.
 */
char *json_text_flags(json_t *doc, size_t flags, size_t *len);

#endif
