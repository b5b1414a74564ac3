"""At most one execution per key and the same answer for every retry: concurrent
duplicates, bodies and their limits, what a replay carries, and which upstream answers are
recorded.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py and the
proxy binary; each test asserts what the client and the upstream observe.
"""

import gzip
import hashlib
import http.server
import json
import socket
import threading
import uuid

import pytest

from harness import WAIT_S, build_request, hold, pace, read_response, wait_until
from proxy_helpers import (
    PROBLEM_PREFIX, assert_not_replayed, assert_problem, assert_replay_of, concurrently,
    in_background, new_key, read_request, record_keys,
)

# tests/run.sh runs this file under ThreadSanitizer with two worker threads a proxy
# (IDEM_TEST_WORKERS=2): its requests meet across workers (docs/internals.md).
pytestmark = pytest.mark.threads

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-authenticate", "proxy-authorization", "proxy-connection"}


# --------------------------------------------------------------------------
# at most one execution, same answer for everyone
# --------------------------------------------------------------------------

def test_concurrent_identical_requests_execute_once(proxy, upstream):
    key = new_key()
    body = b'{"amount": 4200, "currency": "EUR"}'
    rs = concurrently(50, lambda i: proxy.post(key=key, body=body,
                                               headers=[("X-Demo-Delay-Ms", "300")]))
    assert upstream.total() == 1
    assert {r.status for r in rs} == {201}, rs
    assert len({r.body for r in rs}) == 1, "answers differ"
    replayed = [r for r in rs if r.replayed]
    firsts = [r for r in rs if not r.has_header("Idempotent-Replayed")]
    assert len(replayed) == 49, rs
    assert len(firsts) == 1, rs


def test_concurrent_identical_requests_across_two_proxies_execute_once(start_proxy, upstream):
    p1, p2 = start_proxy(), start_proxy()
    key = new_key()
    body = b'{"amount": 4200}'
    rs = concurrently(50, lambda i: (p1 if i % 2 else p2).post(
        key=key, body=body, headers=[("X-Demo-Delay-Ms", "300")]))
    assert upstream.total() == 1
    assert {r.status for r in rs} == {201}, rs
    assert len({r.body for r in rs}) == 1
    assert sum(r.replayed for r in rs) == 49
    assert sum(not r.has_header("Idempotent-Replayed") for r in rs) == 1


def test_retry_after_completion_replays(proxy, upstream):
    key = new_key()
    first = proxy.post(key=key)
    assert first.status == 201
    assert_not_replayed(first)
    for _ in range(3):
        assert_replay_of(proxy.post(key=key), first)
    assert upstream.total() == 1


def test_waiting_duplicate_gets_the_replay(proxy, upstream):
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "1000")]
    f = in_background(proxy.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1, what="first request upstream")
    second = proxy.post(key=key, headers=hs)
    first = f.result()
    assert first.status == 201
    assert_not_replayed(first)
    assert_replay_of(second, first)
    assert upstream.total() == 1


def test_patch_is_protected(proxy, upstream):
    key = new_key()
    first = proxy.request("PATCH", "/v1/payments/p1", [("Idempotency-Key", key)], b'{"a":1}')
    second = proxy.request("PATCH", "/v1/payments/p1", [("Idempotency-Key", key)], b'{"a":1}')
    assert first.status == 201
    assert_replay_of(second, first)
    assert upstream.total() == 1


def test_concurrent_distinct_keys_each_execute_once_with_their_own_answer(proxy, upstream):
    n = 30
    bodies = [('{"n": %d, "u": "%s"}' % (i, uuid.uuid4().hex)).encode() for i in range(n)]
    keys = [new_key() for _ in range(n)]
    rs = concurrently(n, lambda i: proxy.post(key=keys[i], body=bodies[i],
                                              headers=[("X-Demo-Delay-Ms", "200")]))
    assert upstream.total() == n
    for b, r in zip(bodies, rs):
        assert r.status == 201, r
        assert_not_replayed(r)
        # never another request's data
        assert r.json()["body_sha256"] == hashlib.sha256(b).hexdigest()
    # and every replay is its own
    rs2 = concurrently(n, lambda i: proxy.post(key=keys[i], body=bodies[i]))
    for first, again in zip(rs, rs2):
        assert_replay_of(again, first)
    assert upstream.total() == n


class BarrierUpstream:
    """Holds every request until n of them are in it at once, then answers them all 201;
    503 for each once WAIT_S has passed without n together (exchanges that are serialised)."""

    def __init__(self, n):
        barrier = threading.Barrier(n)

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    barrier.wait(WAIT_S)
                    status = 201
                except threading.BrokenBarrierError:
                    status = 503
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 2 * n  # n connections at once: none waits for a SYN retry

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_upstream_exchanges_run_concurrently(start_proxy):
    """n requests of distinct keys are in the upstream at the same time: an upstream that
    answers none of them before all n have arrived answers every one."""
    n = 16
    up = BarrierUpstream(n)
    try:
        # The barrier gives up after WAIT_S; the proxy's upstream timeout and the client's
        # read outlast it, so a slow machine (TSan beside five other test workers) shows
        # either all 201 or the barrier's 503s, never a client timeout first.
        p = start_proxy(upstream_url=up.url,
                        upstream={"timeout": "%ds" % (WAIT_S + 20)})
        rs = concurrently(n, lambda i: p.post(key=new_key(), timeout=WAIT_S + 30))
        assert all(r.status == 201 for r in rs), \
            "the %d exchanges were not all in flight at once: %r" % (n, rs)
    finally:
        up.close()


def test_many_keys_many_retries_two_proxies(start_proxy, upstream):
    p1, p2 = start_proxy(), start_proxy()
    keys = [new_key() for _ in range(10)]
    rs = concurrently(60, lambda i: (p1 if i % 2 else p2).post(
        key=keys[i % 10], body=('{"k": %d}' % (i % 10)).encode(),
        headers=[("X-Demo-Delay-Ms", "200")]))
    assert upstream.total() == 10
    for k in range(10):
        group = [r for i, r in enumerate(rs) if i % 10 == k]
        assert {r.status for r in group} == {201}, group
        assert len({r.body for r in group}) == 1
        assert sum(not r.has_header("Idempotent-Replayed") for r in group) == 1


# --------------------------------------------------------------------------
# bodies
# --------------------------------------------------------------------------

def test_body_over_max_request_body_is_413_and_nothing_claimed(start_proxy, upstream, redis):
    p = start_proxy(limits={"max_request_body": "1KiB"})
    key = new_key()
    r = p.post(key=key, body=b"x" * 1025)
    assert_problem(r, 413, "body-too-large")
    assert upstream.total() == 0
    assert record_keys(redis) == []
    # the key was not claimed: the same key with a small body executes normally
    ok = p.post(key=key, body=b'{"amount": 1}')
    assert ok.status == 201
    assert_not_replayed(ok)
    assert upstream.total() == 1
    # exactly the limit is fine
    assert p.post(key=new_key(), body=b"y" * 1024).status == 201
    assert upstream.total() == 2


def test_chunked_request_body_over_limit_is_413(start_proxy, upstream, redis):
    p = start_proxy(limits={"max_request_body": "1KiB"})
    chunk = b"z" * 600
    body = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(chunk), chunk, len(chunk), chunk)
    r = p.request("POST", "/v1/payments",
                  [("Idempotency-Key", new_key()), ("Transfer-Encoding", "chunked")], body)
    assert_problem(r, 413, "body-too-large")
    assert upstream.total() == 0
    assert record_keys(redis) == []


def test_chunked_request_body_is_fingerprinted_by_its_content(proxy, upstream):
    key = new_key()
    payload = b'{"amount": 77}'
    chunked = b"5\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (payload[:5], len(payload) - 5, payload[5:])
    first = proxy.request("POST", "/v1/payments",
                          [("Idempotency-Key", key), ("Transfer-Encoding", "chunked")], chunked)
    assert first.status == 201, first
    assert first.json()["body_sha256"] == hashlib.sha256(payload).hexdigest()
    assert_replay_of(proxy.post(key=key, body=payload), first)
    assert upstream.total() == 1


def test_binary_bodies_survive_a_replay_byte_for_byte(proxy, upstream):
    key = new_key()
    body = bytes(range(256)) * 4 + b"\x00\x00\r\n\r\n\x00"
    hs = [("X-Demo-Binary", "1"), ("Content-Type", "application/octet-stream")]
    first = proxy.post(key=key, body=body, headers=hs)
    assert first.status == 201
    assert first.body == body + bytes(range(256))
    assert upstream.last_request()["body_sha256"] == hashlib.sha256(body).hexdigest()
    replay = proxy.post(key=key, body=body, headers=hs)
    assert_replay_of(replay, first)
    assert replay.content_type == "application/octet-stream"
    # one flipped byte after a NUL is a different request
    other = bytearray(body)
    other[-1] = 1
    assert_problem(proxy.post(key=key, body=bytes(other), headers=hs), 409, "key-reuse-mismatch")
    assert upstream.total() == 1


def test_large_response_within_limit_replays_intact(proxy, upstream):
    key = new_key()
    hs = [("X-Demo-Size", str(300 * 1024))]
    first = proxy.post(key=key, headers=hs)
    assert first.status == 201 and len(first.body) == 300 * 1024
    assert_replay_of(proxy.post(key=key, headers=hs), first)
    assert upstream.total() == 1


def test_response_larger_than_max_stored_response_is_not_replayed(start_proxy, upstream):
    p = start_proxy(limits={"max_stored_response": "1KiB"})
    key = new_key()
    hs = [("X-Demo-Size", "4096")]
    first = p.post(key=key, headers=hs)
    assert first.status == 201
    assert len(first.body) == 4096  # the first client gets it whole
    retry = p.post(key=key, headers=hs)
    assert_problem(retry, 502, "response-not-replayable")
    assert retry.header("Idempotent-Replayed") == "true"
    assert upstream.total() == 1


@pytest.mark.parametrize("size", [5000, 60000, 100000, 3 * 1024 * 1024])
def test_far_oversized_body_is_413_and_nothing_claimed(start_proxy, upstream, redis, size):
    """Up to max_request_body + max(max_request_body, 64 KiB) the proxy reads the body and
    answers a 413 problem; past that libevent refuses it with its own plain 413 (README,
    "Oversized bodies"). Either way nothing is claimed or forwarded."""
    p = start_proxy(limits={"max_request_body": "4KiB"})
    head = build_request("POST", "/v1/payments", [("Idempotency-Key", new_key()),
                                                   ("Content-Length", str(size))])
    with socket.create_connection(("127.0.0.1", p.port), timeout=15) as s:
        s.sendall(head)
        try:
            s.sendall(b"q" * size)
        except OSError:
            pass  # the proxy may answer and close before reading it all
        r = read_response(s, "POST", timeout=10)
    if size <= 4096 + 65536:
        assert_problem(r, 413, "body-too-large")
    else:
        assert r.status == 413, r
    assert upstream.total() == 0
    assert record_keys(redis) == []


def test_slow_client_body(proxy, upstream):
    key = new_key()
    body = b'{"amount": 31415}'
    data = build_request("POST", "/v1/payments", [("Idempotency-Key", key)], body)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=15) as s:
        for i in range(0, len(data), 7):
            s.sendall(data[i:i + 7])
            pace(0.03)  # a slow client: 7 bytes at a time
        r = read_response(s, "POST")
    assert r.status == 201
    assert r.json()["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert_replay_of(proxy.post(key=key, body=body), r)


def test_pass_through_and_first_answers_larger_than_the_store_limit(proxy, upstream):
    size = 3 * 1024 * 1024
    r = proxy.post("/v2/other", key=None, headers=[("X-Demo-Size", str(size))])
    assert r.status == 201 and len(r.body) == size
    key = new_key()
    first = proxy.post(key=key, headers=[("X-Demo-Size", str(size))])
    assert first.status == 201 and len(first.body) == size
    assert_problem(proxy.post(key=key, headers=[("X-Demo-Size", str(size))]), 502,
                   "response-not-replayable")
    assert upstream.total() == 2


# --------------------------------------------------------------------------
# what a replay looks like
# --------------------------------------------------------------------------

def test_chunked_upstream_answer_replays_with_content_length(proxy, upstream):
    key = new_key()
    hs = [("X-Demo-Chunked", "1")]
    first = proxy.post(key=key, headers=hs)
    assert first.status == 201
    assert first.json()["object"] == "payment"
    replay = proxy.post(key=key, headers=hs)
    assert_replay_of(replay, first)
    assert replay.header("Content-Length") == str(len(first.body))
    assert not replay.has_header("Transfer-Encoding")
    assert upstream.total() == 1


def test_set_cookie_is_not_replayed(proxy, upstream):
    key = new_key()
    hs = [("X-Demo-Set-Cookie", "1")]
    first = proxy.post(key=key, headers=hs)
    assert first.status == 201
    assert first.header_all("Set-Cookie") == ["session=abc; Path=/"]
    order = first.json()["id"]
    assert first.header("X-Demo-Order") == order
    replay = proxy.post(key=key, headers=hs)
    assert_replay_of(replay, first)
    assert not replay.has_header("Set-Cookie")
    assert replay.header("X-Demo-Order") == order


def test_replay_carries_the_stored_headers_and_a_fresh_content_length(proxy, upstream):
    key = new_key()
    hs = [("X-Demo-Set-Cookie", "1"), ("X-Demo-Chunked", "1")]
    first = proxy.post(key=key, headers=hs)
    assert first.status == 201
    replay = proxy.post(key=key, headers=hs)
    assert_replay_of(replay, first)
    skip = HOP_BY_HOP | {"content-length", "set-cookie", "www-authenticate", "date",
                         "idempotent-replayed"}
    for name in {k.lower() for k, _ in first.headers} - skip:
        assert replay.header_all(name) == first.header_all(name), \
            "header %s differs: first %r replay %r" % (name, first.header_all(name),
                                                       replay.header_all(name))
    assert replay.content_type == "application/json"


def test_client_sent_idempotent_replayed_header_changes_nothing(proxy, upstream):
    key = new_key()
    first = proxy.post(key=key, headers=[("Idempotent-Replayed", "true")])
    assert first.status == 201
    assert_not_replayed(first)
    assert upstream.total() == 1
    replay = proxy.post(key=key, headers=[("Idempotent-Replayed", "false")])
    assert_replay_of(replay, first)  # exactly one "true"
    # and without a key, the header does not make a pass-through look replayed
    r = proxy.post(key=None, headers=[("Idempotent-Replayed", "true")])
    assert r.status == 201
    assert_not_replayed(r)
    assert upstream.total() == 2


def test_replay_does_not_touch_the_record(proxy, upstream, redis):
    key = new_key()
    first = proxy.post(key=key)
    assert first.status == 201
    keys = record_keys(redis)
    assert keys, "no record in Redis"
    before = {k: (redis.cmd("PTTL", k), redis.cmd("TYPE", k)) for k in keys}
    for k, (pttl, _) in before.items():
        assert pttl > 0, "record %s has no expiry (PTTL %r)" % (k, pttl)
        assert pttl <= 24 * 3600 * 1000 + 1000, "record %s outlives retention" % k
    dumps = {k: redis.cmd("DUMP", k) for k in keys}
    hold(0.05, "the TTLs run down: a replay that refreshed one would leave it above the PTTL read")
    assert_replay_of(proxy.post(key=key), first)
    for k, (pttl, _) in before.items():
        assert 0 < redis.cmd("PTTL", k) <= pttl, "replay changed the TTL of %s" % k
        assert redis.cmd("DUMP", k) == dumps[k], "replay changed record %s" % k
    assert upstream.total() == 1


def test_record_expires_after_retention(start_proxy, upstream, redis):
    # retention may not be shorter than lease; 2 s leaves the replay below time to come first
    p = start_proxy(lease="1s", retention="2s")
    key = new_key()
    assert p.post(key=key).status == 201
    assert p.post(key=key).replayed
    wait_until(lambda: record_keys(redis) == [], what="the record's retention (2 s) to run out")
    again = p.post(key=key)
    assert again.status == 201
    assert_not_replayed(again)
    assert upstream.total() == 2


def test_an_empty_response_field_value_reaches_the_client_and_the_replay(proxy, upstream):
    key = new_key()
    hs = [("X-Demo-Header", "X-Empty:"), ("X-Demo-Header", "X-After: 1")]
    first = proxy.post(key=key, headers=hs)
    assert first.status == 201, first
    assert first.header_all("X-Empty") == [""], first
    assert first.header("X-After") == "1", first
    replay = proxy.post(key=key, headers=hs)
    assert replay.replayed and replay.header_all("X-Empty") == [""], replay
    assert upstream.executions(key) == 1


def test_www_authenticate_and_proxy_headers_are_not_replayed(proxy, upstream):
    key = new_key()
    hs = [("X-Demo-Header", 'WWW-Authenticate: Bearer realm="pay"'),
          ("X-Demo-Header", "Link: <https://example.test/a>; rel=a"),
          ("X-Demo-Header", "Link: <https://example.test/b>; rel=b"),
          ("X-Demo-Header", "X-Request-Id: req-123")]
    first = proxy.post(key=key, headers=hs)
    assert first.status == 201
    assert first.header('WWW-Authenticate') == 'Bearer realm="pay"'
    replay = proxy.post(key=key, headers=hs)
    assert_replay_of(replay, first)
    assert not replay.has_header("WWW-Authenticate")
    # duplicates are kept, in order
    assert replay.header_all("Link") == ["<https://example.test/a>; rel=a",
                                         "<https://example.test/b>; rel=b"]
    assert replay.header("X-Request-Id") == "req-123"


def test_gzip_answer_passes_and_replays_undecoded(proxy, upstream):
    key = new_key()
    hs = [("X-Demo-Gzip", "1"), ("Accept-Encoding", "gzip")]
    first = proxy.post(key=key, headers=hs)
    assert first.status == 201
    assert first.header("Content-Encoding") == "gzip"
    assert json.loads(gzip.decompress(first.body))["object"] == "payment"
    replay = proxy.post(key=key, headers=hs)
    assert_replay_of(replay, first)
    assert replay.header("Content-Encoding") == "gzip"


# --------------------------------------------------------------------------
# which answers are recorded
# --------------------------------------------------------------------------

@pytest.mark.parametrize("status", [408, 425, 429, 503])
def test_upstream_release_status_releases_the_key(proxy, upstream, status):
    key = new_key()
    hs = [("X-Demo-Status", str(status))]
    a = proxy.post(key=key, headers=hs)
    b = proxy.post(key=key, headers=hs)
    assert a.status == status and b.status == status
    assert_not_replayed(a)
    assert_not_replayed(b)
    assert upstream.total() == 2
    # and once the upstream succeeds, that answer is kept
    ok = proxy.post(key=key)
    assert ok.status == 201
    assert_replay_of(proxy.post(key=key), ok)
    assert upstream.total() == 3


@pytest.mark.parametrize("status", [400, 402, 404, 500, 502])
def test_upstream_error_status_is_recorded_and_replayed(proxy, upstream, status):
    key = new_key()
    hs = [("X-Demo-Status", str(status))]
    first = proxy.post(key=key, headers=hs)
    assert first.status == status
    assert first.json()["status"] == status  # the upstream's own body, not a problem
    assert_replay_of(proxy.post(key=key, headers=hs), first)
    assert upstream.total() == 1


def test_release_statuses_are_configurable(start_proxy, upstream):
    p = start_proxy(release_statuses=[409])
    key = new_key()
    hs = [("X-Demo-Status", "503")]
    first = p.post(key=key, headers=hs)
    assert first.status == 503
    assert_replay_of(p.post(key=key, headers=hs), first)  # 503 is recorded now
    k2 = new_key()
    hs2 = [("X-Demo-Status", "409")]
    assert p.post(key=k2, headers=hs2).status == 409
    r = p.post(key=k2, headers=hs2)
    assert r.status == 409 and not r.replayed
    assert upstream.total() == 3


def test_upstream_204_is_recorded_and_replayed_without_a_body(proxy, upstream):
    key = new_key()
    hs = [("X-Demo-Status", "204")]
    first = proxy.post(key=key, headers=hs)
    assert first.status == 204 and first.body == b""
    replay = proxy.post(key=key, headers=hs)
    assert replay.status == 204 and replay.body == b""
    assert replay.header("Idempotent-Replayed") == "true"
    assert replay.header("Content-Length") in (None, "0")
    assert upstream.total() == 1


class HugeHeaderUpstream:
    """Answers every request with 201 and a header name the record cannot hold (70,000
    bytes; the codec stores names up to 65,535), counting the requests it answered."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        self.stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        with conn, conn.makefile("rb") as rfile:
            if read_request(rfile) is None:
                return
            self.count += 1
            body = b'{"id":"ord_%d"}' % self.count
            conn.sendall(b"HTTP/1.1 201 Created\r\nX-" + b"a" * 70000 + b": 1\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n" % len(body) + body)

    def close(self):
        self.stop = True
        self.sock.close()


def test_an_answer_the_record_cannot_hold_is_never_executed_twice(start_proxy):
    """An answer the record cannot hold (a header name over 65,535 bytes) settles its claim,
    never left to expire: even under on_ambiguous: release every retry gets 502
    response-not-replayable and the upstream runs once."""
    up = HugeHeaderUpstream()
    try:
        p = start_proxy(upstream_url="http://127.0.0.1:%d" % up.port, lease="1s",
                        on_ambiguous="release")
        k = new_key()
        first = p.post(key=k)
        assert first.status == 201
        hold(1.5, "past the 1 s lease of a claim that would have been left behind")
        for _ in range(2):
            retry = p.post(key=k)
            assert retry.status == 502 and retry.replayed, retry
            assert retry.json()["type"] == PROBLEM_PREFIX + "response-not-replayable"
        assert up.count == 1
    finally:
        up.close()
