"""A key in flight: reject or wait, the wait timeout, the lease renewed while the upstream
works, the waiters of a first request that is released, times out or whose proxy crashes, and
the record's TTL.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py and the
proxy binary; each test asserts what the client and the upstream observe.
"""

import threading
import time

import pytest

from harness import HTTPError, hold, wait_until, wall_clock_of
from proxy_helpers import (
    assert_not_replayed, assert_outcome_unknown, assert_problem, assert_replay_of,
    assert_retry_after, concurrently, in_background, metric_sum, new_key, record_id_cli,
    record_keys, upstream_record_ids, wait_waiting,
)

HELD = "idempotency_proxy_held_answers_total"

# tests/run.sh runs this file under ThreadSanitizer with two worker threads a proxy
# (IDEM_TEST_WORKERS=2): its requests meet across workers (docs/internals.md).
pytestmark = pytest.mark.threads


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


def test_wait_timeout_holds_when_the_wall_clock_steps_back(stepped_clock, start_proxy,
                                                            upstream):
    """The wait's deadline was on the wall clock: stepped back 60 s (NTP), a waiting duplicate
    waited for the first request's answer instead of its 409 after wait_timeout."""
    p = start_proxy(wait_timeout="2s", env=stepped_clock.env)
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "9000")]  # still running when the duplicate's wait_timeout ends
    f = in_background(p.post, key=key, headers=hs, timeout=40)
    wait_until(lambda: upstream.total() == 1)
    waiting = in_background(p.post, key=key, headers=hs)
    wait_waiting(p, 1)  # its deadline is set: now the wall clock steps
    stepped_clock.step("-60")
    r = waiting.result()
    assert_problem(r, 409, "request-in-progress")
    assert r.elapsed < 2.0 + 5.0, "expected ~2 s of waiting: %r" % r  # a generous bound
    assert 50 < time.time() - wall_clock_of(p) < 70  # the proxy's wall clock did step
    assert f.result().status == 201
    assert upstream.total() == 1


def test_lease_is_renewed_while_the_upstream_works(start_proxy, upstream):
    # renewed every lease/3: a 2 s lease leaves a loaded machine 1.3 s for each renewal
    p = start_proxy(lease="2s")
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "4000")]
    f = in_background(p.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1)
    hold(2.5, "past the first lease (2 s): only renewal keeps the claim alive")
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


def test_record_ttl_is_retention_and_outlives_the_lease(start_proxy, upstream, redis):
    p = start_proxy(lease="1s", retention="1h")
    key = new_key()
    f = in_background(p.post, key=key, headers=[("X-Demo-Delay-Ms", "800")])
    wait_until(lambda: upstream.total() == 1)
    keys = record_keys(redis)
    assert keys
    assert max(redis.cmd("PTTL", k) for k in keys) > 1000, \
        "the claim must outlive its lease so an expired lease stays visible"
    assert f.result().status == 201
    ttls = [redis.cmd("PTTL", k) for k in record_keys(redis)]
    assert ttls and all(3600 * 1000 - 15000 < t <= 3600 * 1000 for t in ttls), ttls


def test_a_call_longer_than_retention_keeps_its_claim(start_proxy, upstream):
    """An upstream call longer than `retention` keeps its claim (each renewal extends the
    key's TTL): the retry sent past `retention` replays, the upstream runs once."""
    p = start_proxy(lease="1s", retention="2s", wait_timeout="10s")
    k = new_key()
    slow = [("X-Demo-Delay-Ms", "4000")]
    result = {}
    t = threading.Thread(target=lambda: result.update(first=p.post(key=k, headers=slow)))
    t.start()
    wait_until(lambda: upstream.executions(k) == 1, what="the first at the upstream")
    hold(3.0, "past retention (2 s), counted from the claim; the first is still at the upstream")
    retry = p.post(key=k, headers=slow)
    t.join(15)
    assert result["first"].status == 201
    assert retry.status == 201 and retry.replayed, retry
    assert retry.body == result["first"].body
    assert upstream.executions(k) == 1


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
    rid = assert_outcome_unknown(f.result(), replayed=False)
    # the waiter read the held record: an answer from a hold, counted
    assert_outcome_unknown(second, replayed=True, record_id=rid)
    assert metric_sum(p, HELD) == 1
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
    wait_waiting(p2, 1)
    p1.kill()
    with pytest.raises((HTTPError, OSError)):
        f.result()
    r = waiter.result()
    # the lease runs out while it waits: the outcome is unknown (on_ambiguous: hold)
    assert_outcome_unknown(r, replayed=True)
    assert r.elapsed < 4, "the waiter should notice the expired lease: %r" % r
    assert upstream.total() == 1


# --------------------------------------------------------------------------
# a proxy that crashes mid-flight
# --------------------------------------------------------------------------

@pytest.mark.slow
def test_proxy_crash_mid_flight_is_outcome_unknown_after_the_lease(start_proxy, upstream):
    """kill -9 mid-request: the retry at another proxy after the lease gets 502 outcome-unknown,
    and idempotency_proxy_outcome_unknown_total counts that answer (docs/operations.md#metrics),
    though no record was written in that state."""
    p1 = start_proxy(lease="1s")
    p2 = start_proxy(lease="1s")
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "3000")]
    f = in_background(p1.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1)
    p1.kill()
    with pytest.raises((HTTPError, OSError)):
        f.result()
    assert metric_sum(p2, "idempotency_proxy_outcome_unknown_total") == 0
    hold(1.6, "the lease (1 s) of the killed proxy's claim runs out")
    r = p2.post(key=key, headers=hs)
    rid = assert_outcome_unknown(r, replayed=True)
    assert upstream.total() == 1
    assert metric_sum(p2, "idempotency_proxy_outcome_unknown_total") == 1
    assert metric_sum(p2, HELD) == 1
    # the record the retry names is the one the dead proxy's request told the upstream of
    assert upstream_record_ids(upstream, key) == [[rid]]


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
    hold(1.6, "the lease (1 s) of the killed proxy's claim runs out: the retries find it expired")
    rs = concurrently(8, lambda i: p2.post(key=key, headers=[("X-Demo-Delay-Ms", "300")]))
    assert upstream.total() == 2, "the take-over must execute exactly once"
    assert {r.status for r in rs} == {201}, rs
    assert sum(not r.has_header("Idempotent-Replayed") for r in rs) == 1
    assert len({r.body for r in rs}) == 1
    # the take-over's execution carries the record id too: the same record, told twice
    rid = record_id_cli(p2, "/v1/payments", key)[0]["record_id"]
    assert upstream_record_ids(upstream, key) == [[rid], [rid]]
