"""Secrets read from files (docs/configuration.md, "Secrets from files"): redis.password_file
(and the sentinels'), a webhook route's secret_file and delivery.sign.secret_file, each read
again by SIGHUP; a Redis password is sent from each worker's next connection
(docs/redis.md, "Authentication"; docs/failure-modes.md, "Rotating the Redis password").

Real processes only: redis-server with an ACL user (the "Core user" line of docs/redis.md),
redis-sentinel for the sentinels' password, the demo upstream, the inbox receiver and the
proxy binary. The tests change the user's password in Redis, rewrite the file, SIGHUP, and
close the proxy's connections with CLIENT KILL: what a client sees (status, executions at the
upstream), /readyz and idempotency_proxy_redis_up tell which password each new connection
sent. No secret may appear in anything the proxy writes.
"""

import base64
import hashlib
import hmac
import os
import re
import uuid

import pytest

from harness import REPO, documented_acl_rules, log_line, log_lines, wait_ready, wait_until
from inbox_helpers import (
    ENCODED, ROUTE, deliver, new_secret, queued_route, sign_secret, stripe_body,
)
from proxy_helpers import (
    Traffic, assert_problem, metric, new_key, reload_and_wait, run_check, wait_metric,
)
from redis_topology import SentinelGroup, acl_setuser

USER = "idem-proxy"


def new_password(tag):
    return "%s-%s" % (tag, uuid.uuid4().hex)


def write_secret(path, secret, end="\n"):
    """path holds secret (and end), mode 0400, replaced at once as a Secret volume's file is."""
    tmp = "%s.new" % path
    with open(tmp, "w") as f:
        f.write(secret + end)
    os.chmod(tmp, 0o400)
    os.replace(tmp, path)


def assert_no_secret_written(p, *secrets):
    text = p.stderr_text() + p.stdout_text()
    for s in secrets:
        assert s not in text, "a secret is in the proxy's output"


def proxy_connections(redis):
    """The ids of the connections Redis has for USER (CLIENT LIST)."""
    text = redis.cmd("CLIENT", "LIST")
    text = text.decode() if isinstance(text, bytes) else text
    out = set()
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("user") == USER:
            out.add(fields["id"])
    return out


def all_made_again(redis, before):
    """As many connections of USER as before, none of them one of before."""
    now = proxy_connections(redis)
    return len(now) == len(before) and not now & before


def auth_failures(redis):
    """ACL LOG entries of USER's refused AUTHs."""
    out = []
    for entry in redis.cmd("ACL", "LOG", "128"):
        d = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes)
                                                          else v)
             for k, v in zip(entry[0::2], entry[1::2])}
        if d.get("username") == USER and d.get("reason") == "auth":
            out.append(d)
    return out


def start_with_password_file(start_proxy, redis, tmp_path, password):
    """A proxy that reaches redis as USER with password read from a file; (proxy, file)."""
    acl_setuser(redis, USER, "reset", *documented_acl_rules("Core user", password))
    path = tmp_path / "redis-password"
    write_secret(path, password)
    p = start_proxy(redis={"username": USER, "password_file": str(path)})
    wait_ready(p)
    return p, path


def pay_once(p, upstream):
    key = new_key()
    r = p.post(key=key)
    assert r.status == 201, r
    assert upstream.executions(key) == 1
    return key


# --------------------------------------------------------------------------
# redis.password_file
# --------------------------------------------------------------------------

def runbook_acl_commands(old, new):
    """The `ACL SETUSER` steps of docs/failure-modes.md "Rotating the Redis password" (the
    ordered steps after "In this order"), as argument lists with OLD and NEW filled in."""
    with open(os.path.join(REPO, "docs", "failure-modes.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("### Rotating the Redis password"):]
    section = section[section.index("In this order"):section.index("\n### ")]
    spans = re.findall(r"`(ACL SETUSER idem-proxy [^`]+)`", section)
    return [[w.replace("NEW", new).replace("OLD", old) for w in s.split()] for s in spans]


def test_a_rotation_in_the_documented_order_refuses_nothing(tmp_path, redis, start_proxy,
                                                             upstream):
    """The runbook's two-password rotation, its ACL SETUSER lines as written, with keyed
    traffic through every step; a second proxy left on the old password shows what the
    last step does to an instance that did not move."""
    old, new = new_password("old"), new_password("new")
    add, remove = runbook_acl_commands(old, new)
    assert add[3:] == [">" + new] and remove[3:] == ["<" + old], (add, remove)
    p, path = start_with_password_file(start_proxy, redis, tmp_path, old)
    stale_path = tmp_path / "stale-password"
    write_secret(stale_path, old)
    stale = start_proxy(redis={"username": USER, "password_file": str(stale_path)},
                        name="stale")
    wait_ready(stale)
    open_before = proxy_connections(redis)
    redis.cmd("ACL", "LOG", "RESET")
    with Traffic([p, stale], threads=2, then="twice", pause_s=0.02) as traffic:
        pay_once(p, upstream)
        # 1. the user takes the new password beside the old
        redis.cmd(*add)
        pay_once(p, upstream)
        # 2. the file; 3. SIGHUP (the stale proxy's file keeps the old one)
        write_secret(path, new)
        reload_and_wait(p, "redis.password changed")
        # the connections open keep their AUTH: nothing reconnected
        assert proxy_connections(redis) == open_before
        pay_once(p, upstream)
        pay_once(stale, upstream)
        # 4. the old password goes; the open connections go on serving
        redis.cmd(*remove)
        pay_once(p, upstream)
        pay_once(stale, upstream)
    assert traffic.answers and not traffic.errors, traffic.errors
    assert {a.status for a in traffic.answers} == {201}, \
        sorted({(a.kind, a.status) for a in traffic.answers})
    assert traffic.bad == []
    assert all(upstream.executions(k) == 1 for k in traffic.keys)
    assert proxy_connections(redis) == open_before
    assert auth_failures(redis) == []
    # every connection made from now on needs the new password: the proxy that moved
    # reconnects and serves, the one left on the old password is refused
    redis.cmd("CLIENT", "KILL", "USER", USER)
    wait_metric(stale, "idempotency_proxy_redis_up", lambda v: v == 0)
    log_line(stale, "AUTH failed for user %s" % USER, "WRONGPASS")
    wait_ready(p)
    assert metric(p, "idempotency_proxy_redis_up", required=True) == 1
    pay_once(p, upstream)
    key = new_key()
    assert_problem(stale.post(key=key), 503, "store-unavailable")
    assert upstream.executions(key) == 0
    assert not log_lines(p, "WRONGPASS")
    assert auth_failures(redis), "the stale proxy's old password is refused"
    assert_no_secret_written(p, old, new)
    assert_no_secret_written(stale, old, new)


def test_a_killed_connection_before_the_reload_is_refused_then_the_reload_recovers(
        tmp_path, redis, start_proxy, upstream):
    old, new = new_password("old"), new_password("new")
    p, path = start_with_password_file(start_proxy, redis, tmp_path, old)
    pay_once(p, upstream)
    # Redis takes only the new password, the file still holds the old one
    acl_setuser(redis, USER, "resetpass", ">" + new)
    redis.cmd("CLIENT", "KILL", "USER", USER)
    line = log_line(p, "AUTH failed for user %s" % USER, "WRONGPASS")
    assert "redis 127.0.0.1:%d:" % redis.port in line, line
    wait_metric(p, "idempotency_proxy_redis_up", lambda v: v == 0)
    key = new_key()
    assert_problem(p.post(key=key), 503, "store-unavailable")
    assert upstream.executions(key) == 0
    # the file and SIGHUP: the next connection sends the new password
    write_secret(path, new, end="\r\n")
    reload_and_wait(p, "redis.password changed")
    wait_ready(p)
    wait_metric(p, "idempotency_proxy_redis_up", lambda v: v == 1)
    r = p.post(key=key)
    assert r.status == 201, r
    assert upstream.executions(key) == 1
    assert_no_secret_written(p, old, new)


def test_a_reload_with_an_unreadable_password_file_is_refused_and_keeps_the_password(
        tmp_path, redis, start_proxy, upstream):
    old = new_password("old")
    p, path = start_with_password_file(start_proxy, redis, tmp_path, old)
    write_secret(path, "", end="")
    reload_and_wait(p, "reload refused")
    line = log_line(p, "reload refused, running configuration kept")
    assert "redis.password_file: %s: the file is empty" % path in line, line
    assert metric(p, "idempotency_proxy_config_reload_failures_total", required=True) >= 1
    # the running password stays, for the connections made after too
    redis.cmd("CLIENT", "KILL", "USER", USER)
    wait_until(lambda: proxy_connections(redis), what="the proxy's connections made again")
    wait_ready(p)
    pay_once(p, upstream)
    assert_no_secret_written(p, old)


def config_text(redis_lines, routes="routes:\n  - path: /v1/payments*\n"):
    return ("listen: 127.0.0.1:18080\n"
            "admin_listen: \"\"\n"
            "redis:\n"
            "  url: redis://127.0.0.1:6379/0\n" + redis_lines + routes)


@pytest.mark.parametrize("case", ["missing", "empty", "both", "url", "secret_file"])
def test_t_names_the_file_and_the_line(tmp_path, case):
    empty, good = tmp_path / "empty", tmp_path / "good"
    empty.write_text("\n")
    write_secret(good, new_password("pw"))
    missing = tmp_path / "nowhere" / "password"
    hook = ("routes:\n"
            "  - path: /hooks/github\n"
            "    key_from: header:X-GitHub-Delivery\n"
            "    verify: github\n"
            "    secret_file: %s\n" % missing)
    text, line, words = {
        "missing": (config_text("  password_file: %s\n" % missing), 5,
                    "redis.password_file: %s: cannot open: No such file or directory" % missing),
        "empty": (config_text("  password_file: %s\n" % empty), 5,
                  "redis.password_file: %s: the file is empty" % empty),
        "both": (config_text("  password: ${REDIS_PASSWORD}\n  password_file: %s\n" % good), 6,
                 "redis.password and redis.password_file both give the secret; keep one"),
        "url": (config_text("  password_file: %s\n" % good).replace(
            "redis://127.0.0.1", "redis://:in-the-url@127.0.0.1"), 5,
                "redis.password_file and a password in redis.url"),
        "secret_file": (config_text("", hook), 9,
                        "secret_file: %s: cannot open" % missing),
    }[case]
    rc, out, path = run_check(tmp_path, text)
    assert rc != 0, out
    assert "%s:%d: %s" % (path, line, words) in out, out
    assert "in-the-url" not in out


def test_t_takes_a_good_password_file_and_says_nothing_of_it(tmp_path):
    secret = new_password("pw")
    path = tmp_path / "redis-password"
    write_secret(path, secret)
    rc, out, _ = run_check(tmp_path, config_text("  password_file: %s\n" % path))
    assert (rc, out.strip()) == (0, "configuration OK")
    assert secret not in out


# --------------------------------------------------------------------------
# a webhook route's secret_file
# --------------------------------------------------------------------------

def github_delivery(p, secret, delivery, body):
    sig = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return p.request("POST", "/hooks/github",
                     [("X-GitHub-Delivery", delivery), ("X-GitHub-Event", "check_run"),
                      ("X-Hub-Signature-256", sig), ("Content-Type", "application/json")], body)


def test_a_webhook_secret_file_verifies_and_a_rewrite_applies_on_sighup(tmp_path, start_proxy,
                                                                       upstream):
    old, new = new_password("gh-old"), new_password("gh-new")
    path = tmp_path / "github-secret"
    write_secret(path, old)
    p = start_proxy(routes=[{"path": "/hooks/github", "key_from": "header:X-GitHub-Delivery",
                             "verify": "github", "secret_file": str(path)}])
    body = b'{"action": "completed"}'
    first = str(uuid.uuid4())
    assert github_delivery(p, old, first, body).status == 201
    assert_problem(github_delivery(p, new, str(uuid.uuid4()), body), 401, "signature-invalid")
    write_secret(path, new)
    reload_and_wait(p, "reloaded")
    log_line(p, "the webhook secret of route /hooks/github changed")
    second = str(uuid.uuid4())
    assert_problem(github_delivery(p, old, second, body), 401, "signature-invalid")
    assert github_delivery(p, new, second, body).status == 201
    assert upstream.total() == 2
    assert_no_secret_written(p, old, new)


# --------------------------------------------------------------------------
# delivery.sign.secret_file
# --------------------------------------------------------------------------

def signatures_of(attempt):
    return attempt["headers"]["webhook-signature"].split(" ")


def signed_with(attempt, secret):
    """The attempt's webhook-signature is exactly secret's (one v1 signature)."""
    h = attempt["headers"]
    key = base64.b64decode(secret[len("whsec_"):])
    signed = ("%s.%s." % (h["webhook-id"], h["webhook-timestamp"])).encode() + \
        attempt["body"].encode()
    want = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return signatures_of(attempt) == ["v1," + want]


def test_a_sign_secret_file_signs_and_a_rewrite_signs_the_next_attempts(
        tmp_path, start_proxy, receiver_factory):
    receiver = receiver_factory()
    provider, old, new = new_secret(), sign_secret(), sign_secret()
    path = tmp_path / "inbox-signing-secret"
    write_secret(path, old)
    p = start_proxy(routes=[queued_route(provider, max_attempts=1,
                                         sign={"secret_file": str(path)})],
                    upstream_url=receiver.url, upstream={"timeout": "30s"})
    evt1, evt2, evt3 = ("evt_" + uuid.uuid4().hex for _ in range(3))

    def attempts_of(evt, n):
        """The first n attempts of evt at the receiver (waits for them)."""
        def got():
            mine = [a for a in receiver.attempts() if a["event"] == evt]
            return mine if len(mine) >= n else None
        return wait_until(got, what="%d attempts of %s" % (n, evt))

    assert deliver(p, provider, stripe_body(evt1)).status == 202
    assert signed_with(attempts_of(evt1, 1)[0], old)
    # evt2's only attempt fails: a dead letter, signed with the old secret
    receiver.control(sequence=[{"status": 500}])
    assert deliver(p, provider, stripe_body(evt2)).status == 202
    assert signed_with(attempts_of(evt2, 1)[0], old)
    wait_until(lambda: p.admin("GET", "/inbox/%s/dead" % ENCODED).json()["dead"],
               what="evt2 dead")
    write_secret(path, new)
    reload_and_wait(p, "reloaded")
    log_line(p, "the delivery.sign secret of route %s changed" % ROUTE)
    # a new delivery, and an earlier one delivered again: both signed with the new secret
    assert deliver(p, provider, stripe_body(evt3)).status == 202
    assert signed_with(attempts_of(evt3, 1)[0], new)
    r = p.admin("POST", "/inbox/%s/dead/redeliver" % ENCODED)
    assert r.status == 200 and r.json()["redelivered"] == 1, r
    again = attempts_of(evt2, 2)[1]
    assert again["status"] == 200 and signed_with(again, new), again
    assert_no_secret_written(p, old, new)


# --------------------------------------------------------------------------
# redis.sentinel.password_file
# --------------------------------------------------------------------------

SENTINEL_USER = "watcher"


@pytest.mark.topology
def test_a_sentinel_password_file_is_sent_at_the_next_discovery(tmp_path, start_proxy,
                                                                upstream):
    old, new = new_password("s-old"), new_password("s-new")
    g = SentinelGroup(str(tmp_path / "group"), name="payments", n_replicas=0, n_sentinels=1,
                      sentinel_users=["user %s on >%s -@all +ping +sentinel|master "
                                      "+subscribe resetchannels &+switch-master"
                                      % (SENTINEL_USER, old)]).start()
    try:
        path = tmp_path / "sentinel-password"
        write_secret(path, old)
        p = start_proxy(redis={"url": None, "sentinel": {
            "master": "payments", "addresses": list(g.sentinel_addresses),
            "username": SENTINEL_USER, "password_file": str(path)}})
        wait_ready(p)
        pay_once(p, upstream)
        sentinel = g.sentinels[0]
        # the sentinel takes only the new password; a rediscovery with the old one is refused
        sentinel.cmd("ACL", "SETUSER", SENTINEL_USER, "resetpass", ">" + new)
        g.nodes[0].cmd("CLIENT", "KILL", "TYPE", "normal")
        log_line(p, "no sentinel named the primary of payments", "AUTH failed")
        wait_metric(p, "idempotency_proxy_redis_up", lambda v: v == 0)
        key = new_key()
        assert_problem(p.post(key=key), 503, "store-unavailable")
        assert upstream.executions(key) == 0
        write_secret(path, new)
        reload_and_wait(p, "redis.sentinel.password changed")
        wait_ready(p)
        assert p.post(key=key).status == 201
        assert upstream.executions(key) == 1
        assert_no_secret_written(p, old, new)
    finally:
        g.stop()
