"""Configuration limits that protect record identity, and what SIGHUP may change.

Every test runs the real binary: `-t` for what the loader refuses, a started proxy in front of
the demo upstream and a real redis-server for what must work end to end. A SIGHUP refuses a
change of a restart key (the listeners, threads, upstream client, store and inbox consumers
were built from the boot config) and of an identity key (checked against the running config),
and applies a live key to the next requests: one test per kind of key.
"""
import os
import re
import signal

import pytest

from harness import (
    REPO, TEST_WORKERS, Connection, RedisServer, build_config, free_port, hold, log_line, to_yaml,
    wait_ready, wait_until,
)
from proxy_helpers import (
    assert_problem, assert_replay_of, assert_replayed, assert_still_protects, check_config,
    in_background, metric, new_key, reload_and_wait, rewrite, run_check,
)
from redis_topology import Pki, tls_args

# tests/run.sh runs this file under ThreadSanitizer with two worker threads a proxy
# (IDEM_TEST_WORKERS=2): its requests meet across workers (docs/internals.md).
pytestmark = pytest.mark.threads


def assert_refused(tmp_path, text, line, *words, env=None):
    rc, out, path = run_check(tmp_path, text, env=env)
    assert rc != 0 and "configuration OK" not in out, out
    assert "%s:%d:" % (path, line) in out, out
    for w in words:
        assert w in out, out
    return out


def last_refusal(p):
    return [l for l in p.stderr_text().splitlines() if "reload refused" in l][-1]


def assert_refused_as(p, failures, words):
    """The last reload was refused with words in its line, counted once more than failures."""
    line = last_refusal(p)
    assert words in line, line
    assert metric(p, "idempotency_proxy_config_reload_failures_total",
                  required=True) == failures + 1


# --------------------------------------------------------------------------
# redis.key_prefix: a record key is never cut
# --------------------------------------------------------------------------

def test_t_refuses_a_key_prefix_of_253_bytes_with_file_and_line(tmp_path):
    # with 253 bytes, "PREFIX:{ID}" no longer fitted 256 bytes and every id was cut away
    out = assert_refused(tmp_path, "redis:\n  key_prefix: %s\n" % ("p" * 253), 2, "key_prefix",
                         "128")
    assert "p" * 129 not in out


@pytest.mark.parametrize("prefix", ["a{b", "a}", "a b"])
def test_t_refuses_a_key_prefix_with_braces_or_spaces(tmp_path, prefix):
    assert_refused(tmp_path, "redis:\n  key_prefix: \"%s\"\n" % prefix, 2, "key_prefix")


def test_key_prefix_of_128_bytes_keeps_two_clients_apart(start_proxy, upstream, redis):
    prefix = "p" * 128
    p = start_proxy(redis={"key_prefix": prefix})
    ka, kb = new_key("a"), new_key("b")
    a = p.post(key=ka, headers=[("Authorization", "Bearer alice")], body=b'{"amount": 1}')
    b = p.post(key=kb, headers=[("Authorization", "Bearer bob")], body=b'{"amount": 2}')
    assert a.status == 201 and b.status == 201, (a, b)
    assert not b.has_header("Idempotent-Replayed") and a.body != b.body
    assert upstream.executions(ka) == 1 and upstream.executions(kb) == 1
    keys = [str(k) for k in redis.keys("*") if str(k).startswith(prefix)]
    assert len(keys) == 2, keys
    assert all(re.fullmatch(re.escape(prefix) + r":\{[0-9a-f]{32}\}", k) for k in keys), keys
    # each retry replays its own record
    assert_replayed(p.post(key=ka, headers=[("Authorization", "Bearer alice")],
                           body=b'{"amount": 1}'), a)
    assert_replayed(p.post(key=kb, headers=[("Authorization", "Bearer bob")],
                           body=b'{"amount": 2}'), b)
    assert upstream.executions(ka) == 1 and upstream.executions(kb) == 1


# --------------------------------------------------------------------------
# webhook secrets of at least 16 bytes
# --------------------------------------------------------------------------

WEBHOOK_ROUTE = ("routes:\n  - path: /hooks/x\n    key_from: json:/id\n    verify: %s\n"
                 "    secret: %s\n")


@pytest.mark.parametrize("verify,secret", [
    ("standard-webhooks", "whsec_AA=="),
    ("stripe", "\" \""),
    ("stripe", "x"),
    ("github", "fifteen-bytes!!"),
])
def test_t_refuses_a_webhook_secret_under_16_bytes(tmp_path, verify, secret):
    out = assert_refused(tmp_path, WEBHOOK_ROUTE % (verify, secret), 5, "16 bytes")
    if len(secret) > 3:
        assert secret not in out.replace(str(tmp_path), ""), "the secret is echoed: %s" % out


def test_t_standard_webhooks_secret_without_prefix_is_not_said_to_follow_whsec(tmp_path):
    out = assert_refused(tmp_path, WEBHOOK_ROUTE % ("standard-webhooks", "not*base64*at*all"), 5,
                         "not base64")
    assert "whsec_" not in out, out


def test_t_accepts_the_sample_webhooks_config_with_its_documented_secrets(tmp_path):
    env = {"STRIPE_WEBHOOK_SECRET": "whsec_test_secret",              # 17 bytes
           "GITHUB_WEBHOOK_SECRET": "It's a Secret to Everybody",     # 26 bytes
           "WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
           "WEBHOOK_SECRET_PREVIOUS": "whsec_cHJldmlvdXMta2V5LTI0LWJ5dGVzLW9r"}
    rc, out, _ = run_check(tmp_path, open(os.path.join(REPO, "conf", "webhooks.yaml")).read(),
                           env=env)
    assert rc == 0 and "configuration OK" in out, out


# --------------------------------------------------------------------------
# an unset ${VAR} is an error that names it
# --------------------------------------------------------------------------

def test_t_refuses_an_unset_variable_in_the_upstream_url(tmp_path):
    # were it accepted, every request would go to port 80
    assert_refused(tmp_path, "upstream:\n  url: http://127.0.0.1:${UP_PORT}\n", 2,
                   "${UP_PORT} is not set")


def test_t_refuses_an_unset_variable_in_the_redis_url(tmp_path):
    # were it accepted, it would fall back to port 6379: someone else's Redis
    assert_refused(tmp_path, "redis:\n  url: redis://${REDIS_HOST}/0\n", 2,
                   "${REDIS_HOST} is not set")


def test_t_refuses_an_unset_webhook_secret_naming_the_variable(tmp_path):
    assert_refused(tmp_path, WEBHOOK_ROUTE % ("github", "${UP_PORT}"), 5, "${UP_PORT} is not set")


def test_unset_redis_password_reads_as_empty(start_proxy, upstream):
    p = start_proxy(redis={"password": "${IDEM_TEST_SURELY_UNSET}"})
    k = new_key()
    first = p.post(key=k)
    assert first.status == 201
    assert_replayed(p.post(key=k), first)


# --------------------------------------------------------------------------
# booleans: plain true / false only
# --------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["True", "TRUE", "\"true\"", "'false'", "yes"])
def test_t_refuses_booleans_other_than_plain_true_false(tmp_path, value):
    assert_refused(tmp_path, "defaults:\n  require_key: %s\n" % value, 2, "require_key",
                   "true or false")


# --------------------------------------------------------------------------
# durations at most 3650d
# --------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["9223372036854775807ms", "3651d"])
def test_t_refuses_durations_above_3650d(tmp_path, value):
    # lease = retention, so only the maximum can refuse it
    assert_refused(tmp_path, "routes:\n  - path: /a\n    lease: %s\n    retention: %s\n"
                   % (value, value), 3, "at most 3650d")


def test_t_refuses_a_lease_a_renewal_cannot_keep(tmp_path, upstream, redis):
    """`-t` refuses a lease a renewal cannot keep (under 1 s, or not longer than
    redis.timeout): the claim would expire between renewals and a retry execute again."""
    for lease, timeout in (("9ms", "500ms"), ("999ms", "500ms"), ("1s", "1s")):
        cfg = build_config(8080, 9901, upstream.url, redis.url, lease=lease,
                           redis={"timeout": timeout})
        r = check_config(tmp_path, cfg)
        assert r.returncode == 1, (lease, timeout, r.stdout, r.stderr)
        assert "lease (" in r.stderr and "redis.timeout" in r.stderr, r.stderr
    ok = check_config(tmp_path, build_config(8080, 9901, upstream.url, redis.url, lease="1s"))
    assert ok.returncode == 0, ok.stderr


def test_lease_and_retention_of_3650d_work_end_to_end(start_proxy, upstream, redis):
    p = start_proxy(lease="3650d", retention="3650d")
    k = new_key()
    first = p.post(key=k)
    assert first.status == 201, first
    assert_replayed(p.post(key=k), first)
    assert upstream.executions(k) == 1
    ttls = [redis.cmd("PTTL", key) for key in redis.keys("*") if str(key).startswith("idem")]
    assert ttls and all(t > 3649 * 86400 * 1000 for t in ttls), ttls


# --------------------------------------------------------------------------
# SIGHUP: routes may move; identity compared with the running config
# --------------------------------------------------------------------------

ORDERS = {"path": "/v1/orders*", "require_key": True}


def test_sighup_add_then_change_scope_then_remove_a_route(start_proxy, upstream, redis):
    base = [{"path": "/v1/payments*"}]
    p = start_proxy(routes=base)
    failures = metric(p, "idempotency_proxy_config_reload_failures_total", required=True)

    # 1. add a route: accepted
    rewrite(p, upstream, redis, routes=base + [ORDERS])
    reload_and_wait(p, "reloaded")
    wait_until(lambda: p.post(path="/v1/orders").status == 400, what="the new route is served")
    k = new_key()
    first = p.post(path="/v1/orders", key=k, headers=[("Authorization", "Bearer a")])
    assert first.status == 201

    # 2. change its scope_headers: refused, against the running config (not the boot one)
    rewrite(p, upstream, redis,
            routes=base + [dict(ORDERS, scope_headers=["Authorization", "X-Tenant"])])
    reload_and_wait(p, "reload refused")
    last = [l for l in p.stderr_text().splitlines() if "reload refused" in l][-1]
    assert "scope_headers" in last, last
    assert metric(p, "idempotency_proxy_config_reload_failures_total",
                  required=True) == failures + 1
    retry = p.post(path="/v1/orders", key=k, headers=[("Authorization", "Bearer a")])
    assert_replayed(retry, first)
    assert upstream.executions(k) == 1

    # 3. remove it: accepted
    rewrite(p, upstream, redis, routes=base)
    reload_and_wait(p, "reloaded")
    wait_until(lambda: p.post(path="/v1/orders").status != 400, what="the route is gone")
    assert metric(p, "idempotency_proxy_config_reload_failures_total",
                  required=True) == failures + 1


def test_sighup_inserting_a_route_in_front_keeps_replaying_earlier_keys(start_proxy, upstream,
                                                                         redis):
    p = start_proxy(routes=[{"path": "/v1/payments*"}])
    k = new_key()
    first = p.post(key=k, headers=[("Authorization", "Bearer a")])
    assert first.status == 201

    # /v1/payments now matches the new exact route, not /v1/payments* any more
    rewrite(p, upstream, redis, routes=[{"path": "/v1/payments", "require_key": True},
                                        {"path": "/v1/payments*"}])
    reload_and_wait(p, "reloaded")
    wait_until(lambda: p.post().status == 400, what="the inserted route is served")
    retry = p.post(key=k, headers=[("Authorization", "Bearer a")])
    assert_replayed(retry, first)
    assert upstream.executions(k) == 1
    assert "reload refused" not in p.stderr_text()


def test_sighup_refuses_a_new_key_prefix(start_proxy, upstream, redis):
    p = start_proxy()
    rewrite(p, upstream, redis, redis={"key_prefix": "other"})
    reload_and_wait(p, "reload refused")
    last = [l for l in p.stderr_text().splitlines() if "reload refused" in l][-1]
    assert "redis.key_prefix" in last, last


def test_sighup_refuses_a_change_of_record_identity(start_proxy, upstream, redis):
    p = start_proxy(routes=[{"path": "/v1/payments*"}])
    key = new_key()
    first = p.post(key=key, headers=[("Authorization", "Bearer a")])
    assert first.status == 201
    # a scope change is refused; a new route pattern with the same identity is not (record
    # ids do not depend on which route matched), and the retry still replays after both
    for routes, scope, marker in (
            ([{"path": "/v1/payments*"}], ["Authorization", "X-Tenant"], "reload refused"),
            ([{"path": "/v1/pay*"}], ["Authorization"], "reloaded")):
        cfg = build_config(p.port, p.admin_port, upstream.url, redis.url, routes=routes)
        cfg.setdefault("defaults", {})["scope_headers"] = scope
        with open(p.config_path, "w") as f:
            f.write(to_yaml(cfg) + "\n")
        p.signal(signal.SIGHUP)
        wait_until(lambda: marker in p.stderr_text(), what=marker)
        assert_replay_of(p.post(key=key, headers=[("Authorization", "Bearer a")]), first)
    assert upstream.executions(key) == 1


def test_sighup_with_a_differently_spelled_pattern_cannot_change_identity(start_proxy, upstream,
                                                                          redis):
    """`/v1//payments*` is the route `/v1/payments*`: a scope change under that spelling is
    refused like any other, and the retry of a recorded key replays."""
    p = start_proxy(routes=[{"path": "/v1/payments*"}])
    k = new_key()
    first = p.post(key=k, headers=[("Authorization", "Bearer a")])
    assert first.status == 201
    cfg = build_config(p.port, p.admin_port, upstream.url, redis.url,
                       routes=[{"path": "/v1//payments*", "scope_headers": ["X-Account"]}])
    with open(p.config_path, "w") as f:
        f.write(to_yaml(cfg) + "\n")
    before = p.stderr_text().count("reload refused")
    p.signal(signal.SIGHUP)
    wait_until(lambda: p.stderr_text().count("reload refused") > before, what="refusal")
    retry = p.post(key=k, headers=[("Authorization", "Bearer a")])
    assert retry.status == 201 and retry.replayed and retry.body == first.body, retry
    assert upstream.executions(k) == 1


def test_sighup_reloads_routes_and_keeps_the_old_config_when_invalid(start_proxy, upstream,
                                                                     redis):
    p = start_proxy(routes=[{"path": "/v1/payments*"}])
    assert p.post(key=None).status == 201
    cfg = build_config(p.port, p.admin_port, upstream.url, redis.url,
                       routes=[{"path": "/v1/payments*", "require_key": True}])
    with open(p.config_path, "w") as f:
        f.write(to_yaml(cfg) + "\n")
    # a connection opened before the reload keeps working
    with Connection(p.port) as c:
        assert c.request("GET", "/v1/payments").status == 200
        p.signal(signal.SIGHUP)
        wait_until(lambda: p.post(key=None).status == 400, what="require_key after SIGHUP")
        assert c.request("GET", "/v1/payments").status == 200
    assert_problem(p.post(key=None), 400, "missing-key")
    with open(p.config_path, "w") as f:
        f.write("listen: 127.0.0.1:%d\nbogus: [\n" % p.port)
    reload_and_wait(p, "reload refused")
    assert p.alive()
    assert_problem(p.post(key=None), 400, "missing-key")
    assert p.post(key=new_key()).status == 201


def test_sighup_does_not_drop_in_flight_requests(start_proxy, upstream):
    p = start_proxy()
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "1000")]
    f = in_background(p.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1)
    reload_and_wait(p, "reloaded")
    second = p.post(key=key, headers=hs)  # waits across the reload
    first = f.result()
    assert first.status == 201
    assert_replay_of(second, first)
    assert p.alive()
    assert upstream.total() == 1


# --------------------------------------------------------------------------
# SIGHUP and the reload class of each key: restart keys are refused (the
# process was built from them), live keys are applied
# --------------------------------------------------------------------------

WORKERS = int(TEST_WORKERS) if TEST_WORKERS else 1


def on_every_worker(check):
    """check() holds on 4 fresh connections per worker (SO_REUSEPORT spreads them)."""
    return all(check() for _ in range(4 * WORKERS))


@pytest.mark.parametrize("name, change, top", [
    ("listen", lambda: {"listen": "127.0.0.1:%d" % free_port()}, "listen"),
    ("admin_listen", lambda: {"admin_listen": "127.0.0.1:%d" % free_port()}, "admin_listen"),
    ("health_listen", lambda: {"health_listen": "127.0.0.1:%d" % free_port()}, "health_listen"),
    ("workers", lambda: {"workers": WORKERS + 1}, "workers"),
    ("upstream.url", lambda: {"upstream": {"url": "http://127.0.0.1:%d" % free_port()}},
     "upstream"),
    ("upstream.connect_timeout", lambda: {"upstream": {"connect_timeout": "3s"}}, "upstream"),
    ("upstream.timeout", lambda: {"upstream": {"timeout": "31s"}}, "upstream"),
    ("redis.url", lambda: {"redis": {"url": "redis://127.0.0.1:%d/0" % free_port()}}, "redis"),
    # (a password is live since 0.5.0: test_secret_files.py; a user name is not)
    ("redis.username", lambda: {"redis": {"username": "someone", "password": "not-the-one"}},
     "redis"),
    ("redis.timeout", lambda: {"redis": {"timeout": "1s"}}, "redis"),
    ("redis.replica_timeout", lambda: {"redis": {"replica_timeout": "100ms"}}, "redis"),
])
def test_sighup_refuses_a_restart_key_and_keeps_serving_as_before(start_proxy, upstream, redis,
                                                                  name, change, top):
    # the listener, the upstream client and the store keep what they were built from (a new
    # upstream or Redis that nothing listens on, or a wrong user, would fail requests)
    p = start_proxy()
    failures = metric(p, "idempotency_proxy_config_reload_failures_total", required=True)
    rewrite(p, upstream, redis, **change())
    reload_and_wait(p, "reload refused")
    assert_refused_as(p, failures, "%s changed, which needs a restart" % top)
    assert_still_protects(p, upstream)
    assert "reloaded" not in p.stderr_text()


@pytest.fixture
def tls_redis(tmp_path):
    """A redis-server with a TLS port beside its plain one: (server, TLS port, CA, Pki)."""
    pki = Pki(str(tmp_path / "pki"))
    ca = pki.ca("ca")
    port = free_port()
    srv = RedisServer(str(tmp_path / "tls-redis"),
                      extra_args=tls_args(port, pki.server(ca, "redis"), ca)).start()
    yield srv, port, ca, pki
    srv.kill()


def tls_ready_lines(p, port):
    return p.stderr_text().count("127.0.0.1:%d: ready (primary, TLS)" % port)


@pytest.mark.parametrize("key", ["ca_file", "cert_file", "server_name", "verify"])
def test_sighup_refuses_a_change_of_redis_tls_and_reconnects_as_at_boot(start_proxy, upstream,
                                                                         tls_redis, key):
    srv, port, ca, pki = tls_redis
    tls = {"url": "rediss://127.0.0.1:%d/0" % port, "tls": {"ca_file": ca[0]}}
    p = start_proxy(redis=tls)
    wait_ready(p)
    failures = metric(p, "idempotency_proxy_config_reload_failures_total", required=True)
    # ca_file and server_name, applied to the next connection, would fail it: a CA that did
    # not sign the server's certificate, a name it does not carry
    other = pki.ca("other")
    changed = {"ca_file": {"ca_file": other[0]},
               "cert_file": dict(zip(("cert_file", "key_file"), pki.client(other, "c"))),
               "server_name": {"server_name": "redis.other.example"},
               "verify": {"verify": False}}[key]
    rewrite(p, upstream, srv, redis={"url": tls["url"], "tls": dict(tls["tls"], **changed)})
    reload_and_wait(p, "reload refused")
    assert_refused_as(p, failures, "redis changed, which needs a restart")
    # every connection the store makes from now on uses the TLS settings it was built from
    before = tls_ready_lines(p, port)
    srv.cmd("CLIENT", "KILL", "TYPE", "normal")
    wait_until(lambda: tls_ready_lines(p, port) > before, what="a new TLS connection")
    wait_ready(p)
    assert_still_protects(p, upstream)
    assert "redis.tls.verify is false" not in p.stderr_text()


def test_sighup_refuses_a_change_of_a_queued_routes_delivery(start_proxy, upstream, redis):
    hook = {"path": "/hooks/q", "key_from": "json:/id", "verify": "none",
            "delivery": {"mode": "queued", "concurrency": 4}}
    p = start_proxy(routes=[hook, {"path": "/v1/payments*"}])
    failures = metric(p, "idempotency_proxy_config_reload_failures_total", required=True)
    # the inbox consumers were made from the boot config's queued routes
    for change in ({"concurrency": 2}, {"mode": "direct"}):
        routes = [dict(hook, delivery=dict(hook["delivery"], **change)), {"path": "/v1/payments*"}]
        rewrite(p, upstream, redis, routes=routes)
        reload_and_wait(p, "reload refused")
        assert_refused_as(p, failures,
                          "a queued route or its delivery settings changed, which needs a restart")
        failures += 1
    # the route is still queued: acknowledged, then delivered once
    evt = new_key("evt")
    r = p.post(path="/hooks/q", body=('{"id": "%s"}' % evt).encode())
    assert r.status == 202, r
    wait_until(lambda: upstream.executions(evt) == 1, what="the queued delivery")


def stripe_shaped(r):
    return r.status == 400 and r.content_type.startswith("application/json") and \
        "error" in r.json()


def test_sighup_applies_live_keys_to_the_next_requests(start_proxy, upstream, redis):
    p = start_proxy(log={"access": "all"})
    assert p.post(path="/v1/strict").is_problem
    logged = "/v1/payments/" + new_key("logged")
    assert p.post(path=logged, key=new_key(), body=b"x" * 2048).status == 201
    wait_until(lambda: logged in p.stdout_text(), what="the access line of %s" % logged)
    rewrite(p, upstream, redis, errors={"format": "stripe"}, log={"access": "off"},
            limits={"max_request_body": "1KiB"})
    reload_and_wait(p, "reloaded")
    assert "reload refused" not in p.stderr_text()
    # errors.format: a missing key is answered in Stripe's shape, by every worker
    wait_until(lambda: on_every_worker(lambda: stripe_shaped(p.post(path="/v1/strict"))),
               what="Stripe-shaped errors")
    # limits.max_request_body: 2 KiB is now too large, and nothing is forwarded for it
    k = new_key()
    assert p.post(key=k, body=b"x" * 2048).status == 413
    assert upstream.executions(k) == 0
    # log.access: off. A request on a path of its own: no line names it (the log is flushed
    # every 100 ms, so a line for it would have arrived within the hold)
    path = "/v1/payments/" + new_key("unlogged")
    assert p.post(path=path, key=new_key()).status == 201
    hold(0.5, "the access log's 100 ms flush: a line for the request would have arrived")
    logged = [l for l in p.stdout_text().splitlines() if path in l]
    assert logged == [], logged


# --------------------------------------------------------------------------
# a configuration that leaves paths unprotected says so
# --------------------------------------------------------------------------
def test_t_and_startup_warn_that_a_config_without_routes_protects_nothing(tmp_path, start_proxy,
                                                                         upstream, redis):
    cfg = build_config(free_port(), free_port(), upstream.url, redis.url, routes=[])
    rc, out, _ = run_check(tmp_path, to_yaml(cfg) + "\n")
    assert rc == 0 and "configuration OK" in out, out
    assert "warning: no routes: every request is forwarded" in out, out
    p = start_proxy(routes=[])
    log_line(p, "no routes: every request is forwarded")


def test_sighup_that_leaves_a_path_without_a_route_warns_naming_it(start_proxy, upstream, redis):
    """The reload is accepted (removing a route is allowed), but the log names each pattern
    whose requests are forwarded unprotected from now on, and its recorded keys' retries
    execute again."""
    p = start_proxy(routes=[{"path": "/v1/payments*"}, ORDERS])
    k = new_key()
    assert p.post(path="/v1/payments", key=k).status == 201
    rewrite(p, upstream, redis, routes=[ORDERS])
    reload_and_wait(p, "reloaded")
    line = log_line(p, "leaves '/v1/payments*' without a route")
    assert "forwarded unprotected" in line, line
    assert "/v1/orders" not in line, line
    wait_until(lambda: p.post(path="/v1/payments", key=k).status == 201
               and upstream.executions(k) >= 2, what="the path is forwarded as it is")
