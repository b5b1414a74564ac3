"""The client listener's own bounds (docs/configuration.md `limits`, docs/operations.md "Memory";
test_streaming.py has the timeouts and the cap over idle connections): a connection over
`limits.max_connections` while every connection is busy mid-upload is closed at once and reaches
nothing upstream, and a request body counts against `limits.max_buffered` from its head, before
a byte of it is read, so a stalled upload holds its place and the next one gets
`503 overloaded` at once.
"""

import socket
import time

from harness import build_request, read_response, wait_until
from proxy_helpers import assert_problem, new_key

GENEROUS_S = 20.0           # the bound of every wait: a busy CI machine is slow, never this slow


def eof_within(sock, bound_s):
    """Seconds until the peer closed sock (EOF or reset), or None past bound_s."""
    start = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - start < bound_s:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - start
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - start
    return None


def held_mid_body(port, path="/v1/uploads", length=100, headers=()):
    """
    A connection holding a request in its body: busy, so never evicted. The proxy's
    `100 Continue` says it has read the head and waits for the body.
    """
    s = socket.create_connection(("127.0.0.1", port), timeout=GENEROUS_S)
    s.sendall(build_request("POST", path, headers=[("Content-Length", str(length)),
                                                   ("Expect", "100-continue")] + list(headers),
                            port=port))
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = s.recv(4096)
        assert chunk, "closed before 100 Continue"
        got += chunk
    assert got.startswith(b"HTTP/1.1 100"), got
    s.sendall(b"x" * (length // 2))
    return s


def get_served(port):
    with socket.create_connection(("127.0.0.1", port), timeout=GENEROUS_S) as s:
        s.sendall(build_request("GET", "/after", headers=[("Connection", "close")], port=port))
        return read_response(s, "GET", GENEROUS_S).status


def test_over_max_connections_a_connection_is_closed_at_once_and_one_freed_is_reused(
        start_proxy, upstream):
    p = start_proxy(workers=1, limits={"max_connections": 4})
    held = [held_mid_body(p.port) for _ in range(4)]
    try:
        # the fifth finds every connection busy: closed at once, not left in the backlog
        with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
            try:
                s.sendall(build_request("GET", "/over", port=p.port))
            except (BrokenPipeError, ConnectionResetError):
                pass
            closed = eof_within(s, GENEROUS_S)
        assert closed is not None, "the connection over the cap was left open"
        assert upstream.last_request() is None      # nothing reached the upstream
        held.pop().close()
        assert get_served(p.port) == 200
        assert upstream.last_request()["path"] == "/after"
    finally:
        for s in held:
            s.close()


def test_a_stalled_upload_is_counted_from_its_head_and_the_next_gets_503_before_its_body(
        start_proxy, upstream):
    # room for one 1 MiB body and its answer's reservation, not two
    p = start_proxy(limits={"max_request_body": "1MiB", "max_stored_response": "64KiB",
                            "max_buffered": "1600KiB"})
    # a keyed payment: protected, so its body is read whole (counted from its head)
    stalled = held_mid_body(p.port, "/v1/payments", 1 << 20, [("Idempotency-Key", new_key())])
    try:
        key = new_key()
        with socket.create_connection(("127.0.0.1", p.port), timeout=GENEROUS_S) as s:
            # the head alone: the answer comes without a byte of the body
            s.sendall(build_request("POST", "/v1/payments",
                                    headers=[("Idempotency-Key", key),
                                             ("Content-Length", str(1 << 20))], port=p.port))
            r = read_response(s, "POST", GENEROUS_S)
        assert_problem(r, 503, "overloaded")
        assert r.header("Retry-After") == "1"
    finally:
        stalled.close()
    # the stalled upload's count went back with its connection: the same request now executes
    deadline = time.monotonic() + GENEROUS_S
    while True:
        r = p.post(key=key, body=b"x" * (1 << 20))
        if r.status != 503 or time.monotonic() > deadline:
            break
    assert r.status == 201, r
    assert upstream.executions(key) == 1


def test_slow_unkeyed_requests_never_take_the_budget_the_payments_need(start_proxy, upstream):
    """Streamed (pass-through) exchanges take at most half of limits.max_buffered: a crowd of
    slow unkeyed requests gets 503 overloaded before the payments do (docs/operations.md
    "Memory")."""
    # 2 MiB: streams may hold 1 MiB, eight of them at 2 x 64 KiB
    p = start_proxy(limits={"max_buffered": "2MiB", "max_request_body": "64KiB",
                            "max_stored_response": "64KiB", "stream_window": "64KiB"})
    slow = []
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", p.port), timeout=GENEROUS_S)
        s.sendall(build_request("POST", "/v2/exports/%d" % i, headers=[("X-Demo-Delay-Ms", "3000")],
                                body=b"{}", port=p.port))
        slow.append(s)
    try:
        wait_until(lambda: upstream.requests() >= 8, what="the first slow requests upstream")
        keys = [new_key() for _ in range(10)]
        for k in keys:
            r = p.post(key=k, body=b'{"amount": 1}')
            assert r.status == 201, r
        statuses = sorted(read_response(s, "POST", GENEROUS_S).status for s in slow)
    finally:
        for s in slow:
            s.close()
    assert set(statuses) <= {201, 503} and statuses.count(201) >= 8, statuses
    assert statuses.count(503) >= 1, statuses   # the crowd met its share, the payments did not
    assert all(upstream.executions(k) == 1 for k in keys)
