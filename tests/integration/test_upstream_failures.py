"""The upstream unreachable, slow, resetting or closing: 502 upstream-unavailable and a released
key when nothing was sent; 502 outcome-unknown (first answer and retries alike, with the record
id and Retry-After) when it was sent and its answer lost; 504/502 for the requests the proxy does
not protect; never two sends on a dead reused connection; a unix-socket upstream.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py and the
proxy binary; each test asserts what the client and the upstream observe.
"""

import socket
import uuid

import pytest

from harness import free_port, http_request, pace, wait_until
from proxy_helpers import (
    new_key, assert_problem, assert_not_replayed, assert_outcome_unknown, assert_replay_of,
    executions_of_body, metric, upstream_record_ids,
)

HELD = "idempotency_proxy_held_answers_total"


def assert_nothing_sent(r):
    """502 upstream-unavailable, which says that nothing was sent: no record named, no hold."""
    doc = assert_problem(r, 502, "upstream-unavailable")
    assert "record_id" not in doc and not r.has_header("Idempotency-Record-Id"), r
    assert_not_replayed(r)


def test_upstream_unreachable_is_502_and_released(start_proxy, upstream_factory):
    port = free_port()
    p = start_proxy(upstream_url="http://127.0.0.1:%d" % port)
    key = new_key()
    r1 = p.post(key=key)
    assert_nothing_sent(r1)
    r2 = p.post(key=key)
    assert_nothing_sent(r2)  # released, not outcome-unknown
    up = upstream_factory(port=port)
    ok = p.post(key=key)
    assert ok.status == 201, ok
    assert_replay_of(p.post(key=key), ok)
    assert up.total() == 1


def test_upstream_timeout_is_outcome_unknown_first_and_on_every_retry(start_proxy, upstream):
    """Sent, then no answer within upstream.timeout: the first answer is already
    502 outcome-unknown (not replayed), each retry the same with Idempotent-Replayed; all name the
    record the upstream was told of, and only the retries count as answers from a hold."""
    p = start_proxy(upstream={"timeout": "1s"})
    key = new_key()
    hs = [("X-Demo-Fault", "hang")]
    r = p.post(key=key, headers=hs)
    rid = assert_outcome_unknown(r, replayed=False)
    assert r.elapsed < 5
    assert metric(p, HELD, required=True) == 0
    retry = p.post(key=key, headers=hs)
    assert_outcome_unknown(retry, replayed=True, record_id=rid)
    assert metric(p, HELD) == 1
    assert_outcome_unknown(p.post(key=key, headers=hs), replayed=True, record_id=rid)
    assert metric(p, HELD) == 2
    assert upstream.total() == 1
    assert upstream_record_ids(upstream, key) == [[rid]]
    assert p.admin("GET", "/records/" + rid).json()["state"] == "outcome-unknown"


@pytest.mark.parametrize("fault", ["reset", "close"])
def test_upstream_reset_or_close_is_outcome_unknown_first_and_on_retries(proxy, upstream, fault):
    """The request was sent, then the upstream reset mid-answer or closed without one:
    outcome-unknown from the first answer on, never upstream-unavailable (which says nothing
    was sent)."""
    key = new_key()
    hs = [("X-Demo-Fault", fault)]
    rid = assert_outcome_unknown(proxy.post(key=key, headers=hs), replayed=False)
    retry = proxy.post(key=key, headers=hs)
    assert_outcome_unknown(retry, replayed=True, record_id=rid)
    assert metric(proxy, HELD) == 1
    assert upstream.total() == 1


@pytest.mark.parametrize("fault,status,cause", [("delay", 504, "upstream-timeout"),
                                                ("close", 502, "upstream-answer-lost")])
def test_on_ambiguous_release_is_not_outcome_unknown_and_lets_the_retry_execute(
        start_proxy, upstream, fault, status, cause):
    """release: the claim is released, so the answer must not be outcome-unknown (whose rule
    says: retry to pick up a resolution; here the retry executes again): 504 upstream-timeout
    or 502 upstream-answer-lost, naming the record, without Retry-After; the retry executes."""
    p = start_proxy(upstream={"timeout": "1s"}, on_ambiguous="release")
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "2000")] if fault == "delay" else [("X-Demo-Fault", "close")]
    first = p.post(key=key, headers=hs)
    doc = assert_problem(first, status, cause)
    assert "does not hold" in doc["detail"], first
    rid = doc["record_id"]
    assert first.header("Idempotency-Record-Id") == rid, first
    assert first.header("Retry-After") is None, first
    assert_not_replayed(first)
    r = p.post(key=key)  # same fingerprint (X-Demo-* headers are not part of it)
    assert r.status == 201, r
    assert_not_replayed(r)
    assert upstream.total() == 2
    # both executions were told the record: the second one took the released key afresh
    assert upstream_record_ids(upstream, key) == [[rid], [rid]]
    assert metric(p, HELD) == 0
    # Stripe's SDKs retry on their own when told to: here that would execute again
    s = start_proxy(upstream={"timeout": "1s"}, on_ambiguous="release",
                    errors={"format": "stripe"})
    r = s.post(key=new_key(), headers=hs)
    assert r.status == status and r.json()["error"]["code"] == cause, r
    assert r.header("Stripe-Should-Retry") == "false", r


def test_unprotected_request_that_loses_its_answer_is_not_upstream_unavailable(start_proxy,
                                                                               upstream):
    """No key, so no record: a timeout is 504 upstream-timeout and a connection closed after the
    request was sent is 502 upstream-answer-lost; neither names a record."""
    p = start_proxy(upstream={"timeout": "1s"})
    for fault, status, cause in (("hang", 504, "upstream-timeout"),
                                 ("close", 502, "upstream-answer-lost")):
        r = http_request(p.port, "POST", "/v1/payments",
                         [("Content-Type", "application/json"), ("X-Demo-Fault", fault)],
                         b'{"amount": 1}')
        doc = assert_problem(r, status, cause)
        assert "record_id" not in doc and not r.has_header("Idempotency-Record-Id"), r
    assert upstream.total() == 2
    assert metric(p, HELD) == 0


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
        assert_nothing_sent(r)
        assert r.elapsed < 3, r
        r2 = p.post(key=key)
        assert_nothing_sent(r2)  # released, not outcome-unknown
    finally:
        for c in fillers:
            c.close()
        blackhole.close()
