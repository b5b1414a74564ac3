"""What the proxy forwards to the upstream (headers, query, body; no hop-by-hop fields;
never through the environment's HTTP proxy) and how it serves a client connection (keep-alive,
pipelining, Expect: 100-continue, HTTP/1.0).

Real processes over real sockets: redis-server, tests/upstream/payments_api.py and the
proxy binary; each test asserts what the client and the upstream observe.
"""

import hashlib
import socket
import time

from harness import Connection, _Reader, build_request, http_request, read_response
from proxy_helpers import new_key, assert_problem, assert_replay_of


# --------------------------------------------------------------------------
# what reaches the upstream
# --------------------------------------------------------------------------

def test_request_headers_query_and_body_are_forwarded(proxy, upstream):
    key = new_key()
    body = b'{"amount": 12}'
    r = proxy.post("/v1/payments/a%20b?x=1&y=%2F&z", key=key, body=body,
                   headers=[("Authorization", "Bearer tok"), ("X-Trace", "t1"),
                            ("X-Trace", "t2")])
    assert r.status == 201
    doc = r.json()
    assert doc["query"] == "x=1&y=%2F&z"
    assert doc["path"] in ("/v1/payments/a b", "/v1/payments/a%20b")
    seen = upstream.last_headers()
    assert seen["authorization"] == ["Bearer tok"]
    assert seen["content-type"] == ["application/json"]
    assert ",".join(v.replace(" ", "") for v in seen["x-trace"]) == "t1,t2"
    assert upstream.last_request()["body_sha256"] == hashlib.sha256(body).hexdigest()


def test_hop_by_hop_request_headers_are_not_forwarded(proxy, upstream):
    r = proxy.post(key=new_key(), headers=[("Keep-Alive", "timeout=5"), ("TE", "trailers"),
                                           ("Proxy-Authorization", "Basic c2VjcmV0"),
                                           ("Connection", "keep-alive, TE")])
    assert r.status == 201
    seen = upstream.last_headers()
    for h in ("keep-alive", "proxy-authorization"):
        assert h not in seen, "hop-by-hop %s forwarded: %r" % (h, seen)
    assert "trailers" not in ",".join(seen.get("te", [])), seen


def test_every_x_forwarded_for_line_reaches_the_upstream(proxy, upstream):
    """Every X-Forwarded-For line reaches the upstream, joined in order, the client address
    appended."""
    r = proxy.post(key=new_key(), headers=[("X-Forwarded-For", "203.0.113.1"),
                                           ("X-Forwarded-For", "198.51.100.2")])
    assert r.status == 201
    seen = upstream.last_headers().get("x-forwarded-for")
    assert seen == ["203.0.113.1, 198.51.100.2, 127.0.0.1"], seen


def test_the_upstream_is_reached_directly_whatever_proxy_the_environment_names(start_proxy,
                                                                               upstream):
    """http_proxy / all_proxy in the environment (a pod may set them for its application)
    are ignored: payments, with their Authorization, go to the upstream directly, never
    through that proxy."""
    trap = socket.socket()
    trap.bind(("127.0.0.1", 0))
    trap.listen(8)
    proxy_url = "http://127.0.0.1:%d" % trap.getsockname()[1]
    try:
        p = start_proxy(env={"http_proxy": proxy_url, "HTTP_PROXY": proxy_url,
                             "all_proxy": proxy_url, "ALL_PROXY": proxy_url,
                             "no_proxy": "", "NO_PROXY": ""})
        k = new_key()
        r = p.post(key=k)
        assert r.status == 201, r
        assert upstream.executions(k) == 1
        trap.setblocking(False)
        try:
            trap.accept()
            raise AssertionError("the upstream call went to the environment's proxy")
        except BlockingIOError:
            pass
    finally:
        trap.close()


# --------------------------------------------------------------------------
# client connections
# --------------------------------------------------------------------------

def test_keep_alive_client_connection_serves_several_requests(proxy, upstream):
    key = new_key()
    with Connection(proxy.port) as c:
        first = c.request("POST", "/v1/payments", [("Idempotency-Key", key)], b"a")
        replay = c.request("POST", "/v1/payments", [("Idempotency-Key", key)], b"a")
        mismatch = c.request("POST", "/v1/payments", [("Idempotency-Key", key)], b"b")
        bad = c.request("POST", "/v1/payments", ["Idempotency-Key:"], b"a")
        plain = c.request("GET", "/v1/payments")
    assert first.status == 201
    assert_replay_of(replay, first)
    assert_problem(mismatch, 409, "key-reuse-mismatch")
    assert_problem(bad, 400, "invalid-key")
    assert plain.status == 200
    assert upstream.total() == 1


def test_pipelined_requests_are_answered_in_order(proxy, upstream):
    k1, k2 = new_key(), new_key()
    data = (build_request("POST", "/v1/payments", [("Idempotency-Key", k1),
                                                    ("X-Demo-Delay-Ms", "300")], b"one") +
            build_request("POST", "/v1/payments", [("Idempotency-Key", k2)], b"two") +
            build_request("POST", "/v1/payments", [("Idempotency-Key", k1),
                                                    ("X-Demo-Delay-Ms", "300")], b"one"))
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=15) as s:
        s.sendall(data)
        reader = _Reader(s, time.monotonic() + 15)
        rs = [read_response(s, "POST", reader=reader) for _ in range(3)]
    assert [r.status for r in rs] == [201, 201, 201], rs
    assert rs[0].json()["body_sha256"] == hashlib.sha256(b"one").hexdigest()
    assert rs[1].json()["body_sha256"] == hashlib.sha256(b"two").hexdigest()
    assert_replay_of(rs[2], rs[0])
    assert upstream.total() == 2


def test_expect_100_continue(start_proxy, upstream):
    p = start_proxy(limits={"max_request_body": "4KiB"})
    body = b"e" * 2048
    key = new_key()
    head = build_request("POST", "/v1/payments", [("Idempotency-Key", key),
                                                   ("Expect", "100-continue"),
                                                   ("Content-Length", str(len(body)))])
    with socket.create_connection(("127.0.0.1", p.port), timeout=15) as s:
        s.sendall(head)
        s.settimeout(2)
        try:
            early = s.recv(4096)
        except socket.timeout:
            early = b""  # the proxy need not send 100; the client sends the body anyway
        assert early == b"" or early.startswith(b"HTTP/1.1 100"), early
        s.sendall(body)
        reader = _Reader(s, time.monotonic() + 15)
        rest = early.split(b"\r\n\r\n", 1)[1] if early else b""
        reader.buf = rest
        r = read_response(s, "POST", reader=reader)
    assert r.status == 201, r
    assert upstream.total() == 1
    # too large with Expect: a 413 problem, either at once or after the body
    head = build_request("POST", "/v1/payments", [("Idempotency-Key", new_key()),
                                                   ("Expect", "100-continue"),
                                                   ("Content-Length", "5000")])
    with socket.create_connection(("127.0.0.1", p.port), timeout=15) as s:
        s.sendall(head)
        s.settimeout(5)
        first = s.recv(4096)
        if first.startswith(b"HTTP/1.1 100"):
            s.sendall(b"f" * 5000)
            reader = _Reader(s, time.monotonic() + 15)
            reader.buf = first.split(b"\r\n\r\n", 1)[1]
            r = read_response(s, "POST", reader=reader)
        else:
            reader = _Reader(s, time.monotonic() + 15)
            reader.buf = first
            r = read_response(s, "POST", reader=reader)
    assert_problem(r, 413, "body-too-large")
    assert upstream.total() == 1


def test_http10_client(proxy, upstream):
    key = new_key()
    raw = ("POST /v1/payments HTTP/1.0\r\nHost: x\r\nIdempotency-Key: %s\r\n"
           "Content-Length: 2\r\n\r\n{}" % key).encode()
    first = http_request(proxy.port, raw=raw)
    assert first.status == 201, first
    again = http_request(proxy.port, raw=raw)
    assert again.status == 201 and again.replayed and again.body == first.body
    assert upstream.total() == 1
