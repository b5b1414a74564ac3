"""The upstream unreachable, slow, resetting or closing: 502/504 answers, a released
key or an outcome-unknown record, never two sends on a dead reused connection; a unix-socket
upstream.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py and the
proxy binary; each test asserts what the client and the upstream observe.
"""

import socket
import uuid

import pytest

from harness import free_port, pace, wait_until
from proxy_helpers import (
    new_key, assert_problem, assert_not_replayed, assert_replay_of, executions_of_body,
)


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
        pace(0.05)
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


def accept_queue_full(port, backlog):
    """The listener on 127.0.0.1:port has more connections waiting for accept() than its
    backlog, so the kernel drops the next SYN (/proc/net/tcp: a listener's rx_queue is that
    count)."""
    with open("/proc/net/tcp") as f:
        for row in (line.split() for line in f.readlines()[1:]):
            if row[3] == "0A" and row[1] == "0100007F:%04X" % port:
                return int(row[4].split(":")[1], 16) > backlog
    return False


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
        wait_until(lambda: accept_queue_full(port, 0), what="the blackhole's accept queue full")
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
