"""Integration tests of a Redis stall while a keyed request is at the upstream.

Redis (a real redis-server) is SIGSTOPped while the demo upstream works on a keyed POST.
A second keyed request, sent into the stall, times out after redis.timeout, which drops
the proxy's only connection (one worker); so when the upstream answers, the proxy has no
connection to Redis and the record write fails at once. Stalls shorter than the lease
must not let the key execute twice: the proxy answers the client, keeps the answer,
renews the lease and sends the same write again until Redis is back (README "Failure
modes").

Real processes over real sockets: redis-server, tests/upstream/payments_api.py, the
proxy binary.
"""

import signal
import time

import pytest

from harness import WAIT_S, hold_until, log_line, pace, wait_for, wait_ready
from proxy_helpers import assert_problem, in_background, new_key
from redis_gate import RedisGate


def stalled_call(p, redis, upstream, key, delay_ms, stall_s, during=None):
    """POST key (the upstream takes delay_ms), SIGSTOP Redis while it is at the upstream,
    drop the proxy's connection with a request on another key (503 after redis.timeout),
    SIGCONT after stall_s. during(t0, first) runs in the stall after the drop. Returns (the
    first request's future, t0: monotonic time it was sent, monotonic time of SIGCONT)."""
    t0 = time.monotonic()
    first = in_background(p.post, key=key, headers=[("X-Demo-Delay-Ms", str(delay_ms))])
    wait_for(lambda: upstream.executions(key) == 1, what="the request at the upstream")
    redis.pause()
    try:
        stalled = time.monotonic()
        # its claim times out: the proxy drops the connection and reconnects with backoff
        assert_problem(p.post(key=new_key("drop")), 503, "store-unavailable")
        if during is not None:
            during(t0, first)
        hold_until(stalled + stall_s, "Redis stays stopped for the stall being tested")
    finally:
        redis.resume()
    return first, t0, time.monotonic()


def stall_proxy(start_proxy, on_ambiguous, lease="3s", **kw):
    return start_proxy(lease=lease, on_ambiguous=on_ambiguous, workers=1,
                       redis={"timeout": "300ms"}, **kw)


@pytest.mark.parametrize("on_ambiguous", ["release", "hold"])
def test_stall_shorter_than_the_lease_records_the_answer(start_proxy, upstream, redis,
                                                         on_ambiguous):
    """(a) release, (b) hold: a 1.4 s stall during a 1 s upstream call, lease 3 s. The
    answer is recorded once Redis is back; after the lease would have expired, a retry
    gets it replayed (same body bytes) and the upstream executed once."""
    p = stall_proxy(start_proxy, on_ambiguous)
    key = new_key()
    answered = {}

    def during(t0, first):
        # the client is answered while Redis is still stopped: it need not wait for the record
        answered["r"] = first.result(timeout=1.3)

    first, t0, resumed = stalled_call(p, redis, upstream, key, 1000, 1.4, during=during)
    r1 = answered["r"]
    assert r1.status == 201 and not r1.replayed, r1
    hold_until(t0 + 3.5, "the claim's lease (3 s) would be over: only the record answers now")
    r2 = p.post(key=key)
    assert r2.status == 201 and r2.replayed, r2
    assert r2.header("Idempotent-Replayed") == "true"
    assert r2.body == r1.body
    assert upstream.executions(key) == 1


def test_concurrent_retries_during_a_stall_never_execute(start_proxy, upstream, redis):
    """(c) retries of the same key sent during the stall and right after it get 503
    (store unavailable), 409 (in progress) or, once recorded, the replay: never an
    execution, also when they wait past the claim's original lease (release)."""
    p = stall_proxy(start_proxy, "release")
    key = new_key()
    retries = []

    def during(t0, first):
        for _ in range(3):
            retries.append(in_background(p.post, key=key))
            pace(0.15)

    first, t0, resumed = stalled_call(p, redis, upstream, key, 1000, 1.4, during=during)
    wait_ready(p)
    retries += [in_background(p.post, key=key) for _ in range(3)]  # Redis back
    r1 = first.result(timeout=10)
    assert r1.status == 201 and not r1.replayed, r1
    seen = []
    for f in retries:
        r = f.result(timeout=15)
        seen.append(r.status)
        if r.status == 503:
            assert_problem(r, 503, "store-unavailable")
        elif r.status == 409:
            assert_problem(r, 409, "request-in-progress")
        else:
            assert r.status == 201 and r.replayed and r.body == r1.body, r
    hold_until(t0 + 3.5, "the claim's lease (3 s) would be over: only the record answers now")
    r = p.post(key=key)
    assert r.replayed and r.body == r1.body, (r, seen)
    assert upstream.executions(key) == 1, seen


@pytest.mark.parametrize("on_ambiguous", ["hold", "release"])
def test_stall_longer_than_the_lease_leaves_the_claim_to_expire(start_proxy, upstream, redis,
                                                                on_ambiguous):
    """(d) a 2.2 s stall, lease 1 s, upstream 0.4 s: the client gets the upstream's answer
    at once, the write is retried until the lease could have run out, then given up; the
    claim stays and, once Redis is back, reads as expired: hold: 502 outcome-unknown;
    release: the retry executes again (README)."""
    p = stall_proxy(start_proxy, on_ambiguous, lease="1s")
    key = new_key()
    answered = {}

    def during(t0, first):
        answered["r"] = first.result(timeout=3)  # answered during the stall, bounded
        answered["after"] = time.monotonic() - t0
        # the retries end with the lease, not with Redis back: given up while it is stopped
        log_line(p, "the answer could not be recorded; the claim stays until its lease ends")

    stalled_call(p, redis, upstream, key, 400, 2.2, during=during)
    r1 = answered["r"]
    assert r1.status == 201 and not r1.replayed, r1
    assert answered["after"] < 1.0, answered["after"]  # the upstream took 0.4 s
    assert "record write failed" in p.stderr_text()
    wait_ready(p)
    r2 = p.post(key=key)
    if on_ambiguous == "hold":
        assert_problem(r2, 502, "outcome-unknown")
        assert upstream.executions(key) == 1
    else:
        assert r2.status == 201 and not r2.replayed, r2
        assert upstream.executions(key) == 2


def test_drain_during_a_retried_write_ends_in_time(start_proxy, upstream, redis):
    """SIGTERM while the record write waits for a stalled Redis: the client still gets
    the upstream's answer and the proxy exits within its drain deadline (upstream.timeout
    plus slack), not after the lease."""
    p = start_proxy(lease="20s", on_ambiguous="hold", workers=1,
                    redis={"timeout": "300ms"}, upstream={"timeout": "2s"})
    key = new_key()
    first = in_background(p.post, key=key, headers=[("X-Demo-Delay-Ms", "300")])
    wait_for(lambda: upstream.executions(key) == 1, what="the request at the upstream")
    redis.pause()
    try:
        assert_problem(p.post(key=new_key("drop")), 503, "store-unavailable")
        # the upstream answered; the write is being retried
        log_line(p, "the record write failed", "sending it again")
        t = time.monotonic()
        p.signal(signal.SIGTERM)
        r1 = first.result(timeout=10)
        assert r1.status == 201 and not r1.replayed, r1
        p.wait(timeout=10)
        # drain deadline: upstream.timeout 2 s + 5 s slack; the lease (20 s) is not awaited
        assert time.monotonic() - t < 8.5, time.monotonic() - t
    finally:
        redis.resume()


def test_a_record_write_that_timed_out_but_landed_counts_as_done(start_proxy, upstream, redis):
    """The record write is held back past redis.timeout (the proxy drops the connection)
    and lands in Redis before the proxy sends it again: the same write by its owner is
    reported done (the script is idempotent for the owner token), not "no longer ours"."""
    gate = RedisGate(redis.port).start()
    try:
        p = start_proxy(lease="10s", workers=1, redis={"url": gate.url, "timeout": "200ms"})
        wait_ready(p)
        assert p.post(key=new_key()).status == 201  # loads the scripts into Redis
        key = new_key()
        gate.hold_next(("EVALSHA", "EVAL"), ms=300)
        r1 = p.post(key=key)
        assert r1.status == 201 and not r1.replayed, r1
        assert gate.held == 1 and gate.delivered.wait(WAIT_S), "the write was not held back"
        wait_for(lambda: "went through on a later attempt" in p.stderr_text(),
                 what="the write sent again")
        log = p.stderr_text()
        assert "the record write failed (timeout)" in log, log[-2000:]
        assert "no longer ours" not in log, log[-2000:]
        r2 = p.post(key=key)
        assert r2.replayed and r2.body == r1.body, r2
        assert upstream.executions(key) == 1
    finally:
        gate.stop()
