"""What the proxy shows an operator, as the documents state it (docs/operations.md,
docs/configuration.md, docs/webhooks.md), checked against the running proxy:

- the access log's `log.access` levels (log.c): `all`, `errors` and `off`; `errors` keeps a 2xx
  that is not routine and leaves out a queued webhook delivery (`queued` is routine); a reload
  changes the level; a line is JSON for any path;
- the access log and `/metrics` name a route by its pattern without the trailing `*`,
  while `GET /inbox` names a queued route by its `path` as written, `*` included;
- the admin listener answers exactly the documented endpoints;
- `idempotency_proxy_redis_up` is about the connections' setup: it stays 1 while `/readyz`
  is 503 for a replica shortfall (`redis.min_replicas`);
- `delivery.concurrency` counts per route and per worker thread.

Real processes only: redis-server, the proxy binary, the demo upstream and the inbox
receiver of inbox_helpers.py.
"""

import socket
import uuid
import urllib.parse

import pytest

from harness import read_response, wait_until
from inbox_helpers import ROUTE, Receiver, deliver, new_secret, queued_route, stripe_body
from proxy_helpers import access_lines, metric, new_key, wait_metric


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
        assert deliver(p, secret, stripe_body("evt_" + uuid.uuid4().hex),
                       "/wh/stripe").status == 202
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
    assert p.admin("DELETE", "/records/%s?confirm=re-execute&reason=test" % record_id).status \
        == 200
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
            assert deliver(p, secret, stripe_body("evt_" + uuid.uuid4().hex),
                           "/webhooks/other").status == 202
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


# --------------------------------------------------------------------------
# log.access
# --------------------------------------------------------------------------


def drive_outcomes(p):
    """One request of each kind; returns the key of the forwarded one."""
    key = new_key()
    assert p.post(key=key, body=b'{"a": 1}').status == 201                 # forwarded
    assert p.post(key=key, body=b'{"a": 1}').replayed                       # replayed
    assert p.post(key=key, body=b'{"a": 2}').status == 409                  # mismatch
    assert p.post(body=b'{"a": 3}').status == 201                           # unprotected
    assert p.post(key=new_key(), headers=[("X-Demo-Status", "503")]).status == 503  # released
    assert p.post(key="", body=b"{}").status == 400                         # invalid-key
    return key


def test_access_log_all_errors_and_off(start_proxy, upstream):
    everything = start_proxy(log={"access": "all"}, name="all")
    errors = start_proxy(log={"access": "errors"}, name="errors")
    off = start_proxy(log={"access": "off"}, name="off")
    for p in (everything, errors, off):
        drive_outcomes(p)
    got = {name: [(d["outcome"], d["status"]) for d in access_lines(p, n)]
           for name, p, n in (("all", everything, 6), ("errors", errors, 3), ("off", off, 0))}
    assert got["all"] == [("forwarded", 201), ("replayed", 201), ("mismatch", 409),
                          ("unprotected", 201), ("released", 503), ("invalid-key", 400)], got
    assert got["errors"] == [("mismatch", 409), ("released", 503), ("invalid-key", 400)], got
    assert got["off"] == [], got
    # the counts stay in /metrics whatever the log keeps
    m = off.admin("GET", "/metrics").body.decode()
    assert 'outcome="forwarded"} 1' in m and 'outcome="mismatch"} 1' in m, m


def test_access_log_errors_keeps_a_2xx_that_is_not_routine(start_proxy, redis, upstream):
    """forwarded-not-stored answers 201 but retries will get not-replayable: kept."""
    p = start_proxy(log={"access": "errors"}, limits={"max_stored_response": "10B"})
    assert p.post(key=new_key()).status == 201
    assert [(d["outcome"], d["status"]) for d in access_lines(p, 1)] == \
        [("forwarded-not-stored", 201)]


def test_access_log_level_changes_on_reload(start_proxy, upstream):
    import signal as _signal
    # one worker: config_reloads_total counts the reload once it applies (a second worker
    # takes it from its mailbox afterwards)
    p = start_proxy(log={"access": "off"}, workers=1)
    assert p.post(key=new_key()).status == 201
    assert access_lines(p, 0) == []
    with open(p.config_path) as f:
        text = f.read()
    with open(p.config_path, "w") as f:
        f.write(text.replace("access: \"off\"", "access: all").replace("access: off",
                                                                         "access: all"))
    p.signal(_signal.SIGHUP)
    wait_metric(p, "idempotency_proxy_config_reloads_total", lambda v: v == 1)
    assert p.post(key=new_key()).status == 201
    assert [d["outcome"] for d in access_lines(p, 1)] == ["forwarded"]


@pytest.mark.parametrize("path, logged", [
    (b"/v1/payments/\"quoted\"\\back", '/v1/payments/"quoted"\\back'),
    (b"/v1/payments/caf\xc3\xa9", "/v1/payments/caf\u00e9"),
    (b"/v1/payments/\xff\xfe", "(not UTF-8)"),
    (b"/v1/payments/" + b"x" * 5000 + b"\"", "/v1/payments/" + "x" * 5000 + '"'),
    (b"/v1/payments/%22%5C", "/v1/payments/%22%5C"),
])
def test_access_log_line_is_json_for_any_path(proxy, upstream, path, logged):
    s = socket.create_connection(("127.0.0.1", proxy.port))
    try:
        s.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 2\r\n\r\n{}")
        r = read_response(s)
    finally:
        s.close()
    lines = access_lines(proxy, 1)
    assert len(lines) == 1, lines
    d = lines[0]
    assert d["path"] == logged and d["status"] == r.status, (d, r)
    assert list(d) == ["route", "method", "path", "outcome", "status", "record_id",
                       "upstream_ms", "total_ms", "time"]
    assert isinstance(d["upstream_ms"], float) and isinstance(d["total_ms"], float)
    assert d["total_ms"] >= d["upstream_ms"] >= 0
