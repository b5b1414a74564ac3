#!/usr/bin/env python3
"""Send each replay key once (keys replay-TAG-0 .. N-1, bodies as in common.lua), so that
replay.lua then only hits stored answers. Exits 1 unless every answer is 2xx.

usage: warm.py PORT TAG N [BODY_SIZE]"""
import http.client
import sys
import threading


def body(n, size):
    head = '{"amount":1000,"currency":"eur","customer":"cus_%d","description":"order %d"' % (n, n)
    if size <= 0:
        return (head + '}').encode()
    fill = max(0, size - len(head) - len(',"pad":""}'))
    return (head + ',"pad":"' + 'x' * fill + '"}').encode()


def main():
    port, tag, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    bad = []
    lock = threading.Lock()
    workers = 8

    def work(w):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for i in range(w, n, workers):
            conn.request("POST", "/v1/payments", body=body(i, size), headers={
                "Content-Type": "application/json", "Idempotency-Key": "replay-%s-%d" % (tag, i)})
            r = conn.getresponse()
            r.read()
            if not 200 <= r.status < 300:
                with lock:
                    bad.append(r.status)
            if r.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.close()

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if bad:
        print("warm: %d of %d answers not 2xx (%s)" % (len(bad), n, sorted(set(bad))), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
