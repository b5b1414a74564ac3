"""The proxy's connection to Redis in production (README "Redis in production"): TLS,
mutual TLS, ACL users and credentials, a replica or a demoted primary, a resolver that never
answers, and a stalled Redis under steady traffic.

Real processes only: redis-server (or $IDEM_REDIS_SERVER, e.g. valkey-server) with
certificates `openssl` makes here, the demo upstream, the proxy binary; the resolver
test runs them in a network namespace of its own (redis_topology.NetNs, needs root).
"""

import os
import re
import time
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import (
    REPO, Proxy, RedisServer, Upstream, build_config, free_port, log_line, pace, readyz, to_yaml,
    wait_ready, wait_until,
)
from proxy_helpers import (
    assert_problem, assert_replayed, assert_stays_unready, assert_still_protects, metric, new_key,
    record_keys,
)
from redis_topology import (
    ACL_COMMANDS, ACL_RULES, AnsweringResolver, NetNs, Pki, SilentResolver, acl_setuser, tls_args,
)


def assert_refused_unprotected_nothing(p, upstream, redis, db=0):
    """A keyed POST is 503 store-unavailable and nothing reaches the upstream or Redis."""
    before = upstream.total()
    assert_problem(p.post(key=new_key()), 503, "store-unavailable")
    assert upstream.total() == before
    assert record_keys(redis, db) == []


@pytest.fixture
def servers(redis_factory):
    """servers(extra_args=()) -> another started RedisServer (binary: $IDEM_REDIS_SERVER)."""
    return lambda extra_args=(): redis_factory(extra_args=extra_args)


@pytest.fixture
def pki(tmp_path):
    return Pki(str(tmp_path / "pki"))


@pytest.fixture
def tls_redis(servers, pki):
    """tls_redis(ca=None, auth_clients=False) -> (RedisServer, tls port, its CA)."""
    def make(auth_clients=False):
        ca = pki.ca("ca")
        server = pki.server(ca, "redis")
        port = free_port()
        srv = servers(tls_args(port, server, ca, auth_clients=auth_clients))
        return srv, port, ca
    return make


# --------------------------------------------------------------------------
# TLS
# --------------------------------------------------------------------------

def test_tls_keyed_request_is_forwarded_once_and_replayed(start_proxy, upstream, tls_redis):
    r, port, ca = tls_redis()
    p = start_proxy(redis={"url": "rediss://127.0.0.1:%d/0" % port, "tls": {"ca_file": ca[0]}})
    wait_ready(p)
    assert_still_protects(p, upstream)
    assert len(record_keys(r)) == 1  # written over TLS, read back over the plain port
    assert "127.0.0.1:%d: ready (primary, TLS)" % port in p.stderr_text()


def test_tls_with_the_wrong_ca_is_not_ready_and_names_the_reason(start_proxy, upstream,
                                                                 tls_redis, pki):
    r, port, _ = tls_redis()
    other = pki.ca("other")
    p = start_proxy(redis={"url": "rediss://127.0.0.1:%d/0" % port,
                           "tls": {"ca_file": other[0]}})
    line = log_line(p, "certificate verify failed")
    assert "127.0.0.1:%d" % port in line, line
    # OpenSSL's own words (which one depends on whether Redis sends its CA along)
    assert ("unable to get local issuer certificate" in line or
            "self-signed certificate in certificate chain" in line), line
    assert_stays_unready(p, 1.0)
    assert_refused_unprotected_nothing(p, upstream, r)


def test_tls_server_name_must_match_the_certificate(start_proxy, upstream, tls_redis):
    r, port, ca = tls_redis()
    p = start_proxy(redis={"url": "rediss://127.0.0.1:%d/0" % port,
                           "tls": {"ca_file": ca[0], "server_name": "redis.other.example"}})
    line = log_line(p, "certificate verify failed")
    assert "hostname mismatch" in line and "127.0.0.1:%d" % port in line, line
    assert_stays_unready(p, 1.0)
    assert_refused_unprotected_nothing(p, upstream, r)
    # the name the certificate carries is accepted
    ok = start_proxy(redis={"url": "rediss://127.0.0.1:%d/0" % port,
                            "tls": {"ca_file": ca[0], "server_name": "localhost"}})
    wait_ready(ok)
    assert ok.post(key=new_key()).status == 201


def test_tls_verify_false_accepts_any_certificate_and_warns(start_proxy, upstream, tls_redis,
                                                           pki):
    _, port, _ = tls_redis()
    other = pki.ca("other")
    p = start_proxy(redis={"url": "rediss://127.0.0.1:%d/0" % port,
                           "tls": {"ca_file": other[0], "verify": False}})
    wait_ready(p)
    assert p.post(key=new_key()).status == 201
    assert p.stderr_text().count("redis.tls.verify is false") == 1, p.stderr_text()


def test_mutual_tls_needs_the_client_certificate(start_proxy, upstream, tls_redis, pki):
    r, port, ca = tls_redis(auth_clients=True)
    url = "rediss://127.0.0.1:%d/0" % port
    without = start_proxy(redis={"url": url, "tls": {"ca_file": ca[0]}}, name="without")
    line = log_line(without, "TLS")
    assert "127.0.0.1:%d" % port in line and "not ready" in line, line
    assert "certificate required" in line, line  # the server's TLS alert, in OpenSSL's words
    assert_stays_unready(without, 1.0)
    assert_refused_unprotected_nothing(without, upstream, r)

    cert, key_file = pki.client(ca, "idem-proxy")
    p = start_proxy(redis={"url": url, "tls": {"ca_file": ca[0], "cert_file": cert,
                                               "key_file": key_file}}, name="with")
    wait_ready(p)
    assert_still_protects(p, upstream)


# --------------------------------------------------------------------------
# ACL users and credentials
# --------------------------------------------------------------------------

def role_calls(redis):
    """ROLE commands redis ran, or refused (INFO commandstats), since its last RESETSTAT."""
    m = re.search(r"^cmdstat_role:calls=(\d+)(?:.*rejected_calls=(\d+))?",
                  redis.cmd("INFO", "commandstats"), re.M)
    return int(m.group(1)) + int(m.group(2) or 0) if m else 0


def proxy_clients(redis, user):
    """The CLIENT LIST lines of redis's connections authenticated as user."""
    return [l for l in redis.cmd("CLIENT", "LIST").splitlines() if " user=%s " % user in l]


def test_readme_documents_the_acl_the_tests_use():
    with open(os.path.join(REPO, "docs", "redis.md")) as f:
        readme = f.read()
    m = re.search(r"^ACL SETUSER idem-proxy (.*)$", readme, re.M)
    assert m, "docs/redis.md has no `ACL SETUSER idem-proxy ...` line"
    rules = m.group(1).split()
    assert [r for r in rules if r.startswith("+")] == ["+" + c for c in ACL_COMMANDS], rules
    assert "-@all" in rules and "~idem:*" in rules, rules


def test_acl_user_with_the_documented_commands_works_end_to_end(start_proxy, upstream,
                                                                 servers):
    """Claim, forward, complete (EVALSHA, then EVAL after SCRIPT FLUSH), replay, lease
    renewal, release on 503, admin lookup and purge, the idle ROLE check, SELECT: all
    with exactly ACL_COMMANDS; CONFIG GET and INFO (the maxmemory-policy check) are
    denied and tolerated, and Redis' ACL LOG shows no other denial."""
    r = servers()
    acl_setuser(r, "idem-proxy", ">s3cret-pw", *ACL_RULES)
    p = start_proxy(redis={"url": r.url_db(1), "username": "idem-proxy",
                           "password": "s3cret-pw"}, lease="1500ms")
    wait_ready(p)
    key = new_key()
    first = p.post(key=key)
    assert first.status == 201, first
    assert_replayed(p.post(key=key), first)
    # a new script cache: NOSCRIPT, then the body with EVAL
    r.cmd("SCRIPT", "FLUSH")
    k2 = new_key()
    assert p.post(key=k2).status == 201
    assert p.post(key=k2).replayed
    # lease renewals (every lease/3) while the upstream works
    slow = new_key()
    assert p.post(key=slow, headers=[("X-Demo-Delay-Ms", "1300")]).status == 201
    # 503 is a release status: the claim is released, the retry executes
    rel = new_key()
    assert p.post(key=rel, headers=[("X-Demo-Status", "503")]).status == 503
    assert p.post(key=rel).status == 201
    assert upstream.executions(rel) == 2
    # admin: look a record up (GET, PTTL) and purge it (compare-and-set delete)
    rid = str(record_keys(r, db=1)[0]).split("{", 1)[1].rstrip("}")
    assert p.admin("GET", "/records/" + rid).status == 200
    assert p.admin("DELETE", "/records/" + rid + "?confirm=re-execute&reason=test").status == 200
    # idle: the health check (ROLE) keeps it ready. Every connection of the proxy runs it
    # once it has been idle for half a second (STORE_HEALTH_MS / 2): wait for as many ROLEs
    # as the proxy has connections, counted from now
    roles, conns = role_calls(r), len(proxy_clients(r, "idem-proxy"))
    wait_until(lambda: role_calls(r) >= roles + conns, what="an idle ROLE on each connection")
    assert readyz(p) == 200
    assert record_keys(r) == [], "records belong in db 1"
    for k in (key, k2, slow):
        assert upstream.executions(k) == 1
    denied = r.cmd("ACL", "LOG")
    names = set()
    for entry in denied:
        fields = dict(zip(entry[::2], entry[1::2]))
        names.add(fields.get("object"))
    assert names <= {"config|get", "info"}, denied


def eviction_policy_ok(p):
    return metric(p, "idempotency_proxy_redis_eviction_policy_ok", required=True)


@pytest.mark.parametrize("policy", ["volatile-lru", "noeviction"])
def test_eviction_policy_read_from_info_when_config_is_refused(start_proxy, upstream, servers,
                                                               policy):
    """An ACL user without +config (as on managed Redis, where CONFIG is renamed away)
    but with +info: the policy comes from INFO memory. volatile-lru, which evicts exactly
    the proxy's records (they all have a TTL), is warned about and turns the gauge 0, so an
    alert can fire; noeviction turns it 1."""
    r = servers(["--maxmemory-policy", policy])
    acl_setuser(r, "idem-proxy", ">pw", *(ACL_RULES + ["+info"]))
    p = start_proxy(redis={"url": r.url, "username": "idem-proxy", "password": "pw"})
    wait_ready(p)
    want = 0 if policy == "volatile-lru" else 1
    wait_until(lambda: eviction_policy_ok(p) == want, 5, what="the gauge says %d" % want)
    warned = "maxmemory-policy is volatile-lru; an evicted record lets a retry execute again"
    if policy == "volatile-lru":
        assert "127.0.0.1:%d" % r.port in log_line(p, warned)
    else:
        assert warned not in p.stderr_text()
    denied = [dict(zip(e[::2], e[1::2])).get("object") for e in r.cmd("ACL", "LOG")]
    assert "config|get" in denied, denied  # CONFIG GET was refused: INFO told it
    key = new_key()
    assert p.post(key=key).status == 201 and p.post(key=key).replayed


def test_eviction_policy_unreadable_is_unknown_not_ok(start_proxy, upstream, servers):
    """The README's minimal ACL user (no +config, no +info): the policy cannot be read,
    the gauge says -1 (unknown), not 1, and the log says which permission would tell it."""
    r = servers(["--maxmemory-policy", "volatile-lru"])
    acl_setuser(r, "idem-proxy", ">pw", *ACL_RULES)
    p = start_proxy(redis={"url": r.url, "username": "idem-proxy", "password": "pw"})
    wait_ready(p)
    log_line(p, "maxmemory-policy cannot be read", "+info")
    assert eviction_policy_ok(p) == -1


@pytest.mark.parametrize("missing", ["role", "set"])
def test_acl_user_missing_a_command_fails_closed(start_proxy, upstream, servers, missing):
    """Without +role the node cannot be checked: not ready. Without +set no claim can be
    written: every keyed request is refused. Neither forwards anything."""
    r = servers()
    rules = [x for x in ACL_RULES if x != "+" + missing]
    acl_setuser(r, "idem-proxy", ">pw", *rules)
    p = start_proxy(redis={"url": r.url, "username": "idem-proxy", "password": "pw"})
    if missing == "role":
        line = log_line(p, "ROLE failed", "NOPERM")
        assert "127.0.0.1:%d" % r.port in line, line
        assert_stays_unready(p, 1.0)
        assert_refused_unprotected_nothing(p, upstream, r)
    else:
        wait_ready(p)
        assert_refused_unprotected_nothing(p, upstream, r)
        log_line(p, "127.0.0.1:%d" % r.port, "error reply", "NOPERM")


def test_user_and_password_in_the_url_percent_decoded(start_proxy, upstream, servers):
    r = servers()
    password = "p@ss:w/rd%+ " + uuid.uuid4().hex
    acl_setuser(r, "idem:proxy@eu", ">" + password, *ACL_RULES)
    url = "redis://%s:%s@127.0.0.1:%d/2" % (urllib.parse.quote("idem:proxy@eu", safe=""),
                                            urllib.parse.quote(password, safe=""), r.port)
    p = start_proxy(redis={"url": url})
    wait_ready(p)
    key = new_key()
    assert p.post(key=key).status == 201
    assert p.post(key=key).replayed
    assert record_keys(r, db=2) and record_keys(r) == []
    assert password not in p.stderr_text() + p.stdout_text()
    assert urllib.parse.quote(password, safe="") not in p.stderr_text() + p.stdout_text()


def test_username_and_password_from_the_environment(start_proxy, upstream, servers):
    r = servers()
    password = "env-" + uuid.uuid4().hex
    acl_setuser(r, "idem-proxy", ">" + password, *ACL_RULES)
    p = start_proxy(redis={"url": r.url, "username": "${REDIS_USERNAME}",
                           "password": "${REDIS_PASSWORD}"},
                    env={"REDIS_USERNAME": "idem-proxy", "REDIS_PASSWORD": password})
    wait_ready(p)
    key = new_key()
    assert p.post(key=key).status == 201
    assert p.post(key=key).replayed
    # the keys win over the URL's user and password
    q = start_proxy(redis={"url": "redis://nobody:wrong@127.0.0.1:%d/0" % r.port,
                           "username": "${REDIS_USERNAME}", "password": "${REDIS_PASSWORD}"},
                    env={"REDIS_USERNAME": "idem-proxy", "REDIS_PASSWORD": password})
    wait_ready(q)
    assert q.post(key=key).replayed
    assert password not in p.stderr_text() + q.stderr_text()


def test_wrong_acl_password_is_not_ready_and_names_the_user(start_proxy, upstream, servers):
    r = servers()
    acl_setuser(r, "idem-proxy", ">right", *ACL_RULES)
    p = start_proxy(redis={"url": r.url, "username": "idem-proxy", "password": "wrong-pw"})
    line = log_line(p, "AUTH failed for user idem-proxy")
    assert "127.0.0.1:%d" % r.port in line, line
    assert "wrong-pw" not in p.stderr_text()
    assert_stays_unready(p, 1.0)
    assert_refused_unprotected_nothing(p, upstream, r)


# --------------------------------------------------------------------------
# the primary only
# --------------------------------------------------------------------------

def test_replica_is_not_ready_until_promoted(start_proxy, upstream, servers):
    primary = servers()
    replica = servers(["--replicaof", "127.0.0.1", str(primary.port)])
    assert replica.cmd("ROLE")[0] == "slave"
    p = start_proxy(redis={"url": replica.url})
    line = log_line(p, "replica")
    assert "127.0.0.1:%d" % replica.port in line and "not ready" in line, line
    assert_stays_unready(p, 1.0)
    assert_refused_unprotected_nothing(p, upstream, replica)
    assert record_keys(primary) == []
    replica.cmd("REPLICAOF", "NO", "ONE")
    wait_ready(p, timeout=10)
    key = new_key()
    assert p.post(key=key).status == 201
    assert p.post(key=key).replayed
    assert upstream.executions(key) == 1
    assert record_keys(replica)


def test_primary_demoted_to_replica_fails_closed_then_recovers(start_proxy, upstream, servers):
    """READONLY on a claim: that request is refused (never forwarded) and the connection
    is dropped; the reconnect finds ROLE slave: not ready until it is promoted again."""
    a, b = servers(), servers()
    p = start_proxy(redis={"url": a.url})
    wait_ready(p)
    assert p.post(key=new_key()).status == 201
    a.cmd("REPLICAOF", "127.0.0.1", str(b.port))
    key = new_key()
    assert_problem(p.post(key=key), 503, "store-unavailable")
    assert upstream.executions(key) == 0
    log_line(p, "not the primary now", "READONLY")
    log_line(p, "127.0.0.1:%d" % a.port, "replica", "not ready")
    assert_stays_unready(p, 1.0)
    a.cmd("REPLICAOF", "NO", "ONE")
    wait_ready(p, timeout=10)
    assert p.post(key=key).status == 201
    assert upstream.executions(key) == 1


def test_idle_primary_demoted_is_noticed_without_traffic(start_proxy, upstream, servers):
    """The idle check is ROLE: /readyz turns 503 within a few seconds with no request."""
    a, b = servers(), servers()
    p = start_proxy(redis={"url": a.url})
    wait_ready(p)
    a.cmd("REPLICAOF", "127.0.0.1", str(b.port))
    wait_until(lambda: readyz(p) == 503, timeout=15, what="503 with no client traffic")
    log_line(p, "replica")
    assert upstream.total() == 0


# --------------------------------------------------------------------------
# bounded answers
# --------------------------------------------------------------------------

def test_stalled_redis_under_steady_traffic_answers_within_the_timeout(start_proxy, upstream,
                                                                        redis):
    """hiredis' own timer is pushed back by every command written; new requests every
    100 ms must not keep the first one waiting past redis.timeout."""
    p = start_proxy(redis={"timeout": "500ms"})
    wait_ready(p)
    redis.pause()
    try:
        with ThreadPoolExecutor(20) as ex:  # one thread per request: none waits for another
            futures = []
            for _ in range(20):
                futures.append(ex.submit(p.post, key=new_key(), timeout=10))
                pace(0.1)  # a new request every 100 ms
            answers = [f.result() for f in futures]
    finally:
        redis.resume()
    for r in answers:
        assert_problem(r, 503, "store-unavailable")
        assert r.elapsed < 1.3, "redis.timeout is 500ms: %r" % r
    assert upstream.total() == 0
    wait_ready(p)
    assert p.post(key=new_key()).status == 201


# --------------------------------------------------------------------------
# name resolution off the loop (in a network namespace of the test's own)
# --------------------------------------------------------------------------

NO_NETNS = NetNs.available()


def start_proxy_in(ns, workdir, redis_url, upstream, **overrides):
    """The proxy inside ns (`ip netns exec`, so it reads the namespace's resolv.conf)."""
    port, admin_port = free_port(), free_port()
    cfg = build_config(port, admin_port, upstream.url, redis_url, **overrides)
    return Proxy(workdir, "proxy", to_yaml(cfg) + "\n", port, admin_port,
                 wrapper=ns.wrapper).start()


def stop_checked(proxy):
    """SIGTERM: exit 0 within 15 s and no sanitizer report (as conftest's start_proxy)."""
    rc = proxy.stop(timeout=15)
    report = proxy.sanitizer_report()
    assert report is None, report[-6000:]
    assert rc == 0, proxy.stderr_text()[-3000:]


@pytest.mark.threads
@pytest.mark.skipif(NO_NETNS is not None, reason=str(NO_NETNS))
def test_resolver_that_never_answers_delays_nothing_past_the_timeout(tmp_path):
    """In a network namespace whose resolver (127.0.0.1:53) reads and never answers,
    redis.url names a host: keyed POSTs get 503 at once, GETs without a key pass
    promptly on both workers, /readyz is 503, the log names the host and DNS, and each
    reconnect asks the resolver again."""
    workdir = str(tmp_path)
    proxy, started = None, []
    with NetNs("nameserver 127.0.0.1\noptions timeout:5 attempts:2\n") as ns:
        resolver = SilentResolver()
        try:
            redis = RedisServer(os.path.join(workdir, "redis")).start()
            started.append(redis.kill)
            up = Upstream(workdir).start()
            started.append(up.stop)
            proxy = start_proxy_in(ns, workdir, "redis://redis.example.test:%d/0" % redis.port,
                                   up, workers=2, redis={"timeout": "500ms"})
            log_line(proxy, "redis.example.test:%d" % redis.port, "DNS", timeout=10)
            assert resolver.queries > 0
            t0 = time.monotonic()
            with ThreadPoolExecutor(6) as ex:
                posts = [ex.submit(proxy.post, key=new_key(), timeout=10) for _ in range(6)]
                gets = [ex.submit(proxy.request, "GET", "/v1/payments/p_1", timeout=10)
                        for _ in range(12)]
                posts = [f.result() for f in posts]
                gets = [f.result() for f in gets]
            for r in posts:
                assert_problem(r, 503, "store-unavailable")
                assert r.elapsed < 1.5, r
            for r in gets:
                assert r.status == 200 and r.elapsed < 1.0, r
            assert time.monotonic() - t0 < 3
            asked = resolver.queries
            assert_stays_unready(proxy, 2.5)
            assert resolver.queries > asked, "the name is resolved again on every reconnect"
            assert up.stats()["by_method"] == {"GET": 12}  # no POST was forwarded
            line = log_line(proxy, "DNS", "no answer")
            assert "redis.example.test" in line and "not ready" in line, line
        finally:
            if proxy is not None:
                stop_checked(proxy)
            for stop in started:
                stop()
            resolver.close()


@pytest.mark.skipif(NO_NETNS is not None, reason=str(NO_NETNS))
def test_dns_failover_is_followed_on_reconnect(tmp_path):
    """redis.example.test points at A (127.0.0.1); then B (127.0.0.2) becomes the primary,
    the name moves to it and A is demoted: the write that meets A gets 503 (READONLY,
    never forwarded), the reconnect resolves the name again, finds B and serves."""
    workdir = str(tmp_path)
    proxy, started = None, []
    with NetNs("nameserver 127.0.0.1\n") as ns:
        resolver = AnsweringResolver("redis.example.test", "127.0.0.1")
        try:
            port = free_port()
            a = RedisServer(os.path.join(workdir, "a"), port=port).start()
            started.append(a.kill)
            b = RedisServer(os.path.join(workdir, "b"), port=port, host="127.0.0.2").start()
            started.append(b.kill)
            up = Upstream(workdir).start()
            started.append(up.stop)
            # one worker: the old connection of a second worker could still be up on the old node
            proxy = start_proxy_in(ns, workdir, "redis://redis.example.test:%d/0" % port, up,
                                   workers=1)
            wait_ready(proxy)
            first = new_key()
            assert proxy.post(key=first).status == 201
            assert record_keys(a) and record_keys(b) == []
            resolver.address = "127.0.0.2"
            a.cmd("REPLICAOF", "127.0.0.2", str(port))
            key = new_key()
            assert_problem(proxy.post(key=key), 503, "store-unavailable")
            assert up.executions(key) == 0
            wait_ready(proxy, timeout=10)
            log_line(proxy, "redis.example.test:%d: connected to 127.0.0.2" % port)
            ok = proxy.post(key=key)
            assert ok.status == 201, ok
            assert proxy.post(key=key).replayed
            assert up.executions(key) == 1
            # B never had the first key: the proxy put its record back (redis.reassert)
            assert len(record_keys(b)) == 2
            r = proxy.post(key=first)
            assert r.status == 201 and r.replayed, r
            assert up.executions(first) == 1
        finally:
            if proxy is not None:
                stop_checked(proxy)
            for stop in started:
                stop()
            resolver.close()


@pytest.mark.threads
@pytest.mark.skipif(NO_NETNS is not None, reason=str(NO_NETNS))
def test_an_upstream_named_by_host_is_resolved_and_forwarded_once(tmp_path):
    """upstream.url names a host (libcurl resolves it on a thread of its own and asks the
    event loop to watch that thread's wake-up socket): every request is forwarded, a keyed
    payment executes once and its retries replay, on both workers; nothing hangs."""
    workdir = str(tmp_path)
    proxy, started = None, []
    with NetNs("nameserver 127.0.0.1\n") as ns:
        resolver = AnsweringResolver("payments-api.example.test", "127.0.0.1")
        try:
            redis = RedisServer(os.path.join(workdir, "redis")).start()
            started.append(redis.kill)
            up = Upstream(workdir).start()
            started.append(up.stop)
            port, admin_port = free_port(), free_port()
            cfg = build_config(port, admin_port,
                               "http://payments-api.example.test:%d" % up.port, redis.url,
                               workers=2)
            proxy = Proxy(workdir, "proxy", to_yaml(cfg) + "\n", port, admin_port,
                          wrapper=ns.wrapper).start()
            wait_ready(proxy)
            with ThreadPoolExecutor(4) as ex:
                gets = [f.result() for f in [ex.submit(proxy.request, "GET", "/v1/payments/p_%d" % i,
                                                       timeout=10) for i in range(8)]]
            for r in gets:
                assert r.status == 200, r
            key = new_key()
            answers = [proxy.post(key=key, timeout=10) for _ in range(3)]
            assert answers[0].status == 201, answers[0]
            assert [a.replayed for a in answers] == [False, True, True]
            assert len({a.body for a in answers}) == 1
            assert up.executions(key) == 1
            assert resolver.queries > 0
        finally:
            if proxy is not None:
                stop_checked(proxy)
            for stop in started:
                stop()
            resolver.close()
