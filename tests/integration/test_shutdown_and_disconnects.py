"""Clients that go away before their answer, and the drain on SIGTERM and SIGINT:
in-flight requests finish, new ones are refused, the proxy exits 0.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py and the
proxy binary; each test asserts what the client and the upstream observe.
"""

import signal
import socket
import time

import pytest

from harness import WAIT_S, Connection, build_request, hold, port_accepts, wait_until
from proxy_helpers import (
    assert_problem, assert_replay_of, in_background, listening_sockets, metric_sum, new_key,
    wait_metric,
)

# tests/run.sh runs this file under ThreadSanitizer with two worker threads a proxy
# (IDEM_TEST_WORKERS=2): its requests meet across workers (docs/internals.md).
pytestmark = pytest.mark.threads


# --------------------------------------------------------------------------
# clients that go away
# --------------------------------------------------------------------------

def test_client_disconnect_mid_flight_is_recorded_and_replayed(proxy, upstream):
    key = new_key()
    body = b'{"amount": 5}'
    hs = [("Idempotency-Key", key), ("X-Demo-Delay-Ms", "800"),
          ("Content-Type", "application/json")]
    s = socket.create_connection(("127.0.0.1", proxy.port))
    s.sendall(build_request("POST", "/v1/payments", hs, body))
    wait_until(lambda: upstream.total() == 1)
    s.close()
    # the upstream exchange finishes and is recorded: the proxy has nothing in flight
    wait_metric(proxy, "idempotency_proxy_in_flight_requests", lambda v: v == 0)
    retry = proxy.post(key=key, body=body, headers=[("X-Demo-Delay-Ms", "800")])
    assert retry.status == 201
    assert retry.header("Idempotent-Replayed") == "true"
    assert retry.json()["id"] == "ord_1"
    assert upstream.total() == 1


def _send(port, key, headers=(), body=b"{}"):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(build_request("POST", "/v1/payments", [("Idempotency-Key", key)] + list(headers),
                            body))
    return s


def _abandon(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()  # RST


def _send_and_abandon(port, key, headers=(), body=b"{}", first_byte=False):
    """A request whose client resets the connection: at once, or (first_byte) once the first
    byte of the answer has arrived, the rest unread."""
    s = _send(port, key, headers, body)
    if first_byte:
        s.settimeout(WAIT_S)
        assert s.recv(1), "the connection closed before the answer"
    _abandon(s)


def waiting(p):
    return metric_sum(p, "idempotency_proxy_waiting_requests")


def test_waiting_clients_that_disconnect(proxy, upstream):
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "1000")]
    f = in_background(proxy.post, key=key, body=b"{}", headers=hs)
    wait_until(lambda: upstream.total() == 1)
    # two go away at once, while their claim may still be on its way to Redis
    for _ in range(2):
        _send_and_abandon(proxy.port, key, hs)
    socks = [_send(proxy.port, key, hs) for _ in range(3)]
    # three wait on the first one's claim (or, on a machine slow enough for its answer to come
    # first, it is over already and they got the replay), then go away
    wait_until(lambda: waiting(proxy) == 3 or f.done(), what="3 waiting duplicates")
    for s in socks:
        _abandon(s)
    first = f.result()
    assert first.status == 201
    assert_replay_of(proxy.post(key=key, body=b"{}", headers=hs), first)
    assert proxy.alive()
    assert upstream.total() == 1


def test_clients_that_disconnect_before_the_answer_is_read(start_proxy, upstream):
    p = start_proxy(limits={"max_request_body": "1KiB"})
    key = new_key()
    size = [("X-Demo-Size", str(800 * 1024))]
    first = p.post(key=key, headers=size)
    assert first.status == 201
    for _ in range(3):  # a big replay nobody reads
        _send_and_abandon(p.port, key, size, first_byte=True)
    _send_and_abandon(p.port, new_key(), body=b"x" * 5000)   # a 413
    _send_and_abandon(p.port, new_key())                     # mid-claim
    _send_and_abandon(p.port, key, body=b"other")            # a mismatch
    # what the abandoned requests set going has ended
    wait_metric(p, "idempotency_proxy_in_flight_requests", lambda v: v == 0)
    assert p.alive()
    assert_replay_of(p.post(key=key, headers=size), first)
    assert upstream.total() <= 2


# --------------------------------------------------------------------------
# SIGTERM and SIGINT drain
# --------------------------------------------------------------------------

def test_sigterm_drains_in_flight_requests_and_exits_0(start_proxy, upstream):
    p = start_proxy()
    key = new_key()
    f = in_background(p.post, key=key, headers=[("X-Demo-Delay-Ms", "1500")])
    wait_until(lambda: upstream.total() == 1)
    p.signal(signal.SIGTERM)
    r = f.result()
    assert r.status == 201, r
    assert p.wait(15) == 0
    assert not port_accepts(p.port)


def test_sigterm_drain_waits_until_an_answer_is_written_out(start_proxy, upstream):
    """A large answer streaming to a slow reader when SIGTERM comes: the drain must not exit
    (and close the connection) before it is written whole."""
    size = 8 * 1024 * 1024
    p = start_proxy()
    with socket.create_connection(("127.0.0.1", p.port), timeout=30) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        s.sendall(build_request("POST", "/v1/exports", [("X-Demo-Size", str(size)),
                                                        ("X-Demo-Delay-Ms", "300")], b"{}"))
        wait_until(lambda: upstream.total() == 1)
        p.signal(signal.SIGTERM)
        # its answer has begun, nothing reading it yet
        assert s.recv(1, socket.MSG_PEEK) == b"H"
        hold(0.3, "a drain that ended early would close the connection now")
        got = b""
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 201"), head[:200]
    assert len(body) == size, len(body)
    assert p.wait(15) == 0


def test_sigterm_refuses_new_requests_on_kept_alive_connections(start_proxy, upstream):
    """After SIGTERM a request on an open connection is refused unforwarded (503 +
    Connection: close), so the drain never ends with a request sent and unanswered."""
    p = start_proxy()
    slow = in_background(p.post, key=new_key(), headers=[("X-Demo-Delay-Ms", "1500")])
    wait_until(lambda: upstream.total() == 1)
    with Connection(p.port) as c:
        assert c.request("GET", "/v1/payments").status == 200
        p.signal(signal.SIGTERM)
        wait_until(lambda: listening_sockets(p.port) == 0, what="every worker draining")
        late = c.request("POST", "/v1/payments", [("Idempotency-Key", new_key()),
                                                  ("Content-Type", "application/json")],
                         b'{"amount": 1}')
    assert_problem(late, 503, "shutting-down")
    assert (late.header("Connection") or "").lower() == "close"
    assert late.header("Retry-After")
    assert slow.result().status == 201
    assert upstream.total() == 1
    assert p.wait(15) == 0


def test_sigint_drains_and_exits_0(start_proxy, upstream):
    p = start_proxy()
    f = in_background(p.post, key=new_key(), headers=[("X-Demo-Delay-Ms", "800")])
    wait_until(lambda: upstream.total() == 1)
    p.signal(signal.SIGINT)
    assert f.result().status == 201
    assert p.wait(15) == 0


def test_sigterm_answers_a_waiting_duplicate(start_proxy, upstream):
    p = start_proxy()
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "1200")]
    f1 = in_background(p.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1)
    f2 = in_background(p.post, key=key, headers=hs)
    # the duplicate waits on the claim (or, on a machine slow enough, got the replay already)
    wait_until(lambda: waiting(p) == 1 or f2.done(), what="the duplicate waiting")
    p.signal(signal.SIGTERM)
    first, second = f1.result(), f2.result()
    assert first.status == 201
    assert_replay_of(second, first)
    assert p.wait(15) == 0


def test_sigterm_with_idle_keep_alive_connections_exits_promptly(start_proxy, upstream):
    p = start_proxy()
    conns = [Connection(p.port) for _ in range(3)]
    try:
        for c in conns:
            assert c.request("POST", "/v1/payments", [("Idempotency-Key", new_key())],
                             b"{}").status == 201
        t = time.monotonic()
        p.signal(signal.SIGTERM)
        assert p.wait(15) == 0
        assert time.monotonic() - t < 3, "idle keep-alive connections held up the drain"
    finally:
        for c in conns:
            c.close()
