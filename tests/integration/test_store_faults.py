"""Integration tests of the record store under faults: a Redis the proxy cannot use
(wrong or missing password, a database it does not have, nothing listening), an
operator purge racing a retry's claim, and a takeover that times out but lands.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py, the
proxy binary, and (for the late takeover) redis_gate.py, a TCP forwarder that holds
one command back.
"""

import threading
import uuid

import pytest

from harness import WAIT_S, HTTPError, free_port, hold, log_line, wait_ready, wait_until
from proxy_helpers import (
    assert_problem, assert_stays_unready, in_background, metric, new_key, record_keys,
)
from redis_gate import RedisGate


# --------------------------------------------------------------------------
# readiness means "can serve"
# --------------------------------------------------------------------------

def test_wrong_redis_password_is_not_ready(start_proxy, upstream, redis_factory):
    secret = "right-" + uuid.uuid4().hex
    wrong = "wrong-" + uuid.uuid4().hex
    r2 = redis_factory(password=secret)
    p = start_proxy(redis={"url": r2.url, "password": wrong})
    line = log_line(p, "AUTH failed")  # it tried: from here on it must not become ready
    assert_stays_unready(p, redis_down=True)
    r = p.post(key=new_key())
    assert_problem(r, 503, "store-unavailable")
    assert upstream.total() == 0
    assert record_keys(r2) == []
    assert "127.0.0.1:%d" % r2.port in line, line
    assert wrong not in p.stdout_text() + p.stderr_text()


def test_missing_redis_password_on_a_requirepass_server_is_not_ready(start_proxy, upstream,
                                                                      redis_factory):
    r2 = redis_factory(password="right-" + uuid.uuid4().hex)
    p = start_proxy(redis={"url": r2.url})
    line = log_line(p, "AUTH failed")  # it tried: from here on it must not become ready
    assert_stays_unready(p, redis_down=True)
    assert_problem(p.post(key=new_key()), 503, "store-unavailable")
    assert upstream.total() == 0
    assert "127.0.0.1:%d" % r2.port in line, line


def test_redis_database_the_server_does_not_have_is_not_ready(start_proxy, upstream, redis):
    """SELECT 99 fails on a 16-database server: a client command pipelined behind it would
    run in db 0. Not ready, and nothing is written anywhere."""
    p = start_proxy(redis={"url": redis.url_db(99)})
    line = log_line(p, "SELECT failed")  # it tried: from here on it must not become ready
    assert_stays_unready(p, seconds=1.0, redis_down=True)
    assert_problem(p.post(key=new_key()), 503, "store-unavailable")
    assert upstream.total() == 0
    assert record_keys(redis) == [], "a record landed in db 0"
    assert "127.0.0.1:%d" % redis.port in line, line


def test_correct_redis_password_is_ready_and_serves(start_proxy, upstream, redis_factory):
    secret = "pw-" + uuid.uuid4().hex
    r2 = redis_factory(password=secret)
    p = start_proxy(redis={"url": r2.url_db(2), "password": secret})
    wait_ready(p)
    assert metric(p, "idempotency_proxy_redis_up", required=True) == 1
    key = new_key()
    first = p.post(key=key)
    assert first.status == 201, first
    again = p.post(key=key)
    assert again.replayed and again.body == first.body
    assert upstream.executions(key) == 1
    assert record_keys(r2, db=2) and record_keys(r2) == []
    assert secret not in p.stdout_text() + p.stderr_text()


def test_refused_redis_connect_names_the_address(start_proxy, upstream):
    port = free_port()
    p = start_proxy(redis={"url": "redis://127.0.0.1:%d/0" % port})
    line = wait_until(lambda: [l for l in p.stderr_text().splitlines()
                               if "connect failed" in l], what="a connect failed log line")[0]
    assert "127.0.0.1:%d" % port in line, line
    assert p.admin("GET", "/readyz").status == 503


def test_keyed_request_during_the_connection_setup_waits_for_it(start_proxy, upstream, redis):
    """A request that arrives while the connection is being set up is served once the
    setup succeeded (its commands wait in the queue), not refused."""
    redis.stop()
    p = start_proxy(redis={"timeout": "2s"})
    log_line(p, "connect failed")  # it tried while Redis was down: now in its reconnect backoff
    redis.start()
    key = new_key()
    ok = wait_until(lambda: (lambda r: r if r.status == 201 else None)(p.post(key=key)),
                    interval=0.1, what="served after Redis started")
    assert p.post(key=key).replayed
    assert upstream.executions(key) == 1
    wait_ready(p)
    assert ok.status == 201


# --------------------------------------------------------------------------
# shared set-up for (12) and (13): expired claims left by a proxy that died
# --------------------------------------------------------------------------

def expired_claims(start_proxy, upstream, redis, n, delay_ms):
    """n keys whose claims were left by a SIGKILLed proxy (lease 1s) and have expired,
    each executed once upstream; returns [(key, record key)]."""
    a = start_proxy(lease="1s", on_ambiguous="release", workers=1, name="dead")
    out = []
    futures = []
    for i in range(n):
        key = new_key("exp%d" % i)
        before = set(record_keys(redis))
        futures.append(in_background(a.post, key=key,
                                     headers=[("X-Demo-Delay-Ms", str(delay_ms))]))
        wait_until(lambda: upstream.executions(key) == 1, what="at the upstream")
        (rk,) = wait_until(lambda: set(record_keys(redis)) - before, what="claimed")
        out.append((key, rk))
    a.kill()
    for f in futures:
        with pytest.raises((HTTPError, OSError)):
            f.result()
    hold(1.5, "the leases (1 s) of the killed proxy's claims run out")
    return out


# --------------------------------------------------------------------------
# a purge is one compare-and-set
# --------------------------------------------------------------------------

@pytest.mark.slow
def test_purge_racing_a_takeover_does_not_delete_the_live_claim(start_proxy, upstream, redis):
    """The purge reads the expired claim, and its compare-and-set delete is held back (the
    admin listener has its own Redis connection: redis_gate holds that one command) while a
    retry takes the claim over; then it lands. The purge must see that the record changed
    (409), so a second retry waits for the taken-over request instead of executing again."""
    slow = [("X-Demo-Delay-Ms", "1500")]
    (k1, _), (k2, rk2) = expired_claims(start_proxy, upstream, redis, 2, 3000)
    gate = RedisGate(redis.port).start()
    release = threading.Event()
    try:
        b = start_proxy(lease="15s", on_ambiguous="release", workers=1, name="b",
                        redis={"url": gate.url, "timeout": "10s"})
        wait_ready(b)
        # a first takeover loads the takeover script into Redis, as on any running system
        assert b.post(key=k1).status == 201
        assert upstream.executions(k1) == 2
        rid = str(rk2).split("{", 1)[1].rstrip("}")
        gate.hold_next(("EVALSHA", "EVAL"), containing=rk2.encode(), until=release)
        purge = in_background(b.admin, "DELETE", "/records/" + rid)
        wait_until(lambda: gate.held == 1, what="the purge's compare-and-set held")
        retry = in_background(b.post, key=k2, headers=slow)
        wait_until(lambda: upstream.executions(k2) == 2, what="the takeover at the upstream")
    finally:
        release.set()
    d = purge.result(timeout=WAIT_S)
    second = b.post(key=k2, headers=slow)  # while the taken-over request runs
    first = retry.result(timeout=WAIT_S)
    gate.stop()
    assert upstream.executions(k2) == 2, "the key executed again after the purge: %r" % d
    assert first.status == 201 and not first.replayed, first
    assert d.status == 409, d
    assert second.replayed and second.body == first.body, second


def test_purge_of_an_expired_claim_still_deletes(start_proxy, upstream, redis):
    (key, rk), = expired_claims(start_proxy, upstream, redis, 1, 3000)
    b = start_proxy(lease="5s", on_ambiguous="hold", workers=1, name="b")
    rid = str(rk).split("{", 1)[1].rstrip("}")
    d = b.admin("DELETE", "/records/" + rid)
    assert d.status == 200, d
    assert record_keys(redis) == []
    assert b.admin("DELETE", "/records/" + rid).status == 404


# --------------------------------------------------------------------------
# a takeover that may have landed is released like a claim
# --------------------------------------------------------------------------

@pytest.mark.slow
def test_takeover_that_times_out_but_lands_is_released(start_proxy, upstream, redis):
    """The takeover's EVALSHA is held back past redis.timeout (503 store-unavailable) and
    then reaches Redis: it wrote a claim nobody forwards. Released, a retry within that
    claim's lease executes (under in_flight: reject it would get 409 until the lease ends)."""
    (k1, _), (k2, rk2) = expired_claims(start_proxy, upstream, redis, 2, 3000)
    gate = RedisGate(redis.port).start()
    try:
        b = start_proxy(lease="10s", on_ambiguous="release", in_flight="reject", workers=1,
                        name="b", redis={"url": gate.url, "timeout": "200ms"})
        wait_ready(b)
        assert b.post(key=k1).status == 201  # loads the takeover script into Redis
        expired = redis.cmd("GET", rk2)
        gate.hold_next(("EVALSHA", "EVAL"), ms=600)
        assert_problem(b.post(key=k2), 503, "store-unavailable")
        assert gate.delivered.wait(WAIT_S), "the held takeover never reached Redis"
        # it landed: the record is no longer the expired claim (or already released)
        wait_until(lambda: redis.cmd("GET", rk2) != expired, what="landed")
        assert upstream.executions(k2) == 1
        # well before the 10 s lease ends: a claim left to its lease would refuse it till then
        r = wait_until(lambda: (lambda r: r if r.status != 409 else None)(b.post(key=k2)),
                       timeout=7, interval=0.3, what="a retry not refused as in flight")
        assert r.status == 201 and not r.replayed, r
        assert upstream.executions(k2) == 2
        assert b.post(key=k2).replayed
    finally:
        gate.stop()


def test_a_claim_that_lands_after_the_janitors_first_look_is_released(start_proxy, upstream,
                                                                      redis):
    """The claim (SET NX) is held back 2.5 s on its way to Redis (redis_gate.py), past
    redis.timeout: 503 store-unavailable, nothing forwarded, the connection dropped. When
    the janitor first looks (1 s later) Redis has no record yet, which does not prove the
    claim gone: it lands afterwards and is still released, so the retry executes once,
    rather than waiting out the lease and then reading outcome-unknown (hold)."""
    gate = RedisGate(redis.port).start()
    try:
        p = start_proxy(lease="3s", workers=1, redis={"url": gate.url, "timeout": "300ms"})
        wait_ready(p)
        key = new_key()
        gate.hold_next(("SET",), ms=2500)
        assert_problem(p.post(key=key), 503, "store-unavailable")
        assert gate.held == 1 and gate.delivered.wait(WAIT_S), "the claim was not held back"
        # it did land (the gate handed it on, Redis runs it a moment later), then was released:
        # waiting for "no record" alone could pass before it landed
        log_line(p, "released a claim that reached Redis after its request was refused")
        assert record_keys(redis) == []
        r = p.post(key=key)
        assert r.status == 201 and not r.replayed, r
        assert upstream.executions(key) == 1
    finally:
        gate.stop()


# --------------------------------------------------------------------------
# a store failure while waiting is answered, under on_store_error: pass too
# --------------------------------------------------------------------------

# a wall clock this far ahead leaves no room for a lease deadline in a record (16 digits of
# ms): every claim value the proxy makes from then on fails, a real failure of that path
FAR_AHEAD = "+115800000d"


@pytest.mark.parametrize("on_store_error", ["pass", "reject"])
def test_a_claim_value_that_cannot_be_made_while_waiting_is_answered(
        start_proxy, upstream, redis, stepped_clock, on_store_error):
    """B waits on A's claim (in_flight: wait); then B's wall clock jumps so far ahead (the
    Debian faketime library, the monotonic clock left alone) that the claim value of its
    next poll cannot be encoded. That is a store failure reported from the claim, where both
    policies are legal: pass forwards the request unprotected, reject answers 503; never a
    request left without an answer, never an illegal transition."""
    a = start_proxy(name="a", on_store_error=on_store_error)
    b = start_proxy(name="b", on_store_error=on_store_error, env=stepped_clock.env)
    key = new_key()
    first = in_background(a.post, key=key, headers=[("X-Demo-Delay-Ms", "3000")])
    wait_until(lambda: upstream.executions(key) == 1, what="A's request at the upstream")
    waiter = in_background(b.post, key=key, timeout=15)
    wait_until(lambda: metric(b, "idempotency_proxy_waiting_requests") == 1,
               what="B waiting on A's claim")
    stepped_clock.step(FAR_AHEAD)
    r = waiter.result(timeout=12)  # not a hang
    if on_store_error == "pass":
        assert r.status == 201 and not r.replayed, r  # forwarded unprotected, as pass says
    else:
        assert_problem(r, 503, "store-unavailable")
    log = b.stderr_text()
    assert "cannot make the claim value" in log and "illegal transition" not in log, log[-2000:]
    r1 = first.result(timeout=10)
    assert r1.status == 201 and not r1.replayed, r1
