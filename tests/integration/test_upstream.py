"""Self-tests of the demo upstream and of the harness (no proxy involved)."""

import hashlib
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import Connection, HTTPError, http_request, build_config, to_yaml, wait_until


def test_upstream_post_is_an_execution(upstream):
    r = http_request(upstream.port, "POST", "/v1/payments?x=1",
                     [("Idempotency-Key", "k1"), ("Content-Type", "application/json")],
                     b'{"amount": 1}')
    assert r.status == 201, r
    assert r.content_type == "application/json"
    doc = r.json()
    assert doc["id"] == "ord_1"
    assert doc["object"] == "payment"
    assert doc["path"] == "/v1/payments"
    assert doc["query"] == "x=1"
    assert doc["body_sha256"] == hashlib.sha256(b'{"amount": 1}').hexdigest()
    assert doc["body_length"] == 13
    assert upstream.executions("k1") == 1
    assert upstream.total() == 1
    assert upstream.last_headers()["idempotency-key"] == ["k1"]


def test_upstream_get_is_not_an_execution(upstream):
    r = http_request(upstream.port, "GET", "/v1/payments", [("Idempotency-Key", "k")])
    assert r.status == 200 and r.json()["object"] == "list"
    assert upstream.total() == 0
    assert upstream.requests() == 1


def test_upstream_keyless_counts_under_empty_key_and_reset(upstream):
    for _ in range(3):
        assert http_request(upstream.port, "PUT", "/v1/x", body=b"a").status == 201
    assert upstream.executions("") == 3
    assert upstream.stats()["by_key"] == {"": 3}
    upstream.reset()
    assert upstream.total() == 0


def test_upstream_status_chunked_binary_cookie_size(upstream):
    r = http_request(upstream.port, "POST", "/v1/p", [("X-Demo-Status", "503")], b"")
    assert r.status == 503 and r.json()["status"] == 503
    r = http_request(upstream.port, "POST", "/v1/p", [("X-Demo-Chunked", "1")], b"x")
    assert r.status == 201 and r.header("Transfer-Encoding") == "chunked"
    assert not r.has_header("Content-Length") and r.json()["id"] == "ord_2"
    body = bytes(range(256)) * 2
    r = http_request(upstream.port, "POST", "/v1/p", [("X-Demo-Binary", "1")], body)
    assert r.body == body + bytes(range(256))
    assert r.content_type == "application/octet-stream"
    r = http_request(upstream.port, "POST", "/v1/p", [("X-Demo-Set-Cookie", "1")], b"")
    assert r.header("Set-Cookie") == "session=abc; Path=/"
    assert r.header("X-Demo-Order") == "ord_4"
    r = http_request(upstream.port, "POST", "/v1/p", [("X-Demo-Size", "100000")], b"")
    assert len(r.body) == 100000
    assert upstream.total() == 5


def test_upstream_delay_counts_on_arrival(upstream):
    with ThreadPoolExecutor(1) as ex:
        f = ex.submit(http_request, upstream.port, "POST", "/v1/p",
                      [("X-Demo-Delay-Ms", "2000")], b"")
        wait_until(lambda: upstream.total() == 1, what="the delayed request counted")
        # counted while its answer is still to come (2 s: far more than a poll takes)
        assert not f.done(), f.result()
        r = f.result()
    assert r.status == 201 and r.elapsed >= 1.95


def test_upstream_faults(upstream):
    with pytest.raises(socket.timeout):
        http_request(upstream.port, "POST", "/v1/p", [("X-Demo-Fault", "hang")], b"",
                     timeout=0.5)
    with pytest.raises((HTTPError, ConnectionError)):
        http_request(upstream.port, "POST", "/v1/p", [("X-Demo-Fault", "reset")], b"")
    with pytest.raises(HTTPError):
        http_request(upstream.port, "POST", "/v1/p", [("X-Demo-Fault", "close")], b"")
    assert upstream.total() == 3


def test_upstream_close_reused(upstream_factory):
    up = upstream_factory(["--close-reused"])
    with Connection(up.port) as c:
        assert c.request("POST", "/v1/p", [("Idempotency-Key", "a")], b"1").status == 201
        with pytest.raises(HTTPError):
            c.request("POST", "/v1/p", [("Idempotency-Key", "b")], b"2")
    assert up.executions("a") == 1 and up.executions("b") == 1


def test_upstream_unix_socket(upstream_factory, tmp_path):
    path = str(tmp_path / "pay.sock")
    up = upstream_factory(unix_path=path)
    assert up.url == "unix:" + path
    assert up.total() == 0


def test_upstream_exits_cleanly_on_sigterm(upstream_factory):
    up = upstream_factory()
    # a hanging request must not block shutdown
    s = socket.create_connection(("127.0.0.1", up.port))
    s.sendall(b"POST /v1/p HTTP/1.1\r\nHost: x\r\nX-Demo-Fault: hang\r\nContent-Length: 0\r\n\r\n")
    wait_until(lambda: up.total() == 1, what="the hanging request counted")
    t = time.monotonic()
    assert up.stop() == 0
    # the handler sees STOP within its 0.2 s recv timeout; a hang that blocked the exit would
    # take the 10 s stop() waits before it kills
    assert time.monotonic() - t < 3
    s.close()


def test_redis_fixture(redis):
    assert redis.cmd("SET", "a", "1") == "OK"
    assert redis.keys("*") == ["a"]
    redis.stop()
    with pytest.raises(OSError):
        redis.cmd("PING", timeout=0.5)
    redis.start()
    assert redis.cmd("PING") == "PONG"
    redis.pause()
    with pytest.raises(socket.timeout):
        redis.cmd("PING", timeout=0.3)
    redis.resume()
    assert redis.cmd("PING") == "PONG"


def test_yaml_emitter():
    cfg = build_config(8080, 9901, "http://127.0.0.1:3000", "redis://127.0.0.1:6379/0",
                       limits={"max_request_body": "1KiB"}, in_flight="reject",
                       release_statuses=[503], routes=[{"path": "/v1/payments*",
                                                         "require_key": True}])
    text = to_yaml(cfg)
    assert "listen: 127.0.0.1:8080\n" in text
    assert "  max_request_body: 1KiB\n" in text
    assert "defaults:\n  in_flight: reject\n  release_statuses: [503]" in text
    assert "routes:\n  - path: /v1/payments*\n    require_key: true" in text
