/*
 * store_script.c - the store's Lua scripts: the records' text, plain string
 * constants, the registration of the scripts other modules own
 * (store_script_register), and every script's SHA1 for EVALSHA. No script
 * passes through a format function: a Lua '%' pattern is just text
 * (tests/unit/test_store_script.c checks the scripts against their sources).
 */
#include "store_int.h"

#include <stdio.h>
#include <string.h>

#include <openssl/sha.h>

#include "record.h"

/*
 * Lua: "v is not a claim owned by ARGV[1]": byte RECORD_STATE_OFFSET is not
 * RECORD_CLAIMED, or the RECORD_OWNER_LEN bytes at RECORD_OWNER_OFFSET are
 * not the owner token (Lua strings count from 1).
 */
#define STORE_LUA_NOT_CLAIM "string.sub(v, 4, 4) ~= 'C'"
#define STORE_LUA_OWNER_NOT "string.sub(v, 5, 36) ~= ARGV[1]"
#define STORE_LUA_NOT_OURS STORE_LUA_NOT_CLAIM " or " STORE_LUA_OWNER_NOT

/*
 * Lua: set KEYS[1] to ARGV[2] for ARGV[3] ms, or keep its time to live when
 * ARGV[3] is '0' or the key already lives longer (never shortened).
 */
#define STORE_LUA_SET_NEVER_SHORTER \
    "if ARGV[3] == '0' or redis.call('PTTL', KEYS[1]) > tonumber(ARGV[3]) then\n" \
    "  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')\n" \
    "else\n" \
    "  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])\n" \
    "end\n"
_Static_assert(RECORD_STATE_OFFSET + 1 == 4 && RECORD_CLAIMED == 'C' &&
                   RECORD_OWNER_OFFSET + 1 == 5 && RECORD_OWNER_OFFSET + RECORD_OWNER_LEN == 36,
               "STORE_LUA_NOT_OURS reads record.h's layout");

/*
 * Every later change of a record is a compare-and-set on state 'C' and the
 * owner token. The scripts read both by their offsets in record.h
 * (STORE_LUA_NOT_OURS, asserted against them below).
 * REPLACE is idempotent for its owner: a record already byte-for-byte the
 * value (which carries the owner token) is reported applied, so a write
 * that timed out, may have landed and is sent again succeeds; anyone
 * else's value still differs and is refused. Its PX never shortens the
 * key's time to live: an operator's extension of a claim whose stalled
 * owner comes back stands (docs/client-contract.md#how-long-a-record-lives).
 */
#define STORE_SCRIPT_MAX 4096
static const char *const store_script_record_text[SCRIPT_COUNT] = {
    [SCRIPT_REPLACE] =
        "local v = redis.call('GET', KEYS[1])\n"
        "if v == ARGV[2] then\n"
        "  return 1\n"
        "end\n"
        "if not v or " STORE_LUA_NOT_OURS " then\n"
        "  return 0\n"
        "end\n"
        STORE_LUA_SET_NEVER_SHORTER
        "return 1\n",
    [SCRIPT_RELEASE] =
        "local v = redis.call('GET', KEYS[1])\n"
        "if not v or " STORE_LUA_NOT_OURS " then\n"
        "  return 0\n"
        "end\n"
        "redis.call('DEL', KEYS[1])\n"
        "return 1\n",
    [SCRIPT_TAKEOVER] =
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
        "  return 0\n"
        "end\n"
        "redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])\n"
        "return 1\n",
    [SCRIPT_DELETE_UNCHANGED] =
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
        "  return 0\n"
        "end\n"
        "redis.call('DEL', KEYS[1])\n"
        "return 1\n",
    /* the record's retention goes on: KEEPTTL */
    [SCRIPT_RESOLVE] =
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
        "  return 0\n"
        "end\n"
        "redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')\n"
        "return 1\n",
    /*
     * The listing's look at one key: 4 bytes first (a finished record's body
     * stays in Redis), the whole record and its PTTL only in one of the
     * states ARGV[1] lists (state letters, a plain find: no pattern).
     * Byte 3 (0-based) is RECORD_STATE_OFFSET, asserted below. A key of
     * another type under the records' pattern (WRONGTYPE: not the proxy's),
     * or one too short to have a state, is passed over; any other error
     * (NOPERM: an ACL user without +getrange) is the script's error, so the
     * page fails and says so instead of listing nothing (fail closed).
     */
    [SCRIPT_PEEK] =
        "local head = redis.pcall('GETRANGE', KEYS[1], 3, 3)\n"
        "if type(head) == 'table' then\n"
        "  if string.sub(tostring(head.err), 1, 9) == 'WRONGTYPE' then\n"
        "    return false\n"
        "  end\n"
        "  return head\n"
        "end\n"
        "if #head ~= 1 or not string.find(ARGV[1], head, 1, true) then\n"
        "  return false\n"
        "end\n"
        "return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}\n",
    /*
     * An operator's extension of a held record (store_extend_unchanged):
     * while the record is still byte-for-byte ARGV[1], its time to live
     * becomes ARGV[2] ms unless it is that long already (or has no expiry):
     * {1, new ttl} or {0, ttl as it is}; nil when the record changed or is
     * gone. SET ... PX rewrites the same value (no PEXPIRE: the ACL lines
     * of docs/redis.md need nothing new).
     */
    [SCRIPT_EXTEND] =
        "local v = redis.call('GET', KEYS[1])\n"
        "if v ~= ARGV[1] then\n"
        "  return false\n"
        "end\n"
        "local ttl = redis.call('PTTL', KEYS[1])\n"
        "if ttl >= 0 and ttl < tonumber(ARGV[2]) then\n"
        "  redis.call('SET', KEYS[1], v, 'PX', ARGV[2])\n"
        "  return {1, tonumber(ARGV[2])}\n"
        "end\n"
        "return {0, ttl}\n",
    /*
     * The census's look at a batch of keys (store_census.c): the fixed head
     * of each (its first 124 bytes: magic, state, owner, fingerprint, lease
     * deadline, created, completed and, in IR2 and IR3, the answer flag and
     * the lengths of key id and route; in IR1 the answer's status and field
     * count; IR3's mode and ignore list's length after them), never the
     * answer; a held record counted by state, 1 a claim
     * whose lease deadline (bytes 68..83) is not after ARGV[1] (ms), 2
     * outcome-unknown, 3 resolved, with the earliest created time (bytes
     * 84..99) and the shortest PTTL of each (-1: none has one). What
     * record_decode (record.c) checks cheaply is checked here too, so that
     * a value that merely starts like a record is not counted: the fixed
     * fields' digits and hex, the key id (its characters), IR3's mode letter
     * and list length, that the value is long enough for its key id, route
     * and ignore list, that a claim ends there, and
     * a plaintext answer's status and field count; what is left unchecked
     * is a plaintext answer's fields (docs/operations.md#held-records). A
     * key of another type (WRONGTYPE: not the proxy's) is passed over; any
     * other error (NOPERM: an ACL user without +getrange) is the script's
     * error, so the census fails and says so (fail closed).
     */
    [SCRIPT_CENSUS] =
        "local now = tonumber(ARGV[1])\n"
        "local n, oldest, ttl = {0, 0, 0}, {0, 0, 0}, {-1, -1, -1}\n"
        "local function digits(s)\n"
        "  return string.find(s, '^[0-9]+$') ~= nil\n"
        "end\n"
        "local function held(k, h)\n"
        "  local magic, st, i = string.sub(h, 1, 3), string.sub(h, 4, 4), nil\n"
        "  if st == 'U' then\n"
        "    i = 2\n"
        "  elseif st == 'R' then\n"
        "    i = 3\n"
        "  elseif st == 'C' then\n"
        "    i = 1\n"
        "  else\n"
        "    return nil\n"
        "  end\n"
        "  if not (((magic == 'IR2' or magic == 'IR3') and #h >= 123) or\n"
        "      (magic == 'IR1' and #h == 124)) or\n"
        "      not string.find(string.sub(h, 5, 68), '^[0-9a-f]+$') or\n"
        "      not digits(string.sub(h, 69, 116)) then\n"
        "    return nil\n"
        "  end\n"
        "  if i == 1 and tonumber(string.sub(h, 69, 84)) > now then\n"
        "    return nil\n"
        "  end\n"
        "  if magic == 'IR1' then\n"
        "    if not digits(string.sub(h, 117, 124)) or tonumber(string.sub(h, 120, 124)) > 128 then\n"
        "      return nil\n"
        "    end\n"
        "    return i\n"
        "  end\n"
        "  local answer, l, r = string.sub(h, 117, 117), string.sub(h, 118, 119), "
        "string.sub(h, 120, 123)\n"
        "  if (answer ~= 'P' and answer ~= 'S') or not digits(l .. r) then\n"
        "    return nil\n"
        "  end\n"
        "  l, r = tonumber(l), tonumber(r)\n"
        "  if l > 32 or r > 4096 then\n"
        "    return nil\n"
        "  end\n"
        "  local at, g = 123, 0\n"
        "  if magic == 'IR3' then\n"
        "    local x = redis.call('GETRANGE', k, 123, 127)\n"
        "    local mode = string.sub(x, 1, 1)\n"
        "    if #x ~= 5 or (mode ~= 'J' and mode ~= 'F') or not digits(string.sub(x, 2, 5)) then\n"
        "      return nil\n"
        "    end\n"
        "    at, g = 128, tonumber(string.sub(x, 2, 5))\n"
        "    if g > 8256 or (mode == 'F' and g > 0) then\n"
        "      return nil\n"
        "    end\n"
        "  end\n"
        "  local rest = redis.call('GETRANGE', k, at, at + l + r + g + 7)\n"
        "  local tail = string.sub(rest, l + r + g + 1)\n"
        "  if #rest < l + r + g or (l > 0 and not string.find(string.sub(rest, 1, l), "
        "'^[A-Za-z0-9._-]+$')) then\n"
        "    return nil\n"
        "  end\n"
        "  if i == 1 then\n"
        "    if #tail ~= 0 then\n"
        "      return nil\n"
        "    end\n"
        "  elseif answer == 'P' and (#tail < 8 or not digits(string.sub(tail, 1, 8)) or\n"
        "      tonumber(string.sub(tail, 4, 8)) > 128) then\n"
        "    return nil\n"
        "  end\n"
        "  return i\n"
        "end\n"
        "for _, k in ipairs(KEYS) do\n"
        "  local h = redis.pcall('GETRANGE', k, 0, 123)\n"
        "  if type(h) == 'table' and string.sub(tostring(h.err), 1, 9) ~= 'WRONGTYPE' then\n"
        "    return h\n"
        "  end\n"
        "  local i = type(h) == 'string' and held(k, h) or nil\n"
        "  if i then\n"
        "    local created = tonumber(string.sub(h, 85, 100)) or 0\n"
        "    local left = redis.call('PTTL', k)\n"
        "    n[i] = n[i] + 1\n"
        "    if created > 0 and (oldest[i] == 0 or created < oldest[i]) then\n"
        "      oldest[i] = created\n"
        "    end\n"
        "    if left >= 0 and (ttl[i] < 0 or left < ttl[i]) then\n"
        "      ttl[i] = left\n"
        "    end\n"
        "  end\n"
        "end\n"
        "return {n[1], n[2], n[3], oldest[1], oldest[2], oldest[3], ttl[1], ttl[2], ttl[3]}\n",
    /*
     * A write put back on a new primary after a failover (store_reassert.c):
     * ARGV[1] its owner token, ARGV[2] the value this store wrote, ARGV[3]
     * its time to live left (ms), or '0' for a write that kept the key's
     * (KEEPTTL: never put back alone, an earlier entry of the key does that),
     * ARGV[4] for a takeover the record it replaced, else ''. 1: the key
     * already holds it, or a later record of the same owner; 2: put back (the
     * key was gone, held an earlier claim of ours, or still holds the record
     * the takeover replaced); 3: a renewal of a key that is gone; 0: the key
     * holds another owner's record (claimed afresh after the failover). The
     * owner and state are read as STORE_LUA_NOT_OURS reads them.
     */
    [SCRIPT_REASSERT] =
        "local v = redis.call('GET', KEYS[1])\n"
        "if v == ARGV[2] then\n"
        "  return 1\n"
        "end\n"
        "if not v then\n"
        "  if ARGV[3] == '0' then\n"
        "    return 3\n"
        "  end\n"
        "  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])\n"
        "  return 2\n"
        "end\n"
        "if ARGV[4] ~= '' and v == ARGV[4] then\n"
        "  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])\n"
        "  return 2\n"
        "end\n"
        "if " STORE_LUA_OWNER_NOT " then\n"
        "  return 0\n"
        "end\n"
        "if " STORE_LUA_NOT_CLAIM " then\n"
        "  return 1\n"
        "end\n"
        STORE_LUA_SET_NEVER_SHORTER
        "return 2\n",
};
_Static_assert(RECORD_STATE_OFFSET == 3, "SCRIPT_PEEK reads the state at byte 3");
_Static_assert(RECORD_CLAIMED == 'C' && RECORD_UNKNOWN == 'U' && RECORD_RESOLVED == 'R',
               "SCRIPT_CENSUS reads record.h's state letters");
_Static_assert(RECORD_HEAD_LEN == 124 && RECORD_HEAD2_LEN == 123 && RECORD_HEAD3_LEN == 128 &&
                   RECORD_IGNORE_MAX == 8256 && KEYRING_ID_MAX == 32 &&
                   RECORD_ROUTE_MAX == 4096 && RECORD_MAX_HEADERS == 128,
               "SCRIPT_CENSUS reads record.h's head as record_decode does");

const char *store_script_text(enum store_record_script script)
{
    return store_script_record_text[script];
}

void store_script_digest(const char *text, char out[STORE_SCRIPT_SHA_LEN + 1])
{
    unsigned char digest[SHA_DIGEST_LENGTH];

    _Static_assert(2 * SHA_DIGEST_LENGTH == STORE_SCRIPT_SHA_LEN, "a hex SHA1");
    SHA1((const unsigned char *)text, strlen(text), digest);
    for (int j = 0; j < SHA_DIGEST_LENGTH; j++)
        snprintf(&out[2 * j], 3, "%02x", digest[j]);
}

void store_script_register(struct store_script *script)
{
    store_script_digest(script->text, script->sha);
}
