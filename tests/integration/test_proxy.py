"""Integration tests of idempotency-proxy against the behaviour README.md states.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py
and the proxy binary. One test per behaviour, asserting what a client and the
upstream can observe: statuses, headers, body bytes and upstream execution counts.
"""

import base64
import gzip
import hashlib
import hmac
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import (
    REPO, Connection, HTTPError, _Reader, build_config, build_request, free_port,
    http_request, port_accepts, proxy_binary, read_response, to_yaml, wait_until,
)

PROBLEM_PREFIX = "urn:idempotency-proxy:problem:"
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-authenticate", "proxy-authorization", "proxy-connection"}


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def new_key(tag="k"):
    return "%s-%s" % (tag, uuid.uuid4().hex)



def assert_problem(r, status, cause):
    assert r.status == status, r
    assert r.is_problem(), "expected application/problem+json: %r" % r
    doc = r.json()
    for field in ("type", "title", "status", "detail"):
        assert field in doc, "problem without %r: %r" % (field, doc)
    assert doc["type"].startswith(PROBLEM_PREFIX), doc
    assert doc["type"].endswith(":" + cause), "expected cause %r: %r" % (cause, doc)
    assert doc["status"] == status, doc
    assert isinstance(doc["title"], str) and doc["title"], doc
    assert isinstance(doc["detail"], str) and doc["detail"], doc
    return doc


def assert_retry_after(r):
    v = r.header("Retry-After")
    assert v is not None, "no Retry-After: %r" % r
    assert re.fullmatch(r"\d+", v.strip()) or re.match(r"[A-Z][a-z]{2}, \d\d ", v), \
        "Retry-After is neither delta-seconds nor an HTTP-date: %r" % v


def assert_not_replayed(r):
    assert not r.has_header("Idempotent-Replayed"), \
        "first execution must not carry Idempotent-Replayed: %r" % r


def assert_replay_of(replay, first):
    assert replay.status == first.status, (replay, first)
    assert replay.body == first.body, (replay, first)
    assert replay.header_all("Idempotent-Replayed") == ["true"], replay
    cl = replay.header_all("Content-Length")
    assert cl == [str(len(replay.body))], "replay needs one fresh Content-Length: %r" % replay
    assert not replay.has_header("Transfer-Encoding"), replay


def in_background(fn, *args, **kw):
    ex = ThreadPoolExecutor(1)
    fut = ex.submit(fn, *args, **kw)
    ex.shutdown(wait=False)
    return fut


def concurrently(n, fn):
    """Run fn(i) for i in range(n) on n threads started together; results in order."""
    barrier = threading.Barrier(n)

    def run(i):
        barrier.wait(10)
        return fn(i)

    with ThreadPoolExecutor(n) as ex:
        return list(ex.map(run, range(n)))


def prefixed_keys(redis, prefix="idem"):
    return [k for k in redis.keys("*") if str(k).startswith(prefix)]


def executions_of_body(upstream, body):
    h = hashlib.sha256(body).hexdigest()
    return sum(1 for e in upstream.history() if e["body_sha256"] == h)


def run_bin(args, timeout=20, cwd=None):
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    p = subprocess.run([proxy_binary()] + args, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                       cwd=cwd, env=env)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def require_binary():
    if not os.path.exists(proxy_binary()):
        pytest.fail("proxy binary not found at %s" % proxy_binary())


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


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


# --------------------------------------------------------------------------
# mismatches
# --------------------------------------------------------------------------

def test_same_key_different_body_is_409_mismatch(proxy, upstream):
    key = new_key()
    first = proxy.post(key=key, body=b'{"amount": 100}')
    assert first.status == 201
    r = proxy.post(key=key, body=b'{"amount": 999}')
    assert_problem(r, 409, "key-reuse-mismatch")
    assert not r.replayed
    assert upstream.total() == 1
    # the record is unchanged: the original request still replays
    assert_replay_of(proxy.post(key=key, body=b'{"amount": 100}'), first)
    assert upstream.total() == 1


def test_mismatch_while_first_is_in_flight_is_409_at_once(proxy, upstream):
    key = new_key()
    f = in_background(proxy.post, key=key, body=b"one", headers=[("X-Demo-Delay-Ms", "1500")])
    wait_until(lambda: upstream.total() == 1)
    r = proxy.post(key=key, body=b"two", headers=[("X-Demo-Delay-Ms", "1500")])
    assert_problem(r, 409, "key-reuse-mismatch")
    assert r.elapsed < 1.0, "a mismatch must not wait for the first request: %r" % r
    assert f.result().status == 201
    assert upstream.total() == 1


def test_mismatch_status_422(start_proxy, upstream):
    p = start_proxy(mismatch_status=422)
    key = new_key()
    assert p.post(key=key, body=b'{"amount": 1}').status == 201
    assert_problem(p.post(key=key, body=b'{"amount": 2}'), 422, "key-reuse-mismatch")
    assert upstream.total() == 1


def test_same_key_different_path_is_mismatch(proxy, upstream):
    key = new_key()
    assert proxy.post("/v1/payments/a", key=key).status == 201
    assert_problem(proxy.post("/v1/payments/b", key=key), 409, "key-reuse-mismatch")
    assert upstream.total() == 1


def test_same_key_different_query_is_mismatch(proxy, upstream):
    key = new_key()
    assert proxy.post("/v1/payments?capture=true", key=key).status == 201
    assert_problem(proxy.post("/v1/payments?capture=false", key=key), 409, "key-reuse-mismatch")
    assert_problem(proxy.post("/v1/payments", key=key), 409, "key-reuse-mismatch")
    assert upstream.total() == 1


def test_same_key_different_method_is_mismatch(proxy, upstream):
    key = new_key()
    assert proxy.request("POST", "/v1/payments", [("Idempotency-Key", key)], b"x").status == 201
    r = proxy.request("PATCH", "/v1/payments", [("Idempotency-Key", key)], b"x")
    assert_problem(r, 409, "key-reuse-mismatch")
    assert upstream.total() == 1


def test_fingerprint_none_replays_despite_a_different_body(start_proxy, upstream):
    p = start_proxy(routes=[{"path": "/v1/payments*", "fingerprint": "none"}])
    key = new_key()
    first = p.post(key=key, body=b'{"attempt": 1}')
    assert first.status == 201
    assert_replay_of(p.post(key=key, body=b'{"attempt": 2}'), first)
    assert upstream.total() == 1


# --------------------------------------------------------------------------
# scope, classification, key syntax
# --------------------------------------------------------------------------

def test_same_key_under_two_authorization_values_executes_twice(proxy, upstream):
    key = new_key()
    a = proxy.post(key=key, headers=[("Authorization", "Bearer merchant_a")])
    b = proxy.post(key=key, headers=[("Authorization", "Bearer merchant_b")])
    assert a.status == 201 and b.status == 201
    assert_not_replayed(a)
    assert_not_replayed(b)
    assert a.json()["id"] != b.json()["id"]
    assert upstream.total() == 2
    assert_replay_of(proxy.post(key=key, headers=[("Authorization", "Bearer merchant_a")]), a)
    assert_replay_of(proxy.post(key=key, headers=[("Authorization", "Bearer merchant_b")]), b)
    assert upstream.total() == 2


def test_no_key_passes_through_every_time(proxy, upstream):
    rs = [proxy.post(key=None) for _ in range(3)]
    assert [r.status for r in rs] == [201, 201, 201]
    for r in rs:
        assert_not_replayed(r)
    assert len({r.json()["id"] for r in rs}) == 3
    assert upstream.total() == 3


def test_get_with_key_is_not_protected(proxy, upstream):
    key = new_key()
    for _ in range(3):
        r = proxy.request("GET", "/v1/payments", [("Idempotency-Key", key)])
        assert r.status == 200 and r.json()["object"] == "list"
        assert_not_replayed(r)
    assert upstream.requests() == 3
    assert upstream.total() == 0


def test_put_and_delete_with_key_are_not_protected(proxy, upstream, redis):
    key = new_key()
    for method in ("PUT", "PUT", "DELETE", "DELETE"):
        r = proxy.request(method, "/v1/payments/p1", [("Idempotency-Key", key)], b"{}")
        assert r.status == 201
        assert_not_replayed(r)
    assert upstream.total() == 4
    assert prefixed_keys(redis) == []


def test_unmatched_route_with_key_passes_through(proxy, upstream, redis):
    key = new_key()
    for _ in range(2):
        r = proxy.post("/v2/other", key=key)
        assert r.status == 201
        assert_not_replayed(r)
    assert upstream.total() == 2
    assert prefixed_keys(redis) == []


def test_quoted_and_bare_key_are_one_key(proxy, upstream):
    key = new_key()
    first = proxy.post(key='"%s"' % key)
    assert first.status == 201
    assert_replay_of(proxy.post(key=key), first)
    assert_replay_of(proxy.post(key='"%s"' % key), first)
    assert upstream.total() == 1


def test_keys_are_case_sensitive(proxy, upstream):
    key = "Order-ABC-" + uuid.uuid4().hex.upper()
    a = proxy.post(key=key)
    b = proxy.post(key=key.lower())
    assert a.status == 201 and b.status == 201
    assert_not_replayed(b)
    assert upstream.total() == 2


def test_key_of_max_length_is_accepted(proxy, upstream):
    key = ("x" * 223) + uuid.uuid4().hex  # 255 characters
    assert len(key) == 255
    first = proxy.post(key=key)
    assert first.status == 201
    assert_replay_of(proxy.post(key=key), first)
    assert upstream.total() == 1


INVALID_KEY_HEADERS = {
    "empty": ["Idempotency-Key:"],
    "empty-quoted": ['Idempotency-Key: ""'],
    "too-long": ["Idempotency-Key: " + "a" * 256],
    "too-long-quoted": ['Idempotency-Key: "%s"' % ("a" * 256)],
    "control-character": [b"Idempotency-Key: ab\x01cd"],
    "delete-character": [b"Idempotency-Key: ab\x7fcd"],
    "tab-inside": [b"Idempotency-Key: ab\tcd"],
    "non-ascii": [b"Idempotency-Key: caf\xc3\xa9"],
    "two-header-lines": ["Idempotency-Key: abc", "Idempotency-Key: abc"],
    "two-different-lines": ["Idempotency-Key: abc", "Idempotency-Key: def"],
    "broken-quoted": ['Idempotency-Key: "abc'],
    "broken-quoted-escape": ['Idempotency-Key: "ab\\c"'],
    "junk-after-quoted": ['Idempotency-Key: "abc"x'],
}


@pytest.mark.parametrize("case", sorted(INVALID_KEY_HEADERS))
def test_invalid_key_is_400(proxy, upstream, redis, case):
    lines = INVALID_KEY_HEADERS[case]
    r = proxy.request("POST", "/v1/payments", lines + [("Content-Type", "application/json")],
                      b'{"amount": 1}')
    assert_problem(r, 400, "invalid-key")
    assert upstream.total() == 0
    assert prefixed_keys(redis) == []


def test_require_key_without_key_is_400_missing_key(proxy, upstream):
    r = proxy.post("/v1/strict/charges", key=None)
    assert_problem(r, 400, "missing-key")
    assert upstream.total() == 0
    # with a key it is served
    assert proxy.post("/v1/strict/charges", key=new_key()).status == 201
    # a method the route does not protect needs no key
    assert proxy.request("GET", "/v1/strict/charges").status == 200
    assert upstream.total() == 1


# --------------------------------------------------------------------------
# bodies
# --------------------------------------------------------------------------

def test_body_over_max_request_body_is_413_and_nothing_claimed(start_proxy, upstream, redis):
    p = start_proxy(limits={"max_request_body": "1KiB"})
    key = new_key()
    r = p.post(key=key, body=b"x" * 1025)
    assert_problem(r, 413, "body-too-large")
    assert upstream.total() == 0
    assert prefixed_keys(redis) == []
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
    assert prefixed_keys(redis) == []


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
    keys = prefixed_keys(redis)
    assert keys, "no record in Redis"
    before = {k: (redis.cmd("PTTL", k), redis.cmd("TYPE", k)) for k in keys}
    for k, (pttl, _) in before.items():
        assert pttl > 0, "record %s has no expiry (PTTL %r)" % (k, pttl)
        assert pttl <= 24 * 3600 * 1000 + 1000, "record %s outlives retention" % k
    dumps = {k: redis.cmd("DUMP", k) for k in keys}
    time.sleep(0.05)
    assert_replay_of(proxy.post(key=key), first)
    for k, (pttl, _) in before.items():
        assert 0 < redis.cmd("PTTL", k) <= pttl, "replay changed the TTL of %s" % k
        assert redis.cmd("DUMP", k) == dumps[k], "replay changed record %s" % k
    assert upstream.total() == 1


def test_record_expires_after_retention(start_proxy, upstream):
    p = start_proxy(lease="1s", retention="2s")  # retention may not be shorter than lease
    key = new_key()
    assert p.post(key=key).status == 201
    assert p.post(key=key).replayed
    time.sleep(2.5)
    again = p.post(key=key)
    assert again.status == 201
    assert_not_replayed(again)
    assert upstream.total() == 2


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


# --------------------------------------------------------------------------
# in flight
# --------------------------------------------------------------------------

def test_in_flight_reject_gives_409_with_retry_after(start_proxy, upstream):
    p = start_proxy(in_flight="reject")
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "1500")]
    f = in_background(p.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1)
    r = p.post(key=key, headers=hs)
    assert_problem(r, 409, "request-in-progress")
    assert_retry_after(r)
    assert r.elapsed < 1.0, "reject must not wait: %r" % r
    first = f.result()
    assert first.status == 201
    assert_replay_of(p.post(key=key, headers=hs), first)
    assert upstream.total() == 1


def test_wait_timeout_gives_409_with_retry_after(start_proxy, upstream):
    p = start_proxy(wait_timeout="1s")
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "3000")]
    f = in_background(p.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1)
    r = p.post(key=key, headers=hs)
    assert_problem(r, 409, "request-in-progress")
    assert_retry_after(r)
    assert 0.8 <= r.elapsed < 2.0, "expected ~1 s of waiting: %r" % r
    assert f.result().status == 201
    assert upstream.total() == 1


def test_lease_is_renewed_while_the_upstream_works(start_proxy, upstream):
    p = start_proxy(lease="1s")
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "2500")]
    f = in_background(p.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1)
    time.sleep(1.5)  # past the first lease: only renewal keeps the claim alive
    second = p.post(key=key, headers=hs)
    first = f.result()
    assert first.status == 201
    assert_replay_of(second, first)
    assert upstream.total() == 1


def test_in_flight_wait_across_two_proxies(start_proxy, upstream):
    p1, p2 = start_proxy(), start_proxy()
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "800")]
    f = in_background(p1.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1)
    second = p2.post(key=key, headers=hs)
    first = f.result()
    assert_replay_of(second, first)
    # notified or polled with a bounded backoff: not much later than the first
    assert upstream.total() == 1


# --------------------------------------------------------------------------
# upstream failures
# --------------------------------------------------------------------------

def test_upstream_unreachable_is_502_and_released(start_proxy, upstream_factory):
    port = free_port()
    p = start_proxy(upstream_url="http://127.0.0.1:%d" % port)
    key = new_key()
    r1 = p.post(key=key)
    assert_problem(r1, 502, "upstream-unavailable")
    r2 = p.post(key=key)
    assert_problem(r2, 502, "upstream-unavailable")  # released, not outcome-unknown
    assert not r2.replayed
    up = upstream_factory(port=port)
    ok = p.post(key=key)
    assert ok.status == 201, ok
    assert_replay_of(p.post(key=key), ok)
    assert up.total() == 1


def test_upstream_timeout_is_504_then_outcome_unknown(start_proxy, upstream):
    p = start_proxy(upstream={"timeout": "1s"})
    key = new_key()
    hs = [("X-Demo-Fault", "hang")]
    r = p.post(key=key, headers=hs)
    assert_problem(r, 504, "upstream-timeout")
    assert r.elapsed < 5
    retry = p.post(key=key, headers=hs)
    assert_problem(retry, 502, "outcome-unknown")
    assert retry.header("Idempotent-Replayed") == "true"
    assert upstream.total() == 1


@pytest.mark.parametrize("fault", ["reset", "close"])
def test_upstream_reset_or_close_is_502_then_outcome_unknown(proxy, upstream, fault):
    """The request was sent, then the upstream reset mid-answer or closed without one."""
    key = new_key()
    hs = [("X-Demo-Fault", fault)]
    r = proxy.post(key=key, headers=hs)
    assert r.status == 502 and r.is_problem(), r
    retry = proxy.post(key=key, headers=hs)
    assert_problem(retry, 502, "outcome-unknown")
    assert retry.header("Idempotent-Replayed") == "true"
    assert upstream.total() == 1


def test_on_ambiguous_release_lets_the_retry_execute(start_proxy, upstream):
    p = start_proxy(upstream={"timeout": "1s"}, on_ambiguous="release")
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "2000")]
    assert_problem(p.post(key=key, headers=hs), 504, "upstream-timeout")
    r = p.post(key=key)  # same fingerprint (X-Demo-* headers are not part of it)
    assert r.status == 201, r
    assert_not_replayed(r)
    assert upstream.total() == 2


def test_never_two_sends_on_a_dead_reused_upstream_connection(start_proxy, upstream_factory):
    up = upstream_factory(["--close-reused"])
    p = start_proxy(upstream_url=up.url)
    bodies = [('{"n": %d, "u": "%s"}' % (i, uuid.uuid4().hex)).encode() for i in range(6)]
    keys = [new_key() for _ in bodies]
    answers = []
    for k, b in zip(keys, bodies):
        answers.append(p.post(key=k, body=b))
        time.sleep(0.05)
    for b, r in zip(bodies, answers):
        assert executions_of_body(up, b) == 1, \
            "protected request sent upstream %d times: %r" % (executions_of_body(up, b), r)
        assert r.status in (201, 502), r
    # the upstream closed a reused connection under at least one of them: the case was exercised
    assert any(r.status == 502 for r in answers), [r.status for r in answers]
    # retries never execute again either
    for k, b in zip(keys, bodies):
        p.post(key=k, body=b)
    assert up.total() == len(bodies)


def test_unix_socket_upstream(start_proxy, upstream_factory, tmp_path):
    path = str(tmp_path / "payments.sock")
    up = upstream_factory(unix_path=path)
    p = start_proxy(upstream_url="unix:" + path)
    key = new_key()
    first = p.post(key=key)
    assert first.status == 201, first
    assert_replay_of(p.post(key=key), first)
    assert up.total() == 1


# --------------------------------------------------------------------------
# clients and proxies that go away
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
    time.sleep(1.2)  # the upstream exchange finishes and is recorded
    retry = proxy.post(key=key, body=body, headers=[("X-Demo-Delay-Ms", "800")])
    assert retry.status == 201
    assert retry.header("Idempotent-Replayed") == "true"
    assert retry.json()["id"] == "ord_1"
    assert upstream.total() == 1


@pytest.mark.slow
def test_proxy_crash_mid_flight_is_outcome_unknown_after_the_lease(start_proxy, upstream):
    p1 = start_proxy(lease="1s")
    p2 = start_proxy(lease="1s")
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "3000")]
    f = in_background(p1.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1)
    p1.kill()
    with pytest.raises((HTTPError, OSError)):
        f.result()
    time.sleep(1.6)  # the lease runs out
    r = p2.post(key=key, headers=hs)
    assert_problem(r, 502, "outcome-unknown")
    assert r.header("Idempotent-Replayed") == "true"
    assert upstream.total() == 1


@pytest.mark.slow
def test_proxy_crash_with_on_ambiguous_release_is_taken_over_once(start_proxy, upstream):
    p1 = start_proxy(lease="1s", on_ambiguous="release")
    p2 = start_proxy(lease="1s", on_ambiguous="release")
    key = new_key()
    f = in_background(p1.post, key=key, headers=[("X-Demo-Delay-Ms", "3000")])
    wait_until(lambda: upstream.total() == 1)
    p1.kill()
    with pytest.raises((HTTPError, OSError)):
        f.result()
    time.sleep(1.6)
    rs = concurrently(8, lambda i: p2.post(key=key, headers=[("X-Demo-Delay-Ms", "300")]))
    assert upstream.total() == 2, "the take-over must execute exactly once"
    assert {r.status for r in rs} == {201}, rs
    assert sum(not r.has_header("Idempotent-Replayed") for r in rs) == 1
    assert len({r.body for r in rs}) == 1


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
    """A large answer still queued for a slow reader when the last exchange ends: the drain
    must not exit (and close the connection) before it is written whole."""
    size = 8 * 1024 * 1024
    p = start_proxy()
    with socket.create_connection(("127.0.0.1", p.port), timeout=30) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        s.sendall(build_request("POST", "/v1/exports", [("X-Demo-Size", str(size)),
                                                        ("X-Demo-Delay-Ms", "300")], b"{}"))
        wait_until(lambda: upstream.total() == 1)
        p.signal(signal.SIGTERM)
        time.sleep(1.5)  # the answer is queued; nothing reads it yet
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
        time.sleep(0.3)
        late = c.request("POST", "/v1/payments", [("Idempotency-Key", new_key()),
                                                  ("Content-Type", "application/json")],
                         b'{"amount": 1}')
    assert_problem(late, 503, "shutting-down")
    assert (late.header("Connection") or "").lower() == "close"
    assert late.header("Retry-After")
    assert slow.result().status == 201
    assert upstream.total() == 1
    assert p.wait(15) == 0


@pytest.mark.parametrize("spelling", ["//v1/payments", "/V1/payments", "/v1/x/../payments",
                                      "/v1/payment%73", "/v1/payments/", "/v1/./payments"])
def test_other_spellings_of_a_protected_path_are_protected(start_proxy, upstream, spelling):
    p = start_proxy(routes=[{"path": "/v1/payments", "require_key": True}])
    assert_problem(p.post(path=spelling), 400, "missing-key")
    key = new_key()
    assert p.post(key=key).status == 201
    again = p.post(path=spelling, key=key)
    # same record: a replay, or a mismatch when the raw target differs; never a second run
    assert again.status in (201, 409), again
    assert again.status == 409 or again.replayed
    assert upstream.executions(key) == 1


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


def test_absolute_form_target_is_protected_and_forwarded_in_origin_form(proxy, upstream):
    """RFC 9112 3.2.2: a server must accept absolute-form; the upstream gets origin-form."""
    key = new_key()
    target = "http://payments.example/v1/payments?currency=eur"
    first = proxy.post(path=target, key=key)
    assert first.status == 201, first
    last = upstream.last_request()
    assert (last["path"], last["query"]) == ("/v1/payments", "currency=eur"), last
    # the same request in origin-form is the same record: a replay, not a second run
    assert_replay_of(proxy.post(path="/v1/payments?currency=eur", key=key), first)
    assert upstream.executions(key) == 1


@pytest.mark.parametrize("target", [b"/v1/pay\x01ments", b"/v1/payments?a=\x7f", b"*"])
def test_control_character_or_asterisk_target_is_a_problem(proxy, upstream, target):
    raw = (b"POST " + target + b" HTTP/1.1\r\nHost: x\r\nIdempotency-Key: " +
           new_key().encode() + b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
    r = http_request(proxy.port, raw=raw)
    assert_problem(r, 400, "invalid-target")
    assert upstream.total() == 0


def test_unsigned_webhook_on_another_spelling_is_refused(start_proxy, upstream):
    p = start_proxy(routes=[{"path": "/hooks/stripe", "key_from": "json:/id",
                             "verify": "stripe", "secret": "whsec_x_test_secret"}])
    for path in ("/hooks/stripe/", "//hooks/stripe", "/Hooks/stripe", "/hooks/stripe;x",
                 "/hooks/%73tripe"):
        assert_problem(p.request("POST", path, [("Content-Type", "application/json")],
                                 b'{"id": "evt_forged"}'), 401, "signature-invalid")
    assert upstream.total() == 0


def test_sighup_refuses_a_change_of_record_identity(start_proxy, upstream, redis):
    p = start_proxy(routes=[{"path": "/v1/payments*"}])
    key = new_key()
    first = p.post(key=key, headers=[("Authorization", "Bearer a")])
    assert first.status == 201
    # a scope change is refused; a new route pattern with the same identity is not (record
    # ids do not depend on which route matched), and the retry still replays after both
    for routes, scope, marker in (
            ([{"path": "/v1/payments*"}], ["Authorization", "X-Tenant"], "reload refused"),
            ([{"path": "/v1/pay*"}], ["Authorization"], "reloaded")):
        cfg = build_config(p.port, p.admin_port, upstream.url, redis.url, routes=routes)
        cfg.setdefault("defaults", {})["scope_headers"] = scope
        with open(p.config_path, "w") as f:
            f.write(to_yaml(cfg) + "\n")
        p.signal(signal.SIGHUP)
        wait_until(lambda: marker in p.stderr_text(), what=marker)
        assert_replay_of(p.post(key=key, headers=[("Authorization", "Bearer a")]), first)
    assert upstream.executions(key) == 1


# --------------------------------------------------------------------------
# Redis trouble
# --------------------------------------------------------------------------

def test_readyz_stays_503_while_redis_is_stalled(start_proxy, redis):
    """A command that times out drops the connection; the kernel completes the new one's
    TCP handshake for a stopped Redis too, but the instance is ready only once Redis answers."""
    p = start_proxy(redis={"timeout": "300ms"})
    wait_until(lambda: p.admin("GET", "/readyz").status == 200, what="ready")
    redis.pause()
    try:
        assert_problem(p.post(key=new_key()), 503, "store-unavailable")
        seen = set()
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:  # reconnects happen in here
            seen.add(p.admin("GET", "/readyz").status)
            time.sleep(0.05)
        assert seen == {503}, seen
    finally:
        redis.resume()
    wait_until(lambda: p.admin("GET", "/readyz").status == 200, timeout=10, what="ready again")
    assert p.post(key=new_key()).status == 201


def test_readyz_notices_a_stalled_redis_without_traffic(start_proxy, redis):
    """An idle connection gets a timed PING every second, so readiness does not wait for a
    client request to find out."""
    p = start_proxy(redis={"timeout": "300ms"})
    wait_until(lambda: p.admin("GET", "/readyz").status == 200, what="ready")
    redis.pause()
    try:
        wait_until(lambda: p.admin("GET", "/readyz").status == 503, timeout=5,
                   what="503 with no client traffic")
    finally:
        redis.resume()
    wait_until(lambda: p.admin("GET", "/readyz").status == 200, timeout=10, what="ready again")


def test_sigterm_waits_to_release_the_claim_of_a_refused_request(start_proxy, upstream, redis):
    """A request refused with 503 while Redis stalled leaves a claim that lands when Redis
    resumes. Exiting before releasing it would leave a record that reads as "outcome
    unknown" once its lease ends, for a request that never reached the upstream."""
    p = start_proxy(redis={"timeout": "300ms"})
    key = new_key()
    # every worker's connection set up: a claim queued behind a setup is never sent, so
    # it would leave nothing to release
    wait_until(lambda: p.admin("GET", "/readyz").status == 200, what="ready")
    redis.pause()
    try:
        assert_problem(p.post(key=key), 503, "store-unavailable")
        p.signal(signal.SIGTERM)
        time.sleep(1.0)
        assert p.alive(), "exited with a claim still to release"
    finally:
        redis.resume()
    assert p.wait(15) == 0
    assert redis.keys("idem:*") == []
    retry = start_proxy().post(key=key)
    assert retry.status == 201 and not retry.replayed, retry
    assert upstream.executions(key) == 1


def test_claim_that_lands_after_a_redis_stall_is_released(proxy, upstream, redis):
    """The claim of a request refused with 503 (Redis stalled past redis.timeout) reaches
    Redis when it resumes; nothing was forwarded, so the proxy releases it and the retry
    executes, instead of waiting out the lease and then reading "outcome unknown"."""
    key = new_key()
    redis.pause()
    try:
        assert_problem(proxy.post(key=key), 503, "store-unavailable")
    finally:
        redis.resume()
    time.sleep(0.3)
    wait_until(lambda: proxy.post(key=key).status == 201, timeout=8, interval=0.5,
               what="the retry executes once the orphaned claim is released")
    assert upstream.executions(key) == 1
    assert_replay_of(proxy.post(key=key), proxy.post(key=key))


def test_claim_that_lands_after_a_stall_longer_than_the_lease_is_released(start_proxy,
                                                                          upstream, redis):
    """The same with Redis stopped longer than the lease: the release was given up when
    the lease ended, so the claim (never forwarded) then read as "outcome unknown" (hold)
    for its whole retention. The janitor keeps trying for the claim's retention."""
    p = start_proxy(lease="1s", on_ambiguous="hold", redis={"timeout": "300ms"})
    wait_until(lambda: p.admin("GET", "/readyz").status == 200, what="ready")
    key = new_key()
    redis.pause()
    try:
        assert_problem(p.post(key=key), 503, "store-unavailable")
        time.sleep(4.5)  # well past the lease, and past the janitor's old give-up
    finally:
        redis.resume()
    wait_until(lambda: p.post(key=key).status == 201, timeout=8, interval=0.5,
               what="the retry executes once the orphaned claim is released")
    assert upstream.executions(key) == 1
    assert "gave up releasing" not in p.stderr_text()


def test_redis_keys_have_a_hash_tag_and_never_the_raw_key(proxy, upstream, redis):
    key = "RAW-CLIENT-KEY-" + uuid.uuid4().hex
    token = "Bearer sk_live_" + uuid.uuid4().hex
    assert proxy.post(key=key, headers=[("Authorization", token)]).status == 201
    keys = redis.keys("*")
    ours = prefixed_keys(redis)
    assert ours, "no record key with the prefix: %r" % keys
    for k in ours:
        assert re.search(r"\{[^{}]+\}", k), "no {hash tag} in %r" % k
    for k in keys:
        assert key not in str(k) and token not in str(k) and "sk_live_" not in str(k), k


def test_redis_syntax_in_keys_is_harmless(proxy, upstream, redis):
    key = "a b\\r\\nFLUSHALL * {x} $3 \\ 'q' ;"  # a quote would make it an sf-string
    first = proxy.post(key=key)
    assert first.status == 201
    assert_replay_of(proxy.post(key=key), first)
    assert prefixed_keys(redis)
    assert upstream.total() == 1


def test_key_prefix_from_environment(start_proxy, upstream, redis):
    p = start_proxy(redis={"key_prefix": "${IDEM_TEST_PREFIX}"},
                    env={"IDEM_TEST_PREFIX": "acmepay"})
    assert p.post(key=new_key()).status == 201
    ours = prefixed_keys(redis, "acmepay")
    assert ours and all(k.startswith("acmepay") for k in redis.keys("*")), redis.keys("*")


def test_redis_down_at_startup_is_not_fatal(start_proxy, upstream, redis):
    redis.stop()
    p = start_proxy()
    r = p.post(key=new_key())
    assert_problem(r, 503, "store-unavailable")
    assert_retry_after(r)
    assert upstream.total() == 0
    # a keyless request to an unprotected path still passes through
    plain = p.post("/v2/other", key=None)
    assert plain.status == 201
    assert upstream.total() == 1
    assert p.admin("GET", "/readyz").status == 503
    assert p.admin("GET", "/healthz").status == 200
    # served normally as soon as Redis is back
    redis.start()
    key = new_key()
    ok = wait_until(lambda: (lambda r: r if r.status == 201 else None)(p.post(key=key)),
                    timeout=10, interval=0.2, what="keyed request served after Redis start")
    assert_replay_of(p.post(key=key), ok)
    wait_until(lambda: p.admin("GET", "/readyz").status == 200, timeout=10, what="readyz 200")


def test_redis_stopped_rejects_keyed_requests_with_503(proxy, upstream, redis):
    assert proxy.post(key=new_key()).status == 201
    redis.stop()
    r = proxy.post(key=new_key())
    assert_problem(r, 503, "store-unavailable")
    assert_retry_after(r)
    assert r.elapsed < 5
    assert upstream.total() == 1
    assert proxy.post(key=None).status == 201  # keyless still passes


def test_redis_paused_times_out_to_503_and_recovers(proxy, upstream, redis):
    k0 = new_key()
    first = proxy.post(key=k0)
    assert first.status == 201
    redis.pause()
    try:
        r = proxy.post(key=new_key())
        assert_problem(r, 503, "store-unavailable")
        assert r.elapsed < 4, "redis.timeout is 500ms: %r" % r
    finally:
        redis.resume()
    assert upstream.total() == 1
    # no stale replies are matched to new commands
    time.sleep(0.3)
    k1 = new_key()
    ok = wait_until(lambda: (lambda r: r if r.status == 201 else None)(
        proxy.post(key=k1, body=b'{"after": "pause"}')), timeout=10, interval=0.2)
    assert ok.json()["body_sha256"] == hashlib.sha256(b'{"after": "pause"}').hexdigest()
    assert_replay_of(proxy.post(key=k1, body=b'{"after": "pause"}'), ok)
    assert_replay_of(proxy.post(key=k0), first)


def test_on_store_error_pass_forwards_unprotected(start_proxy, upstream, redis):
    p = start_proxy(on_store_error="pass")
    redis.stop()
    key = new_key()
    a, b = p.post(key=key), p.post(key=key)
    assert a.status == 201 and b.status == 201
    assert_not_replayed(b)
    assert upstream.total() == 2


def test_redis_restart_with_empty_script_cache_is_served_normally(proxy, upstream, redis):
    assert proxy.post(key=new_key()).status == 201  # scripts loaded
    redis.stop()
    redis.start()  # a new Redis: empty, no scripts
    key = new_key()
    ok = wait_until(lambda: (lambda r: r if r.status == 201 else None)(proxy.post(key=key)),
                    timeout=10, interval=0.2, what="served after the Redis restart")
    assert_replay_of(proxy.post(key=key), ok)
    assert_problem(proxy.post(key=key, body=b"other"), 409, "key-reuse-mismatch")


def test_redis_fails_after_the_upstream_answered_client_still_gets_it(start_proxy, upstream,
                                                                     redis):
    p = start_proxy(lease="2s")
    key = new_key()
    f = in_background(p.post, key=key, headers=[("X-Demo-Delay-Ms", "1000")])
    wait_until(lambda: upstream.total() == 1)
    redis.pause()
    try:
        r = f.result()
        assert r.status == 201, r
        assert r.json()["id"] == "ord_1"
    finally:
        redis.resume()
    # the store may still be reconnecting: 503 is fine, a second execution is not
    retry = wait_until(lambda: (lambda r: r if r.status != 503 else None)(p.post(key=key)),
                       timeout=10, interval=0.2, what="an answer other than 503")
    assert retry.status in (201, 409, 502), retry
    if retry.status == 201:
        assert retry.replayed
    assert upstream.total() == 1


# --------------------------------------------------------------------------
# problem answers
# --------------------------------------------------------------------------

def test_problem_answers_have_type_title_status_detail(start_proxy, upstream):
    p = start_proxy(limits={"max_request_body": "1KiB"})
    key = new_key()
    assert p.post(key=key).status == 201
    cases = [
        (p.post("/v1/strict", key=None), 400, "missing-key"),
        (p.request("POST", "/v1/payments", ["Idempotency-Key: \"x"], b"{}"), 400, "invalid-key"),
        (p.post(key=new_key(), body=b"x" * 2048), 413, "body-too-large"),
        (p.post(key=key, body=b"different"), 409, "key-reuse-mismatch"),
    ]
    for r, status, cause in cases:
        doc = assert_problem(r, status, cause)
        assert key not in json.dumps(doc), "problem leaks the key: %r" % doc


# --------------------------------------------------------------------------
# operations
# --------------------------------------------------------------------------

def test_admin_healthz_readyz_metrics(proxy, upstream):
    assert proxy.admin("GET", "/healthz").status == 200
    assert proxy.admin("GET", "/readyz").status == 200
    assert proxy.post(key=new_key()).status == 201
    m = proxy.admin("GET", "/metrics")
    assert m.status == 200
    text = m.body.decode()
    assert "# TYPE" in text, text[:500]
    # an unmatched GET on the request port is a plain pass-through
    assert proxy.request("GET", "/_demo/stats").status == 200


def test_access_log_never_contains_the_raw_key_body_or_authorization(proxy, upstream):
    key = "LOGGED-KEY-" + uuid.uuid4().hex
    token = "Bearer sk_live_" + uuid.uuid4().hex
    secret_body = ('{"card": "4242424242424242", "n": "%s"}' % uuid.uuid4().hex).encode()
    n = 0
    for _ in range(2):
        assert proxy.post(key=key, body=secret_body, headers=[("Authorization", token)]).status \
            == 201
        n += 1
    proxy.post(key=key, body=b"mismatch", headers=[("Authorization", token)])
    n += 1
    time.sleep(0.3)
    text = proxy.stdout_text() + proxy.stderr_text()
    assert key not in text
    assert token not in text and "sk_live_" not in text
    assert "4242424242424242" not in text
    lines = json_lines(text)
    assert len(lines) >= n, "expected one JSON access log line per request:\n%s" % text[-2000:]


def find_record_id(proxy):
    """The record id the access log printed for the latest protected request."""
    for doc in reversed(json_lines(proxy.stdout_text() + proxy.stderr_text())):
        for k, v in doc.items():
            if "record" in k.lower() and isinstance(v, str) and v:
                return v
    return None


def test_admin_inspect_and_purge_an_outcome_unknown_record(start_proxy, upstream):
    p = start_proxy(upstream={"timeout": "1s"})
    key = new_key()
    assert_problem(p.post(key=key, headers=[("X-Demo-Fault", "hang")]), 504, "upstream-timeout")
    assert_problem(p.post(key=key), 502, "outcome-unknown")
    time.sleep(0.2)
    rid = find_record_id(p)
    assert rid, "no record id in the access log:\n%s" % (p.stdout_text() + p.stderr_text())[-2000:]
    info = p.admin("GET", "/records/" + rid)
    assert info.status == 200, info
    assert key not in info.body.decode(errors="replace")
    d = p.admin("DELETE", "/records/" + rid)
    assert d.status in (200, 202, 204), d
    r = p.post(key=key)
    assert r.status == 201, r
    assert_not_replayed(r)
    assert upstream.total() == 2


def test_sighup_reloads_routes_and_keeps_the_old_config_when_invalid(start_proxy, upstream,
                                                                     redis):
    p = start_proxy(routes=[{"path": "/v1/payments*"}])
    assert p.post(key=None).status == 201
    cfg = build_config(p.port, p.admin_port, upstream.url, redis.url,
                       routes=[{"path": "/v1/payments*", "require_key": True}])
    with open(p.config_path, "w") as f:
        f.write(to_yaml(cfg) + "\n")
    # a connection opened before the reload keeps working
    with Connection(p.port) as c:
        assert c.request("GET", "/v1/payments").status == 200
        p.signal(signal.SIGHUP)
        wait_until(lambda: p.post(key=None).status == 400, timeout=5,
                   what="require_key after SIGHUP")
        assert c.request("GET", "/v1/payments").status == 200
    assert_problem(p.post(key=None), 400, "missing-key")
    with open(p.config_path, "w") as f:
        f.write("listen: 127.0.0.1:%d\nbogus: [\n" % p.port)
    p.signal(signal.SIGHUP)
    time.sleep(0.5)
    assert p.alive()
    assert_problem(p.post(key=None), 400, "missing-key")
    assert p.post(key=new_key()).status == 201


# --------------------------------------------------------------------------
# webhooks
# --------------------------------------------------------------------------

def test_github_webhook_signature_and_duplicate_delivery(start_proxy, upstream, redis):
    secret = "gh-" + uuid.uuid4().hex
    p = start_proxy(routes=[{"path": "/hooks/github", "key_from": "header:X-GitHub-Delivery",
                             "verify": "github", "secret": "${GH_SECRET}"}],
                    env={"GH_SECRET": secret})
    delivery = str(uuid.uuid4())
    body = b'{"action": "completed", "zen": "Keep it logically awesome."}'

    def sig(b, s=secret):
        return "sha256=" + hmac.new(s.encode(), b, hashlib.sha256).hexdigest()

    base = [("X-GitHub-Delivery", delivery), ("X-GitHub-Event", "check_run"),
            ("Content-Type", "application/json")]
    bad = p.request("POST", "/hooks/github", base + [("X-Hub-Signature-256", sig(body, "nope"))],
                    body)
    assert_problem(bad, 401, "signature-invalid")
    missing = p.request("POST", "/hooks/github", base, body)
    assert_problem(missing, 401, "signature-invalid")
    assert upstream.total() == 0
    assert prefixed_keys(redis) == []  # nobody can pre-claim an event id
    first = p.request("POST", "/hooks/github", base + [("X-Hub-Signature-256", sig(body))], body)
    assert first.status == 201
    dup = p.request("POST", "/hooks/github", base + [("X-Hub-Signature-256", sig(body))], body)
    assert_replay_of(dup, first)
    assert upstream.total() == 1


def test_stripe_webhook_key_from_json_and_tolerance(start_proxy, upstream):
    secret = "whsec_" + uuid.uuid4().hex
    p = start_proxy(routes=[{"path": "/hooks/stripe", "key_from": "json:/id",
                             "verify": "stripe", "secret": "${STRIPE_SECRET}"}],
                    env={"STRIPE_SECRET": secret})
    evt = "evt_" + uuid.uuid4().hex

    def deliver(body, t=None):
        t = int(time.time()) if t is None else t
        mac = hmac.new(secret.encode(), b"%d." % t + body, hashlib.sha256).hexdigest()
        return p.request("POST", "/hooks/stripe",
                         [("Stripe-Signature", "t=%d,v1=%s" % (t, mac)),
                          ("Content-Type", "application/json")], body)

    b1 = json.dumps({"id": evt, "type": "payment_intent.succeeded",
                     "request": {"idempotency_key": None}, "pending_webhooks": 2}).encode()
    old = deliver(b1, int(time.time()) - 600)
    assert_problem(old, 401, "signature-invalid")
    first = deliver(b1)
    assert first.status == 201
    # Stripe changes the body between deliveries (pending_webhooks): still a duplicate
    b2 = json.dumps({"id": evt, "type": "payment_intent.succeeded",
                     "request": {"idempotency_key": None}, "pending_webhooks": 1}).encode()
    assert_replay_of(deliver(b2), first)
    other = deliver(json.dumps({"id": evt + "x", "type": "charge.refunded"}).encode())
    assert other.status == 201 and not other.replayed
    assert upstream.total() == 2


def stripe_delivery(p, secret, body, path="/hooks/stripe", headers=()):
    t = int(time.time())
    mac = hmac.new(secret.encode(), b"%d." % t + body, hashlib.sha256).hexdigest()
    return p.request("POST", path, [("Stripe-Signature", "t=%d,v1=%s" % (t, mac)),
                                    ("Content-Type", "application/json")] + list(headers), body)


def test_webhook_without_a_usable_event_id_is_400_and_nothing_claimed(start_proxy, upstream,
                                                                      redis):
    secret = "whsec_" + uuid.uuid4().hex
    p = start_proxy(routes=[{"path": "/hooks/stripe", "key_from": "json:/id",
                             "verify": "stripe", "secret": secret},
                            {"path": "/hooks/github", "key_from": "header:X-GitHub-Delivery",
                             "verify": "github", "secret": secret}])
    assert_problem(stripe_delivery(p, secret, b'{"type": "charge.succeeded"}'), 400,
                   "missing-key")
    assert_problem(stripe_delivery(p, secret, b'{"id": 42}'), 400, "invalid-key")
    assert_problem(stripe_delivery(p, secret, b'{"id": ""}'), 400, "invalid-key")
    assert_problem(stripe_delivery(p, secret, b'not json'), 400, "missing-key")
    body = b'{"action": "opened"}'
    sig = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    no_id = p.request("POST", "/hooks/github", [("X-Hub-Signature-256", sig)], body)
    assert_problem(no_id, 400, "missing-key")
    assert upstream.total() == 0
    assert prefixed_keys(redis) == []


def test_webhook_failure_answer_is_not_recorded_so_the_redelivery_executes(start_proxy,
                                                                           upstream):
    """A receiver's 500 must not be replayed to the provider's retries (README "Webhooks")."""
    secret = "whsec_" + uuid.uuid4().hex
    p = start_proxy(routes=[{"path": "/hooks/stripe", "key_from": "json:/id",
                             "verify": "stripe", "secret": secret}])
    body = json.dumps({"id": "evt_" + uuid.uuid4().hex}).encode()
    failed = stripe_delivery(p, secret, body, headers=[("X-Demo-Status", "500")])
    assert failed.status == 500 and not failed.replayed
    ok = stripe_delivery(p, secret, body)
    assert ok.status == 201 and not ok.replayed
    assert_replay_of(stripe_delivery(p, secret, body), ok)
    assert upstream.total() == 2


def test_standard_webhooks_secret_rotation(start_proxy, upstream):
    old_raw, new_raw = os.urandom(24), os.urandom(24)
    old = "whsec_" + base64.b64encode(old_raw).decode()
    new = "whsec_" + base64.b64encode(new_raw).decode()
    p = start_proxy(routes=[{"path": "/hooks/std", "key_from": "header:webhook-id",
                             "verify": "standard-webhooks",
                             "secret": ["${WH_OLD}", "${WH_NEW}"]}],
                    env={"WH_OLD": old, "WH_NEW": new})

    def deliver(msg_id, body, raw):
        ts = str(int(time.time()))
        mac = hmac.new(raw, ("%s.%s." % (msg_id, ts)).encode() + body, hashlib.sha256).digest()
        return p.request("POST", "/hooks/std",
                         [("webhook-id", msg_id), ("webhook-timestamp", ts),
                          ("webhook-signature", "v1," + base64.b64encode(mac).decode()),
                          ("Content-Type", "application/json")], body)

    m1, m2 = "msg_" + uuid.uuid4().hex, "msg_" + uuid.uuid4().hex
    body = b'{"type": "invoice.paid"}'
    assert_problem(deliver(m1, body, os.urandom(24)), 401, "signature-invalid")
    a = deliver(m1, body, old_raw)
    assert a.status == 201
    b = deliver(m2, body, new_raw)
    assert b.status == 201
    assert_replay_of(deliver(m1, body, new_raw), a)
    assert upstream.total() == 2


# --------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------

def good_config_text():
    return to_yaml(build_config(free_port(), free_port(), "http://127.0.0.1:3000",
                                "redis://127.0.0.1:6379/0")) + "\n"


def test_cli_check_good_config(tmp_path):
    require_binary()
    path = tmp_path / "good.yaml"
    path.write_text(good_config_text())
    rc, out, err = run_bin(["-t", "-c", str(path)])
    assert rc == 0, (out, err)
    assert "configuration OK" in out + err


BAD_CONFIGS = {
    # name: (text, line of the error)
    "unknown-key": ("listen: 127.0.0.1:8080\nadmin_listen: \"\"\nbogus_key: 1\n"
                    "upstream:\n  url: http://127.0.0.1:3000\n", 3),
    "duplicate-key": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                      "  url: http://127.0.0.1:3001\n", 4),
    "wrong-type": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                   "defaults:\n  require_key: maybe\n", 5),
    "bad-duration": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                     "defaults:\n  lease: 10 parsecs\n", 5),
    "bad-size": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                 "limits:\n  max_request_body: 1GB\n", 5),
    "bad-mismatch-status": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                            "defaults:\n  mismatch_status: 418\n", 5),
    "bad-upstream-scheme": ("listen: 127.0.0.1:8080\nupstream:\n  url: ftp://127.0.0.1:3000\n", 3),
    "bad-in-flight": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                      "defaults:\n  in_flight: sometimes\n", 5),
    "bad-method": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                   "routes:\n  - path: /v1/payments*\n    methods: [POST, FETCH]\n", 6),
    "bad-listen": ("listen: 127.0.0.1:99999\nupstream:\n  url: http://127.0.0.1:3000\n", 1),
    "unknown-route-key": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                          "routes:\n  - path: /v1/payments*\n    requires_key: true\n", 6),
    "zero-workers": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                     "workers: 0\n", 4),
    "too-many-workers": ("listen: 127.0.0.1:8080\nworkers: 65\n", 2),
    "bad-workers": ("listen: 127.0.0.1:8080\nworkers: two\n", 2),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_cli_check_bad_config_reports_the_line(tmp_path, case):
    require_binary()
    text, line = BAD_CONFIGS[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    rc, out, err = run_bin(["-t", "-c", str(path)])
    assert rc == 1, (rc, out, err)
    assert (":%d:" % line) in out + err, (out, err)
    assert "configuration OK" not in out + err


def test_cli_version():
    require_binary()
    rc, out, err = run_bin(["-V"])
    assert rc == 0, (out, err)
    assert re.search(r"\d+\.\d+(\.\d+)?", out + err), (out, err)


def test_cli_help():
    require_binary()
    rc, out, err = run_bin(["-h"])
    assert rc == 0, (out, err)
    assert "-c" in out + err


def test_bad_config_at_startup_fails_with_one_line(tmp_path):
    require_binary()
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_CONFIGS["unknown-key"][0])
    rc, out, err = run_bin(["-c", str(path)])
    assert rc != 0
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and ":3:" in lines[0], err


@pytest.mark.parametrize("workers", [1, 2])
def test_listen_port_in_use_fails_with_one_line(tmp_path, workers):
    """Also with several workers, whose own sockets share the port (SO_REUSEPORT)."""
    require_binary()
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        cfg = build_config(port, free_port(), "http://127.0.0.1:3000",
                           "redis://127.0.0.1:%d/0" % free_port(), workers=workers)
        path = tmp_path / "inuse.yaml"
        path.write_text(to_yaml(cfg) + "\n")
        rc, out, err = run_bin(["-c", str(path)], timeout=20)
    assert rc != 0, (out, err)
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1, "expected one clear line on stderr, got:\n" + err
    assert str(port) in lines[0] or "in use" in lines[0].lower(), lines[0]


def test_unparsable_redis_url_fails_at_startup(tmp_path):
    require_binary()
    cfg = build_config(free_port(), free_port(), "http://127.0.0.1:3000",
                       "redis://127.0.0.1:notaport/0")
    path = tmp_path / "badredis.yaml"
    path.write_text(to_yaml(cfg) + "\n")
    rc, out, err = run_bin(["-c", str(path)], timeout=20)
    assert rc != 0, (out, err)
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1, err


# --------------------------------------------------------------------------
# more of the protected path
# --------------------------------------------------------------------------

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


def test_upstream_exchanges_run_concurrently(proxy, upstream):
    n = 16
    t = time.monotonic()
    rs = concurrently(n, lambda i: proxy.post(key=new_key(),
                                              headers=[("X-Demo-Delay-Ms", "700")]))
    elapsed = time.monotonic() - t
    assert all(r.status == 201 for r in rs), rs
    assert elapsed < 3.5, "%d requests of 0.7 s took %.1f s: exchanges are serialised" % (
        n, elapsed)


def test_same_key_on_two_routes_is_a_mismatch(proxy, upstream):
    # a record id does not depend on the route (README "Redis records"); the fingerprint
    # holds the path, so one key on another route's path is a reused key, not a new one
    key = new_key()
    a = proxy.post("/v1/payments", key=key)
    b = proxy.post("/v1/strict", key=key)
    assert a.status == 201
    assert_problem(b, 409, "key-reuse-mismatch")
    assert upstream.total() == 1


def test_key_header_name_is_case_insensitive(proxy, upstream):
    key = new_key()
    first = proxy.request("POST", "/v1/payments", [("idempotency-key", key)], b"{}")
    again = proxy.request("POST", "/v1/payments", [("IDEMPOTENCY-KEY", key)], b"{}")
    assert first.status == 201
    assert_replay_of(again, first)
    assert upstream.total() == 1


def test_custom_key_header_and_methods(start_proxy, upstream):
    p = start_proxy(routes=[{"path": "/v1/payments*", "key_header": "X-Request-Key",
                             "methods": ["POST", "PUT"]}])
    key = new_key()
    first = p.request("PUT", "/v1/payments/p1", [("X-Request-Key", key)], b"{}")
    assert first.status == 201
    assert_replay_of(p.request("PUT", "/v1/payments/p1", [("X-Request-Key", key)], b"{}"),
                     first)
    # Idempotency-Key means nothing on this route
    k2 = new_key()
    assert not p.post(key=k2).replayed
    assert not p.post(key=k2).replayed
    # PATCH is not protected here
    k3 = new_key()
    for _ in range(2):
        r = p.request("PATCH", "/v1/payments/p1", [("X-Request-Key", k3)], b"{}")
        assert r.status == 201 and not r.replayed
    assert upstream.total() == 5


def test_empty_scope_headers_share_keys_across_authorization(start_proxy, upstream):
    p = start_proxy(scope_headers=[])
    key = new_key()
    a = p.post(key=key, headers=[("Authorization", "Bearer a")])
    b = p.post(key=key, headers=[("Authorization", "Bearer b")])
    assert a.status == 201
    assert_replay_of(b, a)
    assert upstream.total() == 1


def test_several_scope_headers(start_proxy, upstream):
    p = start_proxy(scope_headers=["Authorization", "X-Tenant"])
    key = new_key()
    auth = [("Authorization", "Bearer a")]
    r1 = p.post(key=key, headers=auth + [("X-Tenant", "t1")])
    r2 = p.post(key=key, headers=auth + [("X-Tenant", "t2")])
    r3 = p.post(key=key, headers=auth + [("X-Tenant", "t1")])
    assert r1.status == 201 and r2.status == 201
    assert_not_replayed(r2)
    assert_replay_of(r3, r1)
    assert upstream.total() == 2


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
    assert prefixed_keys(redis) == []


def test_slow_client_body(proxy, upstream):
    key = new_key()
    body = b'{"amount": 31415}'
    data = build_request("POST", "/v1/payments", [("Idempotency-Key", key)], body)
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=15) as s:
        for i in range(0, len(data), 7):
            s.sendall(data[i:i + 7])
            time.sleep(0.03)
        r = read_response(s, "POST")
    assert r.status == 201
    assert r.json()["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert_replay_of(proxy.post(key=key, body=body), r)


def test_head_and_options_pass_through(proxy, upstream):
    assert proxy.request("HEAD", "/v1/payments", [("Idempotency-Key", "x")]).status == 200
    assert proxy.request("OPTIONS", "/v1/payments", [("Idempotency-Key", "x")]).status == 200
    assert upstream.requests() == 2 and upstream.total() == 0


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
    time.sleep(0.2)
    p.signal(signal.SIGTERM)
    first, second = f1.result(), f2.result()
    assert first.status == 201
    assert_replay_of(second, first)
    assert p.wait(15) == 0


def test_upstream_connect_timeout_is_502_and_released(start_proxy):
    # a listener that never accepts, its backlog full: SYNs go unanswered
    blackhole = socket.socket()
    blackhole.bind(("127.0.0.1", 0))
    blackhole.listen(0)
    port = blackhole.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            fillers.append(c)
        time.sleep(0.2)
        p = start_proxy(upstream_url="http://127.0.0.1:%d" % port,
                        upstream={"connect_timeout": "500ms", "timeout": "10s"})
        key = new_key()
        r = p.post(key=key)
        assert_problem(r, 502, "upstream-unavailable")
        assert r.elapsed < 3, r
        r2 = p.post(key=key)
        assert_problem(r2, 502, "upstream-unavailable")  # released, not outcome-unknown
    finally:
        for c in fillers:
            c.close()
        blackhole.close()


# --------------------------------------------------------------------------
# Redis connection options
# --------------------------------------------------------------------------

def test_redis_password_from_environment(start_proxy, upstream, redis_factory):
    secret = "pw-" + uuid.uuid4().hex
    r2 = redis_factory(password=secret)
    p = start_proxy(redis={"url": r2.url, "password": "${REDIS_PASSWORD}"},
                    env={"REDIS_PASSWORD": secret})
    key = new_key()
    first = p.post(key=key)
    assert first.status == 201, first
    assert_replay_of(p.post(key=key), first)
    assert prefixed_keys(r2)
    assert secret not in p.stdout_text() + p.stderr_text()


def test_redis_wrong_password_is_store_unavailable(start_proxy, upstream, redis_factory):
    r2 = redis_factory(password="right-" + uuid.uuid4().hex)
    p = start_proxy(redis={"url": r2.url, "password": "wrong"})
    r = p.post(key=new_key())
    assert_problem(r, 503, "store-unavailable")
    assert upstream.total() == 0


def test_redis_database_number_in_url(start_proxy, upstream, redis):
    p = start_proxy(redis={"url": redis.url_db(3)})
    assert p.post(key=new_key()).status == 201
    assert prefixed_keys(redis) == []
    assert [k for k in redis.keys("*", db=3) if k.startswith("idem")]


def test_redis_over_a_unix_socket(start_proxy, upstream, redis_factory, tmp_path):
    path = str(tmp_path / "redis.sock")
    r2 = redis_factory(unix_path=path)
    p = start_proxy(redis={"url": "unix:" + path})
    key = new_key()
    first = p.post(key=key)
    assert first.status == 201, first
    assert_replay_of(p.post(key=key), first)
    assert prefixed_keys(r2)


# --------------------------------------------------------------------------
# operations, in more detail
# --------------------------------------------------------------------------

def test_access_log_line_fields(proxy, upstream):
    key = new_key()
    proxy.post(key=key)
    proxy.post(key=key)
    time.sleep(0.2)
    lines = [d for d in json_lines(proxy.stdout_text() + proxy.stderr_text())
             if "status" in d]
    assert len(lines) >= 2, lines
    for d in lines[-2:]:
        assert "route" in d and "outcome" in d, d
        assert any("record" in k for k in d), d
        assert any(k.endswith("_ms") or "ms" in k for k in d), d
    assert lines[-1]["status"] == 201
    rec = [v for k, v in lines[-1].items() if "record" in k][0]
    assert rec == [v for k, v in lines[-2].items() if "record" in k][0]
    assert key not in rec


def test_metrics_cover_requests_latency_and_store(proxy, upstream):
    key = new_key()
    proxy.post(key=key)
    proxy.post(key=key)
    m = proxy.admin("GET", "/metrics")
    assert m.status == 200, m
    text = m.body.decode()
    assert "_bucket{" in text and 'le="' in text, "no latency histogram:\n" + text[:2000]
    assert "outcome=" in text, "no requests-by-outcome counter:\n" + text[:2000]
    assert re.search(r"^# TYPE \S+ gauge$", text, re.M), "no gauge:\n" + text[:2000]


def test_admin_purge_refuses_a_claim_still_in_flight(proxy, upstream, redis):
    key = new_key()
    slow = in_background(proxy.post, key=key, headers=[("X-Demo-Delay-Ms", "1500")])
    wait_until(lambda: upstream.total() == 1)
    (record_key,) = prefixed_keys(redis)
    rid = str(record_key).split("{", 1)[1].rstrip("}")
    refused = proxy.admin("DELETE", "/records/" + rid)
    assert refused.status == 409, refused
    assert slow.result().status == 201
    assert proxy.post(key=key).replayed
    assert upstream.executions(key) == 1
    assert proxy.admin("DELETE", "/records/" + rid).status == 200


def test_admin_records_unknown_id_is_404(proxy):
    assert proxy.admin("GET", "/records/" + "0" * 32).status == 404
    assert proxy.admin("DELETE", "/records/" + "0" * 32).status == 404


# --------------------------------------------------------------------------
# waiters and what becomes of the first request
# --------------------------------------------------------------------------

def test_waiter_when_the_first_is_released_is_not_left_hanging(proxy, upstream):
    key = new_key()
    hs = [("X-Demo-Status", "503"), ("X-Demo-Delay-Ms", "800")]
    f = in_background(proxy.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1)
    second = proxy.post(key=key, headers=hs)
    first = f.result()
    assert first.status == 503
    assert_not_replayed(first)
    # the upstream said it did nothing: the waiter executes itself or is told to retry
    if second.status == 503:
        assert_not_replayed(second)
        assert upstream.total() == 2
    else:
        assert_problem(second, 409, "request-in-progress")
        assert upstream.total() == 1
    assert second.elapsed < 5


def test_waiter_when_the_first_times_out_gets_outcome_unknown(start_proxy, upstream):
    p = start_proxy(upstream={"timeout": "1s"})
    key = new_key()
    hs = [("X-Demo-Fault", "hang")]
    f = in_background(p.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1)
    second = p.post(key=key, headers=hs)
    assert_problem(f.result(), 504, "upstream-timeout")
    assert_problem(second, 502, "outcome-unknown")
    assert second.header("Idempotent-Replayed") == "true"
    assert upstream.total() == 1


def test_waiter_on_another_proxy_is_answered_soon_after_the_first(start_proxy, upstream):
    p1, p2 = start_proxy(), start_proxy()
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "1500")]
    done = {}

    def first_req():
        r = p1.post(key=key, headers=hs)
        done["first"] = time.monotonic()
        return r

    f = in_background(first_req)
    wait_until(lambda: upstream.total() == 1)
    second = p2.post(key=key, headers=hs)
    done["second"] = time.monotonic()
    first = f.result()
    assert_replay_of(second, first)
    lag = done["second"] - done["first"]
    assert lag < 0.6, "the waiter on the other proxy answered %.2f s after the first" % lag


def test_waiter_when_the_first_proxy_crashes(start_proxy, upstream):
    p1 = start_proxy(lease="1s")
    p2 = start_proxy(lease="1s", wait_timeout="5s")
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "3000")]
    f = in_background(p1.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1)
    waiter = in_background(p2.post, key=key, headers=hs)
    time.sleep(0.3)
    p1.kill()
    with pytest.raises((HTTPError, OSError)):
        f.result()
    r = waiter.result()
    # the lease runs out while it waits: the outcome is unknown (on_ambiguous: hold)
    assert_problem(r, 502, "outcome-unknown")
    assert r.header("Idempotent-Replayed") == "true"
    assert r.elapsed < 4, "the waiter should notice the expired lease: %r" % r
    assert upstream.total() == 1


def test_mismatch_against_finished_failed_and_tombstoned_records(start_proxy, upstream):
    p = start_proxy(upstream={"timeout": "1s"}, limits={"max_stored_response": "1KiB"})
    unknown, tomb = new_key(), new_key()
    assert p.post(key=unknown, headers=[("X-Demo-Fault", "hang")]).status == 504
    assert p.post(key=tomb, headers=[("X-Demo-Size", "4096")]).status == 201
    for key in (unknown, tomb):
        assert_problem(p.post(key=key, body=b"another body"), 409, "key-reuse-mismatch")
    assert upstream.total() == 2


def test_record_ttl_is_retention_and_outlives_the_lease(start_proxy, upstream, redis):
    p = start_proxy(lease="1s", retention="1h")
    key = new_key()
    f = in_background(p.post, key=key, headers=[("X-Demo-Delay-Ms", "800")])
    wait_until(lambda: upstream.total() == 1)
    keys = prefixed_keys(redis)
    assert keys
    assert max(redis.cmd("PTTL", k) for k in keys) > 1000, \
        "the claim must outlive its lease so an expired lease stays visible"
    assert f.result().status == 201
    ttls = [redis.cmd("PTTL", k) for k in prefixed_keys(redis)]
    assert ttls and all(3600 * 1000 - 15000 < t <= 3600 * 1000 for t in ttls), ttls


def test_redis_restart_mid_flight_client_still_gets_the_answer(proxy, upstream, redis):
    key = new_key()
    f = in_background(proxy.post, key=key, headers=[("X-Demo-Delay-Ms", "1000")])
    wait_until(lambda: upstream.total() == 1)
    redis.stop()
    redis.start()  # the record is gone with the old Redis
    r = f.result()
    assert r.status == 201, r
    assert r.json()["id"] == "ord_1"


def test_route_exact_and_prefix_matching_first_match_wins(start_proxy, upstream):
    p = start_proxy(routes=[{"path": "/v1/payments/special", "require_key": True},
                            {"path": "/v1/payments*"},
                            {"path": "/v1/refunds", "require_key": True}])
    assert_problem(p.post("/v1/payments/special", key=None), 400, "missing-key")
    assert_problem(p.post("/v1/payments/special?x=1", key=None), 400, "missing-key")
    assert p.post("/v1/payments/special/sub", key=None).status == 201
    assert p.post("/v1/payments/other", key=None).status == 201
    assert_problem(p.post("/v1/refunds", key=None), 400, "missing-key")
    assert_problem(p.post("/v1/refunds?a=b", key=None), 400, "missing-key")
    assert p.post("/v1/refunds/r1", key=None).status == 201  # exact: no prefix match
    assert p.post("/v1/refundsX", key=None).status == 201
    assert upstream.total() == 4


# --------------------------------------------------------------------------
# transparency and odds and ends
# --------------------------------------------------------------------------

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


def test_http10_client(proxy, upstream):
    key = new_key()
    raw = ("POST /v1/payments HTTP/1.0\r\nHost: x\r\nIdempotency-Key: %s\r\n"
           "Content-Length: 2\r\n\r\n{}" % key).encode()
    first = http_request(proxy.port, raw=raw)
    assert first.status == 201, first
    again = http_request(proxy.port, raw=raw)
    assert again.status == 201 and again.replayed and again.body == first.body
    assert upstream.total() == 1


def test_admin_listener_can_be_disabled(start_proxy, upstream):
    p = start_proxy(admin=False)
    with open(p.config_path) as f:
        assert 'admin_listen: ""' in f.read()
    key = new_key()
    first = p.post(key=key)
    assert first.status == 201
    assert_replay_of(p.post(key=key), first)


def test_sighup_does_not_drop_in_flight_requests(start_proxy, upstream):
    p = start_proxy()
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "1000")]
    f = in_background(p.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1)
    p.signal(signal.SIGHUP)
    time.sleep(0.1)
    second = p.post(key=key, headers=hs)  # waits across the reload
    first = f.result()
    assert first.status == 201
    assert_replay_of(second, first)
    assert p.alive()
    assert upstream.total() == 1


def contract_example_config(port, admin_port, upstream_url, redis_url):
    return """\
listen: 127.0.0.1:%d                 # client-facing listener
admin_listen: 127.0.0.1:%d         # health, readiness, metrics, key admin ("" disables)
upstream:
  url: %s         # http://, https://, or unix:/path/to.sock
  connect_timeout: 2s
  timeout: 30s                       # whole exchange
redis:
  url: %s      # redis://[:password@]host:port/db ; unix:/path
  password: ${REDIS_PASSWORD}        # optional
  key_prefix: idem
  timeout: 500ms                     # per command; hiredis 0.14 has none, so the proxy times it
limits:
  max_request_body: 1MiB             # larger -> 413, nothing claimed, nothing forwarded
  max_stored_response: 1MiB
defaults:                            # every route inherits these; a route may override any
  key_header: Idempotency-Key
  methods: [POST, PATCH]
  require_key: false                 # true: a protected method without a key -> 400
  key_max_length: 255
  fingerprint: request               # request (method+path+query+body) | none
  scope_headers: [Authorization]     # keys live in a namespace per value of these headers
  lease: 60s                         # claim lease, renewed while the upstream works
  retention: 24h                     # how long a finished record is kept
  in_flight: wait                    # wait | reject
  wait_timeout: 10s                  # wait this long for the first request, then 409
  mismatch_status: 409               # 409 | 422 (the IETF draft's choice)
  release_statuses: [408, 425, 429, 503]   # upstream said "not processed": forget the key
  on_ambiguous: hold                 # hold | release   (see 6)
  on_store_error: reject             # reject (503) | pass (forward unprotected)
routes:                              # first match wins; no match -> plain pass-through
  - path: /v1/payments*              # exact, or prefix with a trailing *
    require_key: true
""" % (port, admin_port, upstream_url, redis_url)


def test_the_contract_example_config_runs(start_proxy, upstream, redis, tmp_path):
    require_binary()
    path = tmp_path / "example.yaml"
    path.write_text(contract_example_config(free_port(), free_port(), upstream.url, redis.url))
    rc, out, err = run_bin(["-t", "-c", str(path)])
    assert rc == 0 and "configuration OK" in out + err, (out, err)
    p = start_proxy(config_text=contract_example_config(0, 0, "{upstream}", "{redis}")
                    .replace("127.0.0.1:0                 #", "127.0.0.1:{port}  #")
                    .replace("127.0.0.1:0         #", "127.0.0.1:{admin_port}  #")
                    .replace("${REDIS_PASSWORD}", "${{REDIS_PASSWORD}}"),
                    env={"REDIS_PASSWORD": ""})
    assert_problem(p.post(key=None), 400, "missing-key")
    key = new_key()
    first = p.post(key=key)
    assert first.status == 201
    assert_replay_of(p.post(key=key), first)


@pytest.mark.parametrize("name", ["idempotency-proxy.yaml", "webhooks.yaml"])
def test_shipped_configs_are_valid(name):
    require_binary()
    path = os.path.join(REPO, "conf", name)
    if not os.path.exists(path):
        pytest.skip("%s not shipped" % name)
    # the README's example secrets (a secret needs at least 16 bytes)
    env = {"STRIPE_WEBHOOK_SECRET": "whsec_test_secret",
           "GITHUB_WEBHOOK_SECRET": "It's a Secret to Everybody",
           "WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
           "WEBHOOK_SECRET_PREVIOUS": "whsec_cHJldmlvdXMta2V5LTI0LWJ5dGVzLW9r"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        rc, out, err = run_bin(["-t", "-c", path])
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert rc == 0 and "configuration OK" in out + err, (out, err)


# --------------------------------------------------------------------------
# clients that go away at awkward moments, load
# --------------------------------------------------------------------------

def _send_and_abandon(port, key, headers=(), body=b"{}", after=0.2):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(build_request("POST", "/v1/payments", [("Idempotency-Key", key)] + list(headers),
                            body))
    time.sleep(after)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()  # RST


def test_waiting_clients_that_disconnect(proxy, upstream):
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "1000")]
    f = in_background(proxy.post, key=key, body=b"{}", headers=hs)
    wait_until(lambda: upstream.total() == 1)
    with ThreadPoolExecutor(5) as ex:
        list(ex.map(lambda i: _send_and_abandon(proxy.port, key, hs, after=0.1 * i),
                    range(5)))
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
        _send_and_abandon(p.port, key, size, after=0.05)
    _send_and_abandon(p.port, new_key(), body=b"x" * 5000, after=0.0)   # a 413
    _send_and_abandon(p.port, new_key(), after=0.0)                     # mid-claim
    _send_and_abandon(p.port, key, body=b"other", after=0.0)            # a mismatch
    time.sleep(0.3)
    assert p.alive()
    assert_replay_of(p.post(key=key, headers=size), first)
    assert upstream.total() <= 2


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


def test_redis_stopping_while_duplicates_wait(start_proxy, upstream, redis):
    p = start_proxy(wait_timeout="5s", lease="3s")  # retries end with the lease
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "1500")]
    f = in_background(p.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1)
    waiter = in_background(p.post, key=key, headers=hs)
    time.sleep(0.3)
    redis.stop()
    first, second = f.result(), waiter.result()
    # the upstream answered: the client gets it at once, while its record write is retried
    assert first.status == 201 and first.elapsed < 3, first
    assert second.status in (409, 503), second
    assert second.is_problem()
    assert second.elapsed < 6.5
    assert upstream.total() == 1


# --------------------------------------------------------------------------
# worker threads (`workers: N`)
# --------------------------------------------------------------------------

def listening_sockets(port):
    """How many sockets listen on 127.0.0.1:port (/proc/net/tcp, state 0A)."""
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return sum(1 for r in rows if r[3] == "0A" and r[1] == "0100007F:%04X" % port)


def requests_total(proxy):
    """The sum of idempotency_proxy_requests_total over routes and outcomes."""
    r = proxy.admin("GET", "/metrics")
    assert r.status == 200, r
    return sum(float(line.rsplit(" ", 1)[1]) for line in r.body.decode().splitlines()
               if line.startswith("idempotency_proxy_requests_total{"))


def test_workers_listen_on_one_port_each_in_a_thread_of_its_own(start_proxy, upstream):
    p = start_proxy(workers=3)
    # the port accepts once worker 0 listens; the others bind right after
    wait_until(lambda: listening_sockets(p.port) == 3, what="3 listening sockets")
    assert len(os.listdir("/proc/%d/task" % p.pid())) >= 3
    rs = concurrently(30, lambda i: p.post(key=new_key()))
    assert {r.status for r in rs} == {201}, rs
    assert upstream.total() == 30


def test_a_second_proxy_cannot_share_the_port_of_a_running_one(start_proxy, tmp_path, upstream,
                                                               redis):
    """SO_REUSEPORT lets any socket that sets it bind the port: a second instance started on
    the same port by mistake must still be refused, not silently take half the clients."""
    p = start_proxy(workers=2)
    wait_until(lambda: listening_sockets(p.port) == 2, what="2 listening sockets")
    cfg = build_config(p.port, free_port(), upstream.url, redis.url, workers=2)
    path = tmp_path / "second.yaml"
    path.write_text(to_yaml(cfg) + "\n")
    rc, out, err = run_bin(["-c", str(path)], timeout=20)
    assert rc == 1, (out, err)
    assert "in use" in err.lower(), err
    assert listening_sockets(p.port) == 2
    assert p.post(key=new_key()).status == 201


def test_two_proxies_starting_at_once_on_one_port_cannot_both_run(tmp_path, upstream, redis):
    """Both could pass the "is the port free" check before either binds its SO_REUSEPORT
    sockets; the endpoint lock lets exactly one of them run, every time."""
    require_binary()
    port = free_port()
    path = tmp_path / "twins.yaml"
    path.write_text(to_yaml(build_config(port, None, upstream.url, redis.url, workers=4)) + "\n")
    for attempt in range(10):
        twins = [subprocess.Popen([proxy_binary(), "-c", str(path)], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for _ in range(2)]
        try:
            wait_until(lambda: any(t.poll() is not None for t in twins), timeout=10,
                       what="one of the two proxies to give up (attempt %d)" % attempt)
            time.sleep(0.2)
            running = [t for t in twins if t.poll() is None]
            refused = [t for t in twins if t.poll() is not None]
            assert len(running) == 1 and len(refused) == 1, [t.poll() for t in twins]
            assert refused[0].returncode == 1
            assert b"in use" in refused[0].stderr.read()
            wait_until(lambda: listening_sockets(port) == 4, what="the survivor's 4 sockets")
        finally:
            for t in twins:
                if t.poll() is None:
                    t.send_signal(signal.SIGTERM)
                t.wait(15)
                t.stderr.close()
        wait_until(lambda: listening_sockets(port) == 0, what="the port to close")


def test_concurrent_identical_requests_across_workers_execute_once(start_proxy, upstream):
    """Each request on a connection of its own, so the kernel spreads them over the workers:
    one executes, the others wait (woken across threads) and replay it."""
    p = start_proxy(workers=4)
    key = new_key()
    rs = concurrently(40, lambda i: p.post(key=key, headers=[("X-Demo-Delay-Ms", "300")]))
    assert upstream.total() == 1
    assert {r.status for r in rs} == {201}, rs
    assert len({r.body for r in rs}) == 1, "answers differ"
    assert sum(r.replayed for r in rs) == 39


def test_metrics_count_the_requests_of_every_worker(start_proxy, upstream):
    p = start_proxy(workers=4)
    before = requests_total(p)
    rs = concurrently(40, lambda i: p.post(key=new_key()))
    assert {r.status for r in rs} == {201}, rs
    # 40 connections over 4 workers: counting worker 0's alone would miss about 30
    assert requests_total(p) - before == 40


def test_sighup_reload_reaches_every_worker(start_proxy, upstream, redis):
    p = start_proxy(workers=4, routes=[{"path": "/v1/payments*"}])
    cfg = build_config(p.port, p.admin_port, upstream.url, redis.url, workers=4,
                       routes=[{"path": "/v1/payments*", "require_key": True}])
    with open(p.config_path, "w") as f:
        f.write(to_yaml(cfg) + "\n")
    p.signal(signal.SIGHUP)

    def every_worker_requires_the_key():
        return {r.status for r in concurrently(40, lambda i: p.post(key=None))} == {400}

    wait_until(every_worker_requires_the_key, timeout=5, what="require_key in every worker")
    for r in concurrently(40, lambda i: p.post(key=None)):
        assert_problem(r, 400, "missing-key")


def test_sighup_refuses_a_change_of_workers(start_proxy, upstream, redis):
    p = start_proxy(workers=2)
    wait_until(lambda: listening_sockets(p.port) == 2, what="2 listening sockets")
    cfg = build_config(p.port, p.admin_port, upstream.url, redis.url, workers=3)
    with open(p.config_path, "w") as f:
        f.write(to_yaml(cfg) + "\n")
    p.signal(signal.SIGHUP)
    wait_until(lambda: "reload refused" in p.stderr_text(), what="reload refused")
    assert "workers changed" in p.stderr_text()
    assert listening_sockets(p.port) == 2
    assert p.post(key=new_key()).status == 201


def test_sigterm_idle_workers_refuse_late_requests_until_the_drain_ends(start_proxy, upstream):
    """A worker with nothing in flight keeps running while another drains, so a request on
    one of its kept-alive connections gets 503 shutting-down, not a silent connection."""
    p = start_proxy(workers=4)
    slow = in_background(p.post, key=new_key(), headers=[("X-Demo-Delay-Ms", "2000")])
    wait_until(lambda: upstream.total() == 1)
    conns = [Connection(p.port) for _ in range(8)]  # spread over the 4 workers
    try:
        for c in conns:
            assert c.request("GET", "/v1/payments").status == 200
        p.signal(signal.SIGTERM)
        time.sleep(0.3)
        for c in conns:
            late = c.request("POST", "/v1/payments", [("Idempotency-Key", new_key())], b"{}")
            assert_problem(late, 503, "shutting-down")
    finally:
        for c in conns:
            c.close()
    assert slow.result().status == 201
    assert upstream.total() == 1  # no late POST was forwarded
    assert p.wait(15) == 0


def test_sigterm_drains_every_worker_and_exits_0(start_proxy, upstream):
    p = start_proxy(workers=4)
    keys = [new_key() for _ in range(12)]
    fs = [in_background(p.post, key=k, headers=[("X-Demo-Delay-Ms", "1500")]) for k in keys]
    wait_until(lambda: upstream.total() == 12, what="12 requests upstream")
    p.signal(signal.SIGTERM)
    rs = [f.result() for f in fs]
    assert [r.status for r in rs] == [201] * 12, rs
    assert p.wait(15) == 0
    assert not port_accepts(p.port)
    assert all(upstream.executions(k) == 1 for k in keys)
