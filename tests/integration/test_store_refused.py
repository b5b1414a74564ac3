"""Integration tests of writes that Redis refuses for a moment (README "Failure modes").

A primary without a synced replica under `min-replicas-to-write 1` answers every write
with NOREPLICAS (as do CLUSTERDOWN, TRYAGAIN, BUSY, READONLY, LOADING and MASTERDOWN in
their cases): the write did not run, and the same write succeeds once Redis takes writes
again. A claim refused that way fails its request (503, nothing claimed); an owner's
record write, release or lease renewal is sent again every 200 ms while its lease holds,
and the queued webhook inbox's records and settlements likewise, so a refusal shorter
than the lease never lets a key execute twice, nor leaves a known answer unrecorded.

The refusal is real: `CONFIG SET min-replicas-to-write 1` on a redis-server without a
replica, reset to 0 later, from the test or (to meet exactly one command) from
redis_gate.py just before that command goes on to Redis.
"""

import threading
import time
import uuid

import pytest

from harness import hold_until, log_line, wait_until
from inbox_helpers import (
    deliver, inbox, inbox_empty, inbox_ok, new_secret, queued_route, start_inbox_proxy,
    stripe_body,
)
from proxy_helpers import assert_problem, in_background, metric, new_key, record_keys
from redis_gate import RedisGate

LEASE_DEADLINE = slice(68, 84)  # proxy/idem/record.h: the lease deadline, ms since the epoch


def refuse_writes(redis):
    assert redis.cmd("CONFIG", "SET", "min-replicas-to-write", "1") == "OK"


def take_writes(redis):
    assert redis.cmd("CONFIG", "SET", "min-replicas-to-write", "0") == "OK"


def the_record(redis):
    keys = record_keys(redis, "idem:", inbox=False)
    assert len(keys) == 1, keys
    return redis.cmd("GET", keys[0])


def lease_deadline_ms(redis):
    v = the_record(redis)
    return int(v[LEASE_DEADLINE]) if v is not None and v[3] == "C" else None


def refused_at_the_upstream(p, redis, upstream, key, headers, refusal_s):
    """POST key (headers steer the upstream); while it is at the upstream Redis refuses
    writes for refusal_s, and at least until the proxy's write after it met the refusal.
    Returns (the first answer, which comes meanwhile; monotonic time the request was sent)."""
    t0 = time.monotonic()
    first = in_background(p.post, key=key, headers=headers)
    wait_until(lambda: upstream.executions(key) == 1, what="the payment at the upstream")
    refuse_writes(redis)
    refused = time.monotonic()
    r1 = first.result(timeout=10)
    log_line(p, "the record write failed (refused for now)")
    hold_until(refused + refusal_s, "Redis refuses writes for refusal_s: the write is sent "
               "again every 200 ms meanwhile")
    take_writes(redis)
    return r1, t0


@pytest.fixture
def writes_back(redis):
    """Whatever a test leaves behind, Redis takes writes again at its end."""
    yield
    take_writes(redis)


@pytest.mark.parametrize("on_ambiguous", ["release", "hold"])
def test_a_record_write_refused_for_a_moment_is_recorded(start_proxy, upstream, redis,
                                                         writes_back, on_ambiguous):
    """The field report: one Redis, lease 5 s, a payment at the upstream for 2 s; meanwhile
    `min-replicas-to-write 1` (no replica), reset 2 s later. The client gets its 201, the
    refused record write is sent again until Redis takes it, and a retry after the lease
    would have ended gets the replay: under release the upstream ran once (not twice),
    under hold it is no 502 outcome-unknown."""
    p = start_proxy(lease="5s", on_ambiguous=on_ambiguous)
    key = new_key()
    r1, t0 = refused_at_the_upstream(p, redis, upstream, key, [("X-Demo-Delay-Ms", "2000")], 2.0)
    assert r1.status == 201 and not r1.replayed, r1
    hold_until(t0 + 5.5, "the claim's 5 s lease would be over: a retry then would execute "
               "again if nothing was recorded")
    r2 = p.post(key=key)
    assert r2.status == 201 and r2.replayed, r2
    assert r2.body == r1.body
    assert upstream.executions(key) == 1
    assert the_record(redis)[3] == "D"
    log = p.stderr_text()
    assert "the record write failed (refused for now)" in log, log[-3000:]
    assert "could not be recorded" not in log, log[-3000:]


def test_a_renewal_refused_longer_than_the_lease_keeps_the_claim(start_proxy, upstream, redis,
                                                                 writes_back):
    """Lease 6 s (renewed every 2 s), the payment at the upstream for 11 s, writes refused
    for 6.5 s from just after a renewal: the claim's lease runs out in Redis meanwhile, but
    nobody can take a refused primary's record over either. Once Redis takes writes again
    the renewal is sent within 200 ms (not at the next lease/3), so a retry right after
    finds a live lease, waits, and gets the replay: the upstream ran once
    (on_ambiguous: release, where an expired lease would be taken over and run again)."""
    p = start_proxy(lease="6s", on_ambiguous="release")
    key = new_key()
    first = in_background(p.post, key=key, headers=[("X-Demo-Delay-Ms", "11000")])
    wait_until(lambda: upstream.executions(key) == 1, what="the payment at the upstream")
    claimed = lease_deadline_ms(redis)
    wait_until(lambda: (lease_deadline_ms(redis) or 0) > claimed, interval=0.02,
               what="the first renewal")
    renewed = time.monotonic()
    refuse_writes(redis)
    hold_until(renewed + 6.5, "writes refused past the 6 s lease: it runs out in Redis")
    assert lease_deadline_ms(redis) < time.time() * 1000, "the lease did not run out in Redis"
    take_writes(redis)
    back = time.monotonic()
    # a bound on the renewal, then the retry (which a lapsed lease would let execute)
    try:
        wait_until(lambda: lease_deadline_ms(redis) > time.time() * 1000, 1.0, interval=0.02,
                   what="the lease renewed")
    except AssertionError:
        pass
    renewed_after = time.monotonic() - back
    r2 = p.post(key=key, timeout=20)
    r1 = first.result(timeout=20)
    assert r1.status == 201 and not r1.replayed, r1
    assert r2.status == 201 and r2.replayed and r2.body == r1.body, (r2, renewed_after)
    assert upstream.executions(key) == 1, renewed_after
    log = p.stderr_text()
    assert "lease renewal failed (refused for now); retrying every 200 ms" in log, log[-3000:]


def test_a_release_refused_for_a_moment_is_released(start_proxy, upstream, redis, writes_back):
    """The upstream answers a release status (503: it did nothing) while Redis refuses
    writes: the release is sent again until Redis takes it, so the claim is gone soon
    after and the retry executes once, rather than waiting out the lease and reading
    "outcome unknown" (on_ambiguous: hold, the default)."""
    p = start_proxy(lease="5s")
    key = new_key()
    r1, _ = refused_at_the_upstream(p, redis, upstream, key, [("X-Demo-Delay-Ms", "1000"),
                                                             ("X-Demo-Status", "503")], 1.5)
    assert r1.status == 503 and not r1.replayed, r1
    # released once Redis takes writes again: the bound (2.5 s, up to when the 5 s lease would
    # end) is what tells a release sent again from a claim left to its lease
    wait_until(lambda: record_keys(redis, "idem:", inbox=False) == [], timeout=2.5,
               what="the claim released")
    r2 = p.post(key=key)
    assert r2.status == 201 and not r2.replayed, r2
    assert upstream.executions(key) == 2  # the 503 that did nothing, and the retry


def test_a_claim_refused_for_a_moment_fails_its_request(start_proxy, upstream, redis,
                                                        writes_back):
    """A claim (SET NX) that gets NOREPLICAS did not run: 503 store-unavailable, nothing
    forwarded, nothing claimed; once Redis takes writes the same key executes once."""
    p = start_proxy()
    key = new_key()
    refuse_writes(redis)
    assert_problem(p.post(key=key), 503, "store-unavailable")
    assert upstream.executions(key) == 0
    assert record_keys(redis, "idem:", inbox=False) == []
    take_writes(redis)
    r = p.post(key=key)
    assert r.status == 201 and not r.replayed, r
    assert upstream.executions(key) == 1


# ---- the queued webhook inbox ---------------------------------------------------

def refusal_for(redis, seconds):
    """An action for RedisGate.before_next: refuse writes now, take them again later."""
    def act():
        refuse_writes(redis)
        threading.Timer(seconds, take_writes, args=(redis,)).start()
    return act


@pytest.fixture
def gated_inbox(start_proxy, receiver_factory, redis, writes_back):
    """(proxy, receiver, secret, gate): a queued route, its Redis behind redis_gate.py."""
    gate = RedisGate(redis.port).start()
    try:
        receiver = receiver_factory()
        secret = new_secret()
        p = start_proxy(routes=[queued_route(secret)], upstream_url=receiver.url,
                        upstream={"timeout": "60s"}, env={"STRIPE_SECRET": secret},
                        redis={"url": gate.url}, workers=1)
        wait_until(lambda: inbox_ok(p) and p.admin("GET", "/readyz").status == 200,
                   what="ready, the group made")
        yield p, receiver, secret, gate
    finally:
        gate.stop()


def refused_delivery(gated, redis, names, containing=None):
    """Deliver a new event; Redis refuses writes for 1 s from the first command named one of
    names (and holding `containing`) on. Returns (the event id, the provider's answer)."""
    p, _, secret, gate = gated
    evt = "evt_" + uuid.uuid4().hex
    gate.before_next(names, refusal_for(redis, 1.0), containing=containing)
    r = deliver(p, secret, stripe_body(evt))
    assert gate.acted.wait(5), "no %s came" % (names,)
    return evt, r


def test_queued_ack_record_refused_for_a_moment_is_recorded(gated_inbox, redis):
    """The delivery is in the stream, then Redis refuses the record of the 202 for a
    second (NOREPLICAS, met exactly by that write): the provider gets its 202 at once (the
    dedupe is only delayed, not lost), the record lands once Redis takes writes, a
    duplicate delivery gets the stored 202, and the receiver gets the event once."""
    p, receiver, secret, _ = gated_inbox
    # the record's key is `idem:{<record id>}`; the inbox's scripts name `idem:inbox:{`
    evt, r = refused_delivery(gated_inbox, redis, ("EVALSHA", "EVAL"), containing=b"idem:{")
    assert r.status == 202 and not r.replayed, r
    wait_until(lambda: any(redis.cmd("GET", k)[3] == "D"
                           for k in record_keys(redis, "idem:", inbox=False)),
               what="the 202 recorded")
    assert "the record write failed (refused for now)" in p.stderr_text()
    dup = deliver(p, secret, stripe_body(evt))
    assert dup.status == 202 and dup.replayed, dup
    wait_until(lambda: metric(p, "idempotency_proxy_inbox_delivered_total") == 1,
               what="delivered")
    # settled: nothing left in the stream, pending or scheduled that could reach the receiver
    wait_until(lambda: inbox_empty(p), what="the inbox empty")
    assert [a["event"] for a in receiver.attempts()] == [evt]


def test_queued_append_refused_is_503_and_its_release_is_not_lost(gated_inbox, redis):
    """The XADD is refused (NOREPLICAS), and so, at first, is the release of the claim:
    the provider gets 503, the release is sent again until Redis takes it, and the
    provider's retry right after is queued (202) instead of waiting out the lease."""
    p, receiver, secret, _ = gated_inbox
    evt, r = refused_delivery(gated_inbox, redis, ("XADD",))
    assert r.status == 503 and b"could not be queued" in r.body, r
    # released once Redis takes writes (the wait's bound is well inside the 60 s lease, which
    # would end the claim otherwise)
    wait_until(lambda: record_keys(redis, "idem:", inbox=False) == [], what="the claim released")
    r = deliver(p, secret, stripe_body(evt))
    assert r.status == 202 and not r.replayed, r
    wait_until(lambda: [a["event"] for a in receiver.attempts()] == [evt],
               what="delivered once")


def test_queued_settlement_refused_for_a_moment_is_sent_again_not_redelivered(
        start_proxy, receiver_factory, redis, writes_back):
    """The receiver's 2xx comes while Redis refuses writes: the acknowledgement (XACK and
    XDEL) is sent again until Redis takes it, and the entry is neither lost nor delivered
    a second time."""
    receiver = receiver_factory(delay=1.0)
    secret = new_secret()
    p = start_inbox_proxy(start_proxy, receiver, secret)
    wait_until(lambda: inbox_ok(p), what="the group")
    evt = "evt_" + uuid.uuid4().hex
    assert deliver(p, secret, stripe_body(evt)).status == 202
    wait_until(lambda: receiver.attempts(), interval=0.02, what="in delivery")
    refuse_writes(redis)
    # the receiver answers 2xx after 1 s: the acknowledgement is refused
    log_line(p, "failed to settle it")
    take_writes(redis)
    wait_until(lambda: metric(p, "idempotency_proxy_inbox_delivered_total") == 1,
               interval=0.1, what="acknowledged once Redis takes writes")
    stats = inbox(p)
    assert stats["pending"] == 0 and stats["depth"] == 0, stats
    assert "failed to settle it" in p.stderr_text()
    # acknowledged and deleted: nothing is left that could be delivered again
    assert stats["scheduled"] == 0, stats
    assert [a["event"] for a in receiver.attempts()] == [evt]
