#!/usr/bin/python3
"""payments_api.py - the demo "legacy payments API" behind idempotency-proxy.

It has no idempotency of its own: every POST/PATCH/PUT/DELETE outside /_demo/
is an *execution* that creates a new order, so a test can count exactly how
many times the proxy let a request through.

    /usr/bin/python3 tests/upstream/payments_api.py --listen 127.0.0.1:3000
    /usr/bin/python3 tests/upstream/payments_api.py --unix /tmp/payments.sock
    /usr/bin/python3 tests/upstream/payments_api.py --listen 127.0.0.1:0 --close-reused

Prints one line "listening on HOST:PORT" (or "listening on unix:PATH") once
ready; with port 0 the line carries the port the kernel picked.

Per-request behaviour comes from request headers, so a retry carrying the same
headers behaves the same:

  X-Demo-Delay-Ms: N    sleep N ms before answering (counted on arrival)
  X-Demo-Status: N      answer status N with {"error": ..., "status": N}
  X-Demo-Chunked: 1     answer with Transfer-Encoding: chunked
  X-Demo-Binary: 1      application/octet-stream: request body + bytes 0x00..0xFF
  X-Demo-Set-Cookie: 1  add "Set-Cookie: session=abc; Path=/" and "X-Demo-Order: ord_N"
  X-Demo-Size: N        a body of exactly N bytes
  X-Demo-Header: Name: value   add that response header line (repeatable, in order)
  X-Demo-Gzip: 1        gzip the body and say Content-Encoding: gzip
  X-Demo-Fault: hang    count, never answer (until the client closes)
  X-Demo-Fault: reset   count, send half an answer, then RST the connection
  X-Demo-Fault: close   count, close the connection without a byte

--close-reused: the second request read on one keep-alive connection is counted
and the connection is closed without an answer (what makes libcurl resend a
POST on a fresh connection: "Connection died, retrying a fresh connect").

Inspection (never counted):
  GET  /_demo/executions?key=K  {"key": K, "count": n}
  GET  /_demo/stats             {"total": n, "by_key": {...}, "requests": n, ...}
  POST /_demo/reset             zero everything
  GET  /_demo/last-headers      headers of the last execution, {lower-name: [values]}
  GET  /_demo/last-request      method, path, query, raw header pairs, body sha256
                                of the last request of any method outside /_demo/
  GET  /_demo/history           every execution, oldest first (method, path, key,
                                order id, raw header pairs, body sha256)
  GET  /_demo/transfers?tag=T   the record of the large transfer named T (below): kind
                                ("blob", "sink"), state ("sending", "receiving", "complete",
                                "write-error", "reset", "read-error"), size (announced, or
                                null), bytes (written or read so far), sha256 (of those bytes),
                                chunked, trailers, expect, error, and started_mono / ended_mono /
                                reset_mono: time.monotonic() of this process, CLOCK_MONOTONIC,
                                which every process of the machine shares (a test compares them
                                with its own). 404 while there is none; without tag, all of them

Large bodies, streamed 64 KiB at a time and never held whole (never counted either):
  GET|POST|HEAD /_demo/blob?size=N[&seed=S][&chunked=1][&trailer=1][&reset_after=K][&tag=T]
        N deterministic bytes (the same N and S give the same bytes; 64 KiB blocks, each the
        seed and its index then random bytes of the seed), application/octet-stream, with a
        Content-Length, or chunked; trailer=1 (chunked) ends with the trailer field
        X-Demo-Sha256: <hex> and announces it with Trailer:. reset_after=K: K body bytes, 50 ms,
        then the connection is reset (SO_LINGER 0) at reset_mono. A write that fails (the peer
        went away) ends the transfer in state "write-error" at ended_mono. Recorded under tag T
        (default blob-<n>).
  POST|PUT /_demo/sink[?tag=T]
        reads the request body (Content-Length or chunked, trailers kept) in pieces and answers
        200 {"tag", "sha256", "length", "chunked", "trailers", "expect"} of what it received;
        Expect: 100-continue is answered 100 first (http.server does). A body cut short ends in
        state "read-error" with no answer.
  An execution whose query has demo_blob=N (demo_seed=, demo_chunked=1, demo_tag= as above)
        is counted as any other, then answered 201 with those N bytes, streamed (tag default
        ord_<n>): a protected route with a large answer.
"""

import argparse
import gzip
import hashlib
import http.server
import json
import os
import random
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

EXECUTING_METHODS = ("POST", "PATCH", "PUT", "DELETE")
STOP = threading.Event()


class State:
    """Counters shared by all connection threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.total = 0
        self.by_key = {}
        self.requests = 0
        self.by_method = {}
        self.last_headers = {}
        self.last_request = None
        self.history = []
        self.transfers = {}
        self.transfer_seq = 0

    def note_request(self, method, path, query, header_pairs, body):
        """Every request outside /_demo/, executions or not."""
        with self.lock:
            self.requests += 1
            self.by_method[method] = self.by_method.get(method, 0) + 1
            self.last_request = {
                "method": method,
                "path": path,
                "query": query,
                "headers": [[k, v] for k, v in header_pairs],
                "body_sha256": hashlib.sha256(body).hexdigest(),
                "body_length": len(body),
            }

    def execute(self, method, path, query, key, header_pairs, body):
        """Count one execution; returns the new order number."""
        with self.lock:
            self.total += 1
            n = self.total
            self.by_key[key] = self.by_key.get(key, 0) + 1
            grouped = {}
            for k, v in header_pairs:
                grouped.setdefault(k.lower(), []).append(v)
            self.last_headers = grouped
            self.history.append({
                "n": n,
                "method": method,
                "path": path,
                "query": query,
                "key": key,
                "id": "ord_%d" % n,
                "headers": [[k, v] for k, v in header_pairs],
                "body_sha256": hashlib.sha256(body).hexdigest(),
                "body_length": len(body),
                "time": time.time(),
            })
        # the one line a legacy API adds to its log (docs/operations.md "Correlating with the
        # upstream"): the proxy's record id, never the idempotency key
        sys.stderr.write("payments_api: executed ord_%d %s %s Idempotency-Record-Id=%s\n"
                         % (n, method, path, grouped.get("idempotency-record-id", ["-"])[0]))
        sys.stderr.flush()
        return n


    # -- large transfers (/_demo/blob, /_demo/sink, demo_blob=N): one record per tag
    def transfer_start(self, tag, kind, size, chunked, **more):
        with self.lock:
            self.transfer_seq += 1
            tag = tag or "%s-%d" % (kind, self.transfer_seq)
            rec = {"tag": tag, "kind": kind, "state": "sending" if kind == "blob" else "receiving",
                   "size": size, "bytes": 0, "sha256": hashlib.sha256(b"").hexdigest(),
                   "chunked": bool(chunked), "trailers": [], "expect": None, "error": None,
                   "started_mono": time.monotonic(), "ended_mono": None, "reset_mono": None}
            rec.update(more)
            self.transfers[tag] = rec
            return tag

    def transfer_update(self, tag, **fields):
        with self.lock:
            self.transfers[tag].update(fields)

    def transfer(self, tag):
        with self.lock:
            rec = self.transfers.get(tag)
            return dict(rec) if rec is not None else None


STATE = State()

BLOCK = 65536
_BASE_BLOCKS = {}


def blob_pieces(seed, size):
    """The N deterministic bytes of /_demo/blob, 64 KiB at a time: block i is the seed and i
    (16 bytes, big-endian) then the random bytes of the seed's base block, so that no two blocks
    of a blob are alike (a piece repeated or left out changes the SHA-256)."""
    base = _BASE_BLOCKS.get(seed)
    if base is None:
        base = _BASE_BLOCKS[seed] = random.Random(seed).randbytes(BLOCK)
    tail = base[16:]
    i = 0
    while i * BLOCK < size:
        block = struct.pack(">QQ", seed & 0xFFFFFFFFFFFFFFFF, i) + tail
        yield block[:size - i * BLOCK]
        i += 1


class BadRequest(Exception):
    pass


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "LegacyPayments/1.0"
    sys_version = ""
    # one handler instance per connection; counts requests read on it
    requests_on_connection = 0

    # ------------------------------------------------------------ plumbing
    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("payments_api: %s\n" % (fmt % args))

    def _header_pairs(self):
        # email.message.Message keeps every raw line, duplicates included
        return list(self.headers.raw_items())

    def _read_body(self):
        te = self.headers.get("Transfer-Encoding")
        if te is not None and "chunked" in te.lower():
            chunks = []
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    raise BadRequest("eof in chunk size")
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while True:  # trailers
                        t = self.rfile.readline(65537)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    break
                data = self.rfile.read(size)
                if len(data) != size:
                    raise BadRequest("short chunk")
                chunks.append(data)
                self.rfile.readline(3)  # CRLF after the chunk
            return b"".join(chunks)
        cl = self.headers.get_all("Content-Length") or []
        if not cl:
            return b""
        if len(set(v.strip() for v in cl)) != 1:
            raise BadRequest("conflicting Content-Length")
        n = int(cl[0])
        data = self.rfile.read(n) if n > 0 else b""
        if len(data) != n:
            raise BadRequest("short body")
        return data

    def _send(self, status, body, content_type="application/json", extra=(),
              chunked=False):
        self.send_response(status)
        if body is not None and status not in (204, 304) and status >= 200:
            self.send_header("Content-Type", content_type)
        for k, v in extra:
            self.send_header(k, v)
        if status in (204, 304) or status < 200:
            self.end_headers()
            return
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if self.command != "HEAD":
                step = max(1, (len(body) + 3) // 4)  # several chunks
                for i in range(0, len(body), step):
                    part = body[i:i + step]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        self.wfile.flush()

    def _json(self, status, obj, extra=()):
        body = (json.dumps(obj, sort_keys=True) + "\n").encode()
        self._send(status, body, "application/json", extra)

    # ------------------------------------------------------------- faults
    def _hang(self):
        """Never answer; keep the socket until the peer closes or we stop."""
        self.close_connection = True
        sock = self.connection
        sock.settimeout(0.2)
        while not STOP.is_set():
            try:
                data = sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not data:
                break

    def _reset(self, n):
        """Half an answer, then an RST (SO_LINGER 0)."""
        self.close_connection = True
        head = ("HTTP/1.1 201 Created\r\n"
                "Content-Type: application/json\r\n"
                "Content-Length: 4096\r\n"
                "X-Demo-Order: ord_%d\r\n\r\n" % n).encode()
        partial = b'{"id": "ord_%d", "object": "payment", "status": "partial' % n
        try:
            self.wfile.write(head + partial)
            self.wfile.flush()
            time.sleep(0.05)
        except OSError:
            pass
        self._rst()

    def _rst(self):
        sock = self.connection
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        try:
            sock.close()
        except OSError:
            pass

    def _close(self):
        """Close without a byte (a clean FIN)."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # ------------------------------------------------------- large transfers
    def _send_blob(self, status, size, seed, chunked, trailer, reset_after, tag, extra=()):
        """size bytes of blob_pieces(seed), written as they are made (a blocked write is the
        peer's back-pressure); the transfer is recorded under tag."""
        tag = STATE.transfer_start(tag, "blob", size, chunked)
        h = hashlib.sha256()
        sent = 0
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            for k, v in extra:
                self.send_header(k, v)
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
                if trailer:
                    self.send_header("Trailer", "X-Demo-Sha256")
            else:
                self.send_header("Content-Length", str(size))
            self.end_headers()
            if self.command == "HEAD":
                STATE.transfer_update(tag, state="complete", ended_mono=time.monotonic())
                return
            for piece in blob_pieces(seed, size):
                if reset_after is not None and sent + len(piece) >= reset_after:
                    piece = piece[:reset_after - sent]
                    if piece:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked
                                         else piece)
                        h.update(piece)
                        sent += len(piece)
                    time.sleep(0.05)  # as X-Demo-Fault: reset: the bytes leave, then the RST
                    now = time.monotonic()
                    STATE.transfer_update(tag, bytes=sent, sha256=h.hexdigest(),
                                          state="reset", reset_mono=now, ended_mono=now)
                    self.close_connection = True
                    return self._rst()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                h.update(piece)
                sent += len(piece)
                STATE.transfer_update(tag, bytes=sent)
            if chunked:
                end = b"0\r\n"
                if trailer:
                    end += b"X-Demo-Sha256: %s\r\n" % h.hexdigest().encode()
                self.wfile.write(end + b"\r\n")
        except OSError as e:
            STATE.transfer_update(tag, bytes=sent, sha256=h.hexdigest(), state="write-error",
                                  error=repr(e), ended_mono=time.monotonic())
            self.close_connection = True
            return
        STATE.transfer_update(tag, bytes=sent, sha256=h.hexdigest(), state="complete",
                              ended_mono=time.monotonic())

    def _sink(self, query):
        """Read the body in pieces, hash it, answer what arrived (never holds it whole)."""
        q = urllib.parse.parse_qs(query, keep_blank_values=True)
        te = self.headers.get("Transfer-Encoding")
        chunked = te is not None and "chunked" in te.lower()
        cl = self.headers.get("Content-Length")
        tag = STATE.transfer_start(q.get("tag", [None])[0], "sink",
                                   None if chunked or cl is None else int(cl), chunked,
                                   expect=self.headers.get("Expect"))
        h = hashlib.sha256()
        got = 0
        trailers = []

        def take(n):
            nonlocal got
            while n > 0:
                data = self.rfile.read(min(n, BLOCK))
                if not data:
                    raise BadRequest("the body ended after %d bytes" % got)
                h.update(data)
                got += len(data)
                n -= len(data)
                STATE.transfer_update(tag, bytes=got)

        try:
            if chunked:
                while True:
                    line = self.rfile.readline(65537)
                    if not line:
                        raise BadRequest("eof in chunk size after %d bytes" % got)
                    size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while True:
                            t = self.rfile.readline(65537)
                            if t in (b"\r\n", b"\n"):
                                break
                            if not t:
                                raise BadRequest("eof in trailers")
                            k, _, v = t.decode("latin-1").partition(":")
                            trailers.append([k.strip(), v.strip()])
                        break
                    take(size)
                    if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                        raise BadRequest("chunk not followed by CRLF")
            else:
                take(int(cl or 0))
        except (BadRequest, ValueError, OSError) as e:
            STATE.transfer_update(tag, bytes=got, sha256=h.hexdigest(), state="read-error",
                                  error=repr(e), ended_mono=time.monotonic())
            self.close_connection = True
            return
        STATE.transfer_update(tag, bytes=got, sha256=h.hexdigest(), trailers=trailers,
                              state="complete", ended_mono=time.monotonic())
        return self._json(200, {"tag": tag, "sha256": h.hexdigest(), "length": got,
                                "chunked": chunked, "trailers": trailers,
                                "expect": self.headers.get("Expect")})

    # ------------------------------------------------------------- demo API
    def _demo(self, method, path, query):
        q = urllib.parse.parse_qs(query, keep_blank_values=True)
        if path == "/_demo/executions" and method in ("GET", "HEAD"):
            key = q.get("key", [""])[0]
            with STATE.lock:
                count = STATE.by_key.get(key, 0)
            return self._json(200, {"key": key, "count": count})
        if path == "/_demo/stats" and method in ("GET", "HEAD"):
            with STATE.lock:
                obj = {"total": STATE.total, "by_key": dict(STATE.by_key),
                       "requests": STATE.requests, "by_method": dict(STATE.by_method)}
            return self._json(200, obj)
        if path == "/_demo/reset" and method == "POST":
            with STATE.lock:
                STATE.reset()
            return self._json(200, {"reset": True})
        if path == "/_demo/last-headers" and method in ("GET", "HEAD"):
            with STATE.lock:
                obj = dict(STATE.last_headers)
            return self._json(200, obj)
        if path == "/_demo/last-request" and method in ("GET", "HEAD"):
            with STATE.lock:
                obj = STATE.last_request
            return self._json(200, obj)
        if path == "/_demo/history" and method in ("GET", "HEAD"):
            with STATE.lock:
                obj = list(STATE.history)
            return self._json(200, obj)
        if path == "/_demo/transfers" and method in ("GET", "HEAD"):
            tag = q.get("tag", [None])[0]
            if tag is None:
                with STATE.lock:
                    return self._json(200, [dict(r) for r in STATE.transfers.values()])
            rec = STATE.transfer(tag)
            if rec is None:
                return self._json(404, {"error": "no such transfer", "tag": tag})
            return self._json(200, rec)
        if path == "/_demo/blob" and method in ("GET", "HEAD", "POST"):
            try:
                size = int(q["size"][0])
                seed = int(q.get("seed", ["0"])[0])
                reset_after = q.get("reset_after", [None])[0]
                reset_after = int(reset_after) if reset_after is not None else None
            except (KeyError, ValueError) as e:
                return self._json(400, {"error": "bad blob parameters: %s" % e, "status": 400})
            return self._send_blob(200, size, seed, q.get("chunked", ["0"])[0] == "1",
                                   q.get("trailer", ["0"])[0] == "1", reset_after,
                                   q.get("tag", [None])[0])
        return self._json(404, {"error": "no such demo endpoint", "path": path})

    # ------------------------------------------------------------ dispatch
    def _handle(self):
        self.requests_on_connection += 1
        method = self.command
        split = urllib.parse.urlsplit(self.path)
        path, query = split.path, split.query
        if path == "/_demo/sink" and method in ("POST", "PUT"):
            return self._sink(query)
        try:
            body = self._read_body()
        except (BadRequest, ValueError) as e:
            self.close_connection = True
            return self._json(400, {"error": "bad request: %s" % e, "status": 400})

        if path.startswith("/_demo/"):
            return self._demo(method, path, query)

        pairs = self._header_pairs()
        STATE.note_request(method, path, query, pairs, body)

        if self.server.close_reused and self.requests_on_connection == 2:
            if method in EXECUTING_METHODS:
                key = self.headers.get("Idempotency-Key", "")
                STATE.execute(method, path, query, key, pairs, body)
            return self._close()

        if method not in EXECUTING_METHODS:
            return self._json(200, {"object": "list", "path": path, "query": query,
                                    "data": []})

        key = self.headers.get("Idempotency-Key", "")
        n = STATE.execute(method, path, query, key, pairs, body)
        order = "ord_%d" % n

        fault = (self.headers.get("X-Demo-Fault") or "").strip().lower()
        if fault == "hang":
            return self._hang()
        if fault == "reset":
            return self._reset(n)
        if fault == "close":
            return self._close()

        delay = self.headers.get("X-Demo-Delay-Ms")
        if delay:
            deadline = time.monotonic() + int(delay) / 1000.0
            while not STOP.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(left, 0.05))

        status = 201
        if self.headers.get("X-Demo-Status"):
            status = int(self.headers["X-Demo-Status"])

        extra = []
        for line in self.headers.get_all("X-Demo-Header") or []:
            name, _, value = line.partition(":")
            extra.append((name.strip(), value.strip()))
        if self.headers.get("X-Demo-Set-Cookie") == "1":
            extra.append(("Set-Cookie", "session=abc; Path=/"))
            extra.append(("X-Demo-Order", order))

        q = urllib.parse.parse_qs(query, keep_blank_values=True)
        if "demo_blob" in q:
            return self._send_blob(status, int(q["demo_blob"][0]),
                                   int(q.get("demo_seed", ["0"])[0]),
                                   q.get("demo_chunked", ["0"])[0] == "1", False, None,
                                   q.get("demo_tag", [order])[0], extra)

        size = self.headers.get("X-Demo-Size")
        if size is not None:
            n_bytes = int(size)
            pattern = b"%s:0123456789abcdefghijklmnopqrstuvwxyz\n" % order.encode()
            out = (pattern * (n_bytes // len(pattern) + 1))[:n_bytes]
            ctype = "application/octet-stream"
        elif self.headers.get("X-Demo-Binary") == "1":
            out = body + bytes(range(256))
            ctype = "application/octet-stream"
        elif self.headers.get("X-Demo-Status"):
            out = (json.dumps({"error": "demo status %d" % status, "status": status,
                               "id": order}, sort_keys=True) + "\n").encode()
            ctype = "application/json"
        else:
            out = (json.dumps({
                "id": order,
                "object": "payment",
                "method": method,
                "path": path,
                "query": query,
                "body_sha256": hashlib.sha256(body).hexdigest(),
                "body_length": len(body),
            }, sort_keys=True) + "\n").encode()
            ctype = "application/json"

        if self.headers.get("X-Demo-Gzip") == "1":
            out = gzip.compress(out, mtime=0)
            extra.append(("Content-Encoding", "gzip"))
        chunked = self.headers.get("X-Demo-Chunked") == "1"
        self._send(status, out, ctype, extra, chunked=chunked)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _handle

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (ConnectionError, BrokenPipeError, socket.timeout):
            self.close_connection = True
        except OSError:
            self.close_connection = True

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass


class TCPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


class UnixServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    request_queue_size = 256

    def get_request(self):
        sock, _ = super().get_request()
        return sock, ("unix", 0)  # BaseHTTPRequestHandler wants a (host, port)

    def shutdown_request(self, request):
        try:
            request.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self.close_request(request)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--listen", default=None, help="HOST:PORT (port 0 picks one)")
    g.add_argument("--unix", default=None, help="unix socket path")
    ap.add_argument("--close-reused", action="store_true",
                    help="close a keep-alive connection after reading its 2nd request")
    ap.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = ap.parse_args(argv)

    if args.unix:
        try:
            os.unlink(args.unix)
        except FileNotFoundError:
            pass
        server = UnixServer(args.unix, Handler)
        where = "unix:%s" % args.unix
    else:
        hostport = args.listen or "127.0.0.1:3000"
        host, _, port = hostport.rpartition(":")
        host = host.strip("[]") or "127.0.0.1"
        server = TCPServer((host, int(port)), Handler)
        where = "%s:%d" % (host, server.server_address[1])
    server.close_reused = args.close_reused
    server.verbose = args.verbose

    def on_signal(signum, frame):
        STOP.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                         daemon=True)
    t.start()
    sys.stdout.write("listening on %s\n" % where)
    sys.stdout.flush()
    while not STOP.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    if args.unix:
        try:
            os.unlink(args.unix)
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
