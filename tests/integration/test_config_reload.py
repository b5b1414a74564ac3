"""Configuration limits that protect record identity, and what SIGHUP may change (issue 11).

Every test runs the real binary: `-t` for what the loader refuses, a started proxy in front of
the demo upstream and a real redis-server for what must work end to end.
"""
import os
import re
import signal
import subprocess
import uuid

import pytest

from harness import REPO, build_config, proxy_binary, to_yaml, wait_until


def new_key(tag="k"):
    return "%s-%s" % (tag, uuid.uuid4().hex)


def run_check(tmp_path, text, env=None, name="check.yaml"):
    """`idempotency-proxy -t -c FILE` on text; (returncode, stdout + stderr, path)."""
    path = tmp_path / name
    path.write_text(text)
    e = dict(os.environ)
    e.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    for var in ("UP_PORT", "REDIS_HOST"):
        e.pop(var, None)
    e.update(env or {})
    p = subprocess.run([proxy_binary(), "-t", "-c", str(path)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20, env=e)
    return p.returncode, p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace"), path


def assert_refused(tmp_path, text, line, *words, env=None):
    rc, out, path = run_check(tmp_path, text, env=env)
    assert rc != 0 and "configuration OK" not in out, out
    assert "%s:%d:" % (path, line) in out, out
    for w in words:
        assert w in out, out
    return out


def assert_replayed(r, first):
    assert r.status == first.status and r.body == first.body, (r, first)
    assert r.header("Idempotent-Replayed") == "true", r


def metric(p, name):
    body = p.admin("GET", "/metrics").body.decode()
    m = re.search(r"^%s (\d+)" % re.escape(name), body, re.M)
    assert m, "no %s in /metrics" % name
    return int(m.group(1))


def rewrite(p, upstream, redis_server, **kw):
    cfg = build_config(p.port, p.admin_port, upstream.url, redis_server.url, **kw)
    with open(p.config_path, "w") as f:
        f.write(to_yaml(cfg) + "\n")


def reload_and_wait(p, marker):
    """SIGHUP, then wait for one more log line containing marker ('reloaded', 'reload refused')."""
    before = p.stderr_text().count(marker)
    p.signal(signal.SIGHUP)
    wait_until(lambda: p.stderr_text().count(marker) > before, what=marker)


# --------------------------------------------------------------------------
# (1) redis.key_prefix: a record key is never cut
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
# (7) webhook secrets of at least 16 bytes
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
# (10) an unset ${VAR} is an error that names it
# --------------------------------------------------------------------------

def test_t_refuses_an_unset_variable_in_the_upstream_url(tmp_path):
    # it used to pass and send every request to port 80
    assert_refused(tmp_path, "upstream:\n  url: http://127.0.0.1:${UP_PORT}\n", 2,
                   "${UP_PORT} is not set")


def test_t_refuses_an_unset_variable_in_the_redis_url(tmp_path):
    # it used to pass and fall back to port 6379: someone else's Redis
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
# (17) booleans: plain true / false only
# --------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["True", "TRUE", "\"true\"", "'false'", "yes"])
def test_t_refuses_booleans_other_than_plain_true_false(tmp_path, value):
    assert_refused(tmp_path, "defaults:\n  require_key: %s\n" % value, 2, "require_key",
                   "true or false")


# --------------------------------------------------------------------------
# (3) durations at most 3650d
# --------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["9223372036854775807ms", "3651d"])
def test_t_refuses_durations_above_3650d(tmp_path, value):
    # lease = retention, so only the maximum can refuse it
    assert_refused(tmp_path, "routes:\n  - path: /a\n    lease: %s\n    retention: %s\n"
                   % (value, value), 3, "at most 3650d")


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
# (8, 9) SIGHUP: routes may move; identity compared with the running config
# --------------------------------------------------------------------------

ORDERS = {"path": "/v1/orders*", "require_key": True}


def test_sighup_add_then_change_scope_then_remove_a_route(start_proxy, upstream, redis):
    base = [{"path": "/v1/payments*"}]
    p = start_proxy(routes=base)
    failures = metric(p, "idempotency_proxy_config_reload_failures_total")

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
    assert metric(p, "idempotency_proxy_config_reload_failures_total") == failures + 1
    retry = p.post(path="/v1/orders", key=k, headers=[("Authorization", "Bearer a")])
    assert_replayed(retry, first)
    assert upstream.executions(k) == 1

    # 3. remove it: accepted
    rewrite(p, upstream, redis, routes=base)
    reload_and_wait(p, "reloaded")
    wait_until(lambda: p.post(path="/v1/orders").status != 400, what="the route is gone")
    assert metric(p, "idempotency_proxy_config_reload_failures_total") == failures + 1


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
