/*
 * path.c - request path normalisation for route matching. Pure.
 */
#include "path.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <event2/http.h>

int path_normalize(const char *raw, char *out, size_t outsize)
{
    size_t decoded_len = 0, n = 0;
    char *decoded = evhttp_uridecode(raw, 0, &decoded_len);
    char *seg, *save = NULL;

    if (outsize < 2)
        return -1;
    strcpy(out, "/");
    if (decoded == NULL)
        return -1;
    if (strlen(decoded) != decoded_len) {
        free(decoded);
        return -1;
    }
    for (seg = strtok_r(decoded, "/", &save); seg != NULL; seg = strtok_r(NULL, "/", &save)) {
        seg[strcspn(seg, ";")] = '\0';
        if (seg[0] == '\0' || strcmp(seg, ".") == 0)
            continue;
        if (strcmp(seg, "..") == 0) {
            while (n > 0 && out[n] != '/')
                n--; /* back to the slash before the last segment */
            out[n == 0 ? 1 : n] = '\0';
            continue;
        }
        size_t len = strlen(seg);
        if (n + 1 + len + 1 > outsize) {
            free(decoded);
            strcpy(out, "/");
            return -1;
        }
        out[n++] = '/';
        for (size_t i = 0; i < len; i++)
            out[n++] = (char)tolower((unsigned char)seg[i]);
        out[n] = '\0';
    }
    if (n == 0)
        strcpy(out, "/");
    free(decoded);
    return 0;
}
