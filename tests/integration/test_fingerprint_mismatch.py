"""A key sent again with another request (body, path, query, method, route) is a
mismatch: 409 (or the configured status) at once, nothing forwarded, the record unchanged.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py and the
proxy binary; each test asserts what the client and the upstream observe.
"""


from harness import wait_until
from proxy_helpers import new_key, assert_problem, assert_replay_of, in_background


def test_same_key_different_body_is_409_mismatch(proxy, upstream):
    key = new_key()
    first = proxy.post(key=key, body=b'{"amount": 100}')
    assert first.status == 201
    r = proxy.post(key=key, body=b'{"amount": 999}')
    assert_problem(r, 409, "key-reuse-mismatch")
    assert not r.replayed
    assert upstream.total() == 1
    # the record is unchanged: the original request still replays
    assert_replay_of(proxy.post(key=key, body=b'{"amount": 100}'), first)
    assert upstream.total() == 1


def test_mismatch_while_first_is_in_flight_is_409_at_once(proxy, upstream):
    key = new_key()
    f = in_background(proxy.post, key=key, body=b"one", headers=[("X-Demo-Delay-Ms", "1500")])
    wait_until(lambda: upstream.total() == 1)
    r = proxy.post(key=key, body=b"two", headers=[("X-Demo-Delay-Ms", "1500")])
    assert_problem(r, 409, "key-reuse-mismatch")
    assert r.elapsed < 1.0, "a mismatch must not wait for the first request: %r" % r
    assert f.result().status == 201
    assert upstream.total() == 1


def test_mismatch_status_422(start_proxy, upstream):
    p = start_proxy(mismatch_status=422)
    key = new_key()
    assert p.post(key=key, body=b'{"amount": 1}').status == 201
    assert_problem(p.post(key=key, body=b'{"amount": 2}'), 422, "key-reuse-mismatch")
    assert upstream.total() == 1


def test_same_key_different_path_is_mismatch(proxy, upstream):
    key = new_key()
    assert proxy.post("/v1/payments/a", key=key).status == 201
    assert_problem(proxy.post("/v1/payments/b", key=key), 409, "key-reuse-mismatch")
    assert upstream.total() == 1


def test_same_key_different_query_is_mismatch(proxy, upstream):
    key = new_key()
    assert proxy.post("/v1/payments?capture=true", key=key).status == 201
    assert_problem(proxy.post("/v1/payments?capture=false", key=key), 409, "key-reuse-mismatch")
    assert_problem(proxy.post("/v1/payments", key=key), 409, "key-reuse-mismatch")
    assert upstream.total() == 1


def test_same_key_different_method_is_mismatch(proxy, upstream):
    key = new_key()
    assert proxy.request("POST", "/v1/payments", [("Idempotency-Key", key)], b"x").status == 201
    r = proxy.request("PATCH", "/v1/payments", [("Idempotency-Key", key)], b"x")
    assert_problem(r, 409, "key-reuse-mismatch")
    assert upstream.total() == 1


def test_fingerprint_none_replays_despite_a_different_body(start_proxy, upstream):
    p = start_proxy(routes=[{"path": "/v1/payments*", "fingerprint": "none"}])
    key = new_key()
    first = p.post(key=key, body=b'{"attempt": 1}')
    assert first.status == 201
    assert_replay_of(p.post(key=key, body=b'{"attempt": 2}'), first)
    assert upstream.total() == 1


def test_same_key_on_two_routes_is_a_mismatch(proxy, upstream):
    # a record id does not depend on the route (README "Redis records"); the fingerprint
    # holds the path, so one key on another route's path is a reused key, not a new one
    key = new_key()
    a = proxy.post("/v1/payments", key=key)
    b = proxy.post("/v1/strict", key=key)
    assert a.status == 201
    assert_problem(b, 409, "key-reuse-mismatch")
    assert upstream.total() == 1


def test_mismatch_against_finished_failed_and_tombstoned_records(start_proxy, upstream):
    p = start_proxy(upstream={"timeout": "1s"}, limits={"max_stored_response": "1KiB"})
    unknown, tomb = new_key(), new_key()
    assert_problem(p.post(key=unknown, headers=[("X-Demo-Fault", "hang")]), 502,
                   "outcome-unknown")
    assert p.post(key=tomb, headers=[("X-Demo-Size", "4096")]).status == 201
    for key in (unknown, tomb):
        assert_problem(p.post(key=key, body=b"another body"), 409, "key-reuse-mismatch")
    assert upstream.total() == 2


def test_a_422_mismatch_carries_its_reason_phrase(start_proxy, upstream):
    """mismatch_status: 422 answers `422 Unprocessable Content`, RFC 9110's reason phrase."""
    p = start_proxy(mismatch_status=422)
    k = new_key()
    assert p.post(key=k, body=b'{"amount": 1}').status == 201
    r = p.post(key=k, body=b'{"amount": 2}')
    assert r.status == 422 and r.reason == "Unprocessable Content", (r.status, r.reason)
