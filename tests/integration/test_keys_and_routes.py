"""Which requests are protected (methods, routes, key optional or required), the
Idempotency-Key syntax, the scope headers that keep two clients' keys apart, and the other
spellings of a protected path.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py and the
proxy binary; each test asserts what the client and the upstream observe.
"""

import uuid

import pytest

from harness import http_request
from proxy_helpers import (
    assert_not_replayed, assert_problem, assert_replay_of, new_key, record_keys,
)


# --------------------------------------------------------------------------
# which requests are protected
# --------------------------------------------------------------------------

def test_no_key_passes_through_every_time(proxy, upstream):
    rs = [proxy.post(key=None) for _ in range(3)]
    assert [r.status for r in rs] == [201, 201, 201]
    for r in rs:
        assert_not_replayed(r)
    assert len({r.json()["id"] for r in rs}) == 3
    assert upstream.total() == 3


def test_get_with_key_is_not_protected(proxy, upstream):
    key = new_key()
    for _ in range(3):
        r = proxy.request("GET", "/v1/payments", [("Idempotency-Key", key)])
        assert r.status == 200 and r.json()["object"] == "list"
        assert_not_replayed(r)
    assert upstream.requests() == 3
    assert upstream.total() == 0


def test_put_and_delete_with_key_are_not_protected(proxy, upstream, redis):
    key = new_key()
    for method in ("PUT", "PUT", "DELETE", "DELETE"):
        r = proxy.request(method, "/v1/payments/p1", [("Idempotency-Key", key)], b"{}")
        assert r.status == 201
        assert_not_replayed(r)
    assert upstream.total() == 4
    assert record_keys(redis) == []


def test_unmatched_route_with_key_passes_through(proxy, upstream, redis):
    key = new_key()
    for _ in range(2):
        r = proxy.post("/v2/other", key=key)
        assert r.status == 201
        assert_not_replayed(r)
    assert upstream.total() == 2
    assert record_keys(redis) == []


def test_custom_key_header_and_methods(start_proxy, upstream):
    p = start_proxy(routes=[{"path": "/v1/payments*", "key_header": "X-Request-Key",
                             "methods": ["POST", "PUT"]}])
    key = new_key()
    first = p.request("PUT", "/v1/payments/p1", [("X-Request-Key", key)], b"{}")
    assert first.status == 201
    assert_replay_of(p.request("PUT", "/v1/payments/p1", [("X-Request-Key", key)], b"{}"),
                     first)
    # Idempotency-Key means nothing on this route
    k2 = new_key()
    assert not p.post(key=k2).replayed
    assert not p.post(key=k2).replayed
    # PATCH is not protected here
    k3 = new_key()
    for _ in range(2):
        r = p.request("PATCH", "/v1/payments/p1", [("X-Request-Key", k3)], b"{}")
        assert r.status == 201 and not r.replayed
    assert upstream.total() == 5


def test_head_and_options_pass_through(proxy, upstream):
    assert proxy.request("HEAD", "/v1/payments", [("Idempotency-Key", "x")]).status == 200
    assert proxy.request("OPTIONS", "/v1/payments", [("Idempotency-Key", "x")]).status == 200
    assert upstream.requests() == 2 and upstream.total() == 0


def test_route_exact_and_prefix_matching_first_match_wins(start_proxy, upstream):
    p = start_proxy(routes=[{"path": "/v1/payments/special", "require_key": True},
                            {"path": "/v1/payments*"},
                            {"path": "/v1/refunds", "require_key": True}])
    assert_problem(p.post("/v1/payments/special", key=None), 400, "missing-key")
    assert_problem(p.post("/v1/payments/special?x=1", key=None), 400, "missing-key")
    assert p.post("/v1/payments/special/sub", key=None).status == 201
    assert p.post("/v1/payments/other", key=None).status == 201
    assert_problem(p.post("/v1/refunds", key=None), 400, "missing-key")
    assert_problem(p.post("/v1/refunds?a=b", key=None), 400, "missing-key")
    assert p.post("/v1/refunds/r1", key=None).status == 201  # exact: no prefix match
    assert p.post("/v1/refundsX", key=None).status == 201
    assert upstream.total() == 4


# --------------------------------------------------------------------------
# key syntax
# --------------------------------------------------------------------------

def test_quoted_and_bare_key_are_one_key(proxy, upstream):
    key = new_key()
    first = proxy.post(key='"%s"' % key)
    assert first.status == 201
    assert_replay_of(proxy.post(key=key), first)
    assert_replay_of(proxy.post(key='"%s"' % key), first)
    assert upstream.total() == 1


def test_keys_are_case_sensitive(proxy, upstream):
    key = "Order-ABC-" + uuid.uuid4().hex.upper()
    a = proxy.post(key=key)
    b = proxy.post(key=key.lower())
    assert a.status == 201 and b.status == 201
    assert_not_replayed(b)
    assert upstream.total() == 2


def test_key_of_max_length_is_accepted(proxy, upstream):
    key = ("x" * 223) + uuid.uuid4().hex  # 255 characters
    assert len(key) == 255
    first = proxy.post(key=key)
    assert first.status == 201
    assert_replay_of(proxy.post(key=key), first)
    assert upstream.total() == 1


INVALID_KEY_HEADERS = {
    "empty": ["Idempotency-Key:"],
    "empty-quoted": ['Idempotency-Key: ""'],
    "too-long": ["Idempotency-Key: " + "a" * 256],
    "too-long-quoted": ['Idempotency-Key: "%s"' % ("a" * 256)],
    "control-character": [b"Idempotency-Key: ab\x01cd"],
    "delete-character": [b"Idempotency-Key: ab\x7fcd"],
    "tab-inside": [b"Idempotency-Key: ab\tcd"],
    "non-ascii": [b"Idempotency-Key: caf\xc3\xa9"],
    "two-header-lines": ["Idempotency-Key: abc", "Idempotency-Key: abc"],
    "two-different-lines": ["Idempotency-Key: abc", "Idempotency-Key: def"],
    "broken-quoted": ['Idempotency-Key: "abc'],
    "broken-quoted-escape": ['Idempotency-Key: "ab\\c"'],
    "junk-after-quoted": ['Idempotency-Key: "abc"x'],
}


@pytest.mark.parametrize("case", sorted(INVALID_KEY_HEADERS))
def test_invalid_key_is_400(proxy, upstream, redis, case):
    lines = INVALID_KEY_HEADERS[case]
    r = proxy.request("POST", "/v1/payments", lines + [("Content-Type", "application/json")],
                      b'{"amount": 1}')
    assert_problem(r, 400, "invalid-key")
    assert upstream.total() == 0
    assert record_keys(redis) == []


def test_require_key_without_key_is_400_missing_key(proxy, upstream):
    r = proxy.post("/v1/strict/charges", key=None)
    assert_problem(r, 400, "missing-key")
    assert upstream.total() == 0
    # with a key it is served
    assert proxy.post("/v1/strict/charges", key=new_key()).status == 201
    # a method the route does not protect needs no key
    assert proxy.request("GET", "/v1/strict/charges").status == 200
    assert upstream.total() == 1


def test_key_header_name_is_case_insensitive(proxy, upstream):
    key = new_key()
    first = proxy.request("POST", "/v1/payments", [("idempotency-key", key)], b"{}")
    again = proxy.request("POST", "/v1/payments", [("IDEMPOTENCY-KEY", key)], b"{}")
    assert first.status == 201
    assert_replay_of(again, first)
    assert upstream.total() == 1


def test_a_bare_key_with_a_comma_is_refused_and_a_quoted_one_is_one_key(proxy, upstream):
    """A bare key with a comma (`t4, t5`) is 400 invalid-key: an intermediary may have joined
    two Idempotency-Key lines into it (RFC 9110 section 5.3). Quoted, it is one key."""
    a, b = new_key(), new_key()
    before = upstream.total()
    r = proxy.post(key=a + ", " + b)
    assert_problem(r, 400, "invalid-key")
    assert upstream.total() == before
    quoted = '"' + a + "," + b + '"'
    assert proxy.post(key=quoted).status == 201
    again = proxy.post(key=quoted)
    assert again.status == 201 and again.header("Idempotent-Replayed") == "true"
    assert upstream.executions(quoted) == 1  # forwarded as sent


# --------------------------------------------------------------------------
# scope
# --------------------------------------------------------------------------

def test_same_key_under_two_authorization_values_executes_twice(proxy, upstream):
    key = new_key()
    a = proxy.post(key=key, headers=[("Authorization", "Bearer merchant_a")])
    b = proxy.post(key=key, headers=[("Authorization", "Bearer merchant_b")])
    assert a.status == 201 and b.status == 201
    assert_not_replayed(a)
    assert_not_replayed(b)
    assert a.json()["id"] != b.json()["id"]
    assert upstream.total() == 2
    assert_replay_of(proxy.post(key=key, headers=[("Authorization", "Bearer merchant_a")]), a)
    assert_replay_of(proxy.post(key=key, headers=[("Authorization", "Bearer merchant_b")]), b)
    assert upstream.total() == 2


def test_empty_scope_headers_share_keys_across_authorization(start_proxy, upstream):
    p = start_proxy(scope_headers=[])
    key = new_key()
    a = p.post(key=key, headers=[("Authorization", "Bearer a")])
    b = p.post(key=key, headers=[("Authorization", "Bearer b")])
    assert a.status == 201
    assert_replay_of(b, a)
    assert upstream.total() == 1


def test_several_scope_headers(start_proxy, upstream):
    p = start_proxy(scope_headers=["Authorization", "X-Tenant"])
    key = new_key()
    auth = [("Authorization", "Bearer a")]
    r1 = p.post(key=key, headers=auth + [("X-Tenant", "t1")])
    r2 = p.post(key=key, headers=auth + [("X-Tenant", "t2")])
    r3 = p.post(key=key, headers=auth + [("X-Tenant", "t1")])
    assert r1.status == 201 and r2.status == 201
    assert_not_replayed(r2)
    assert_replay_of(r3, r1)
    assert upstream.total() == 2


def test_a_scope_header_on_two_lines_is_refused(proxy, upstream):
    """Two Authorization lines are 400 invalid-key: the record's scope would be a guess."""
    before = upstream.total()
    r = proxy.post(key=new_key(), headers=[("Authorization", "Bearer alice"),
                                           ("Authorization", "Bearer bob")])
    assert_problem(r, 400, "invalid-key")
    assert upstream.total() == before


# --------------------------------------------------------------------------
# spellings of a protected path
# --------------------------------------------------------------------------

@pytest.mark.parametrize("spelling", ["//v1/payments", "/V1/payments", "/v1/x/../payments",
                                      "/v1/payment%73", "/v1/payments/", "/v1/./payments"])
def test_other_spellings_of_a_protected_path_are_protected(start_proxy, upstream, spelling):
    p = start_proxy(routes=[{"path": "/v1/payments", "require_key": True}])
    assert_problem(p.post(path=spelling), 400, "missing-key")
    key = new_key()
    assert p.post(key=key).status == 201
    again = p.post(path=spelling, key=key)
    # same record: a replay, or a mismatch when the raw target differs; never a second run
    assert again.status in (201, 409), again
    assert again.status == 409 or again.replayed
    assert upstream.executions(key) == 1


@pytest.mark.parametrize("spelling", [b"//x/v1/payments", b"/\\x/v1/payments",
                                      b"///x/v1/payments", b"//x:80/v1/payments",
                                      b"//x@y/v1/payments", b"/\\/x/webhooks/stripe"])
def test_a_path_a_url_parser_reads_as_host_and_route_is_refused(start_proxy, upstream,
                                                                  spelling):
    """A WHATWG parser (Node's new URL, fetch) reads //x/v1/payments as the host x and the
    path /v1/payments: which endpoint the upstream runs is its choice, so the proxy refuses
    the target rather than pass it unprotected (or a webhook unverified)."""
    p = start_proxy(routes=[{"path": "/v1/payments", "require_key": True},
                            {"path": "/webhooks/stripe", "key_from": "json:/id",
                             "verify": "stripe", "secret": "whsec_" + "a" * 32}])
    for key in (None, new_key()):
        hs = b"" if key is None else b"Idempotency-Key: " + key.encode() + b"\r\n"
        raw = (b"POST " + spelling + b" HTTP/1.1\r\nHost: x\r\n" + hs +
               b"Content-Length: 11\r\nConnection: close\r\n\r\n{\"id\": \"e\"}")
        assert_problem(http_request(p.port, raw=raw), 400, "invalid-target")
    assert upstream.total() == 0


def test_absolute_form_target_is_protected_and_forwarded_in_origin_form(proxy, upstream):
    """RFC 9112 3.2.2: a server must accept absolute-form; the upstream gets origin-form."""
    key = new_key()
    target = "http://payments.example/v1/payments?currency=eur"
    first = proxy.post(path=target, key=key)
    assert first.status == 201, first
    last = upstream.last_request()
    assert (last["path"], last["query"]) == ("/v1/payments", "currency=eur"), last
    # the same request in origin-form is the same record: a replay, not a second run
    assert_replay_of(proxy.post(path="/v1/payments?currency=eur", key=key), first)
    assert upstream.executions(key) == 1


@pytest.mark.parametrize("target", [b"/v1/pay\x01ments", b"/v1/payments?a=\x7f", b"*"])
def test_control_character_or_asterisk_target_is_a_problem(proxy, upstream, target):
    raw = (b"POST " + target + b" HTTP/1.1\r\nHost: x\r\nIdempotency-Key: " +
           new_key().encode() + b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
    r = http_request(proxy.port, raw=raw)
    assert_problem(r, 400, "invalid-target")
    assert upstream.total() == 0
