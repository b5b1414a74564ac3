#!/usr/bin/env python3
"""Redis memory per idempotency record: sample finished records, run MEMORY USAGE and STRLEN,
decode the record (proxy/idem/record.h) to find the stored body, and report what a record costs
beyond the body it stores. Needs only a TCP connection to Redis (no client library).

usage: record_overhead.py PORT KEY_PREFIX [SAMPLES]
prints "name value" lines (bytes, averages over the sample) for tests/bench/run."""
import socket
import struct
import sys

HEAD = 124  # proxy/idem/record.h RECORD_HEAD_LEN (IR1)
HEAD2 = 123  # RECORD_HEAD2_LEN (IR2), before key id and route name


class Redis:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.f = self.s.makefile("rb")

    def cmd(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out)
        return self.read()

    def read(self):
        line = self.f.readline()[:-2]
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("bad reply %r" % line)


def decode(v):
    """(state, head bytes, stored header bytes, header names, body length) of one plaintext
    record, IR1 or IR2 (proxy/idem/record.h); None for a sealed one."""
    state = chr(v[3])
    if v[:3] == b"IR1":
        head, answer = HEAD, 116
    else:
        if v[116:117] != b"P":
            return None
        head = HEAD2 + int(v[117:119]) + int(v[119:123])
        answer = head
    if state == "C":
        return state, head, 0, [], 0
    n = int(v[answer + 3:answer + 8])
    off = answer + 8
    names = []
    for _ in range(n):
        (nl,) = struct.unpack(">H", v[off:off + 2])
        names.append(v[off + 2:off + 2 + nl].decode())
        off += 2 + nl
        (vl,) = struct.unpack(">I", v[off:off + 4])
        off += 4 + vl
    return state, answer + 8, off - (answer + 8), names, len(v) - off


def main():
    port, prefix = int(sys.argv[1]), sys.argv[2]
    want = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    r = Redis(port)
    keys, cursor = [], "0"
    while True:
        cursor, batch = r.cmd("SCAN", cursor, "MATCH", prefix + ":{*", "COUNT", 1000)
        keys += batch
        if cursor == b"0" or len(keys) >= want * 4:
            break
    rows = []
    heads = []
    names = set()
    for k in keys:
        v = r.cmd("GET", k)
        if v is None or len(v) < HEAD2 or v[:3] not in (b"IR1", b"IR2"):
            continue
        d = decode(v)
        if d is None or d[0] != "D":
            continue
        state, head, hdr, hnames, body = d
        heads.append(head)
        mem = r.cmd("MEMORY", "USAGE", k, "SAMPLES", "0")
        strlen = r.cmd("STRLEN", k)
        rows.append((len(k), mem, strlen, hdr, body))
        names.update(hnames)
        if len(rows) >= want:
            break
    if not rows:
        print("records 0")
        return 1
    info = r.cmd("INFO", "memory").decode()
    mem_info = dict(l.split(":", 1) for l in info.split("\r\n") if ":" in l)
    dbsize = r.cmd("DBSIZE")
    avg = lambda i: sum(x[i] for x in rows) / len(rows)
    print("records %d" % len(rows))
    print("key_len %.0f" % avg(0))
    print("memory_usage %.1f" % avg(1))
    print("strlen %.1f" % avg(2))
    print("record_head %.0f" % (sum(heads) / len(heads)))
    print("stored_headers %.1f" % avg(3))
    print("body %.1f" % avg(4))
    print("overhead_beyond_body %.1f" % (avg(1) - avg(4)))
    print("redis_overhead_beyond_value %.1f" % (avg(1) - avg(2)))
    print("dbsize %d" % dbsize)
    used = int(mem_info["used_memory"]) - int(mem_info["used_memory_startup"])
    print("used_memory_per_key %.1f" % (used / dbsize if dbsize else 0))
    print("stored_header_names %s" % ",".join(sorted(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
