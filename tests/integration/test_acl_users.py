"""The ACL users of docs/redis.md ("ACL users"), each run as that user.

The lines are read from the page, so the page cannot drift from what the proxy sends. For
each feature the proxy runs as the documented user on real servers, and the test checks:

- that the feature works end to end (answers, executions, deliveries, failover);
- that Redis denied the user nothing but the optional `maxmemory-policy` probes (`ACL LOG`);
- on data nodes, that every command of the line was executed during the run
  (`INFO commandstats`, reset before the proxy started, no other client running those
  commands): so a line without any one of them gets `NOPERM`;
- at the sentinels, which keep no commandstats, that a line without each of its rules
  gets the denial in `ACL LOG`.

The ready-made access strings of docs/managed-redis.md ("Access strings"), which a managed
service takes without a password, are run the same way: a user given only the string and a
password, the proxy connecting as it.

The Sentinel and Cluster cases start topologies and carry the `topology` marker.
"""

import json
import re
import urllib.parse
import uuid

import pytest

from harness import (
    RedisError, documented_access_strings, documented_acl_rules, documented_acl_users, hold,
    log_line, readyz, wait_ready, wait_until,
)
from inbox_helpers import ROUTE, Receiver, deliver, new_secret, queued_route, stripe_body
from proxy_helpers import metric, record_id_cli
from redis_topology import (
    ClusterGroup, SentinelGroup, acl_setuser, cluster_redis, redirections, redis_cli, replica_pair,
)

USER = "idem-proxy"
PASSWORD = "acl-" + uuid.uuid4().hex[:12]
# what the proxy asks that a user may refuse: the maxmemory-policy check falls back or skips
OPTIONAL = {"config|get", "info"}
HEADINGS = ["Core user", "Core user with the eviction-policy check", "Redis Cluster user",
            "Webhook inbox user", "Sentinel user"]


# --------------------------------------------------------------------------
# the page and the servers
# --------------------------------------------------------------------------

def rules_of(heading, drop=()):
    """The rules of the documented line, with the test's password and without drop."""
    return [r for r in documented_acl_rules(heading, PASSWORD) if r not in drop]


def commands_of(rules):
    return [r[1:].lower() for r in rules if r.startswith("+")]


def set_user(server, rules):
    acl_setuser(server, USER, "reset", *rules)


def reset_counts(server):
    """Zero INFO commandstats and ACL LOG (before the proxy starts)."""
    server.cmd("CONFIG", "RESETSTAT")
    server.cmd("ACL", "LOG", "RESET")


def executed(server):
    """{command: calls} from INFO commandstats (subcommands as `config|get`)."""
    text = server.cmd("INFO", "commandstats")
    text = text.decode() if isinstance(text, bytes) else text
    return {m.group(1).lower(): int(m.group(2))
            for m in re.finditer(r"^cmdstat_([^:]+):calls=(\d+)", text, re.M)}


def denials(server):
    """{(reason, object)} that ACL LOG holds for the proxy's user."""
    out = set()
    for entry in server.cmd("ACL", "LOG", "128"):
        d = dict(zip(entry[0::2], entry[1::2]))
        d = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes)
                                                          else v) for k, v in d.items()}
        if d.get("username") == USER:
            out.add((d["reason"], str(d["object"]).lower()))
    return out


def assert_denied_only_optional(servers):
    denied = set().union(*(denials(s) for s in servers))
    unexpected = {d for d in denied if not (d[0] == "command" and d[1] in OPTIONAL)}
    assert not unexpected, "the documented user was refused %r" % sorted(unexpected)


def assert_every_command_ran(servers, rules, also_ran=()):
    """Every +command of rules executed on servers (or in also_ran: counted elsewhere)."""
    ran = {}
    for s in servers:
        for cmd, calls in executed(s).items():
            ran[cmd] = ran.get(cmd, 0) + calls
    unused = [c for c in commands_of(rules) if not ran.get(c) and c not in also_ran]
    assert not unused, "never run as the documented user (the test misses a feature, or " \
        "the page lists a command the proxy does not send): %r" % unused


def redis_as_user(url, **kw):
    return dict({"url": url, "username": USER, "password": PASSWORD}, **kw)


# the census of held records every second, so a test sees it walk the records it made
CENSUS = {"held_refresh": "1s"}


def census_walked(servers, db=0):
    """Waits for a census of held records that looked at a record key (its SCAN, and the
    GETRANGE of its script); its result is on one of servers (the others of a cluster answer
    MOVED)."""
    def walked():
        for server in servers:
            try:
                v = server.cmd("GET", "idem:census:{held}:result", db=db)
            except RedisError:
                continue
            if v is not None and json.loads(v)["keys"] > 0:
                return True
        return False
    wait_until(walked, what="a census that walked the records")


def test_the_page_documents_a_user_per_feature():
    users = documented_acl_users()
    assert list(users) == HEADINGS, list(users)
    core = commands_of(users["Core user"])
    for heading in HEADINGS[1:4]:
        # every data-node line can do what the core line does (the cluster one needs no SELECT)
        assert set(core) - {"select"} <= set(commands_of(users[heading])), heading


# --------------------------------------------------------------------------
# core: one node with a replica, database 1
# --------------------------------------------------------------------------

def keyed_requests_as_the_user(p, primary, upstream):
    """Claim, WAIT, forward, record, replay, 409, release, admin read and purge, NOSCRIPT, the
    listing and a bulk dry run, a resolve."""
    key = "acl-" + uuid.uuid4().hex
    first = p.post(key=key, body=b'{"amount": 1}')
    assert first.status == 201, first
    again = p.post(key=key, body=b'{"amount": 1}')
    assert again.status == 201 and again.replayed and again.body == first.body, again
    assert p.post(key=key, body=b'{"amount": 2}').status == 409
    assert upstream.executions(key) == 1
    done = record_id_cli(p, "/v1/payments", key)[0]["record_id"]
    # a release_statuses answer: the claim is released and the retry executes
    released = "acl-" + uuid.uuid4().hex
    assert p.post(key=released, headers=[("X-Demo-Status", "503")]).status == 503
    assert p.post(key=released).status == 201
    assert upstream.executions(released) == 2
    # admin: a record read (GET, PTTL) and purged (the compare-and-set script)
    r = p.admin("GET", "/records/%s" % done)
    assert r.status == 200 and r.json()["state"] == "done", r
    # an emptied script cache: EVALSHA answers NOSCRIPT, the proxy sends EVAL
    primary.cmd("SCRIPT", "FLUSH")
    fresh = "acl-" + uuid.uuid4().hex
    assert p.post(key=fresh).status == 201
    assert p.post(key=fresh).replayed
    # a finished record: purged only with confirm=re-execute and a reason
    assert p.admin("DELETE", "/records/%s?confirm=re-execute&reason=acl+check" % done).status \
        == 200
    assert p.admin("GET", "/records/%s" % done).status == 404
    # admin: an outcome-unknown record resolved (its compare-and-set script, SET ... KEEPTTL)
    held = "acl-" + uuid.uuid4().hex
    assert p.post(key=held, headers=[("X-Demo-Fault", "close")]).status == 502
    unknown = record_id_cli(p, "/v1/payments", held)[0]["record_id"]
    # the listing and a bulk dry run walk the records as the user (SCAN, the peek's GETRANGE)
    listed = p.admin("GET", "/records?state=outcome-unknown")
    assert listed.status == 200, listed
    assert [e["record_id"] for e in listed.json()["records"]] == [unknown], listed.json()
    dry = p.admin("POST", "/records/bulk", body=json.dumps(
        {"action": "purge", "state": "outcome-unknown"}).encode())
    assert dry.status == 200 and dry.json()["matched"] == 1, dry
    answer = b'{"status": 201, "headers": [], "body_base64": "e30=", "reason": "acl check"}'
    assert p.admin("PUT", "/records/%s" % unknown, body=answer).status == 200
    resolved = p.post(key=held, headers=[("X-Demo-Fault", "close")])
    assert resolved.status == 201 and resolved.replayed and resolved.body == b"{}", resolved


@pytest.mark.parametrize("heading, policy_ok", [
    ("Core user", -1),                                  # CONFIG and INFO refused: unknown
    ("Core user with the eviction-policy check", 1),    # INFO memory: noeviction
])
def test_core_user_runs_claims_replays_waits_and_the_policy_check(heading, policy_ok, tmp_path,
                                                                 start_proxy, upstream):
    rules = rules_of(heading)

    def install(primary):
        set_user(primary, rules)
        return rules
    core_features_as_the_user(tmp_path, start_proxy, upstream, policy_ok, install)


def core_features_as_the_user(tmp_path, start_proxy, upstream, policy_ok, install):
    """On a primary with a replica, install(primary) makes the proxy's user and returns its
    rules; a proxy as that user (min_replicas 1) takes claims, replays, 409s, releases, lists,
    dry-runs a bulk change and walks the census; the eviction gauge is policy_ok; Redis
    refused only the optional commands and ran every command the rules allow."""
    with replica_pair(tmp_path) as (primary, replica):
        rules = install(primary)
        reset_counts(primary)
        p = start_proxy(redis=redis_as_user(primary.url_db(1), min_replicas=1,
                                            replica_timeout="1s", timeout="2s"),
                        workers=1, admin_config=CENSUS)
        wait_ready(p)
        keyed_requests_as_the_user(p, primary, upstream)
        census_walked([primary], db=1)
        assert metric(p, "idempotency_proxy_redis_eviction_policy_ok") == policy_ok
        assert_denied_only_optional([primary])
        assert_every_command_ran([primary], rules)


# --------------------------------------------------------------------------
# the webhook inbox
# --------------------------------------------------------------------------

def inbox_stats(p):
    r = p.admin("GET", "/inbox")
    assert r.status == 200, r
    return r.json()["routes"][0]


def dead_letters(p):
    r = p.admin("GET", "/inbox/%s/dead" % urllib.parse.quote(ROUTE, safe=""))
    assert r.status == 200, r
    return r.json()["dead"]


def test_inbox_user_accepts_delivers_retries_dead_letters_and_redelivers(tmp_path, start_proxy):
    rules = rules_of("Webhook inbox user")
    receiver = Receiver(str(tmp_path)).start()
    try:
        with replica_pair(tmp_path) as (primary, replica):
            set_user(primary, rules)
            reset_counts(primary)
            secret = new_secret()
            route = queued_route(secret, max_attempts=2, visibility_timeout="3s",
                                 backoff={"initial": "100ms", "max": "200ms"}, rate="50/s",
                                 sign={"secret": "whsec_" + "QUNMLXVzZXItc2lnbmluZy1zZWNyZXQtMzI="})
            p = start_proxy(routes=[route], upstream_url=receiver.url,
                            upstream={"timeout": "10s"}, workers=1,
                            redis=redis_as_user(primary.url_db(1), min_replicas=1,
                                                replica_timeout="1s", timeout="2s"))
            # the store's setup, not /readyz: with min_replicas, readiness waits for a WAIT or
            # an idle ROLE, and the inbox's turns leave the connection idle never
            log_line(p, "ready (primary)")
            delivered = lambda n: wait_until(
                lambda: metric(p, "idempotency_proxy_inbox_delivered_total") == n,
                interval=0.1, what="%d deliveries" % n)
            dead = lambda n: wait_until(
                lambda: metric(p, "idempotency_proxy_inbox_dead_lettered_total") == n,
                interval=0.1, what="%d dead letters" % n)

            # accepted, delivered, acknowledged; a duplicate gets the stored 202
            first = stripe_body("evt_" + uuid.uuid4().hex)
            assert deliver(p, secret, first).status == 202
            delivered(1)
            again = deliver(p, secret, first)
            assert again.status == 202 and again.replayed, again
            # the receiver fails: a retry after the backoff, then the dead-letter stream
            receiver.control(status=500)
            assert deliver(p, secret, stripe_body("evt_" + uuid.uuid4().hex)).status == 202
            dead(1)
            stats = inbox_stats(p)
            assert stats["dead"] == 1 and stats["scheduled"] == 0, stats
            letter = dead_letters(p)[0]
            # redelivered once the receiver is back
            receiver.control(status=200)
            path = "/inbox/%s/dead/%s/redeliver" % (urllib.parse.quote(ROUTE, safe=""),
                                                   letter["id"])
            assert p.admin("POST", path).status == 200
            delivered(2)
            # another dead letter, deleted
            receiver.control(status=500)
            assert deliver(p, secret, stripe_body("evt_" + uuid.uuid4().hex)).status == 202
            dead(2)
            letter = dead_letters(p)[0]
            assert p.admin("DELETE", "/inbox/%s/dead/%s" % (
                urllib.parse.quote(ROUTE, safe=""), letter["id"])).status == 200
            assert inbox_stats(p)["dead"] == 0
            # a slow receiver: the delivery in flight is renewed (XCLAIM JUSTID)
            receiver.control(status=200, delay=1.6)
            assert deliver(p, secret, stripe_body("evt_" + uuid.uuid4().hex)).status == 202
            delivered(3)
            # the second step: a 429 with Retry-After holds the route, a pause queues without
            # sending, a resume delivers, a bulk redelivery moves the dead letters back
            receiver.control(delay=0, sequence=[{"status": 429, "headers": {"Retry-After": "1"}}])
            assert deliver(p, secret, stripe_body("evt_" + uuid.uuid4().hex)).status == 202
            delivered(4)
            encoded = urllib.parse.quote(ROUTE, safe="")
            assert p.admin("POST", "/inbox/%s/pause" % encoded).status == 200
            assert deliver(p, secret, stripe_body("evt_" + uuid.uuid4().hex)).status == 202
            assert inbox_stats(p)["paused"] is True
            assert p.admin("POST", "/inbox/%s/resume" % encoded).status == 200
            delivered(5)
            receiver.control(status=500)
            assert deliver(p, secret, stripe_body("evt_" + uuid.uuid4().hex)).status == 202
            dead(3)
            receiver.control(status=200)
            r = p.admin("POST", "/inbox/%s/dead/redeliver" % encoded)
            assert r.status == 200 and r.json()["redelivered"] == 1, r
            delivered(6)
            got = receiver.attempts()[-1]["headers"]
            assert got["webhook-id"] and got["webhook-signature"].startswith("v1,")
            assert readyz(p) == 200
            assert_denied_only_optional([primary])
            # the core commands among them: the core user's test
            assert_every_command_ran([primary], rules, also_ran=commands_of(rules_of("Core user")))
    finally:
        receiver.stop()


def test_core_user_alone_refuses_queued_deliveries_with_503(tmp_path, start_proxy):
    """What the inbox line adds is needed: without it a queued route answers 503 (NOPERM),
    never 2xx, GET /inbox fails, and the proxy is not ready, saying which command."""
    receiver = Receiver(str(tmp_path)).start()
    try:
        with replica_pair(tmp_path) as (primary, replica):
            set_user(primary, rules_of("Core user"))
            reset_counts(primary)
            secret = new_secret()
            p = start_proxy(routes=[queued_route(secret)], upstream_url=receiver.url,
                            redis=redis_as_user(primary.url), workers=1)
            log_line(p, "the Redis user may not run XADD (NOPERM)")
            r = p.admin("GET", "/readyz")
            assert r.status == 503 and b"NOPERM" in r.body, r
            r = deliver(p, secret, stripe_body("evt_" + uuid.uuid4().hex))
            assert r.status == 503, r
            assert p.admin("GET", "/inbox").status != 200
            assert receiver.attempts() == []
            refused = {obj for reason, obj in denials(primary) if reason == "command"}
            assert refused - OPTIONAL, refused
            assert refused - OPTIONAL <= set(commands_of(rules_of("Webhook inbox user"))), refused
    finally:
        receiver.stop()


@pytest.mark.parametrize("missing", ["+xautoclaim", "+exists", "+time"])
def test_inbox_user_without_one_command_is_not_ready_and_the_log_names_it(tmp_path, start_proxy,
                                                                           missing):
    receiver = Receiver(str(tmp_path)).start()
    try:
        with replica_pair(tmp_path) as (primary, replica):
            set_user(primary, rules_of("Webhook inbox user", drop=[missing]))
            secret = new_secret()
            p = start_proxy(routes=[queued_route(secret)], upstream_url=receiver.url,
                            redis=redis_as_user(primary.url), workers=1)
            log_line(p, "the Redis user may not run %s (NOPERM)" % missing[1:].upper())
            r = p.admin("GET", "/readyz")
            assert r.status == 503 and b"NOPERM" in r.body, r
            assert deliver(p, secret, stripe_body("evt_" + uuid.uuid4().hex)).status in \
                (202, 503)
            # a span in which nothing may be delivered: 20 delivery ticks (INBOX_TICK_MS 50)
            hold(1.0, "a span in which the inbox must deliver nothing without the permission")
            assert receiver.attempts() == [], "nothing is delivered without the permission"
            # the ACL fixed: ready again within the probe's 2 s
            set_user(primary, rules_of("Webhook inbox user"))
            wait_ready(p)
    finally:
        receiver.stop()


# --------------------------------------------------------------------------
# the managed services' access strings (docs/managed-redis.md, "Access strings")
# --------------------------------------------------------------------------

# heading of docs/managed-redis.md: the docs/redis.md line it is made from
MANAGED = {"ElastiCache RBAC: core": "Core user",
           "ElastiCache RBAC: core with the eviction-policy check":
               "Core user with the eviction-policy check",
           "ElastiCache RBAC: webhook inbox": "Webhook inbox user"}


def set_access_string(server, heading):
    """USER as the service makes it: nothing, then the access string, then a password (the
    string holds none). Returns the string's rules."""
    rules = documented_access_strings()[heading]
    acl_setuser(server, USER, "reset")
    acl_setuser(server, USER, *rules)
    acl_setuser(server, USER, ">" + PASSWORD)
    return rules


def test_managed_access_strings_are_the_acl_lines_as_elasticache_takes_them():
    strings = documented_access_strings()
    assert list(strings) == list(MANAGED), list(strings)
    for heading, line in MANAGED.items():
        rules = strings[heading]
        # what ElastiCache refuses or requires in a string (docs/managed-redis.md, [doc A8])
        assert rules[0] == "on", rules
        assert not [r for r in rules if r[0] in "<>#!" or r.startswith("reset") or
                    r in ("nopass", "+@all", "allcommands")], rules
        assert "+config|get" not in rules and "+config" not in rules
        # the commands of the docs/redis.md line, no more, no fewer
        assert commands_of(rules) == commands_of(documented_acl_users()[line]), heading
        assert [r for r in rules if r.startswith("~")] == ["~idem:*"]


@pytest.mark.parametrize("heading, policy_ok", [
    ("ElastiCache RBAC: core", -1),                                  # CONFIG, INFO refused
    ("ElastiCache RBAC: core with the eviction-policy check", 1),    # INFO memory: noeviction
])
def test_managed_access_string_runs_its_feature(heading, policy_ok, tmp_path, start_proxy,
                                                upstream):
    # once, replayed, 409, released, the listing and a bulk dry run (+scan +getrange)
    core_features_as_the_user(tmp_path, start_proxy, upstream, policy_ok,
                              lambda primary: set_access_string(primary, heading))


def test_managed_inbox_access_string_delivers(tmp_path, start_proxy, upstream):
    receiver = Receiver(str(tmp_path)).start()
    try:
        with replica_pair(tmp_path) as (primary, replica):
            set_access_string(primary, "ElastiCache RBAC: webhook inbox")
            reset_counts(primary)
            secret = new_secret()
            p = start_proxy(routes=[queued_route(secret),
                                    {"path": "/v1/payments*", "require_key": True}],
                            upstream_url=receiver.url, workers=1,
                            redis=redis_as_user(primary.url_db(1), min_replicas=1,
                                                replica_timeout="1s", timeout="2s"))
            log_line(p, "ready (primary)")
            event = stripe_body("evt_" + uuid.uuid4().hex)
            assert deliver(p, secret, event).status == 202
            wait_until(lambda: metric(p, "idempotency_proxy_inbox_delivered_total") == 1,
                       interval=0.1, what="the delivery")
            again = deliver(p, secret, event)
            assert again.status == 202 and again.replayed, again
            assert len(receiver.attempts()) == 1
            assert inbox_stats(p)["dead"] == 0
            # a keyed request beside the inbox: forwarded once, then replayed
            key = "acl-" + uuid.uuid4().hex
            first = p.post(key=key)
            assert first.status < 300 and not first.replayed, first
            assert p.post(key=key).replayed
            assert_denied_only_optional([primary])
    finally:
        receiver.stop()


# --------------------------------------------------------------------------
# Redis Cluster: slot map, ASK, WAIT on each primary, NOSCRIPT per node
# --------------------------------------------------------------------------

def start_migration(src, dst, slots, src_id, dst_id):
    """Half of src's slots MIGRATING to dst: new keys there get ASK. Returns those slots."""
    moving = slots[:len(slots) // 2]
    redis_cli(dst, ["CLUSTER SETSLOT %d IMPORTING %s" % (s, src_id) for s in moving])
    redis_cli(src, ["CLUSTER SETSLOT %d MIGRATING %s" % (s, dst_id) for s in moving])
    return moving


def finish_migration(src, dst, moving, dst_id, others):
    """The moving slots' keys to dst, and the slots given to dst: src answers MOVED."""
    lines = []
    for s in moving:
        for k in src.cmd("CLUSTER", "GETKEYSINSLOT", s, 1000):
            k = k.decode() if isinstance(k, bytes) else k
            lines.append('MIGRATE 127.0.0.1 %d "" 0 5000 KEYS %s' % (dst.port, k))
    if lines:
        redis_cli(src, lines)
    for n in [dst, src] + list(others):
        redis_cli(n, ["CLUSTER SETSLOT %d NODE %s" % (s, dst_id) for s in moving])


@pytest.mark.slow
@pytest.mark.topology
def test_cluster_user_reads_the_map_follows_ask_and_waits(tmp_path, start_proxy, upstream):
    rules = rules_of("Redis Cluster user")
    c = ClusterGroup(str(tmp_path / "cluster"), node_timeout_ms=2000)
    c.start()
    try:
        # everything the test asks the nodes itself, before the counts are reset
        primaries = c.primaries()
        src, dst = primaries[:2]
        src_id, dst_id = c.node_id(src), c.node_id(dst)
        slots = c.slots_of(src)
        for n in c.alive():
            set_user(n, rules)
            reset_counts(n)
        p = start_proxy(redis=cluster_redis(c, username=USER, password=PASSWORD,
                                            min_replicas=1, replica_timeout="1s",
                                            timeout="2s"), workers=1, admin_config=CENSUS)
        wait_ready(p)
        keys = []
        for _ in range(10):
            keys.append("acl-" + uuid.uuid4().hex)
            assert p.post(key=keys[-1]).status == 201
        for n in primaries:
            n.cmd("SCRIPT", "FLUSH")
        moving = start_migration(src, dst, slots, src_id, dst_id)
        for _ in range(40):                   # a sixth of them land in a migrating slot
            keys.append("acl-" + uuid.uuid4().hex)
            assert p.post(key=keys[-1]).status == 201
        finish_migration(src, dst, moving, dst_id, primaries[2:])
        for k in keys:                        # served where the new map says
            r = p.post(key=k)
            assert r.status == 201 and r.replayed, (k, r)
            assert upstream.executions(k) == 1
        # ASK needs +asking; a MOVED (if a request beats the next map read) only a map read
        assert redirections([p], "ask") > 0
        # a released claim and a purged record (the scripts' DEL), on the record's node
        released = "acl-" + uuid.uuid4().hex
        assert p.post(key=released, headers=[("X-Demo-Status", "503")]).status == 503
        assert p.post(key=released).status == 201 and upstream.executions(released) == 2
        # the purged record is one made for it: q below replays the older keys, and the access
        # log's last "replayed" line can be an older key's while the log is still being flushed
        purged = "acl-" + uuid.uuid4().hex
        assert p.post(key=purged).status == 201 and p.post(key=purged).replayed
        done = record_id_cli(p, "/v1/payments", purged)[0]["record_id"]
        assert p.admin("GET", "/records/%s" % done).status == 200
        assert p.admin("DELETE", "/records/%s?confirm=re-execute&reason=acl+check" % done) \
            .status == 200
        # the census: SCAN on each primary, a script per record key
        census_walked(primaries)
        assert_denied_only_optional(c.alive())
        p.stop()

        # without +cluster|shards (Redis 6 has no CLUSTER SHARDS): the map from CLUSTER SLOTS
        for n in c.alive():
            n.cmd("ACL", "LOG", "RESET")
            set_user(n, rules_of("Redis Cluster user", drop=("+cluster|shards",)))
        q = start_proxy(redis=cluster_redis(c, username=USER, password=PASSWORD), workers=1,
                        name="slots")
        wait_ready(q)
        assert q.post(key=keys[1]).replayed
        log_line(q, "CLUSTER SHARDS refused (NOPERM")
        assert {obj for _, obj in denials(dst)} - OPTIONAL <= {"cluster|shards"}
        assert_every_command_ran(primaries, rules)
    finally:
        c.stop()


# --------------------------------------------------------------------------
# Sentinel: discovery, the +switch-master hint, a planned failover followed
# --------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.topology
def test_sentinel_user_discovers_the_primary_and_follows_a_failover(tmp_path, start_proxy,
                                                                  upstream):
    sentinel_rules = rules_of("Sentinel user")
    g = SentinelGroup(str(tmp_path / "sentinel"), n_replicas=1, n_sentinels=3,
                      down_after_ms=1000).start()
    try:
        for node in g.nodes:
            set_user(node, rules_of("Core user"))
        for s in g.sentinels:
            set_user(s, sentinel_rules)
            s.cmd("ACL", "LOG", "RESET")
        redis = {"url": None, "username": USER, "password": PASSWORD, "timeout": "1s",
                 "sentinel": {"master": g.name, "addresses": g.sentinel_addresses,
                              "username": USER, "password": PASSWORD}}
        p = start_proxy(redis=redis, workers=1)
        wait_ready(p)
        key = "acl-" + uuid.uuid4().hex
        assert p.post(key=key).status == 201
        old = g.named()
        g.sentinels[0].cmd("SENTINEL", "FAILOVER", g.name)
        g.wait_named(old)
        wait_until(lambda: metric(p, "idempotency_proxy_redis_failovers_followed_total") == 1,
                   interval=0.1, what="the failover followed")
        log_line(p, "following the failover")
        wait_ready(p)
        fresh = "acl-" + uuid.uuid4().hex
        assert p.post(key=fresh).status == 201
        assert upstream.executions(key) == 1 and upstream.executions(fresh) == 1
        assert_denied_only_optional(g.sentinels + g.nodes)
        p.stop()

        # the sentinels keep no commandstats: each rule, left out, is refused by name
        for rule, denied in (("+sentinel|master", ("command", "sentinel|master")),
                             ("+subscribe", ("command", "subscribe")),
                             ("&+switch-master", ("channel", "+switch-master")),
                             ("+ping", ("command", "ping"))):
            for s in g.sentinels:
                s.cmd("ACL", "LOG", "RESET")
                set_user(s, [r for r in sentinel_rules if r != rule])
            q = start_proxy(redis=redis, workers=1, name="without-" + rule.strip("+&|"))
            wait_until(lambda: any(denied in denials(s) for s in g.sentinels),
                       interval=0.2, what="a sentinel refusing %s" % (denied,))
            q.stop()
    finally:
        g.stop()
