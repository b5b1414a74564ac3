"""Problem answers, the admin listener's probes and /metrics, the access log, and
inspecting and purging a record.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py and the
proxy binary; each test asserts what the client and the upstream observe.
"""

import json
import re
import uuid

import pytest

from harness import wait_ready, wait_until
from proxy_helpers import (
    access_lines, assert_not_replayed, assert_problem, assert_replay_of, in_background,
    json_lines, new_key, record_keys,
)

# tests/run.sh runs this file under ThreadSanitizer with two worker threads a proxy
# (IDEM_TEST_WORKERS=2): its requests meet across workers (docs/internals.md).
pytestmark = pytest.mark.threads


# --------------------------------------------------------------------------
# problem answers
# --------------------------------------------------------------------------

def test_problem_answers_have_type_title_status_detail(start_proxy, upstream):
    p = start_proxy(limits={"max_request_body": "1KiB"})
    key = new_key()
    assert p.post(key=key).status == 201
    cases = [
        (p.post("/v1/strict", key=None), 400, "missing-key"),
        (p.request("POST", "/v1/payments", ["Idempotency-Key: \"x"], b"{}"), 400, "invalid-key"),
        (p.post(key=new_key(), body=b"x" * 2048), 413, "body-too-large"),
        (p.post(key=key, body=b"different"), 409, "key-reuse-mismatch"),
    ]
    for r, status, cause in cases:
        doc = assert_problem(r, status, cause)
        assert key not in json.dumps(doc), "problem leaks the key: %r" % doc


# --------------------------------------------------------------------------
# probes, metrics and the access log
# --------------------------------------------------------------------------

def test_admin_healthz_readyz_metrics(proxy, upstream):
    assert proxy.admin("GET", "/healthz").status == 200
    # /readyz: 200 once every worker's Redis connection is up (at start it may still be 503
    # "redis unreachable" while the first connection is made)
    wait_ready(proxy)
    assert proxy.post(key=new_key()).status == 201
    m = proxy.admin("GET", "/metrics")
    assert m.status == 200
    text = m.body.decode()
    assert "# TYPE" in text, text[:500]
    # an unmatched GET on the request port is a plain pass-through
    assert proxy.request("GET", "/_demo/stats").status == 200


def test_access_log_never_contains_the_raw_key_body_or_authorization(proxy, upstream):
    key = "LOGGED-KEY-" + uuid.uuid4().hex
    token = "Bearer sk_live_" + uuid.uuid4().hex
    secret_body = ('{"card": "4242424242424242", "n": "%s"}' % uuid.uuid4().hex).encode()
    n = 0
    for _ in range(2):
        assert proxy.post(key=key, body=secret_body, headers=[("Authorization", token)]).status \
            == 201
        n += 1
    proxy.post(key=key, body=b"mismatch", headers=[("Authorization", token)])
    n += 1
    access_lines(proxy, n, requests_only=True)
    text = proxy.stdout_text() + proxy.stderr_text()
    assert key not in text
    assert token not in text and "sk_live_" not in text
    assert "4242424242424242" not in text
    lines = json_lines(text)
    assert len(lines) >= n, "expected one JSON access log line per request:\n%s" % text[-2000:]


def test_access_log_line_fields(proxy, upstream):
    key = new_key()
    proxy.post(key=key)
    proxy.post(key=key)
    access_lines(proxy, 2, requests_only=True)
    lines = [d for d in json_lines(proxy.stdout_text() + proxy.stderr_text())
             if "status" in d]
    assert len(lines) >= 2, lines
    for d in lines[-2:]:
        assert "route" in d and "outcome" in d, d
        assert any("record" in k for k in d), d
        assert any(k.endswith("_ms") or "ms" in k for k in d), d
    assert lines[-1]["status"] == 201
    rec = [v for k, v in lines[-1].items() if "record" in k][0]
    assert rec == [v for k, v in lines[-2].items() if "record" in k][0]
    assert key not in rec


def test_metrics_cover_requests_latency_and_store(proxy, upstream):
    key = new_key()
    proxy.post(key=key)
    proxy.post(key=key)
    m = proxy.admin("GET", "/metrics")
    assert m.status == 200, m
    text = m.body.decode()
    assert "_bucket{" in text and 'le="' in text, "no latency histogram:\n" + text[:2000]
    assert "outcome=" in text, "no requests-by-outcome counter:\n" + text[:2000]
    assert re.search(r"^# TYPE \S+ gauge$", text, re.M), "no gauge:\n" + text[:2000]


def test_admin_listener_can_be_disabled(start_proxy, upstream):
    p = start_proxy(admin=False)
    with open(p.config_path) as f:
        assert 'admin_listen: ""' in f.read()
    key = new_key()
    first = p.post(key=key)
    assert first.status == 201
    assert_replay_of(p.post(key=key), first)


# --------------------------------------------------------------------------
# inspecting and purging records
# --------------------------------------------------------------------------

def find_record_id(proxy):
    """The record id the access log printed for the latest protected request."""
    for doc in reversed(json_lines(proxy.stdout_text() + proxy.stderr_text())):
        for k, v in doc.items():
            if "record" in k.lower() and isinstance(v, str) and v:
                return v
    return None


def test_admin_inspect_and_purge_an_outcome_unknown_record(start_proxy, upstream):
    p = start_proxy(upstream={"timeout": "1s"})
    key = new_key()
    assert_problem(p.post(key=key, headers=[("X-Demo-Fault", "hang")]), 504, "upstream-timeout")
    assert_problem(p.post(key=key), 502, "outcome-unknown")
    access_lines(p, 2, requests_only=True)  # the 2 requests' lines
    rid = find_record_id(p)
    assert rid, "no record id in the access log:\n%s" % (p.stdout_text() + p.stderr_text())[-2000:]
    info = p.admin("GET", "/records/" + rid)
    assert info.status == 200, info
    assert key not in info.body.decode(errors="replace")
    d = p.admin("DELETE", "/records/" + rid)
    assert d.status in (200, 202, 204), d
    r = p.post(key=key)
    assert r.status == 201, r
    assert_not_replayed(r)
    assert upstream.total() == 2


def test_admin_purge_refuses_a_claim_still_in_flight(proxy, upstream, redis):
    key = new_key()
    slow = in_background(proxy.post, key=key, headers=[("X-Demo-Delay-Ms", "1500")])
    wait_until(lambda: upstream.total() == 1)
    (record_key,) = record_keys(redis)
    rid = str(record_key).split("{", 1)[1].rstrip("}")
    refused = proxy.admin("DELETE", "/records/" + rid)
    assert refused.status == 409, refused
    assert slow.result().status == 201
    assert proxy.post(key=key).replayed
    assert upstream.executions(key) == 1
    # finished now: purged only when the operator says the next retry executes again
    assert proxy.admin("DELETE", "/records/" + rid).status == 409
    assert proxy.admin("DELETE", "/records/" + rid + "?confirm=re-execute&reason=test").status \
        == 200


def test_admin_records_unknown_id_is_404(proxy):
    assert proxy.admin("GET", "/records/" + "0" * 32).status == 404
    assert proxy.admin("DELETE", "/records/" + "0" * 32).status == 404
