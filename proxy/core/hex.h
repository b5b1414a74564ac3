/*
 * hex.h - lowercase hexadecimal of bytes: the spelling of record ids,
 * fingerprints and token fingerprints (RFC 4648 section 8, "base16", in
 * lower case). Pure; no allocation.
 */
#ifndef IDEM_HEX_H
#define IDEM_HEX_H

#include <stddef.h>

/*
 * Write the n bytes of bytes (borrowed) as 2 * n lowercase hex digits and a
 * NUL into out (caller-owned, at least 2 * n + 1 bytes). Cannot fail.
 */
void hex_lower(const unsigned char *bytes, size_t n, char *out);

#endif
