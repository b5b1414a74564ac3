"""Re-assertion after a failover (docs/redis.md "Re-assertion after a failover"): each worker
keeps its own recent writes and puts back, owner-checked, what a new primary lost, before any
new claim; for redis.reassert.grace it refuses new claims.

A Redis without persistence restarted on its port is the simplest new primary: it comes back
empty with another replication ID, as a managed node does after a failover to an empty
replacement. Real processes only: redis-server (or $IDEM_REDIS_SERVER), the demo upstream,
the proxy. The failover under load with replicas and two proxies is test_managed_redis.py's.
"""

import contextlib
import threading

import pytest

from harness import log_line, log_lines, wait_ready, wait_until
from proxy_helpers import assert_problem, metric, new_key, record_keys
from redis_gate import RedisGate
from redis_topology import acl_setuser


def reasserted(p, result):
    return metric(p, "idempotency_proxy_redis_reasserted_total", {"result": result}) or 0


def restart_empty(redis):
    """The node dies and comes back on its port with nothing (no AOF, no snapshot)."""
    redis.kill()
    redis.start()
    assert redis.keys("*") == []


def start(start_proxy, redis, window="30s", grace="1s", redis_section=None, **kw):
    """A proxy with re-assertion on redis (its redis section: redis_section over that), ready."""
    section = {"url": redis.url, "reassert": {"window": window, "grace": grace}}
    section.update(redis_section or {})
    p = start_proxy(redis=section, **kw)
    wait_ready(p)
    return p


def assert_replays_once(p, upstream, key):
    """Once the proxy takes claims again, key's retry is a replay and ran once."""
    wait_ready(p)
    r = p.post(key=key)
    assert r.status == 201 and r.replayed, r
    assert upstream.executions(key) == 1


@contextlib.contextmanager
def back_empty_while_its_setup_is_held(start_proxy, redis, grace, promoted=False, **kw):
    """A proxy through a RedisGate finished a key; the node comes back empty (promoted: as a
    promoted replica, REPLICAOF and REPLICAOF NO ONE giving it a second replication ID, as
    after a failover), and the proxy's new connection is held at ROLE (its answers from
    there wait in the gate: it has not followed yet). Yields (gate, proxy, key)."""
    gate = RedisGate(redis.port).start()
    try:
        p = start(start_proxy, redis, grace=grace,
                  redis_section={"url": gate.url, "timeout": "5s"}, **kw)
        key = new_key()
        assert p.post(key=key).status == 201
        redis.kill()
        gate.hold_replies(from_command="ROLE")
        redis.start()
        if promoted:
            redis.cmd("REPLICAOF", "127.0.0.1", "1")  # nothing there: it stays empty
            redis.cmd("REPLICAOF", "NO", "ONE")
            assert "master_replid2:" + "0" * 40 not in redis.cmd("INFO", "replication")
        wait_until(gate.held_replies, what="the proxy's new connection held at ROLE")
        yield gate, p, key
    finally:
        gate.stop()


@pytest.mark.threads
def test_a_node_back_empty_gets_the_recent_writes_back(start_proxy, upstream, redis):
    """A finished key's record is lost with the node; the proxy follows the new replication ID,
    puts the record back with the time to live it had left, and the retry replays it."""
    p = start(start_proxy, redis, workers=2)
    stores = len(log_lines(p, "ready (primary"))  # the workers' and the admin worker's
    assert stores == 3
    key = new_key()
    assert p.post(key=key).status == 201
    [record] = record_keys(redis)
    ttl_before = int(redis.cmd("PTTL", record))
    restart_empty(redis)
    log_line(p, "a new primary (another replication ID)", "putting back")
    wait_until(lambda: len(log_lines(p, "ready (primary")) == 2 * stores,
               what="every store on the node again")
    wait_ready(p)
    # each serving worker puts back its journal; the admin worker claims nothing: no grace
    assert len(log_lines(p, "putting back")) == 2
    assert not log_lines(p, "first connection"), "a node never promoted: no grace at start"
    # the counter moves when the put-back's answer arrives, after the log line
    wait_until(lambda: reasserted(p, "restored") >= 1, what="the put-back answered: restored")
    assert record_keys(redis) == [record]
    assert 0 < int(redis.cmd("PTTL", record)) <= ttl_before
    assert_replays_once(p, upstream, key)
    assert metric(p, "idempotency_proxy_redis_failovers_followed_total") >= 1


def test_control_without_reassertion_the_retry_runs_again(start_proxy, upstream, redis):
    """The same with redis.reassert.window 0s: the record is gone and the retry executes a
    second time (what re-assertion is for; so the test above can fail)."""
    p = start(start_proxy, redis, window="0s")
    key = new_key()
    assert p.post(key=key).status == 201
    restart_empty(redis)
    wait_ready(p)
    assert not log_lines(p, "putting back")
    r = wait_until(lambda: (lambda r: r if r.status != 503 else None)(p.post(key=key)),
                   what="a keyed answer once the proxy is back")
    assert r.status == 201 and not r.replayed, r
    assert upstream.executions(key) == 2


def test_the_grace_refuses_new_claims_then_serves(start_proxy, upstream, redis):
    """For redis.reassert.grace after it follows a new primary, a fresh key gets 503
    store-unavailable with Retry-After, never forwarded, and /readyz says why; then it is
    served."""
    p = start(start_proxy, redis, grace="10s")  # a bound for what it refuses meanwhile
    assert p.post(key=new_key()).status == 201
    restart_empty(redis)
    log_line(p, "putting back", "new claims refused for 10000 ms")
    key = new_key()
    r = p.post(key=key)
    assert_problem(r, 503, "store-unavailable")
    assert r.header("Retry-After")
    assert upstream.executions(key) == 0
    # once every store is back on the node (the admin worker's reconnects too), the grace
    # is what /readyz names
    wait_until(lambda: b"putting back recent writes" in p.admin("GET", "/readyz").body,
               what="/readyz naming the grace")
    assert p.admin("GET", "/readyz").status == 503


def test_the_grace_ends(start_proxy, upstream, redis):
    p = start(start_proxy, redis, grace="1s")
    restart_empty(redis)
    log_line(p, "putting back")
    wait_ready(p)
    key = new_key()
    assert p.post(key=key).status == 201
    assert upstream.executions(key) == 1


def test_the_same_node_reached_again_is_not_a_new_primary(start_proxy, upstream, redis):
    """A dropped connection to the same node (same replication ID): no put-back, no grace,
    no failover counted."""
    p = start(start_proxy, redis, grace="3s")
    assert p.post(key=new_key()).status == 201
    redis.cmd("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    wait_until(lambda: len(log_lines(p, "ready (primary")) >= 2, what="the proxy reconnected")
    wait_ready(p)
    key = new_key()
    assert p.post(key=key).status == 201
    assert not log_lines(p, "putting back")
    assert metric(p, "idempotency_proxy_redis_failovers_followed_total") == 0


def test_a_claim_in_flight_is_put_back_and_its_answer_recorded(start_proxy, upstream, redis):
    """The node dies while a request is at the upstream: its claim is put back on the new
    node, so the answer is recorded (owner-checked) and the retry replays it, once."""
    p = start(start_proxy, redis, grace="1s")
    key = new_key()
    answers = []
    t = threading.Thread(target=lambda: answers.append(
        p.post(key=key, headers=[("X-Demo-Delay-Ms", "3000")], timeout=30)))
    t.start()
    wait_until(lambda: upstream.executions(key) == 1, what="the request at the upstream")
    restart_empty(redis)
    log_line(p, "putting back")
    t.join(30)
    assert answers and answers[0].status == 201, answers
    assert_replays_once(p, upstream, key)


def test_without_info_every_reconnection_is_taken_for_a_new_primary(start_proxy, upstream,
                                                                   redis):
    """An ACL user denied INFO: the replication ID cannot be read, so a reconnection to the
    same node is taken for a new primary (fail closed): the journal is put back, the grace
    applies, and the log says why."""
    acl_setuser(redis, "noinfo", "on", ">pw-noinfo-0123456789", "~*", "+@all", "-info")
    p = start_proxy(redis={"url": redis.url, "username": "noinfo",
                           "password": "pw-noinfo-0123456789",
                           "reassert": {"window": "30s", "grace": "1s"}})
    wait_ready(p)
    key = new_key()
    assert p.post(key=key).status == 201
    redis.cmd("CLIENT", "KILL", "USER", "noinfo")
    log_line(p, "INFO replication is refused: taken for a new primary", "putting back")
    # the log line is written when the journal is sent; the counter moves on its answer
    wait_until(lambda: reasserted(p, "present") >= 1, what="the put-back answered: present")
    assert_replays_once(p, upstream, key)



def test_a_put_back_cut_short_goes_again_on_the_same_node(start_proxy, upstream, redis):
    """The connection drops while the journal is being put back (its first put-back is held
    past redis.timeout): the next connection reaches the same node (same replication ID) and
    sends the whole journal again, so the record is back and the retry replays it."""
    gate = RedisGate(redis.port).start()
    try:
        p = start_proxy(redis={"url": gate.url, "timeout": "500ms",
                               "reassert": {"window": "30s", "grace": "1s"}})
        wait_ready(p)
        key = new_key()
        assert p.post(key=key).status == 201
        gate.hold_next(("EVALSHA", "EVAL"), ms=1500)
        restart_empty(redis)
        log_line(p, "could not put back a recent write", "goes again on the next connection")
        log_line(p, "the last put-back did not finish", "putting back")
        assert_replays_once(p, upstream, key)
    finally:
        gate.stop()


def test_a_claim_queued_during_the_setup_waits_for_the_put_back(start_proxy, upstream,
                                                                 redis):
    """The node comes back empty, and a retry arrives while the new connection is being set
    up (its answers from ROLE on held), so it waits in the setup queue: once the connection
    is ready it is refused with the grace (503, unsent), never sent before the put-back (an
    empty node knows no script: an EVALSHA put-back would have been applied after it)."""
    with back_empty_while_its_setup_is_held(start_proxy, redis, "1s", workers=1) as \
            (gate, p, key):
        answers = []
        t = threading.Thread(target=lambda: answers.append(p.post(key=key, timeout=30)))
        t.start()
        wait_until(lambda: metric(p, "idempotency_proxy_in_flight_requests") >= 1,
                   what="the retry waiting for the connection")
        gate.release_replies()
        t.join(30)
        assert answers, "the retry got no answer"
        assert answers[0].status == 503 or answers[0].replayed, answers[0]
        assert_replays_once(p, upstream, key)


def test_a_write_larger_than_the_journal_leaves_the_others_in_it(start_proxy, upstream,
                                                                redis):
    """redis.reassert.max_bytes smaller than one answer: that record alone is left out
    (counted), the small one before it is still put back."""
    p = start_proxy(workers=1, redis={"url": redis.url, "reassert": {
        "window": "30s", "grace": "1s", "max_bytes": "64KiB"}})
    wait_ready(p)
    small, large = new_key(), new_key()
    assert p.post(key=small).status == 201
    assert p.post(key=large, headers=[("X-Demo-Size", "100000")]).status == 201
    assert metric(p, "idempotency_proxy_redis_reassert_dropped_total") == 1
    restart_empty(redis)
    log_line(p, "putting back")
    assert_replays_once(p, upstream, small)


def test_a_proxy_that_starts_waits_the_grace_for_the_others_put_back(start_proxy, upstream,
                                                                     redis):
    """Proxy A finished a key; the node comes back empty, as a promoted replica (REPLICAOF and
    REPLICAOF NO ONE: a second replication ID, as after a failover), and A has not followed
    yet (its new connection's setup held at ROLE). Proxy B starts now: its first primary was
    promoted, perhaps just now, so it refuses new claims for the grace (503, never forwarded)
    instead of running A's key afresh; once A has put it back, B replays it."""
    with back_empty_while_its_setup_is_held(start_proxy, redis, "5s", promoted=True,
                                            name="a") as (gate, a, key):
        b = start_proxy(redis={"url": redis.url, "reassert": {"window": "30s", "grace": "5s"}},
                        name="b")
        log_line(b, "first connection, to a promoted replica: new claims refused for 5000 ms")
        r = b.post(key=key)
        assert_problem(r, 503, "store-unavailable")
        assert upstream.executions(key) == 1
        gate.release_replies()
        log_line(a, "putting back")
        assert_replays_once(b, upstream, key)
