"""Replicated claims (README "Redis in production", "Replicated claims"): with
`redis.min_replicas: N` a won claim is forwarded only once `WAIT N replica_timeout`
on its own connection says N replicas hold it; fewer, or a failed WAIT, is
`503 store-unavailable` with the claim released and nothing forwarded. After the
record is written a second WAIT only counts a shortfall. Claims of one loop turn
share one WAIT.

Real processes only: a redis-server primary and a replica started with --replicaof
on loopback ports (a frozen replica is SIGSTOPped), the demo upstream, the proxy.
"""

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import (
    REPLICAS_SHORT, TEST_WORKERS, RedisServer, _resp_encode, hold, readyz, unready_reason,
    wait_ready, wait_until,
)
from proxy_helpers import (
    assert_problem, bearer, metric, new_key, new_token, parse_exposition, promtool_check,
    promtool_path, record_keys, reload_and_wait, rewrite, run_check, token_file,
)
from redis_gate import RedisGate
from redis_topology import ACL_RULES, acl_setuser, in_sync, replica_pair

RECORD_STATE_OFFSET = 3  # proxy/idem/record.h


def shortfalls(p, phase):
    return metric(p, "idempotency_proxy_wait_shortfalls_total", phase=phase, absent=0, unique=True)


def wait_calls(redis):
    """How many WAIT commands redis ran since the last CONFIG RESETSTAT."""
    info = redis.cmd("INFO", "commandstats")
    m = re.search(r"^cmdstat_wait:calls=(\d+)", info, re.M)
    return int(m.group(1)) if m else 0


def role_calls(redis):
    """ROLE commands redis ran (INFO commandstats) since its last CONFIG RESETSTAT."""
    m = re.search(r"^cmdstat_role:calls=(\d+)", redis.cmd("INFO", "commandstats"), re.M)
    return int(m.group(1)) if m else 0


def clients(redis):
    """CLIENT LIST as one {field: value} per connection, the asking one left out."""
    out = []
    for line in redis.cmd("CLIENT", "LIST").splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("cmd") != "client|list":
            out.append(fields)
    return out


def proxy_clients(primary):
    """The proxy's connections to primary (not its replicas' links: flag S)."""
    return [c for c in clients(primary) if "S" not in c.get("flags", "")]


def blocked_in_wait(primary):
    """The connections of primary blocked in a WAIT (flag b)."""
    return [c for c in clients(primary) if c.get("cmd") == "wait" and "b" in c["flags"]]


# the claim, `SET key value NX GET PX retention` (exchange_claim.c), with the default retention
RETENTION_MS = 24 * 3600 * 1000


def claims_reached_redis(primary, n):
    """All n claims the proxy sent reached primary: those it ran (their records are there)
    and the rest, queued behind the WAIT that blocks their connection, in its query buffer.
    A claim of a fresh key has record.h's fixed head, so every claim is as long as the first
    (a queued ROLE, one per connection at most, is shorter than a claim)."""
    keys = record_keys(primary)
    if not keys:
        return False
    one = len(_resp_encode(["SET", keys[0], primary.cmd("GET", keys[0]), "NX", "GET", "PX",
                            str(RETENTION_MS)]))
    queued = sum(int(c["qbuf"]) for c in blocked_in_wait(primary))
    return queued >= (n - len(keys)) * one


@pytest.fixture
def pair(tmp_path):
    with replica_pair(tmp_path) as pr:
        yield pr


@pytest.fixture
def linked_pair(tmp_path):
    """A primary and a replica that replicates through a RedisGate (link.cut(): a
    partition): (primary, replica, link)."""
    primary = RedisServer(str(tmp_path / "primary"),
                          extra_args=["--repl-diskless-sync-delay", "0"]).start()
    link = RedisGate(primary.port).start()
    replica = RedisServer(str(tmp_path / "replica"),
                          extra_args=["--replicaof", "127.0.0.1", str(link.port)]).start()
    try:
        wait_until(lambda: in_sync(primary, replica), interval=0.05,
                   what="the replica linked to the primary")
        yield primary, replica, link
    finally:
        link.stop()
        for srv in (replica, primary):
            srv.kill()


def start_replicated(start_proxy, primary, min_replicas=1, replica_timeout="1s", **kw):
    """A proxy on primary with min_replicas; a healthy replica confirms in well under a
    millisecond, the default 1s (redis.timeout 2s) only keeps a loaded machine from
    failing a claim the replica would confirm."""
    redis = {"url": primary.url, "min_replicas": min_replicas,
             "replica_timeout": replica_timeout, "timeout": "2s"}
    redis.update(kw.pop("redis", {}))
    p = start_proxy(redis=redis, **kw)
    wait_ready(p)
    return p


# --------------------------------------------------------------------------
# a replica that does not confirm
# --------------------------------------------------------------------------

def test_frozen_replica_gets_503_claim_released_nothing_forwarded(start_proxy, upstream, pair):
    primary, replica = pair
    p = start_replicated(start_proxy, primary, replica_timeout="200ms",
                         redis={"timeout": "500ms"})
    replica.pause()
    key = new_key()
    try:
        r = p.post(key=key)
        assert_problem(r, 503, "store-unavailable")
        assert r.header("Retry-After") == "1", r
        assert 0.15 <= r.elapsed < 1.5, "replica_timeout is 200ms: %r" % r
        assert upstream.executions(key) == 0 and upstream.total() == 0
        # the claim is released (owner-checked delete) on the primary
        wait_until(lambda: record_keys(primary) == [], what="the claim released")
        assert shortfalls(p, "claim") == 1
        assert "the claim reached 0 of 1 replicas" in p.stderr_text()
    finally:
        replica.resume()
    wait_until(lambda: in_sync(primary, replica), what="the replica caught up")
    first = p.post(key=key)
    assert first.status == 201, first
    again = p.post(key=key)
    assert again.replayed and again.body == first.body, again
    assert upstream.executions(key) == 1
    assert shortfalls(p, "claim") == 1


def start_two_replicas_wanted(start_proxy, primary, **kw):
    """A proxy on primary (one replica) with min_replicas 2, connected: its /readyz says
    what the store lacks, whatever the routes do about it."""
    p = start_proxy(redis={"url": primary.url, "min_replicas": 2, "replica_timeout": "100ms",
                           "timeout": "2s"}, **kw)
    wait_until(lambda: unready_reason(p) == REPLICAS_SHORT, what="/readyz 503")
    return p


def test_two_replicas_wanted_one_present_every_claim_refused(start_proxy, upstream, pair):
    """...and /readyz says so: a proxy that refuses every payment is not ready."""
    promtool_path()
    primary, _ = pair
    p = start_two_replicas_wanted(start_proxy, primary)
    for _ in range(3):
        assert_problem(p.post(key=new_key()), 503, "store-unavailable")
    assert upstream.total() == 0
    wait_until(lambda: record_keys(primary) == [], what="the claims released")
    body = p.admin("GET", "/metrics").body
    promtool_check(body)
    types, samples = parse_exposition(body.decode())
    assert types["idempotency_proxy_wait_shortfalls_total"] == "counter"
    assert types["idempotency_proxy_replica_wait_duration_seconds"] == "histogram"
    assert shortfalls(p, "claim") == 3 and shortfalls(p, "record") == 0
    assert metric(p, "idempotency_proxy_replica_wait_duration_seconds_count",
                  absent=0, unique=True) == 3
    assert metric(p, "idempotency_proxy_requests_total",
                  outcome="store-error", absent=0, unique=True) == 3
    assert re.search(r"the claim reached [01] of 2 replicas", p.stderr_text())


def test_on_store_error_pass_forwards_once_with_the_claim_kept(start_proxy, upstream, pair):
    """pass: a shortfall is a store failure the route accepted; the request is forwarded
    with its (unreplicated) claim, recorded, and a retry is replayed, never re-executed."""
    primary, _ = pair
    p = start_two_replicas_wanted(start_proxy, primary, on_store_error="pass")
    key = new_key()
    first = p.post(key=key)
    assert first.status == 201, first
    again = p.post(key=key)
    assert again.replayed and again.body == first.body, again
    assert upstream.executions(key) == 1
    assert shortfalls(p, "claim") == 1
    assert metric(p, "idempotency_proxy_store_error_passes_total", absent=0, unique=True) == 1


def test_wait_that_times_out_fails_closed_and_the_claim_is_released(start_proxy, upstream,
                                                                     pair):
    """The WAIT itself is held back past redis.timeout: it times out at the proxy (the
    connection drops), so the claim may or may not be replicated: 503, nothing forwarded,
    and the claim is released once Redis answers again (the release goes out on the next
    connection, or from the janitor)."""
    primary, _ = pair
    gate = RedisGate(primary.port).start()
    try:
        p = start_replicated(start_proxy, primary, replica_timeout="100ms",
                             redis={"url": gate.url, "timeout": "300ms"})
        key = new_key()
        gate.hold_next(("WAIT",), ms=700)
        r = p.post(key=key)
        assert_problem(r, 503, "store-unavailable")
        assert r.elapsed < 1.0, r
        assert upstream.total() == 0
        assert gate.delivered.wait(5), "the held WAIT never reached Redis"
        wait_until(lambda: record_keys(primary) == [], what="the claim released")
        assert "WAIT for 1 replicas failed (timeout)" in p.stderr_text()
        assert shortfalls(p, "claim") == 1
        wait_ready(p)
        assert p.post(key=key).status == 201
        assert p.post(key=key).replayed
        assert upstream.executions(key) == 1
    finally:
        gate.stop()


@pytest.mark.parametrize("min_replicas", [0, 1])
def test_failover_to_a_replica_that_missed_the_claim(start_proxy, upstream, linked_pair,
                                                     min_replicas):
    """A failover without Sentinel: the replication link is cut, a keyed POST arrives, the
    primary dies and the replica is promoted. min_replicas 0: the claim was acknowledged
    and forwarded, the promoted replica never had it, and the retry executes again (the
    double payment this setting exists for). min_replicas 1: the unconfirmed claim was
    refused before anything was forwarded, so the retry is the one execution."""
    primary, replica, link = linked_pair
    a = start_replicated(start_proxy, primary, min_replicas=min_replicas, name="a")
    key = new_key()
    link.cut()
    first = a.post(key=key)
    a.kill()  # the primary's machine is lost, and proxy a with it
    primary.kill()
    replica.cmd("REPLICAOF", "NO", "ONE")
    b = start_proxy(redis={"url": replica.url}, name="b")
    wait_ready(b)
    retry = b.post(key=key)
    assert retry.status == 201 and not retry.replayed, retry
    if min_replicas == 0:
        assert first.status == 201, first
        assert upstream.executions(key) == 2
    else:
        assert_problem(first, 503, "store-unavailable")
        assert upstream.executions(key) == 1
        assert b.post(key=key).replayed
        assert upstream.executions(key) == 1


# --------------------------------------------------------------------------
# a replica that confirms
# --------------------------------------------------------------------------

def test_healthy_replica_forwarded_once_and_replayed(start_proxy, upstream, pair):
    primary, replica = pair
    p = start_replicated(start_proxy, primary)
    key = new_key()
    first = p.post(key=key)
    assert first.status == 201, first
    again = p.post(key=key)
    assert again.replayed and again.body == first.body, again
    assert upstream.executions(key) == 1
    wait_until(lambda: record_keys(replica) == record_keys(primary) != [],
               what="the record on the replica")
    assert shortfalls(p, "claim") == 0 and shortfalls(p, "record") == 0
    assert metric(p, "idempotency_proxy_replica_wait_duration_seconds_count",
                  absent=0, unique=True) == 1


def test_claim_is_on_the_replica_before_the_upstream_sees_the_request(start_proxy, upstream,
                                                                      pair):
    """The replica is frozen when the claim is won: the upstream gets nothing until it
    resumes and confirms; when the upstream counts the request, the replica already
    holds the claim (state C)."""
    primary, replica = pair
    p = start_replicated(start_proxy, primary, replica_timeout="2s",
                         redis={"timeout": "4s"})
    key = new_key()
    replica.pause()
    with ThreadPoolExecutor(1) as ex:
        try:
            fut = ex.submit(p.post, key=key, headers=[("X-Demo-Delay-Ms", "1500")], timeout=10)
            wait_until(lambda: record_keys(primary) != [], what="the claim")
            wait_until(lambda: blocked_in_wait(primary), what="the claim's WAIT blocked")
            hold(0.4, "a span in which the request must not reach the upstream: the claim's "
                      "WAIT is blocked on the frozen replica")
            assert upstream.executions(key) == 0, "forwarded before a replica had the claim"
        finally:
            replica.resume()
        wait_until(lambda: upstream.executions(key) == 1, interval=0.005,
                   what="the upstream got the request")
        held = record_keys(replica)
        assert len(held) == 1, held
        value = replica.cmd("GET", held[0])
        assert value[RECORD_STATE_OFFSET] == "C", value[:40]
        first = fut.result()
    assert first.status == 201, first
    assert p.post(key=key).replayed
    assert upstream.executions(key) == 1
    assert shortfalls(p, "claim") == 0


def test_record_shortfall_is_counted_and_does_not_delay_the_answer(start_proxy, upstream,
                                                                   pair):
    primary, replica = pair
    p = start_replicated(start_proxy, primary, replica_timeout="3s", redis={"timeout": "6s"})
    key = new_key()
    with ThreadPoolExecutor(1) as ex:
        try:
            fut = ex.submit(p.post, key=key, headers=[("X-Demo-Delay-Ms", "500")], timeout=10)
            wait_until(lambda: upstream.executions(key) == 1, what="forwarded")
            replica.pause()  # the claim was confirmed; the record will not be
            first = fut.result()
            assert first.status == 201, first
            # waiting for the record's WAIT would take 0.5 + 3 s
            assert first.elapsed < 2.5, "the record's WAIT (3s) must not delay: %r" % first
            assert shortfalls(p, "record") == 0
            wait_until(lambda: shortfalls(p, "record") == 1, what="the record's shortfall counted")
        finally:
            replica.resume()
    assert shortfalls(p, "claim") == 0
    assert "the record reached 0 of 1 replicas" in p.stderr_text()
    again = p.post(key=key)
    assert again.replayed and again.body == first.body, again
    assert upstream.executions(key) == 1


# --------------------------------------------------------------------------
# one WAIT per loop turn
# --------------------------------------------------------------------------

def test_claims_share_one_wait(start_proxy, upstream, pair):
    """40 fresh keys while the replica is frozen. The first claim's WAIT blocks the
    connection, so the other 39 SET NX wait behind it in Redis; when the replica resumes
    they are answered at once, in one loop turn, and share the next WAIT: 2 WAITs (3 if
    the claims straddle a turn) for 40 claims, where one per claim would be 40. Each
    worker thread has its own connection, so its own WAITs."""
    primary, replica = pair
    p = start_replicated(start_proxy, primary, replica_timeout="3s", redis={"timeout": "6s"})
    n = 40
    keys = [new_key("batch") for _ in range(n)]
    primary.cmd("CONFIG", "RESETSTAT")
    replica.pause()
    with ThreadPoolExecutor(n) as ex:
        try:
            futures = [ex.submit(p.post, key=k, headers=[("X-Demo-Delay-Ms", "2000")],
                                 timeout=20) for k in keys]
            wait_until(lambda: metric(p, "idempotency_proxy_in_flight_requests",
                                      absent=0, unique=True) == n,
                       what="every request received (its claim sent)")
            wait_until(lambda: claims_reached_redis(primary, n),
                       what="every claim in Redis, run or queued behind a blocked WAIT")
            assert upstream.total() == 0
        finally:
            replica.resume()
        wait_until(lambda: upstream.total() == n, what="every claim forwarded")
        claim_waits = wait_calls(primary)  # the records are not written yet (2 s)
        answers = [f.result() for f in futures]
    assert [a.status for a in answers] == [201] * n, answers
    assert all(upstream.executions(k) == 1 for k in keys)
    workers = int(TEST_WORKERS or 1)
    assert 1 < claim_waits <= 3 * workers, "%d WAITs for %d claims" % (claim_waits, n)
    assert shortfalls(p, "claim") == 0


# --------------------------------------------------------------------------
# the ACL of README "Redis in production"
# --------------------------------------------------------------------------

def test_acl_user_with_the_documented_commands_waits_for_replicas(start_proxy, upstream, pair):
    primary, _ = pair
    acl_setuser(primary, "idem-proxy", ">pw", *ACL_RULES)
    p = start_replicated(start_proxy, primary,
                         redis={"username": "idem-proxy", "password": "pw"})
    key = new_key()
    assert p.post(key=key).status == 201
    assert p.post(key=key).replayed
    assert upstream.executions(key) == 1
    denied = set()
    for entry in primary.cmd("ACL", "LOG"):
        denied.add(dict(zip(entry[::2], entry[1::2])).get("object"))
    assert denied <= {"config|get", "info"}, denied  # the maxmemory-policy check


def test_acl_user_without_wait_fails_closed(start_proxy, upstream, pair):
    primary, _ = pair
    acl_setuser(primary, "idem-proxy", ">pw", *[r for r in ACL_RULES if r != "+wait"])
    p = start_replicated(start_proxy, primary,
                         redis={"username": "idem-proxy", "password": "pw"})
    key = new_key()
    assert_problem(p.post(key=key), 503, "store-unavailable")
    assert upstream.total() == 0
    wait_until(lambda: record_keys(primary) == [], what="the claim released")
    assert "NOPERM" in p.stderr_text()
    assert shortfalls(p, "claim") == 1


# --------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------

def test_t_refuses_a_replica_timeout_over_half_of_redis_timeout(tmp_path):
    rc, out, path = run_check(tmp_path, "redis:\n  min_replicas: 1\n  replica_timeout: 300ms\n"
                                        "  timeout: 500ms\n")
    assert rc == 1, out
    assert "%s:2: redis.replica_timeout (300ms) must be at most half of redis.timeout " \
           "(500ms)" % path in out, out


def test_sighup_changing_min_replicas_needs_a_restart(start_proxy, upstream, pair):
    primary, _ = pair
    p = start_replicated(start_proxy, primary)
    rewrite(p, upstream, primary, redis={"min_replicas": 0, "replica_timeout": "1s",
                                         "timeout": "2s"})
    reload_and_wait(p, "reload refused")
    last = [l for l in p.stderr_text().splitlines() if "reload refused" in l][-1]
    assert "redis changed, which needs a restart" in last, last
    primary.cmd("CONFIG", "RESETSTAT")
    key = new_key()
    assert p.post(key=key).status == 201
    assert wait_calls(primary) >= 1, "the running min_replicas 1 still WAITs"


def test_readyz_follows_the_replicas_min_replicas_needs(start_proxy, upstream, pair):
    """A proxy whose claims all get 503 (too few replicas) must not report ready: a
    stopped replica turns /readyz 503 without any traffic, a frozen one from its first
    shortfall on (it is still listed, but its offset lags), and both come back once the
    replica has caught up, again without traffic."""
    primary, replica = pair
    p = start_replicated(start_proxy, primary, replica_timeout="200ms",
                         redis={"timeout": "500ms"})
    replica.pause()
    try:
        assert_problem(p.post(key=new_key()), 503, "store-unavailable")
        assert unready_reason(p) == REPLICAS_SHORT
        # two idle health checks (ROLE) on each of the proxy's connections, counted from now,
        # see the frozen replica listed, lagging
        roles, conns = role_calls(primary), len(proxy_clients(primary))
        wait_until(lambda: role_calls(primary) >= roles + 2 * conns,
                   what="two idle ROLEs on each connection")
        assert unready_reason(p) == REPLICAS_SHORT
    finally:
        replica.resume()
    wait_until(lambda: readyz(p) == 200, what="ready once the replica caught up")
    assert p.post(key=new_key()).status == 201
    replica.kill()
    wait_until(lambda: unready_reason(p) == REPLICAS_SHORT,
               what="/readyz 503 with the replica gone, no traffic")
    assert upstream.total() == 1


def test_a_frozen_replica_turns_readyz_503_without_traffic(start_proxy, upstream, tmp_path):
    """A replica that is connected but stalled stays listed by ROLE; /readyz stayed 200
    without traffic until Redis's repl-timeout dropped it (60 s), while every claim would
    get 503. Its acknowledged offset lags the primary's once the primary pings it (every
    repl-ping-replica-period; 1 s here, 10 s by default): not ready within 3 s of that."""
    with replica_pair(tmp_path, ["--repl-ping-replica-period", "1"]) as (primary, replica):
        p = start_replicated(start_proxy, primary)
        replica.pause()
        t = time.monotonic()
        wait_until(lambda: unready_reason(p) == REPLICAS_SHORT,
                   what="/readyz 503 for a frozen replica, no traffic")
        assert time.monotonic() - t < 8
        replica.resume()
        wait_until(lambda: readyz(p) == 200, what="ready once it caught up")
        assert p.post(key=new_key()).status == 201
        assert upstream.total() == 1


def test_an_extension_is_answered_once_min_replicas_hold_it(start_proxy, upstream, pair,
                                                            tmp_path):
    """An operator's extension that a failover loses lets the key expire when it was due, and
    a retry then executes: under min_replicas it is 200 only once the replicas hold it; with
    the replica frozen, 503 (the CLI's "could not tell"), and the primary has it."""
    primary, replica = pair
    token = new_token()
    p = start_replicated(start_proxy, primary, replica_timeout="300ms", redis={"timeout": "1s"},
                         retention="1h", admin_host="0.0.0.0",
                         admin_token_file=token_file(tmp_path, token))
    # a replica just synced acknowledges the stream from its next REPLCONF ACK on: until
    # then a claim falls short (503, nothing forwarded, nothing held)
    held = lambda: p.post(key=new_key(), headers=[("X-Demo-Fault", "close")])
    r = wait_until(lambda: [r for r in [held()] if r.status != 503], interval=0.2,
                   what="a claim the replica holds")[0]
    assert r.status == 502, r
    rid = r.json()["record_id"]
    extend = lambda days: p.admin(
        "POST", "/records/%s/extend" % rid, headers=bearer(token),
        body=json.dumps({"seconds": days * 86400, "reason": "INC-19"}).encode())
    r = extend(2)
    assert r.status == 200 and r.json()["changed"] is True, r
    replica.pause()
    try:
        r = extend(3)
        assert r.status == 503 and "not confirmed" in r.json()["error"], r
        assert int(primary.cmd("PTTL", "idem:{%s}" % rid)) > 2 * 86400 * 1000 + 3600 * 1000
    finally:
        replica.resume()
    wait_until(lambda: in_sync(primary, replica), what="the replica caught up")
    r = extend(4)
    assert r.status == 200 and r.json()["changed"] is True, r
