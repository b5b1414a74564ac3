/*
 * hex.c - lowercase hexadecimal of bytes (hex.h).
 */
#include "hex.h"

void hex_lower(const unsigned char *bytes, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 0xf];
    }
    out[2 * n] = '\0';
}
