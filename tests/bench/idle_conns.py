#!/usr/bin/env python3
"""Open N keep-alive client connections to the proxy, send one request on each (so every
connection has been through a full exchange and sits idle in keep-alive), then hold them.
Prints "ready OPEN FAILED" once all are idle, then holds until stdin closes or HOLD seconds
pass; prints "closed_by_server K" (connections the server dropped while held) at the end.

usage: idle_conns.py PORT N [HOLD_SECONDS] [PATH]"""
import resource
import selectors
import socket
import sys
import time


def main():
    port, n = int(sys.argv[1]), int(sys.argv[2])
    hold = float(sys.argv[3]) if len(sys.argv) > 3 else 30
    path = sys.argv[4] if len(sys.argv) > 4 else "/v1/payments"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 100)), hard))

    req = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path).encode()
    socks, failed = [], 0
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.setblocking(False)
            socks.append(s)
        except OSError:
            failed += 1
    # one request per connection, in windows of 256 outstanding
    sel = selectors.DefaultSelector()
    idle = []
    i = 0
    pending = {}
    deadline = time.time() + 60
    while (i < len(socks) or pending) and time.time() < deadline:
        while i < len(socks) and len(pending) < 256:
            s = socks[i]
            i += 1
            try:
                s.send(req)
            except OSError:
                failed += 1
                continue
            pending[s] = b""
            sel.register(s, selectors.EVENT_READ)
        for key, _ in sel.select(timeout=1):
            s = key.fileobj
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                failed += 1
                sel.unregister(s)
                del pending[s]
                continue
            buf = pending[s] + data
            head, sep, body = buf.partition(b"\r\n\r\n")
            if not sep:
                pending[s] = buf
                continue
            length = 0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v)
            if len(body) < length:
                pending[s] = buf
                continue
            sel.unregister(s)
            del pending[s]
            idle.append(s)
    failed += len(pending)
    print("ready %d %d" % (len(idle), failed), flush=True)

    for s in idle:
        sel.register(s, selectors.EVENT_READ)
    end = time.time() + hold
    sel.register(sys.stdin, selectors.EVENT_READ)
    closed = set()
    while time.time() < end:
        events = sel.select(timeout=max(0.0, end - time.time()))
        stop = False
        for key, _ in events:
            if key.fileobj is sys.stdin:
                stop = True
                continue
            s = key.fileobj
            try:
                if s.recv(1) == b"":
                    closed.add(s)
                    sel.unregister(s)
            except BlockingIOError:
                pass
            except OSError:
                closed.add(s)
                sel.unregister(s)
        if stop:
            break
    print("closed_by_server %d" % len(closed), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
