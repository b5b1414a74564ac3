"""Client and upstream connections: on the paths that save CPU, every request is answered,
once.

- upstream sockets stay registered with the event loop while their connection idles in
  curl's pool (upstream.c): keep-alive reuse, an upstream that closes idle connections,
  curl closing an expired idle connection and opening its successor in one call (unix
  socket: connect completes at once), and a 1 MiB answer;
- answers are written in the loop iteration that produced them (reply.c): pipelined
  requests, HEAD, Connection: close, keep-alive;
- client sockets stay in the event loop while evhttp pauses reading (reply.c): clients that
  close or half-close mid-request, pipelined requests beyond one read, slow readers.

The upstream of the socket tests is a small HTTP server in this file that counts the
connections it accepted and can close a connection once it has been idle for a while.
"""

import json
import os
import socket
import struct
import threading
import time

import pytest

from harness import Connection, _Reader, build_request, hold, read_response, wait_until
from proxy_helpers import new_key, read_request, wait_metric


class CountingUpstream:
    """HTTP/1.1 on TCP or a unix socket: 201 + a JSON body naming the connection and its
    request number; idle_close_s closes a connection that stays idle that long."""

    def __init__(self, unix_path=None, idle_close_s=None, body_size=None):
        self.unix_path = unix_path
        self.idle_close_s = idle_close_s
        self.body_size = body_size
        self.lock = threading.Lock()
        self.connections = 0
        self.requests = 0
        self.closed_idle = 0
        self.closed = 0  # connections this side has closed (after the close)
        self.stop = threading.Event()
        if unix_path:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(unix_path)
            self.url = "unix:" + unix_path
        else:
            self.sock = socket.socket()
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind(("127.0.0.1", 0))
            self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.sock.listen(128)
        self.sock.settimeout(0.2)
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            with self.lock:
                self.connections += 1
                n = self.connections
            threading.Thread(target=self._serve, args=(c, n), daemon=True).start()

    def _serve(self, c, conn_no):
        served = 0
        c.settimeout(self.idle_close_s or 30)
        rfile = c.makefile("rb")
        try:
            while not self.stop.is_set():
                try:
                    request = read_request(rfile)
                except socket.timeout:
                    if self.idle_close_s:
                        with self.lock:
                            self.closed_idle += 1
                    return
                if request is None:
                    return
                served += 1
                with self.lock:
                    self.requests += 1
                if self.body_size:
                    body = bytes((i * 7 + 3) % 251 for i in range(self.body_size))
                    ctype = b"application/octet-stream"
                else:
                    body = json.dumps({"connection": conn_no, "request": served}).encode()
                    ctype = b"application/json"
                c.sendall(b"HTTP/1.1 201 Created\r\nContent-Type: " + ctype +
                          b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        except OSError:
            return
        finally:
            rfile.close()
            c.close()
            with self.lock:
                self.closed += 1

    def close(self):
        self.stop.set()
        self.sock.close()
        self.thread.join(2)


@pytest.fixture
def counting_upstream():
    made = []

    def make(**kw):
        u = CountingUpstream(**kw)
        made.append(u)
        return u

    yield make
    for u in made:
        u.close()


def proxy_cpu_s(p):
    """utime + stime of the proxy process, in seconds."""
    with open("/proc/%d/stat" % p.pid()) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def client_sockets(p):
    """How many client connections p still holds open: its sockets on p.port (the listener
    aside), and those a client's RST took out of the kernel's tables (only p's close ends them)."""
    pid = p.pid()
    mine = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue  # closed meanwhile
        if link.startswith("socket:["):
            mine.add(link[len("socket:["):-1])
    known, on_port = set(), set()
    for table, inode_col in (("tcp", 9), ("tcp6", 9), ("udp", 9), ("udp6", 9), ("unix", 6),
                             ("netlink", 9)):
        try:
            with open("/proc/%d/net/%s" % (pid, table)) as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        for row in rows:
            if len(row) <= inode_col:
                continue
            known.add(row[inode_col])
            if table.startswith("tcp") and int(row[1].rsplit(":", 1)[1], 16) == p.port \
                    and row[3] != "0A":  # 0A: LISTEN
                on_port.add(row[inode_col])
    return len(mine & on_port) + len(mine - known)


# --------------------------------------------------------------------------
# upstream sockets kept registered across transfers
# --------------------------------------------------------------------------

def test_sequential_requests_reuse_one_upstream_connection(start_proxy, counting_upstream):
    up = counting_upstream()
    p = start_proxy(upstream_url=up.url, workers=1)  # one worker: one upstream connection
    for _ in range(30):
        r = p.post(key=new_key())
        assert r.status == 201, r
    assert up.requests == 30
    assert up.connections == 1, "keep-alive reuse lost: %d connections" % up.connections


def test_upstream_closing_idle_connections_loses_no_request(start_proxy, counting_upstream):
    """The upstream closes each connection 0.2 s after its answer: the idle socket turns
    readable (EOF) while curl keeps it in its pool. Every later request still gets its
    201 on a fresh connection, executed once, and the proxy does not spin on the closed
    socket."""
    up = counting_upstream(idle_close_s=0.2)
    p = start_proxy(upstream_url=up.url)
    for i in range(5):
        r = p.post(key=new_key())
        assert r.status == 201, (i, r)
        wait_until(lambda: up.closed == i + 1, what="the upstream closed connection %d" % (i + 1))
    assert up.requests == 5
    assert up.closed_idle >= 4
    assert up.connections == 5
    before = proxy_cpu_s(p)  # every upstream connection closed, none reused yet
    hold(1.0, "a span in which the proxy must not spin on the closed idle socket")
    assert proxy_cpu_s(p) - before < 0.2, "the proxy spins on a closed idle socket"
    assert p.post(key=new_key()).status == 201


def test_expired_idle_unix_connection_is_replaced_in_one_call(start_proxy, counting_upstream,
                                                             tmp_path):
    """Past its idle limit (CURLOPT_MAXAGE_CONN 4: more than 4 whole seconds) curl closes the pooled connection and opens the next one in
    the same call; on a unix socket the connect completes at once and curl asks for
    EV_READ straight away, under the number the closed socket just had. The answer must
    come at once, not after upstream.timeout."""
    up = counting_upstream(unix_path=str(tmp_path / "up.sock"))
    p = start_proxy(upstream_url=up.url, upstream={"timeout": "10s"})
    assert p.post(key=new_key()).status == 201
    # curl counts idle time in whole seconds (idle / 1000 > 4: reused up to 5 s) from when the
    # transfer returned the connection, which a loaded machine may stamp late: 7 s is past it
    hold(7, "the pooled connection outlives curl's idle limit (MAXAGE_CONN: more than 4 s)")
    t = time.monotonic()
    r = p.post(key=new_key(), timeout=15)
    assert r.status == 201, r
    assert time.monotonic() - t < 2, "the answer waited %.1f s" % (time.monotonic() - t)
    assert up.connections == 2 and up.requests == 2


def test_one_mib_answer_is_forwarded_and_replayed_whole(start_proxy, counting_upstream):
    up = counting_upstream(body_size=1048576)
    p = start_proxy(upstream_url=up.url)
    key = new_key()
    want = bytes((i * 7 + 3) % 251 for i in range(1048576))
    first = p.post(key=key, timeout=30)
    assert first.status == 201 and first.body == want, (first.status, len(first.body))
    retry = p.post(key=key, timeout=30)
    assert retry.status == 201 and retry.header("Idempotent-Replayed") == "true"
    assert retry.body == want
    assert up.requests == 1


# --------------------------------------------------------------------------
# answers written in the iteration that produced them
# --------------------------------------------------------------------------

def test_pipelined_requests_are_answered_in_order(proxy, upstream):
    keys = [new_key() for _ in range(3)]
    s = socket.create_connection(("127.0.0.1", proxy.port))
    try:
        s.sendall(b"".join(build_request("POST", "/v1/payments",
                                         [("Idempotency-Key", k),
                                          ("Content-Type", "application/json")],
                                         b'{"amount": 7}') for k in keys) +
                  build_request("HEAD", "/v1/payments", []))
        # one reader for the four: an answer that came in the same recv as the one before it
        # stays in that reader's buffer (a fresh reader per answer dropped it, and waited)
        reader = _Reader(s, time.monotonic() + 15)
        answers = [read_response(s, reader=reader) for _ in keys]
        head = read_response(s, method="HEAD", reader=reader)
    finally:
        s.close()
    assert [a.status for a in answers] == [201, 201, 201], answers
    assert len({a.json()["id"] for a in answers}) == 3
    assert head.body == b""
    for k in keys:
        assert upstream.executions(k) == 1


def test_connection_close_is_honoured_after_the_answer(proxy, upstream):
    s = socket.create_connection(("127.0.0.1", proxy.port))
    try:
        s.sendall(build_request("POST", "/v1/payments",
                                [("Idempotency-Key", new_key()), ("Connection", "close"),
                                 ("Content-Type", "application/json")], b"{}"))
        r = read_response(s)
        s.settimeout(5)
        assert s.recv(1) == b"", "the proxy kept a Connection: close connection open"
    finally:
        s.close()
    assert r.status == 201


def test_keep_alive_connection_alternates_replays_and_forwards(proxy, upstream):
    key = new_key()
    with Connection(proxy.port) as c:
        hs = [("Idempotency-Key", key), ("Content-Type", "application/json")]
        first = c.request("POST", "/v1/payments", hs, b'{"a": 1}')
        for i in range(5):
            assert c.request("POST", "/v1/payments", hs, b'{"a": 1}').replayed
            other = c.request("POST", "/v1/payments",
                              [("Idempotency-Key", new_key()),
                               ("Content-Type", "application/json")], b'{"b": %d}' % i)
            assert other.status == 201 and not other.replayed
    assert first.status == 201
    assert upstream.executions(key) == 1


# --------------------------------------------------------------------------
# client sockets stay in epoll while evhttp pauses reading (reply.c `watch`)
# --------------------------------------------------------------------------

def test_client_closing_during_its_request_does_not_make_the_proxy_spin(proxy, upstream):
    """While a request waits for the upstream, evhttp does not read its connection; the
    client's close keeps the socket readable, and the proxy's extra read event must not
    wake the loop for it again and again."""
    key = new_key()
    s = socket.create_connection(("127.0.0.1", proxy.port))
    s.sendall(build_request("POST", "/v1/payments",
                            [("Idempotency-Key", key), ("X-Demo-Delay-Ms", "1500"),
                             ("Content-Type", "application/json")], b"{}"))
    wait_until(lambda: upstream.executions(key) == 1, what="the request at the upstream")
    s.close()
    before = proxy_cpu_s(proxy)
    hold(1.0, "a span in which the proxy must not spin on the closed client socket")
    assert proxy_cpu_s(proxy) - before < 0.2, "the proxy spins on a closed client socket"
    # the abandoned exchange ends: answered (to no one) and recorded
    wait_metric(proxy, "idempotency_proxy_in_flight_requests", lambda v: v == 0)
    assert upstream.executions(key) == 1
    retry = proxy.post(key=key, body=b"{}")
    assert retry.status == 201 and retry.replayed


def test_half_closed_client_still_gets_its_answer(proxy, upstream):
    """A client that shuts down its sending side after the request (HTTP/1.0-style tools)
    is answered, as before."""
    s = socket.create_connection(("127.0.0.1", proxy.port))
    try:
        s.sendall(build_request("POST", "/v1/payments",
                                [("Idempotency-Key", new_key()), ("X-Demo-Delay-Ms", "300"),
                                 ("Content-Type", "application/json")], b"{}"))
        s.shutdown(socket.SHUT_WR)
        r = read_response(s)
    finally:
        s.close()
    assert r.status == 201, r


def test_pipelined_requests_beyond_one_read_are_all_answered(proxy, upstream):
    """More than evhttp reads at once (4 KiB) arrives while the first request waits: the
    rest stays in the socket, readable, until evhttp reads again."""
    keys = [new_key() for _ in range(6)]
    pad = b'{"pad": "' + b"x" * 3000 + b'"}'
    s = socket.create_connection(("127.0.0.1", proxy.port))
    try:
        s.sendall(b"".join(build_request("POST", "/v1/payments",
                                         [("Idempotency-Key", k), ("X-Demo-Delay-Ms", "100"),
                                          ("Content-Type", "application/json")], pad)
                           for k in keys))
        before = proxy_cpu_s(proxy)
        reader = _Reader(s, time.monotonic() + 15)
        answers = [read_response(s, reader=reader) for _ in keys]
        spent = proxy_cpu_s(proxy) - before
    finally:
        s.close()
    assert [a.status for a in answers] == [201] * len(keys), answers
    assert spent < 0.3, "%.2f s of CPU for 6 requests: the proxy spun" % spent
    for k in keys:
        assert upstream.executions(k) == 1


def test_pipelined_request_sent_while_the_first_is_upstream_waits_its_turn(proxy, upstream):
    """The second request arrives while the first is at the upstream and evhttp does not
    read: the extra read event sees it, takes itself out (no spin), and evhttp reads it
    once the first answer is out; both are answered in order, each executed once."""
    k1, k2 = new_key(), new_key()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=15) as s:
        s.sendall(build_request("POST", "/v1/payments",
                                [("Idempotency-Key", k1), ("X-Demo-Delay-Ms", "1200"),
                                 ("Content-Type", "application/json")], b'{"n": 1}'))
        wait_until(lambda: upstream.executions(k1) == 1, what="first request upstream")
        s.sendall(build_request("POST", "/v1/payments",
                                [("Idempotency-Key", k2), ("Content-Type", "application/json")],
                                b'{"n": 2}'))
        before = proxy_cpu_s(proxy)
        hold(0.6, "a span in which the second request waits, unread, behind the first: "
                  "the proxy must not spin")
        spent = proxy_cpu_s(proxy) - before
        reader = _Reader(s, time.monotonic() + 15)
        first = read_response(s, reader=reader)
        second = read_response(s, reader=reader)
    assert spent < 0.2, "%.2f s of CPU while a pipelined request waited: the proxy spun" % spent
    assert (first.status, second.status) == (201, 201), (first, second)
    assert json.loads(first.body)["body_length"] == 8
    assert upstream.executions(k1) == 1 and upstream.executions(k2) == 1


def test_slow_reader_gets_a_large_answer_whole_then_its_pipelined_answer(proxy, upstream):
    """A client that reads nothing for a while: the 4 MiB pass-through answer streams at its
    pace (a window of it in the proxy, the upstream transfer paused, reading on again); the
    client's next request arrives meanwhile. The proxy neither spins nor stalls other clients,
    and both answers arrive whole, in order."""
    size = 4 * 1024 * 1024
    key = new_key()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        s.sendall(build_request("POST", "/v1/exports", [("X-Demo-Size", str(size))], b"{}"))
        wait_until(lambda: upstream.total() >= 1, what="export requested")
        # its answer has begun: the proxy writes it as the client takes it
        s.settimeout(30)
        assert s.recv(1, socket.MSG_PEEK) == b"H"
        s.sendall(build_request("POST", "/v1/payments",
                                [("Idempotency-Key", key), ("Content-Type", "application/json")],
                                b'{"n": 3}'))
        before = proxy_cpu_s(proxy)
        other = proxy.post(key=new_key(), body=b'{"other": 1}')  # another client meanwhile
        hold(0.8, "a span in which the slow reader reads nothing: the proxy must not spin")
        spent = proxy_cpu_s(proxy) - before
        reader = _Reader(s, time.monotonic() + 30)
        big = read_response(s, reader=reader)
        paid = read_response(s, reader=reader)
    assert other.status == 201, other
    assert spent < 0.3, "%.2f s of CPU while a slow reader waited: the proxy spun" % spent
    assert big.status == 201 and len(big.body) == size, (big.status, len(big.body))
    assert paid.status == 201 and json.loads(paid.body)["body_length"] == 8, paid
    assert upstream.executions(key) == 1


def test_clients_closing_mid_request_then_new_connections_on_their_sockets(proxy, upstream):
    """Eighty clients send a slow request and go away while it is at the upstream, half with
    a FIN and half with a RST: each connection's record and read event must go with it, so
    the new connections that get the same socket numbers afterwards are served as usual
    (and more than 64 sockets grow the per-socket table). Every request executed once, and
    the abandoned ones were recorded (a retry replays)."""
    keys = [new_key() for _ in range(80)]
    socks = []
    for i, k in enumerate(keys):
        s = socket.create_connection(("127.0.0.1", proxy.port), timeout=15)
        s.sendall(build_request("POST", "/v1/payments",
                                [("Idempotency-Key", k), ("X-Demo-Delay-Ms", "700"),
                                 ("Content-Type", "application/json")], b'{"i": %d}' % i))
        socks.append(s)
    wait_until(lambda: all(upstream.executions(k) == 1 for k in keys),
               what="every request at the upstream")
    for i, s in enumerate(socks):
        if i % 2:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    before = proxy_cpu_s(proxy)
    hold(0.5, "a span in which the proxy must not spin on the closed client sockets")
    assert proxy_cpu_s(proxy) - before < 0.3, "the proxy spins on closed client sockets"
    # the answers are written to the closed sockets; evhttp frees them
    wait_until(lambda: client_sockets(proxy) == 0, what="the proxy closed every client socket")
    conns = [Connection(proxy.port) for _ in range(80)]
    try:
        for round_no in range(2):
            for i, c in enumerate(conns):
                r = c.request("POST", "/v1/payments",
                              [("Idempotency-Key", keys[i]), ("Content-Type", "application/json")],
                              b'{"i": %d}' % i)
                assert r.status == 201 and r.replayed, (round_no, i, r)
    finally:
        for c in conns:
            c.close()
    assert all(upstream.executions(k) == 1 for k in keys)
