"""How long a record lives (docs/client-contract.md "How long a record lives"): `retention`
from the request's last write (the claim, each lease renewal, the answer or the
outcome-unknown mark); a replay leaves the TTL alone, an operator's resolve keeps it.

Real processes: redis-server, the demo upstream (`X-Demo-Delay-Ms` makes it slow,
`X-Demo-Fault: close` closes the connection without answering) and the proxy. The record's
times come from `GET /records/<id>` (its `created_ms`, `completed_ms` and `ttl_ms`, the key's
PTTL), so no assertion depends on how fast the test reads them: ttl_ms plus the time since
the answer was written can only be at least `retention` when the answer restarted it.
"""

import base64
import json
import time

import pytest

from harness import wait_until
from proxy_helpers import CLOSE, access_record_id, bearer, new_key, new_token, token_file

pytestmark = pytest.mark.threads

RETENTION_MS = 20000
SLOW_MS = 4000


def start(start_proxy, tmp_path, token, **kw):
    # no renewal (every lease/3, 6.7 s) restarts the TTL while the upstream works (4 s)
    return start_proxy(lease="%ds" % (RETENTION_MS // 1000),
                       retention="%ds" % (RETENTION_MS // 1000), admin_host="0.0.0.0",
                       admin_token_file=token_file(tmp_path, token), **kw)


def show(p, token, record_id):
    r = p.admin("GET", "/records/" + record_id, headers=bearer(token))
    assert r.status == 200, r
    return r.json()


def since_ms(t_ms):
    return time.time() * 1000 - t_ms


@pytest.mark.parametrize("outcome", ["answer", "outcome-unknown"])
def test_retention_counts_from_the_answer_not_the_claim(outcome, start_proxy, upstream,
                                                        tmp_path):
    token = new_token()
    # outcome unknown: the upstream, still working, times out after SLOW_MS
    kw = {} if outcome == "answer" else {"upstream": {"timeout": "%dms" % SLOW_MS}}
    p = start(start_proxy, tmp_path, token, **kw)
    key = new_key()
    delay = SLOW_MS if outcome == "answer" else 3 * SLOW_MS
    r = p.post(key=key, headers=[("X-Demo-Delay-Ms", str(delay))], timeout=30)
    assert r.status == (201 if outcome == "answer" else 502), r
    rec = show(p, token, access_record_id(p, "/v1/payments"))
    assert rec["state"] == ("done" if outcome == "answer" else "outcome-unknown"), rec
    assert rec["completed_ms"] - rec["created_ms"] >= SLOW_MS - 500, rec
    # counted from the claim, ttl_ms + the time since the answer would be at most
    # retention - SLOW_MS; from the answer it is retention (plus the time since the read)
    assert rec["ttl_ms"] + since_ms(rec["completed_ms"]) > RETENTION_MS - 1500, rec
    assert rec["ttl_ms"] <= RETENTION_MS, rec


def test_a_replay_leaves_the_ttl_alone(start_proxy, upstream, tmp_path):
    token = new_token()
    p = start(start_proxy, tmp_path, token)
    key = new_key()
    first = p.post(key=key)
    assert first.status == 201, first
    rid = access_record_id(p, "/v1/payments")
    before = show(p, token, rid)["ttl_ms"]
    for _ in range(3):
        r = p.post(key=key)
        assert r.status == 201 and r.replayed, r
    after = show(p, token, rid)["ttl_ms"]
    assert after <= before, (before, after)
    assert upstream.executions(key) == 1


def test_an_operators_resolve_keeps_the_time_left(start_proxy, upstream, tmp_path):
    token = new_token()
    p = start(start_proxy, tmp_path, token)
    key = new_key()
    assert p.post(key=key, headers=CLOSE).status == 502
    rid = access_record_id(p, "/v1/payments")
    held = show(p, token, rid)
    assert held["state"] == "outcome-unknown", held
    doc = {"status": 201, "headers": [["Content-Type", "application/json"]],
           "body_base64": base64.b64encode(b'{"id": "pay_1"}').decode(),
           "reason": "found at the upstream, ticket OPS-1"}
    r = p.admin("PUT", "/records/" + rid, body=json.dumps(doc).encode(),
                headers=bearer(token) + [("Content-Type", "application/json")])
    assert r.status == 200, r
    resolved = show(p, token, rid)
    assert resolved["state"] == "resolved", resolved
    assert resolved["created_ms"] == held["created_ms"], (held, resolved)
    assert resolved["ttl_ms"] <= held["ttl_ms"], (held, resolved)
    retry = p.post(key=key, headers=CLOSE)
    assert retry.status == 201 and retry.replayed and retry.body == b'{"id": "pay_1"}', retry
    assert upstream.executions(key) == 1
