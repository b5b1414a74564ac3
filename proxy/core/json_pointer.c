/*
 * json_pointer.c - see json_pointer.h.
 */
#include "json_pointer.h"

#include <stdlib.h>
#include <string.h>

bool json_pointer_valid(const char *pointer, size_t len)
{
    if (len > 0 && pointer[0] != '/')
        return false;
    for (size_t i = 0; i < len; i++)
        if (pointer[i] == '~' && (i + 1 == len || (pointer[i + 1] != '0' && pointer[i + 1] != '1')))
            return false;
    return true;
}

bool json_pointer_index(const char *token, size_t len, size_t size, size_t *index)
{
    size_t n = 0;

    if (len == 0 || (len > 1 && token[0] == '0'))
        return false;
    for (size_t i = 0; i < len; i++) {
        if (token[i] < '0' || token[i] > '9')
            return false;
        n = n * 10 + (size_t)(token[i] - '0');
        if (n >= size)
            return false;
    }
    *index = n;
    return true;
}

/* One reference token applied to node (RFC 6901 section 4); NULL when it names nothing. */
static json_t *json_pointer_step(json_t *node, const char *token, size_t len)
{
    size_t index;

    if (json_is_object(node))
        return json_object_getn(node, token, len);
    if (json_is_array(node) && json_pointer_index(token, len, json_array_size(node), &index))
        return json_array_get(node, index);
    return NULL;
}

/* The reference token at *p (after its '/') unescaped into token; *p moves past it. */
static size_t json_pointer_token(const char **p, const char *end, char *token)
{
    size_t n = 0;

    for ((*p)++; *p < end && **p != '/'; (*p)++) {
        if (**p != '~') {
            token[n++] = **p;
            continue;
        }
        (*p)++;
        token[n++] = **p == '0' ? '~' : '/'; /* json_pointer_valid: '0' or '1' follows */
    }
    return n;
}

int json_pointer_parent(json_t *root, const char *pointer, size_t len, json_t **parent,
                        char *token, size_t *token_len)
{
    const char *p = pointer, *end = pointer + len;
    json_t *node = root;

    *parent = NULL;
    *token_len = 0;
    if (!json_pointer_valid(pointer, len))
        return -1;
    while (p < end) {
        size_t n = json_pointer_token(&p, end, token);

        if (p == end) { /* the last token: its node is the caller's to take or change */
            *parent = node;
            *token_len = n;
            return 0;
        }
        if ((node = json_pointer_step(node, token, n)) == NULL)
            return -1;
    }
    return 0;
}

json_t *json_pointer_get(json_t *root, const char *pointer)
{
    size_t len = strlen(pointer), n;
    char *token = malloc(len + 1); /* unescaping only shortens */
    json_t *parent, *node = NULL;

    if (token == NULL)
        return NULL;
    if (json_pointer_parent(root, pointer, len, &parent, token, &n) == 0)
        node = parent == NULL ? root : json_pointer_step(parent, token, n);
    free(token);
    return node;
}
