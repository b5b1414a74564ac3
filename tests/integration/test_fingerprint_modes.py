"""The fingerprint modes of docs/client-contract.md ("The fingerprint and what is recorded"):
`fingerprint: json` and `form` compare a rebuilt body as the same request, refuse a body they
cannot read with 400 invalid-body before anything is claimed or forwarded, and keep what a
record was made with across a reload.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py (which answers
every execution with a new order id, so equal bodies mean a replay) and the proxy binary.

- json: members reordered, whitespace changed and a `fingerprint_ignore`d member changed replay
  (one execution, Idempotent-Replayed: true, the same bytes); a changed value, or 1 against
  1.0, is 409; a body that is not JSON, another Content-Type, a repeated member name: 400
  invalid-body, never forwarded, no Redis key, counted; an empty body (a capture) works;
- form: parameters reordered and %65 for e replay; a changed value is 409; an invalid escape is
  400;
- under encryption.keyring a json retry still replays, its record sealed and keyed;
- a reload from request to json on a route with a live record: the identical retry replays,
  a reordered one is 409, a new key replays reordered; back to request, the json record still
  compares as JSON and a body it cannot read is a 409, never a 400;
- the route's current mode refuses first: a non-JSON retry of a recorded key is 400, the record
  unchanged;
- a body whose parsed form needs more than a quarter of limits.max_buffered is 413 (counted
  while it is read, given back after), never forwarded; a body that fits replays;
- a held json record (IR3) is counted by the census, shown with its mode and list, and an
  operator's resolution keeps them: a reordered retry replays it.
"""
import base64
import hashlib
import json

from harness import wait_until
from proxy_helpers import (
    CLOSE, access_ids, assert_problem, assert_replay_of, head, metric, new_key,
    new_keyring_secret, raw, record_keys, reload_and_wait, rewrite, write_keyring,
)

JSON = [("Content-Type", "application/json")]
FORM = [("Content-Type", "application/x-www-form-urlencoded")]
PAYMENTS = {"path": "/v1/payments*", "fingerprint": "json",
            "fingerprint_ignore": ["/client_ts", "/items/0/nonce"]}
CHARGES = {"path": "/v1/charges*", "fingerprint": "form"}
FIRST = b'{"amount": 100, "currency": "eur", "client_ts": 1767225600, ' \
        b'"items": [{"sku": "a-1", "nonce": "n1"}, {"sku": "b-2"}]}'
# the same value: members in another order, other whitespace, the ignored members changed
REBUILT = b'{\n  "items":[{"nonce":"n2","sku":"a-1"},{"sku":"b-2"}],\n  "currency":"eur",' \
          b'"client_ts":1767225631,"amount":100}'


def post(p, key, body, headers=JSON, path="/v1/payments"):
    return p.post(path=path, key=key, body=body, headers=headers)


def record_value(redis):
    """The one record in Redis, as bytes."""
    keys = record_keys(redis)
    assert len(keys) == 1, keys
    return raw(redis, keys[0])


def refused_metric(p, route="/v1/payments"):
    return metric(p, "idempotency_proxy_requests_total", route=route, outcome="invalid-body",
                  absent=0)


def assert_refused_unforwarded(p, upstream, redis, key, r, words):
    """r is 400 invalid-body naming words, and nothing of key reached the upstream or Redis."""
    doc = assert_problem(r, 400, "invalid-body")
    assert words in doc["detail"], doc
    assert upstream.executions(key) == 0
    assert record_keys(redis) == []


# --------------------------------------------------------------------------
# json
# --------------------------------------------------------------------------

def test_json_rebuilt_body_with_an_ignored_member_changed_replays(start_proxy, upstream, redis):
    p = start_proxy(routes=[PAYMENTS])
    key = new_key()
    first = post(p, key, FIRST)
    assert first.status == 201, first
    assert_replay_of(post(p, key, REBUILT), first)
    assert upstream.executions(key) == 1
    # what the upstream got is the client's body, byte for byte: the canonical form is hashed only
    assert upstream.last_request()["body_sha256"] == hashlib.sha256(FIRST).hexdigest()
    # the record keeps how its fingerprint was made (IR3: mode J and the list, in its head)
    value = record_value(redis)
    assert value[:3] == b"IR3" and value[123:124] == b"J", value[:140]
    assert b"010/client_ts014/items/0/nonce" in value[:200], value[:200]


def test_json_changed_value_is_409_and_an_integer_is_not_a_real(start_proxy, upstream):
    p = start_proxy(routes=[PAYMENTS])
    key = new_key()
    first = post(p, key, b'{"amount": 100, "currency": "eur"}')
    assert first.status == 201, first
    assert_problem(post(p, key, b'{"amount": 101, "currency": "eur"}'), 409, "key-reuse-mismatch")
    assert_problem(post(p, key, b'{"amount": 100.0, "currency": "eur"}'), 409,
                   "key-reuse-mismatch")
    # a member not ignored, added: another request
    assert_problem(post(p, key, b'{"amount": 100, "currency": "eur", "note": ""}'), 409,
                   "key-reuse-mismatch")
    assert upstream.executions(key) == 1
    assert_replay_of(post(p, key, b'{"currency":"eur","amount":100}'), first)


def test_json_body_that_is_not_json_is_400_never_forwarded(start_proxy, upstream, redis):
    p = start_proxy(routes=[PAYMENTS])
    key = new_key()
    r = post(p, key, b'{"amount": 100, "card": "4242424242424242"')
    assert_refused_unforwarded(p, upstream, redis, key, r, "not JSON")
    assert "4242" not in r.body.decode(), "the detail must not quote the body: %r" % r
    assert not r.replayed
    assert refused_metric(p) == 1
    # refused again, not remembered: the key is free for the request the client meant
    assert post(p, key, FIRST).status == 201
    assert upstream.executions(key) == 1


def test_json_whose_parsed_form_passes_a_quarter_of_max_buffered_is_413(start_proxy, upstream,
                                                                         redis):
    """jansson's tree of 300,000 empty objects is tens of MB: under max_buffered 8 MiB (2 MiB a
    body) it is refused before it grows, never forwarded; what it took is given back; a body of
    numbers the same route can read replays."""
    p = start_proxy(routes=[PAYMENTS], limits={"max_buffered": "8MiB"})
    key = new_key()
    objects = b"[" + b",".join([b"{}"] * 300000) + b"]"
    r = post(p, key, objects)
    doc = assert_problem(r, 413, "body-too-large")
    assert "max_buffered" in doc["detail"], doc
    assert upstream.executions(key) == 0
    assert record_keys(redis) == []
    wait_until(lambda: metric(p, "idempotency_proxy_buffered_bytes") == 0,
               what="the parsed form's bytes given back to limits.max_buffered")
    numbers = json.dumps({"amount": 100, "items": list(range(20000))}).encode()
    first = post(p, key, numbers)
    assert first.status == 201, first
    rebuilt = json.dumps({"items": list(range(20000)), "amount": 100}, indent=1).encode()
    assert_replay_of(post(p, key, rebuilt), first)
    assert upstream.executions(key) == 1


def test_json_with_another_content_type_is_400(start_proxy, upstream, redis):
    p = start_proxy(routes=[PAYMENTS])
    for headers, words in (([("Content-Type", "text/plain")], "Content-Type"),
                           ([("Content-Type", "application/x-www-form-urlencoded")],
                            "Content-Type"),
                           (JSON + JSON, "more than one Content-Type")):
        key = new_key()
        assert_refused_unforwarded(p, upstream, redis, key, post(p, key, FIRST, headers=headers),
                                   words)
    # application/*+json and parameters are taken
    key = new_key()
    assert post(p, key, FIRST, headers=[("Content-Type",
                                         "Application/Merge-Patch+JSON; charset=utf-8")]).status == 201
    # without a key nothing is fingerprinted: forwarded unprotected, as on any route
    assert p.post(body=b"not json", headers=[("Content-Type", "text/plain")]).status == 201
    assert refused_metric(p) == 3


def test_json_repeated_member_name_is_400(start_proxy, upstream, redis):
    p = start_proxy(routes=[PAYMENTS])
    key = new_key()
    r = post(p, key, b'{"amount": 1, "to": "acct_a", "to": "acct_b"}')
    assert_refused_unforwarded(p, upstream, redis, key, r, "repeats a member name")
    key = new_key()
    r = post(p, key, b'{"amount": 18446744073709551616}')
    assert_refused_unforwarded(p, upstream, redis, key, r, "64-bit")


def test_json_empty_body_is_its_own_request(start_proxy, upstream):
    """A body-less capture needs no Content-Type, replays, and is not the request `{}`."""
    p = start_proxy(routes=[PAYMENTS])
    key = new_key()
    capture = "/v1/payments/pi_1/capture"
    first = p.request("POST", capture, [("Idempotency-Key", key)], None)
    assert first.status == 201, first
    assert_replay_of(p.request("POST", capture, [("Idempotency-Key", key)], None), first)
    assert_problem(post(p, key, b"{}", path=capture), 409, "key-reuse-mismatch")
    assert upstream.executions(key) == 1


# --------------------------------------------------------------------------
# form
# --------------------------------------------------------------------------

def test_form_reordered_and_percent_encoded_parameters_replay(start_proxy, upstream, redis):
    p = start_proxy(routes=[CHARGES])
    key = new_key()
    first = post(p, key, b"amount=100&currency=eur&description=Order%2042", FORM, "/v1/charges")
    assert first.status == 201, first
    rebuilt = b"description=Order+42&currency=%65ur&amount=100"
    assert_replay_of(post(p, key, rebuilt, FORM, "/v1/charges"), first)
    assert upstream.executions(key) == 1
    assert record_value(redis)[:3] == b"IR3" and record_value(redis)[123:128] == b"F0000"


def test_form_changed_value_is_409(start_proxy, upstream):
    p = start_proxy(routes=[CHARGES])
    key = new_key()
    assert post(p, key, b"amount=100&currency=eur", FORM, "/v1/charges").status == 201
    for body in (b"amount=200&currency=eur", b"amount=100&currency=eur&currency=usd",
                 b"amount=100&currency=eur%00"):
        assert_problem(post(p, key, body, FORM, "/v1/charges"), 409, "key-reuse-mismatch")
    assert upstream.executions(key) == 1


def test_form_invalid_escape_is_400(start_proxy, upstream, redis):
    p = start_proxy(routes=[CHARGES])
    for body, words in ((b"amount=100&note=50%zz", "hex digits"),
                        (b"amount=100&note=%ff", "UTF-8")):
        key = new_key()
        r = post(p, key, body, FORM, "/v1/charges")
        assert_refused_unforwarded(p, upstream, redis, key, r, words)
    key = new_key()
    assert_refused_unforwarded(p, upstream, redis, key,
                               post(p, key, b"amount=100", JSON, "/v1/charges"), "Content-Type")
    assert refused_metric(p, "/v1/charges") == 3


# --------------------------------------------------------------------------
# keyring
# --------------------------------------------------------------------------

def test_json_under_a_keyring_replays_sealed_and_keyed(start_proxy, upstream, redis, tmp_path):
    keyring = write_keyring(tmp_path / "keyring.yaml", ("2026-12", new_keyring_secret()))
    p = start_proxy(routes=[PAYMENTS], encryption={"keyring": keyring})
    key = new_key()
    first = post(p, key, FIRST)
    assert first.status == 201, first
    assert_replay_of(post(p, key, REBUILT), first)
    assert_problem(post(p, key, FIRST.replace(b"100", b"101")), 409, "key-reuse-mismatch")
    assert upstream.executions(key) == 1
    version, state, _, answer, key_id, _ = head(record_value(redis))
    assert (version, state, answer, key_id) == (3, "D", "S", "2026-12")


# --------------------------------------------------------------------------
# reload
# --------------------------------------------------------------------------

def test_reload_from_request_to_json_keeps_live_records_comparable(start_proxy, upstream, redis):
    p = start_proxy(routes=[{"path": "/v1/payments*"}])
    old = new_key()
    first = post(p, old, FIRST)
    assert first.status == 201, first
    assert_problem(post(p, old, REBUILT), 409, "key-reuse-mismatch")

    rewrite(p, upstream, redis, routes=[PAYMENTS])
    reload_and_wait(p, "reloaded")

    def rebuilt_retry_replays():
        k = new_key("after")
        return post(p, k, FIRST).status == 201 and post(p, k, REBUILT).replayed
    wait_until(rebuilt_retry_replays, what="a new key compared as JSON after the reload")

    # the record made before compares as it was made: bytes
    assert_replay_of(post(p, old, FIRST), first)
    assert_problem(post(p, old, REBUILT), 409, "key-reuse-mismatch")
    assert upstream.executions(old) == 1
    versions = sorted(raw(redis, k)[:3] for k in record_keys(redis))
    assert versions[0] == b"IR2" and set(versions[1:]) == {b"IR3"}, versions


def test_reload_from_json_to_request_compares_json_records_as_json(start_proxy, upstream, redis):
    p = start_proxy(routes=[PAYMENTS])
    key = new_key()
    first = post(p, key, FIRST)
    assert first.status == 201, first

    rewrite(p, upstream, redis, routes=[{"path": "/v1/payments*"}])
    reload_and_wait(p, "reloaded")

    def bytes_compared():
        k = new_key("after")
        return post(p, k, FIRST).status == 201 and post(p, k, REBUILT).status == 409
    wait_until(bytes_compared, what="a new key compared as bytes after the reload")

    assert_replay_of(post(p, key, REBUILT), first)
    # a body the record's mode cannot read is not the recorded request: 409, not 400
    assert_problem(post(p, key, b"amount=100&currency=eur", FORM), 409, "key-reuse-mismatch")
    assert upstream.executions(key) == 1


def test_the_routes_mode_refuses_first_and_the_record_stays(start_proxy, upstream, redis):
    p = start_proxy(routes=[PAYMENTS])
    key = new_key()
    assert post(p, key, FIRST).status == 201
    before = record_value(redis)
    assert_problem(post(p, key, b"amount=100"), 400, "invalid-body")
    assert_problem(post(p, key, FIRST, headers=[("Content-Type", "text/plain")]), 400,
                   "invalid-body")
    assert record_value(redis) == before
    assert upstream.executions(key) == 1


# --------------------------------------------------------------------------
# a held json record: census, admin view, an operator's resolution
# --------------------------------------------------------------------------

def test_a_held_json_record_is_counted_shown_and_resolved_in_its_mode(start_proxy, upstream,
                                                                      redis):
    p = start_proxy(routes=[PAYMENTS], admin_config={"held_refresh": "1s"})
    key = new_key()
    seen = len(access_ids(p))
    assert post(p, key, FIRST, headers=JSON + CLOSE).status == 502
    record_id = wait_until(lambda: access_ids(p)[seen:] and access_ids(p)[seen],
                           what="the access-log line of the held request")
    wait_until(lambda: metric(p, "idempotency_proxy_held_records", state="outcome_unknown") == 1,
               what="the census counting the held IR3 record")

    shown = p.admin("GET", "/records/" + record_id)
    assert shown.status == 200, shown
    doc = shown.json()
    assert doc["state"] == "outcome-unknown"
    assert doc["fingerprint_mode"] == "json", doc
    assert doc["fingerprint_ignore"] == ["/client_ts", "/items/0/nonce"], doc

    body = b'{"id": "ord_found_by_support"}'
    r = p.admin("PUT", "/records/" + record_id, headers=JSON, body=json.dumps({
        "status": 201, "headers": [["Content-Type", "application/json"]],
        "body_base64": base64.b64encode(body).decode(),
        "reason": "INC-7: the upstream shows the payment"}).encode())
    assert r.status == 200, r
    replay = post(p, key, REBUILT)
    assert replay.status == 201 and replay.body == body and replay.replayed, replay
    assert_problem(post(p, key, FIRST.replace(b"100", b"101")), 409, "key-reuse-mismatch")
    assert upstream.executions(key) == 1
    assert raw(redis, record_keys(redis)[0])[:4] == b"IR3R"
