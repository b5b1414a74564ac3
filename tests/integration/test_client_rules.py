"""The client contract's rules of a route (docs/client-contract.md): scope_required and the key
rules (key_min_length, key_pattern), a key taken from the JSON body on an ordinary protected
route (key_from: json:), the replay marker on first executions (replayed_header_on_first), and
errors.format per route.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py and the proxy
binary; each test asserts what the client, the upstream and Redis show. stripe-node on a route
of its own beside a problem+json route is test_clients.py's (its node fixture lives there).
"""

import json
import uuid

from harness import http_request, wait_until
from proxy_helpers import (
    assert_not_replayed, assert_problem, assert_replay_of, metric, new_key, record_keys,
)

UUID_PATTERN = ("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                "[0-9a-fA-F]{12}")


def executions_at(upstream, path):
    """How many times the upstream executed a request to path (the demo counts by key; a
    route that reads its key from the body sends none in the header)."""
    return sum(1 for h in upstream.history() if h["path"] == path)


# --------------------------------------------------------------------------
# scope_required
# --------------------------------------------------------------------------

SCOPED = [{"path": "/v1/payments*", "scope_headers": ["X-Account-Id"], "scope_required": True}]


def test_scope_required_refuses_a_keyed_request_without_its_scope_header(start_proxy, upstream,
                                                                          redis):
    p = start_proxy(routes=SCOPED)
    key = new_key()
    for extra in ([], [("X-Account-Id", "")], [("X-Account-Id", "  ")]):
        r = p.post(key=key, headers=extra)
        doc = assert_problem(r, 400, "missing-scope")
        assert "X-Account-Id" in doc["detail"] and key not in doc["detail"], doc
    assert upstream.executions(key) == 0
    assert record_keys(redis) == []


def test_scope_required_protects_a_request_that_sends_its_scope(start_proxy, upstream):
    p = start_proxy(routes=SCOPED)
    key = new_key()
    first = p.post(key=key, headers=[("X-Account-Id", "acct_1")])
    assert first.status == 201
    assert_replay_of(p.post(key=key, headers=[("X-Account-Id", "acct_1")]), first)
    # another account's namespace: the same key is another record
    assert p.post(key=key, headers=[("X-Account-Id", "acct_2")]).status == 201
    assert upstream.executions(key) == 2
    # no key, no scope: not protected, so not checked (docs: forwarded unprotected)
    r = p.post(key=None)
    assert r.status == 201
    assert_not_replayed(r)


# --------------------------------------------------------------------------
# key_min_length and key_pattern
# --------------------------------------------------------------------------

def test_key_min_length_refuses_a_short_key_naming_the_rule(start_proxy, upstream, redis):
    p = start_proxy(key_min_length=16)
    for key in ("order-42", '"order-42"'):
        doc = assert_problem(p.post(key=key), 400, "invalid-key")
        assert "key_min_length (16 bytes)" in doc["detail"], doc
        assert "order-42" not in doc["detail"], doc
    assert upstream.executions("order-42") == 0
    assert record_keys(redis) == []
    key = "0123456789abcdef"                                 # 16 bytes: taken
    first = p.post(key=key)
    assert first.status == 201
    assert_replay_of(p.post(key=key), first)
    assert upstream.executions(key) == 1


def test_key_pattern_refuses_a_key_outside_it_and_takes_a_uuid(start_proxy, upstream, redis):
    p = start_proxy(key_pattern=UUID_PATTERN)
    good = str(uuid.uuid4())
    for key in ("order-42", good + "x", "x" + good, good.replace("-", "_")):
        doc = assert_problem(p.post(key=key), 400, "invalid-key")
        assert "does not match this route's key_pattern" in doc["detail"], doc
        assert key not in doc["detail"], doc
        assert upstream.executions(key) == 0
    assert record_keys(redis) == []
    first = p.post(key=good)
    assert first.status == 201
    assert_replay_of(p.post(key=good), first)
    assert upstream.executions(good) == 1


# --------------------------------------------------------------------------
# key_from: json: on an ordinary protected route
# --------------------------------------------------------------------------

TRANSFERS = [{"path": "/v1/transfers*", "key_from": "json:/reference"},
             {"path": "/v1/payouts*", "key_from": "json:/reference", "require_key": True,
              "key_pattern": "tr_[0-9a-f]+"}]


def transfer(reference, amount):
    return json.dumps({"reference": reference, "amount": amount, "currency": "eur"}).encode()


def test_key_from_json_replays_the_retry_and_refuses_another_body(start_proxy, upstream, redis):
    p = start_proxy(routes=TRANSFERS)
    ref = "tr_" + uuid.uuid4().hex
    first = p.post("/v1/transfers", body=transfer(ref, 1200))
    assert first.status == 201
    assert_not_replayed(first)
    assert_replay_of(p.post("/v1/transfers", body=transfer(ref, 1200)), first)
    assert executions_at(upstream, "/v1/transfers") == 1
    doc = assert_problem(p.post("/v1/transfers", body=transfer(ref, 1300)), 409,
                         "key-reuse-mismatch")
    assert ref not in json.dumps(doc), doc
    assert executions_at(upstream, "/v1/transfers") == 1
    assert len(record_keys(redis)) == 1
    # an Idempotency-Key header beside the member is not read: the body's key replays
    assert_replay_of(p.post("/v1/transfers", key=new_key(), body=transfer(ref, 1200)), first)
    assert executions_at(upstream, "/v1/transfers") == 1


def test_key_from_json_without_the_member_is_unprotected_and_not_json_is_refused(
        start_proxy, upstream, redis):
    p = start_proxy(routes=TRANSFERS)
    body = json.dumps({"amount": 5, "currency": "eur"}).encode()
    for _ in range(2):                                      # documented: no key, not protected
        r = p.post("/v1/transfers", body=body)
        assert r.status == 201
        assert_not_replayed(r)
    assert executions_at(upstream, "/v1/transfers") == 2
    assert record_keys(redis) == []
    # a body that is not JSON: whether it holds a key cannot be told, so never forwarded
    doc = assert_problem(p.post("/v1/transfers", body=b"reference=tr_1&amount=5",
                                headers=[("Content-Type", "application/x-www-form-urlencoded")]),
                         400, "invalid-key")
    assert "json:/reference" in doc["detail"], doc
    # a client that sent Idempotency-Key meant to be protected: this route does not read it
    doc = assert_problem(p.post("/v1/transfers", key=new_key(), body=body), 400, "missing-key")
    assert "Idempotency-Key" in doc["detail"], doc
    # a member that is not a string
    assert_problem(p.post("/v1/transfers", body=transfer(7, 5)), 400, "invalid-key")
    assert executions_at(upstream, "/v1/transfers") == 2
    assert record_keys(redis) == []


def test_key_from_header_refuses_idempotency_key_in_its_place(start_proxy, upstream, redis):
    """key_from: header:X-Reference: a request that sends Idempotency-Key and no X-Reference
    meant to be protected: 400 missing-key naming both, never forwarded; with X-Reference the
    retry replays (test_keys_and_routes: a key_header route forwards it unprotected)."""
    p = start_proxy(routes=[{"path": "/v1/legacy*", "key_from": "header:X-Reference"}])
    key = new_key()
    doc = assert_problem(p.post("/v1/legacy", key=key), 400, "missing-key")
    assert "X-Reference" in doc["detail"] and "Idempotency-Key" in doc["detail"], doc
    assert executions_at(upstream, "/v1/legacy") == 0
    assert record_keys(redis) == []
    first = p.post("/v1/legacy", key=None, headers=[("X-Reference", key)])
    assert first.status == 201
    assert_replay_of(p.post("/v1/legacy", key=None, headers=[("X-Reference", key)]), first)
    assert executions_at(upstream, "/v1/legacy") == 1


def test_key_from_json_with_require_key_and_key_pattern(start_proxy, upstream, redis):
    p = start_proxy(routes=TRANSFERS)
    assert_problem(p.post("/v1/payouts", body=b'{"amount": 5}'), 400, "missing-key")
    doc = assert_problem(p.post("/v1/payouts", body=transfer("order-42", 5)), 400, "invalid-key")
    assert "key_pattern" in doc["detail"] and "order-42" not in doc["detail"], doc
    assert executions_at(upstream, "/v1/payouts") == 0
    assert record_keys(redis) == []
    ref = "tr_" + uuid.uuid4().hex
    first = p.post("/v1/payouts", body=transfer(ref, 5))
    assert first.status == 201
    assert_replay_of(p.post("/v1/payouts", body=transfer(ref, 5)), first)
    assert executions_at(upstream, "/v1/payouts") == 1


def test_key_from_json_reads_a_body_with_an_integer_past_64_bits(start_proxy, upstream, redis):
    """Only the key's string is used: an integer past 64 bits elsewhere in the body is read (the
    retry replays; without the member the body is unprotected, as any body without it); a number
    beyond a double cannot be read, so it is refused and says why, never forwarded."""
    p = start_proxy(routes=TRANSFERS)
    ref = "tr_" + uuid.uuid4().hex
    body = b'{"reference":"' + ref.encode() + b'","amount":99999999999999999999}'
    first = p.post("/v1/transfers", body=body)
    assert first.status == 201
    assert_replay_of(p.post("/v1/transfers", body=body), first)
    assert executions_at(upstream, "/v1/transfers") == 1
    r = p.post("/v1/transfers", body=b'{"amount":99999999999999999999}')
    assert r.status == 201
    assert_not_replayed(r)
    assert executions_at(upstream, "/v1/transfers") == 2
    doc = assert_problem(p.post("/v1/transfers", body=b'{"reference":"' + ref.encode() +
                                b'x","amount":1e400}'), 400, "invalid-key")
    assert "beyond a double" in doc["detail"] and "json:/reference" in doc["detail"], doc
    assert executions_at(upstream, "/v1/transfers") == 2
    assert len(record_keys(redis)) == 1


def test_key_from_json_whose_parsed_body_passes_a_quarter_of_max_buffered_is_413(
        start_proxy, upstream, redis):
    """Reading the key parses the whole body: jansson's tree of 300,000 empty objects (tens of
    MB) is counted under max_buffered as a json fingerprint's is, and refused at a quarter of it
    (2 MiB of 8), on an ordinary route and on a webhook receiver alike; never forwarded, what it
    took given back, and a body the route can read is protected as before."""
    p = start_proxy(routes=TRANSFERS + [{"path": "/hooks/x", "key_from": "json:/id",
                                         "verify": "none"}],
                    limits={"max_buffered": "8MiB"})
    ref = "tr_" + uuid.uuid4().hex
    objects = b",".join([b"{}"] * 300000)
    for path, body in (("/v1/transfers", b'{"reference":"' + ref.encode() + b'","items":['
                        + objects + b"]}"),
                       ("/hooks/x", b'{"id":"evt_' + ref.encode() + b'","data":[' + objects
                        + b"]}")):
        doc = assert_problem(p.post(path, body=body), 413, "body-too-large")
        assert "key_from" in doc["detail"] and "max_buffered" in doc["detail"], doc
        assert executions_at(upstream, path) == 0
    assert record_keys(redis) == []
    wait_until(lambda: metric(p, "idempotency_proxy_buffered_bytes") == 0,
               what="the parsed body's bytes given back to limits.max_buffered")
    first = p.post("/v1/transfers", body=transfer(ref, 5))
    assert first.status == 201
    assert_replay_of(p.post("/v1/transfers", body=transfer(ref, 5)), first)
    assert executions_at(upstream, "/v1/transfers") == 1


# --------------------------------------------------------------------------
# the replay marker on first executions
# --------------------------------------------------------------------------

def test_replay_marker_is_absent_from_first_executions_by_default(proxy, upstream):
    key = new_key()
    first = proxy.post(key=key)
    assert first.status == 201
    assert_not_replayed(first)
    assert_replay_of(proxy.post(key=key), first)
    # an upstream that says Idempotent-Replayed itself never marks a first execution a replay
    own = [("X-Demo-Header", "Idempotent-Replayed: true")]
    other = new_key()
    first = proxy.post(key=other, headers=own)
    assert first.status == 201
    assert_not_replayed(first)
    assert_replay_of(proxy.post(key=other, headers=own), first)
    assert upstream.executions(other) == 1


def test_replay_marker_says_false_on_first_executions_when_enabled(start_proxy, upstream):
    p = start_proxy(replayed_header_on_first=True,
                    routes=[{"path": "/v1/payments*"},
                            {"path": "/v1/strict*", "require_key": True},
                            {"path": "/v1/quiet*", "replayed_header_on_first": False}])
    key = new_key()
    # the upstream's own marker is dropped: the answer says one thing
    own = [("X-Demo-Header", "Idempotent-Replayed: true")]
    first = p.post(key=key, headers=own)
    assert first.status == 201
    assert first.header_all("Idempotent-Replayed") == ["false"], first
    replay = p.post(key=key, headers=own)
    assert_replay_of(replay, first)                       # "true", once: false was never stored
    assert upstream.executions(key) == 1
    # a released answer was executed too (release_statuses: the retry executes again)
    busy = new_key()
    for _ in range(2):
        r = p.post(key=busy, headers=[("X-Demo-Status", "503")])
        assert r.status == 503 and r.header_all("Idempotent-Replayed") == ["false"], r
    assert upstream.executions(busy) == 2
    # not protected (no key), the proxy's own problem, a route that turns it off: no marker
    assert_not_replayed(p.post(key=None))
    assert_not_replayed(assert_problem_response(p.post("/v1/strict", key=None), 400))
    quiet = new_key()
    first = p.post("/v1/quiet", key=quiet)
    assert first.status == 201
    assert_not_replayed(first)
    assert_replay_of(p.post("/v1/quiet", key=quiet), first)


def assert_problem_response(r, status):
    assert r.status == status and r.is_problem(), r
    return r


# --------------------------------------------------------------------------
# errors.format per route
# --------------------------------------------------------------------------

def assert_stripe_error(r, status, code, stripe_type="invalid_request_error"):
    assert r.status == status, r
    assert r.header("Content-Type") == "application/json", r
    assert r.header("Stripe-Should-Retry") == "false", r
    doc = r.json()
    assert list(doc) == ["error"], doc
    assert doc["error"]["code"] == code and doc["error"]["type"] == stripe_type, doc
    return doc


def test_two_routes_answer_each_in_its_own_error_format(start_proxy, upstream):
    """The top level says stripe (and so the routes that say nothing); /v2/ says problem.
    Answers before a route is known take the top level's; a body too large, refused from
    its head, takes its route's."""
    p = start_proxy(errors={"format": "stripe"}, limits={"max_request_body": "1KiB"},
                    routes=[{"path": "/v1/charges*", "require_key": True,
                             "scope_headers": ["X-Account-Id"], "scope_required": True},
                            {"path": "/v2/payments*", "require_key": True,
                             "errors": {"format": "problem"}}])
    acct = [("X-Account-Id", "acct_1")]
    assert_stripe_error(p.post("/v1/charges", key=None), 400, "missing-key")
    assert_stripe_error(p.post("/v1/charges", key=new_key()), 400, "missing-scope")
    assert_problem(p.post("/v2/payments", key=None), 400, "missing-key")
    # a key reused with another body, on each route
    k1, k2 = new_key(), new_key()
    assert p.post("/v1/charges", key=k1, headers=acct, body=b'{"amount": 1}').status == 201
    assert p.post("/v2/payments", key=k2, body=b'{"amount": 1}').status == 201
    assert_stripe_error(p.post("/v1/charges", key=k1, headers=acct, body=b'{"amount": 2}'), 409,
                        "key-reuse-mismatch", "idempotency_error")
    r = p.post("/v2/payments", key=k2, body=b'{"amount": 2}')
    assert_problem(r, 409, "key-reuse-mismatch")
    assert not r.has_header("Stripe-Should-Retry"), r
    assert upstream.executions(k1) == 1 and upstream.executions(k2) == 1
    # refused from the head: its route's format
    big = b"x" * 2048
    assert_problem(p.post("/v2/payments", key=new_key(), body=big), 413, "body-too-large")
    assert_stripe_error(p.post("/v1/charges", key=new_key(), headers=acct, body=big), 413,
                        "body-too-large")
    # before any route: the top level's
    r = http_request(p.port, "POST", "/v2%2Fpayments", [("Idempotency-Key", new_key())], b"{}")
    assert_stripe_error(r, 400, "invalid-target")
