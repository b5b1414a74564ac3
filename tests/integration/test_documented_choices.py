"""Facts the documents state on more than one page, each checked against
the running proxy (docs/operations.md, docs/configuration.md, docs/webhooks.md):

- `log.access: errors` leaves out a queued webhook delivery (`queued` is routine);
- the access log and `/metrics` name a route by its pattern without the trailing `*`,
  while `GET /inbox` names a queued route by its `path` as written, `*` included;
- the admin listener answers exactly the documented endpoints;
- `idempotency_proxy_redis_up` is about the connections' setup: it stays 1 while `/readyz`
  is 503 for a replica shortfall (`redis.min_replicas`);
- `delivery.concurrency` counts per route and per worker thread.

Real processes only: redis-server, the proxy binary, the demo upstream and the inbox
receiver of inbox_helpers.py.
"""

import hashlib
import hmac
import time
import uuid
import urllib.parse

import pytest

from harness import wait_until
from inbox_helpers import ROUTE, Receiver, deliver, new_secret, queued_route, stripe_body
from proxy_helpers import access_lines, metric


def signed_delivery(p, path, secret, body):
    """A Stripe-signed POST of body to path (inbox_helpers.deliver(), for another route)."""
    t = int(time.time())
    mac = hmac.new(secret.encode(), b"%d." % t + body, hashlib.sha256).hexdigest()
    return p.request("POST", path, [("Stripe-Signature", "t=%d,v1=%s" % (t, mac)),
                                    ("Content-Type", "application/json")], body, timeout=10)


def started_receiver(tmp_path, made, delay=0.0):
    r = Receiver(str(tmp_path), delay=delay).start()
    made.append(r)
    return r


def overlap(attempts, delay):
    """The most attempts a receiver answering after `delay` seconds held at one moment."""
    edges = sorted([(a["t"], 1) for a in attempts] + [(a["t"] + delay - 0.05, -1)
                                                      for a in attempts],
                   key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_access_log_errors_leaves_out_a_queued_delivery(tmp_path, start_proxy):
    made = []
    try:
        receiver = started_receiver(tmp_path, made)
        secret = new_secret()
        for level, expected in (("errors", []), ("all", [("queued", 202)])):
            p = start_proxy(routes=[queued_route(secret)], upstream_url=receiver.url,
                            log={"access": level}, name="log-" + level)
            assert deliver(p, secret, stripe_body("evt_" + uuid.uuid4().hex)).status == 202
            assert p.stop() == 0  # its last access-log lines are written at exit
            got = [(d["outcome"], d["status"]) for d in access_lines(p)]
            assert got == expected, (level, got)
    finally:
        for r in made:
            r.stop()


def test_route_is_named_without_its_star_in_logs_and_metrics_and_with_it_in_the_inbox(
        tmp_path, start_proxy):
    made = []
    try:
        receiver = started_receiver(tmp_path, made)
        secret = new_secret()
        webhook = dict(queued_route(secret), path="/wh/*")
        p = start_proxy(routes=[{"path": "/v1/payments*"}, webhook], upstream_url=receiver.url)
        assert p.post(key="k-" + uuid.uuid4().hex).status == 200
        assert signed_delivery(p, "/wh/stripe", secret,
                               stripe_body("evt_" + uuid.uuid4().hex)).status == 202
        text = p.admin("GET", "/metrics").body.decode()
        assert 'route="/v1/payments",outcome="forwarded"} 1' in text, text
        assert 'route="/wh/",outcome="queued"} 1' in text, text
        routes = p.admin("GET", "/inbox").json()["routes"]
        assert [(r["route"], r["admin"]) for r in routes] == [
            ("/wh/*", urllib.parse.quote("/wh/*", safe=""))]
        assert p.stop() == 0  # its last access-log lines are written at exit
        assert [d["route"] for d in access_lines(p)] == ["/v1/payments", "/wh/"]
    finally:
        for r in made:
            r.stop()


def test_admin_listener_answers_the_documented_endpoints_only(start_proxy, upstream):
    p = start_proxy()
    key = "k-" + uuid.uuid4().hex
    assert p.post(key=key).status == 201
    record_id = access_lines(p, 1)[-1]["record_id"]
    assert p.admin("GET", "/healthz").status == 200
    assert p.admin("GET", "/readyz").status == 200
    assert p.admin("GET", "/metrics").status == 200
    assert p.admin("GET", "/records/%s" % record_id).json()["state"] == "done"
    assert p.admin("GET", "/inbox").json() == {"routes": []}
    lookup = p.admin("GET", "/records/lookup?path=/v1/payments&key=" + key).json()
    assert (lookup["record_id"], lookup["exists"]) == (record_id, True), lookup
    listed = p.admin("GET", "/records?state=outcome-unknown")
    assert (listed.status, listed.json()["records"]) == (200, []), listed
    # a resolve of a finished record: an empty body is refused before Redis is asked
    assert p.admin("PUT", "/records/%s" % record_id).status == 400
    # not an endpoint of this release: pause
    assert p.admin("POST", "/inbox/%2Fwh/pause").status == 404
    assert p.admin("DELETE", "/records/%s" % record_id).status == 200
    assert p.admin("GET", "/records/%s" % record_id).status == 404


def test_redis_up_stays_1_while_readyz_reports_a_replica_shortfall(start_proxy, upstream):
    p = start_proxy(redis={"min_replicas": 1, "replica_timeout": "100ms"})  # no replica
    def short():
        # until the first connection's setup is done, /readyz says "redis unreachable"
        r = p.admin("GET", "/readyz")
        return r if r.status == 503 and b"too few replicas" in r.body else None
    wait_until(short, what="/readyz 503 'too few replicas' without a replica")
    assert metric(p, "idempotency_proxy_redis_up") == 1


@pytest.mark.threads
def test_delivery_concurrency_counts_per_route_and_per_worker(tmp_path, start_proxy):
    delay = 2.0
    made = []
    try:
        secret = new_secret()
        # one worker, two routes of concurrency 1: two deliveries at a time, one per route
        receiver = started_receiver(tmp_path, made, delay=delay)
        other = dict(queued_route(secret, concurrency=1), path="/webhooks/other")
        p = start_proxy(routes=[queued_route(secret, concurrency=1), other],
                        upstream_url=receiver.url, workers=1, name="routes")
        for _ in range(3):
            assert deliver(p, secret, stripe_body("evt_" + uuid.uuid4().hex)).status == 202
            assert signed_delivery(p, "/webhooks/other", secret,
                                   stripe_body("evt_" + uuid.uuid4().hex)).status == 202
        wait_until(lambda: metric(p, "idempotency_proxy_inbox_delivered_total") == 6,
                   interval=0.2, what="six deliveries")
        attempts = receiver.attempts()
        assert overlap(attempts, delay) == 2, attempts
        for path in (ROUTE, "/webhooks/other"):
            assert overlap([a for a in attempts if a["path"] == path], delay) == 1, attempts

        # two workers, one route of concurrency 1: two at a time, one per worker
        assert p.stop() == 0  # it consumes the same stream
        receiver = started_receiver(tmp_path, made, delay=delay)
        q = start_proxy(routes=[queued_route(secret, concurrency=1)], upstream_url=receiver.url,
                        workers=2, name="workers")
        for _ in range(4):
            assert deliver(q, secret, stripe_body("evt_" + uuid.uuid4().hex)).status == 202
        wait_until(lambda: metric(q, "idempotency_proxy_inbox_delivered_total") == 4,
                   interval=0.2, what="four deliveries")
        assert overlap(receiver.attempts(), delay) == 2, receiver.attempts()
    finally:
        for r in made:
            r.stop()
