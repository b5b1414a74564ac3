#!/usr/bin/env python3
"""A webhook receiver for the inbox tests: one thread per connection, logs every attempt.

Usage: inbox_receiver.py --port N --log FILE [--delay SECONDS] [--status CODE]

Each POST is one delivery attempt. Its line in FILE (JSON, appended, so the
log outlives a restart of the receiver) holds the arrival time `t` (unix
seconds), the `event` (the Idempotency-Key header), the path, the status it
answered, whether a signature header came along, the header fields (names
lowercased), the body and its sha256.
The answer waits `delay` seconds, then is `status` with an empty body, or with
`body_bytes` bytes of body (written 1 MiB at a time) when that is set.

Control (the test changes behaviour without a restart):
  POST /_control {"delay": 30, "status": 500, "body_bytes": 0}   each key optional
  POST /_control {"sequence": [{"status": 429, "headers": {"Retry-After": "3"}}]}
                 the next attempts get these answers in turn (with these header
                 fields), then the state above again
  GET  /_attempts                               every line of FILE, as a JSON list
Python 3 standard library only.
"""
import argparse
import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"delay": 0.0, "status": 200, "body_bytes": 0, "sequence": []}
LOCK = threading.Lock()
ARGS = None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _answer(self, status, body=b"", ctype="application/json", headers=None):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the proxy went away (killed, or gave up): it will try again

    def do_GET(self):
        if self.path != "/_attempts":
            self._answer(404)
            return
        with LOCK:
            try:
                with open(ARGS.log) as f:
                    lines = [json.loads(l) for l in f if l.strip()]
            except FileNotFoundError:
                lines = []
        self._answer(200, json.dumps(lines).encode())

    def do_POST(self):
        t = time.time()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/_control":
            with LOCK:
                STATE.update(json.loads(body or b"{}"))
            self._answer(200, json.dumps(STATE).encode())
            return
        extra = {}
        with LOCK:
            delay, status, body_bytes = STATE["delay"], STATE["status"], STATE["body_bytes"]
            if STATE["sequence"]:
                step = STATE["sequence"].pop(0)
                status, extra = step.get("status", status), step.get("headers", {})
        entry = {
            "t": t, "event": self.headers.get("Idempotency-Key"), "path": self.path,
            "status": status,
            "signed": any(self.headers.get(h) for h in ("Stripe-Signature", "X-Hub-Signature-256",
                                                          "webhook-signature")),
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body.decode("utf-8", "replace"),
        }
        with LOCK:
            with open(ARGS.log, "a") as f:
                f.write(json.dumps(entry) + "\n")
        if delay:
            time.sleep(delay)
        if body_bytes:
            self._answer_large(status, body_bytes)
        else:
            self._answer(status, headers=extra)

    def _answer_large(self, status, n):
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        chunk = b"x" * (1 << 20)
        try:
            while n > 0:
                self.wfile.write(chunk[:min(n, len(chunk))])
                n -= min(n, len(chunk))
        except (BrokenPipeError, ConnectionResetError):
            pass


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # listen() backlog: a burst of 100 connections at once


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--delay", type=float, default=0.0)
    ap.add_argument("--status", type=int, default=200)
    ARGS = ap.parse_args()
    STATE.update(delay=ARGS.delay, status=ARGS.status)
    server = Server(("127.0.0.1", ARGS.port), Handler)
    server.serve_forever()


if __name__ == "__main__":
    main()
