"""The health listener and readiness (docs/operations.md "Health listener", "/readyz";
docs/configuration.md `health_listen`, `readiness`):

- `health_listen` serves GET and HEAD of `/healthz`, `/readyz` and `/metrics` with no token,
  whatever token a client sends; any other path there is 404 (the records and the inbox
  included, with the admin token too), another method 405, a body 413: nothing reaches a record;
- once it is set, the admin listener serves none of the three: without the token they are 401
  like every admin path, with it 404; it may stand without `admin_listen`;
- a `health_listen` on the port of `admin_listen` or `listen` is a `-t` error naming its line;
- `readiness: process` keeps `/readyz` 200 while Redis is stopped (its body says the store is
  away), pass-through requests reach the upstream, keyed ones get `503 store-unavailable` with
  `Retry-After` and never reach it, `idempotency_proxy_redis_up` says 0, and the SIGTERM drain
  still turns `/readyz` 503; `readiness: store` is 503 then, and a SIGHUP to `process` turns it 200.

Real processes only: redis-server (stopped by the tests themselves), the demo upstream and the
proxy binary.
"""

import re
import signal

import pytest

from harness import build_config, free_port, http_request, port_accepts, to_yaml, wait_until
from proxy_helpers import (
    assert_problem, assert_retry_after, bearer, in_background, metric, new_key, new_token,
    reload_and_wait, rewrite, run_check, token_file,
)

# the probes read every worker's state from the admin worker's thread: tests/run.sh runs this
# file under ThreadSanitizer too
pytestmark = pytest.mark.threads

PROBES = ("/healthz", "/readyz", "/metrics")
RECORD_ID = "0123456789abcdef0123456789abcdef"
NOT_PROBES = ("/records", "/records/" + RECORD_ID, "/inbox", "/inbox/x/dead",
              "/records/lookup?path=/v1/payments&key=k", "/", "/healthz/", "/metrics.txt")


def health(port, method, path, **kw):
    return http_request(port, method, path, **kw)


def start_with_health(start_proxy, health_port=None, **kw):
    """A proxy with health_listen on 0.0.0.0 (reached on 127.0.0.1): (proxy, its port)."""
    port = health_port or free_port()
    p = start_proxy(health_listen="0.0.0.0:%d" % port, **kw)
    wait_until(lambda: port_accepts(port) or not p.alive(), what="the health listener's port")
    assert p.alive(), p.stderr_text()
    return p, port


def health_ready(port):
    return health(port, "GET", "/readyz").status == 200


def test_health_listener_answers_the_probes_with_no_token_and_nothing_else(start_proxy,
                                                                           tmp_path, redis):
    token = new_token()
    p, port = start_with_health(start_proxy, admin_host="0.0.0.0",
                                admin_token_file=token_file(tmp_path, token))
    wait_until(lambda: health_ready(port), what="/readyz 200 on the health listener")
    key = new_key()
    assert p.post(key=key).status == 201
    record_id = p.admin("GET", "/records/lookup?path=/v1/payments&key=" + key,
                        headers=bearer(token)).json()["record_id"]

    for credentials in ([], bearer(token), bearer(new_token()), [("Authorization", "Basic x")]):
        r = health(port, "GET", "/healthz", headers=credentials)
        assert (r.status, r.body) == (200, b"ok\n"), r
        r = health(port, "GET", "/readyz", headers=credentials)
        assert (r.status, r.body) == (200, b"ready\n"), r
        assert r.header("Cache-Control") == "no-store", r
        r = health(port, "GET", "/metrics", headers=credentials)
        assert r.status == 200 and r.header("Content-Type").startswith("text/plain; version=0.0.4"), r
        assert re.search(rb"^idempotency_proxy_redis_up 1$", r.body, re.M), r.body[:400]
        assert r.header("WWW-Authenticate") is None, r
    for path in PROBES:
        r = health(port, "HEAD", path)
        assert r.status == 200 and r.body == b"", r

    for path in NOT_PROBES + ("/records/" + record_id,):
        for credentials in ([], bearer(token)):
            r = health(port, "GET", path, headers=credentials)
            assert (r.status, r.body) == (404, b"not found\n"), (path, r)
    for method in ("DELETE", "POST", "PUT"):
        for path in ("/records/" + record_id, "/healthz", "/inbox/x/dead/1-0"):
            r = health(port, method, path, headers=bearer(token))
            assert r.status == 405 and r.header("Allow") == "GET, HEAD", (method, path, r)
    # a body is refused before it is read
    r = health(port, "GET", "/healthz", body=b"x" * 10)
    assert_problem(r, 413, "body-too-large")
    # other methods are not served at all, as on the admin listener
    assert health(port, "OPTIONS", "/healthz").status == 501

    # the record the DELETEs named is still there
    got = p.admin("GET", "/records/" + record_id, headers=bearer(token))
    assert got.status == 200 and got.json()["state"] == "done", got


def test_admin_listener_serves_no_probe_once_health_listen_is_set(start_proxy, tmp_path):
    token = new_token()
    p, port = start_with_health(start_proxy, admin_host="0.0.0.0",
                                admin_token_file=token_file(tmp_path, token))
    wait_until(lambda: health_ready(port), what="/readyz 200 on the health listener")
    for path in PROBES + NOT_PROBES:
        for method in ("GET", "HEAD", "DELETE"):
            r = p.admin(method, path)
            assert r.status == 401 and r.header("WWW-Authenticate"), (method, path, r)
    for path in PROBES:
        r = p.admin("GET", path, headers=bearer(token))
        assert (r.status, r.body) == (404, b"not found\n"), (path, r)
    # the rest of the admin API is as before, behind the token
    assert p.admin("GET", "/inbox", headers=bearer(token)).status == 200
    unauthorized = metric(p, "idempotency_proxy_admin_unauthorized_total",
                          labels={"reason": "missing"},
                          text=health(port, "GET", "/metrics").body.decode())
    assert unauthorized == len(PROBES + NOT_PROBES) * 3


def test_health_listen_stands_without_admin_listen(start_proxy):
    p, port = start_with_health(start_proxy, admin=False)
    with open(p.config_path) as f:
        assert 'admin_listen: ""' in f.read()
    wait_until(lambda: health_ready(port), what="/readyz 200 on the health listener")
    key = new_key()
    assert p.post(key=key).status == 201
    assert p.post(key=key).header("Idempotent-Replayed") == "true"
    text = health(port, "GET", "/metrics").body.decode()
    assert metric(p, "idempotency_proxy_requests_total", text=text,
                  labels={"route": "/v1/payments", "outcome": "replayed"}) == 1


@pytest.mark.parametrize("other", ["admin_listen", "listen"])
def test_t_refuses_a_health_listen_on_another_listeners_port(tmp_path, other):
    port, admin_port = free_port(), free_port()
    taken = {"admin_listen": admin_port, "listen": port}[other]
    cfg = build_config(port, admin_port, "http://127.0.0.1:3000", "redis://127.0.0.1:6379/0",
                       health_listen="0.0.0.0:%d" % taken)
    text = to_yaml(cfg) + "\n"
    rc, out, path = run_check(tmp_path, text)
    line = text.splitlines().index("health_listen: 0.0.0.0:%d" % taken) + 1
    assert rc == 1, out
    assert "%s:%d: health_listen and %s use the same port %d" % (path, line, other, taken) in out, out


def redis_down(p, port):
    """Once the health listener's /metrics says the store is away (Redis stopped)."""
    text = health(port, "GET", "/metrics").body.decode()
    return metric(p, "idempotency_proxy_redis_up", text=text, required=True) == 0


def assert_keyed_refused_and_pass_through_served(p, upstream):
    """Redis away: a keyed POST gets 503 store-unavailable with Retry-After and never reaches
    the upstream; a pass-through GET and an unkeyed POST of an optional-key route do."""
    before = upstream.requests()
    r = p.post(key=new_key(), body=b'{"amount": 1, "keyed": true}')
    assert_problem(r, 503, "store-unavailable")
    assert_retry_after(r)
    assert upstream.requests() == before and upstream.total() == 0
    r = p.request("GET", "/v1/payments/pay_reconcile_me")
    assert r.status < 500, r
    last = upstream.last_request()
    assert (last["method"], last["path"]) == ("GET", "/v1/payments/pay_reconcile_me"), last
    r = p.post(body=b'{"amount": 2, "unkeyed": true}')
    assert r.status == 201, r
    assert upstream.requests() == before + 2
    assert [h["method"] for h in upstream.history()] == ["POST"], upstream.history()


def test_readiness_process_keeps_readyz_200_while_redis_is_stopped(start_proxy, upstream, redis):
    p, port = start_with_health(start_proxy, readiness="process")
    wait_until(lambda: health(port, "GET", "/readyz").body == b"ready\n",
               what="/readyz 'ready' with Redis up")
    redis.stop()
    wait_until(lambda: redis_down(p, port), what="idempotency_proxy_redis_up 0")
    r = health(port, "GET", "/readyz")
    assert r.status == 200, r
    assert r.body == b"ready (readiness: process; the store is away: redis unreachable)\n", r
    assert_keyed_refused_and_pass_through_served(p, upstream)

    # the drain still takes the pod out: /readyz 503 while a request finishes
    # (an unkeyed POST: the demo upstream delays only what it executes)
    slow = in_background(p.post, path="/v1/payments/slow", headers=[("X-Demo-Delay-Ms", "3000")],
                         timeout=30)
    wait_until(lambda: upstream.last_request()["path"] == "/v1/payments/slow",
               what="the slow POST at the upstream")
    p.signal(signal.SIGTERM)
    r = wait_until(lambda: (lambda r: r if r.status == 503 else None)(
        health(port, "GET", "/readyz")), what="/readyz 503 while draining")
    assert r.body == b"draining\n", r
    assert slow.result(timeout=30).status == 201
    assert p.wait(timeout=p.drain_bound_s()) == 0


def test_readiness_store_is_503_and_a_sighup_to_process_turns_it_200(start_proxy, upstream,
                                                                     redis):
    p, port = start_with_health(start_proxy)
    wait_until(lambda: health_ready(port), what="/readyz 200 with Redis up")
    redis.stop()
    r = wait_until(lambda: (lambda r: r if r.status == 503 else None)(
        health(port, "GET", "/readyz")), what="/readyz 503 with Redis stopped")
    assert r.body == b"redis unreachable\n", r
    assert redis_down(p, port)

    rewrite(p, upstream, redis, health_listen="0.0.0.0:%d" % port, readiness="process")
    reload_and_wait(p, "reloaded")
    r = health(port, "GET", "/readyz")
    assert r.status == 200, r
    assert r.body == b"ready (readiness: process; the store is away: redis unreachable)\n", r
    assert redis_down(p, port), "the metric still says the store is away"
    assert_keyed_refused_and_pass_through_served(p, upstream)

    # Redis back: ready as ever
    redis.start()
    wait_until(lambda: health(port, "GET", "/readyz").body == b"ready\n",
               what="/readyz 'ready' once Redis is back")
    k = new_key()
    assert p.post(key=k).status == 201
    assert upstream.executions(k) == 1
