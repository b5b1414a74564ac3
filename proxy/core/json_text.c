/*
 * json_text.c - see json_text.h.
 */
#include "json_text.h"

#include <string.h>

char *json_text(json_t *doc, size_t *len)
{
    return json_text_flags(doc, JSON_COMPACT, len);
}

char *json_text_flags(json_t *doc, size_t flags, size_t *len)
{
    char *text;

    if (doc == NULL)
        return NULL;
    text = json_dumps(doc, flags);
    json_decref(doc);
    if (text != NULL)
        *len = strlen(text);
    return text;
}
