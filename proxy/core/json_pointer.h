/*
 * json_pointer.h - RFC 6901 JSON Pointers over a jansson document: the one
 * reader of pointers, for a webhook's event id (key_from: json:) and the
 * members a fingerprint leaves out (fingerprint_ignore). Pure.
 */
#ifndef IDEM_JSON_POINTER_H
#define IDEM_JSON_POINTER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/*
 * Whether pointer (len bytes, any bytes) is a JSON Pointer (RFC 6901
 * section 3): "" or '/'-separated reference tokens in which every '~' is
 * followed by '0' or '1'. Pure.
 */
bool json_pointer_valid(const char *pointer, size_t len);

/*
 * Resolve pointer (len bytes, borrowed) in root (borrowed) up to its last
 * reference token (RFC 6901 section 4): *parent gets the node that token
 * applies to (borrowed from root), token (caller-owned, at least len bytes)
 * the token unescaped ("~1" '/', "~0" '~') and *token_len its length. For
 * "" (the whole document) *parent is NULL and *token_len 0. Returns 0, or
 * -1 when pointer is not a JSON Pointer or a token before the last names
 * nothing (no such member, an index out of range or not one, a scalar).
 */
int json_pointer_parent(json_t *root, const char *pointer, size_t len, json_t **parent,
                        char *token, size_t *token_len);

/*
 * The array index that token (len bytes) names in an array of size
 * elements: "0", or digits without a leading zero, below size (RFC 6901
 * section 4; "-" names nothing). False when it names none.
 */
bool json_pointer_index(const char *token, size_t len, size_t size, size_t *index);

/*
 * The node pointer (NUL-terminated, borrowed) names in root (borrowed), or
 * NULL when it names nothing or is not a JSON Pointer. Borrowed from root.
 * Allocates a token buffer; NULL as well when out of memory.
 */
json_t *json_pointer_get(json_t *root, const char *pointer);

#endif
