#!/usr/bin/env python3
"""Redis memory per idempotency record, measured (README "When one Redis is not enough").

Starts a redis-server, the demo upstream (tests/upstream/payments_api.py) and the proxy
(build/proxy/idempotency-proxy, or $IDEM_PROXY_BIN), all on free loopback ports in a temp
dir, then for each answer size writes N records through the proxy (fresh keys, the
upstream answering exactly SIZE body bytes with X-Demo-Size) and reports, per record:
used_memory growth from INFO memory (so the key, the value, the expiry entry and the
allocator's rounding all count) and MEMORY USAGE averaged over a sample of the keys.

usage: tests/bench/record_memory.py [N] [SIZE ...]   (defaults: 2000; 0 256 1024 4096 16384)
prints a Markdown table."""
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from harness import Proxy, RedisServer, Upstream, build_config, free_port, to_yaml  # noqa: E402


def used_memory(redis):
    info = redis.cmd("INFO", "memory")
    info = info.decode() if isinstance(info, bytes) else info
    return int(next(l.split(":")[1] for l in info.splitlines() if l.startswith("used_memory:")))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    sizes = [int(s) for s in sys.argv[2:]] or [0, 256, 1024, 4096, 16384]
    work = tempfile.mkdtemp(prefix="record-memory-")
    redis = RedisServer(os.path.join(work, "redis")).start()
    upstream = Upstream(work).start()
    port, admin = free_port(), free_port()
    text = to_yaml(build_config(port, admin, upstream.url, redis.url, workers=2)) + "\n"
    proxy = Proxy(work, "proxy", text, port, admin)
    proxy.start()
    try:
        print("| answer body | records | used_memory per record | MEMORY USAGE per record |")
        print("| ---: | ---: | ---: | ---: |")
        for size in sizes:
            redis.cmd("FLUSHALL")
            before = used_memory(redis)

            def one(i):
                r = proxy.post(key="mem-%d-%d" % (size, i), headers=[("X-Demo-Size", str(size))],
                               timeout=30)
                assert r.status == 201 and len(r.body) == size, r
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(one, range(n)))
            grown = (used_memory(redis) - before) / n
            keys = redis.cmd("SCAN", "0", "MATCH", "idem:*", "COUNT", 200)[1][:100]
            usage = sum(redis.cmd("MEMORY", "USAGE", k, "SAMPLES", "0") for k in keys) / len(keys)
            print("| %d B | %d | %.0f B | %.0f B |" % (size, n, grown, usage))
    finally:
        proxy.stop()
        upstream.stop()
        redis.kill()


if __name__ == "__main__":
    main()
