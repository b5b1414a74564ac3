"""The client listener's own bounds (docs/configuration.md `limits`, docs/operations.md "Memory"):
`limits.header_timeout` closes a head sent too slowly, `limits.idle_timeout` a kept-alive
connection left silent, `limits.max_connections` caps the connections (a new one replaces the one
idle longest, or is closed at once when every connection is busy), and a request body counts
against `limits.max_buffered` from its head, before a byte of it is read, so a stalled upload
holds its place and the next one gets `503 overloaded` at once.
"""

import socket
import time

from harness import _Reader, build_request, read_response
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


def test_a_head_sent_a_byte_at_a_time_is_closed_at_the_header_timeout(start_proxy):
    p = start_proxy(limits={"header_timeout": "2s"})
    head = build_request("GET", "/slow", headers=[("X-Pad", "x" * 200)], port=p.port)
    start = time.monotonic()
    closed_after = None
    with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
        # one byte every 0.1 s: the whole head would take over 20 s, each byte resets no timer
        for i in range(len(head)):
            try:
                s.sendall(head[i:i + 1])
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.monotonic() - start
                break
            if eof_within(s, 0.1) is not None:
                closed_after = time.monotonic() - start
                break
    assert closed_after is not None, "the slow head was never closed"
    assert 1.5 <= closed_after < len(head) * 0.1, closed_after


def test_a_kept_alive_connection_silent_past_the_idle_timeout_is_closed(start_proxy, upstream):
    p = start_proxy(limits={"idle_timeout": "2s"})
    with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
        s.sendall(build_request("GET", "/first", port=p.port))
        r = read_response(s, "GET", 5, reader=_Reader(s, time.monotonic() + 5))
        assert r.status == 200 and r.header("Connection", "").lower() != "close", r
        waited = eof_within(s, GENEROUS_S)
    assert waited is not None and waited >= 1.5, waited


def held_mid_body(port, path="/v1/uploads", length=100):
    """
    A connection holding a request in its body: busy, so never evicted. The proxy's
    `100 Continue` says it has read the head and waits for the body.
    """
    s = socket.create_connection(("127.0.0.1", port), timeout=GENEROUS_S)
    s.sendall(build_request("POST", path, headers=[("Content-Length", str(length)),
                                                   ("Expect", "100-continue")], port=port))
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


def test_at_max_connections_a_new_request_replaces_the_connection_idle_longest(start_proxy,
                                                                                 upstream):
    p = start_proxy(workers=1, limits={"max_connections": 3})
    idle = [socket.create_connection(("127.0.0.1", p.port), timeout=5) for _ in range(3)]
    try:
        assert get_served(p.port) == 200
        assert eof_within(idle[0], GENEROUS_S) is not None, "the idle-longest was not closed"
    finally:
        for s in idle:
            s.close()


def test_a_stalled_upload_is_counted_from_its_head_and_the_next_gets_503_before_its_body(
        start_proxy, upstream):
    # room for one 1 MiB body and its answer's reservation, not two
    p = start_proxy(limits={"max_request_body": "1MiB", "max_stored_response": "64KiB",
                            "max_buffered": "1600KiB"})
    stalled = held_mid_body(p.port, "/v1/payments", 1 << 20)
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
