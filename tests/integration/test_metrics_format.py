"""GET /metrics is valid Prometheus text exposition and counts what happened.

After a forward, a replay and a mismatch went through the
proxy, `promtool check metrics` (Debian package `prometheus`, /usr/bin/promtool)
accepts the admin listener's /metrics with no lint finding, the request counter
has exactly one sample per outcome, the latency histograms counted the exchanges,
and /readyz follows Redis going away and coming back.
"""

import math
import uuid

import pytest

from harness import wait_until
from proxy_helpers import metric_number, parse_exposition, promtool_check, promtool_path

# tests/run.sh runs this file under ThreadSanitizer with two worker threads a proxy
# (IDEM_TEST_WORKERS=2): its requests meet across workers (docs/internals.md).
pytestmark = pytest.mark.threads

ROUTE = "/v1/payments"           # the route pattern /v1/payments* as the metrics label it

# the README's "Metrics" table: name -> type
DOCUMENTED = {
    "idempotency_proxy_requests_total": "counter",
    "idempotency_proxy_upstream_duration_seconds": "histogram",
    "idempotency_proxy_redis_duration_seconds": "histogram",
    "idempotency_proxy_in_flight_requests": "gauge",
    "idempotency_proxy_waiting_requests": "gauge",
    "idempotency_proxy_upstream_in_flight": "gauge",
    "idempotency_proxy_redis_up": "gauge",
    "idempotency_proxy_store_errors_total": "counter",
    "idempotency_proxy_store_error_passes_total": "counter",
    "idempotency_proxy_config_reloads_total": "counter",
    "idempotency_proxy_config_reload_failures_total": "counter",
    "idempotency_proxy_held_answers_total": "counter",
    "idempotency_proxy_build_info": "gauge",
    "idempotency_proxy_held_records": "gauge",
    "idempotency_proxy_held_record_oldest_seconds": "gauge",
    "idempotency_proxy_held_record_expiry_seconds": "gauge",
    "idempotency_proxy_held_census_age_seconds": "gauge",
}


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def values(samples, name, **labels):
    return [v for n, l, v in samples if n == name and all(l.get(k) == x for k, x in labels.items())]


def one_value(samples, name, **labels):
    vs = values(samples, name, **labels)
    assert len(vs) == 1, "expected one sample %s%r, found %r" % (name, labels, vs)
    return vs[0]


def check_histogram(samples, family):
    buckets = [(l["le"], v) for n, l, v in samples if n == family + "_bucket"]
    assert buckets, "histogram %s has no buckets" % family
    les = [metric_number(le) for le, _ in buckets]
    assert les == sorted(les) and les[-1] == math.inf, "%s: bucket bounds %r" % (family, les)
    counts = [v for _, v in buckets]
    assert counts == sorted(counts), "%s: buckets not cumulative %r" % (family, buckets)
    count = one_value(samples, family + "_count")
    assert counts[-1] == count, "%s: +Inf bucket %r != _count %r" % (family, counts[-1], count)
    total = one_value(samples, family + "_sum")
    assert total >= 0 and (count > 0 or total == 0), "%s: _sum %r, _count %r" % (family, total,
                                                                                count)
    return count


def scrape(proxy):
    r = proxy.admin("GET", "/metrics")
    assert r.status == 200, r
    ctype = r.header("Content-Type") or ""
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype, r
    return r.body


# --------------------------------------------------------------------------
# the test
# --------------------------------------------------------------------------

def test_metrics_pass_promtool_and_count_forward_replay_mismatch(proxy, upstream, redis):
    promtool_path()  # before anything else: a missing promtool is a failure, not a skip
    key = "metrics-%s" % uuid.uuid4().hex
    first = proxy.post(key=key, body=b'{"amount": 100}')
    assert first.status == 201 and not first.replayed, first
    replay = proxy.post(key=key, body=b'{"amount": 100}')
    assert replay.status == 201 and replay.replayed and replay.body == first.body, replay
    mismatch = proxy.post(key=key, body=b'{"amount": 999}')
    assert mismatch.status == 409, mismatch
    assert upstream.executions(key) == 1

    body = scrape(proxy)
    promtool_check(body)
    types, samples = parse_exposition(body.decode("utf-8"))

    for name, typ in DOCUMENTED.items():
        assert types.get(name) == typ, "README documents %s as a %s; # TYPE says %r" % (
            name, typ, types.get(name))

    req = "idempotency_proxy_requests_total"
    assert one_value(samples, req, route=ROUTE, outcome="forwarded") == 1
    assert one_value(samples, req, route=ROUTE, outcome="replayed") == 1
    assert one_value(samples, req, route=ROUTE, outcome="mismatch") == 1
    counted = [(l, v) for n, l, v in samples if n == req and v]
    assert sum(v for _, v in counted) == 3, "three client requests were made: %r" % counted

    assert check_histogram(samples, "idempotency_proxy_upstream_duration_seconds") >= 1
    assert check_histogram(samples, "idempotency_proxy_redis_duration_seconds") >= 3
    assert one_value(samples, "idempotency_proxy_redis_up") == 1
    assert one_value(samples, "idempotency_proxy_in_flight_requests") == 0
    # no held record was answered from: the counter is there, at 0, with no labels
    assert [(l, v) for n, l, v in samples
            if n == "idempotency_proxy_held_answers_total"] == [({}, 0)]
    # the census of held records: every state, at 0 when nothing is held
    for state in ("claimed_expired", "outcome_unknown", "resolved"):
        assert one_value(samples, "idempotency_proxy_held_records", state=state) == 0
        assert one_value(samples, "idempotency_proxy_held_record_oldest_seconds", state=state) == 0

    # readiness follows Redis: gone -> 503, back on the same port -> 200
    assert proxy.admin("GET", "/readyz").status == 200
    redis.kill()
    wait_until(lambda: proxy.admin("GET", "/readyz").status == 503, 10,
               what="/readyz 503 after redis-server was killed")
    assert one_value(parse_exposition(scrape(proxy).decode())[1],
                     "idempotency_proxy_redis_up") == 0
    redis.start()
    wait_until(lambda: proxy.admin("GET", "/readyz").status == 200, 15,
               what="/readyz 200 after redis-server came back")

    # still well-formed after the store errors and the reconnect
    body = scrape(proxy)
    promtool_check(body)
    _, samples = parse_exposition(body.decode("utf-8"))
    assert one_value(samples, "idempotency_proxy_redis_up") == 1
    assert one_value(samples, req, route=ROUTE, outcome="forwarded") == 1
