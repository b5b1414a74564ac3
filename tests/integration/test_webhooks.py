"""Webhook routes: signature verification (GitHub, Stripe, Standard Webhooks), the event id
as the key, a redelivery after a failure, methods a route does not verify, one event id on two
routes.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py and the
proxy binary; each test asserts what the client and the upstream observe.
"""

import base64
import hashlib
import hmac
import json
import os
import time
import uuid

from harness import DEFAULT_TIMEOUT, build_config
from inbox_helpers import deliver
from proxy_helpers import assert_problem, assert_replay_of, check_config, record_keys

HOOK = "/hooks/stripe"  # the Stripe routes here (inbox_helpers.deliver posts to the inbox's)


def test_unsigned_webhook_on_another_spelling_is_refused(start_proxy, upstream):
    p = start_proxy(routes=[{"path": "/hooks/stripe", "key_from": "json:/id",
                             "verify": "stripe", "secret": "whsec_x_test_secret"}])
    for path in ("/hooks/stripe/", "//hooks/stripe", "/Hooks/stripe", "/hooks/stripe;x",
                 "/hooks/%73tripe"):
        assert_problem(p.request("POST", path, [("Content-Type", "application/json")],
                                 b'{"id": "evt_forged"}'), 401, "signature-invalid")
    assert upstream.total() == 0


def test_github_webhook_signature_and_duplicate_delivery(start_proxy, upstream, redis):
    secret = "gh-" + uuid.uuid4().hex
    p = start_proxy(routes=[{"path": "/hooks/github", "key_from": "header:X-GitHub-Delivery",
                             "verify": "github", "secret": "${GH_SECRET}"}],
                    env={"GH_SECRET": secret})
    delivery = str(uuid.uuid4())
    body = b'{"action": "completed", "zen": "Keep it logically awesome."}'

    def sig(b, s=secret):
        return "sha256=" + hmac.new(s.encode(), b, hashlib.sha256).hexdigest()

    base = [("X-GitHub-Delivery", delivery), ("X-GitHub-Event", "check_run"),
            ("Content-Type", "application/json")]
    bad = p.request("POST", "/hooks/github", base + [("X-Hub-Signature-256", sig(body, "nope"))],
                    body)
    assert_problem(bad, 401, "signature-invalid")
    missing = p.request("POST", "/hooks/github", base, body)
    assert_problem(missing, 401, "signature-invalid")
    assert upstream.total() == 0
    assert record_keys(redis) == []  # nobody can pre-claim an event id
    first = p.request("POST", "/hooks/github", base + [("X-Hub-Signature-256", sig(body))], body)
    assert first.status == 201
    dup = p.request("POST", "/hooks/github", base + [("X-Hub-Signature-256", sig(body))], body)
    assert_replay_of(dup, first)
    assert upstream.total() == 1


def test_stripe_webhook_key_from_json_and_tolerance(start_proxy, upstream):
    secret = "whsec_" + uuid.uuid4().hex
    p = start_proxy(routes=[{"path": "/hooks/stripe", "key_from": "json:/id",
                             "verify": "stripe", "secret": "${STRIPE_SECRET}"}],
                    env={"STRIPE_SECRET": secret})
    evt = "evt_" + uuid.uuid4().hex
    b1 = json.dumps({"id": evt, "type": "payment_intent.succeeded",
                     "request": {"idempotency_key": None}, "pending_webhooks": 2}).encode()
    old = deliver(p, secret, b1, HOOK, age_s=600, timeout=DEFAULT_TIMEOUT)
    assert_problem(old, 401, "signature-invalid")
    first = deliver(p, secret, b1, HOOK, timeout=DEFAULT_TIMEOUT)
    assert first.status == 201
    # Stripe changes the body between deliveries (pending_webhooks): still a duplicate
    b2 = json.dumps({"id": evt, "type": "payment_intent.succeeded",
                     "request": {"idempotency_key": None}, "pending_webhooks": 1}).encode()
    assert_replay_of(deliver(p, secret, b2, HOOK, timeout=DEFAULT_TIMEOUT), first)
    b3 = json.dumps({"id": evt + "x", "type": "charge.refunded"}).encode()
    other = deliver(p, secret, b3, HOOK, timeout=DEFAULT_TIMEOUT)
    assert other.status == 201 and not other.replayed
    assert upstream.total() == 2


def test_webhook_without_a_usable_event_id_is_400_and_nothing_claimed(start_proxy, upstream,
                                                                      redis):
    secret = "whsec_" + uuid.uuid4().hex
    p = start_proxy(routes=[{"path": "/hooks/stripe", "key_from": "json:/id",
                             "verify": "stripe", "secret": secret},
                            {"path": "/hooks/github", "key_from": "header:X-GitHub-Delivery",
                             "verify": "github", "secret": secret}])
    for body, problem in ((b'{"type": "charge.succeeded"}', "missing-key"),
                          (b'{"id": 42}', "invalid-key"), (b'{"id": ""}', "invalid-key"),
                          (b'not json', "missing-key")):
        assert_problem(deliver(p, secret, body, HOOK, timeout=DEFAULT_TIMEOUT), 400, problem)
    body = b'{"action": "opened"}'
    sig = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    no_id = p.request("POST", "/hooks/github", [("X-Hub-Signature-256", sig)], body)
    assert_problem(no_id, 400, "missing-key")
    assert upstream.total() == 0
    assert record_keys(redis) == []


def test_webhook_failure_answer_is_not_recorded_so_the_redelivery_executes(start_proxy,
                                                                           upstream):
    """A receiver's 500 must not be replayed to the provider's retries (README "Webhooks")."""
    secret = "whsec_" + uuid.uuid4().hex
    p = start_proxy(routes=[{"path": "/hooks/stripe", "key_from": "json:/id",
                             "verify": "stripe", "secret": secret}])
    body = json.dumps({"id": "evt_" + uuid.uuid4().hex}).encode()
    failed = deliver(p, secret, body, HOOK, headers=[("X-Demo-Status", "500")],
                     timeout=DEFAULT_TIMEOUT)
    assert failed.status == 500 and not failed.replayed
    ok = deliver(p, secret, body, HOOK, timeout=DEFAULT_TIMEOUT)
    assert ok.status == 201 and not ok.replayed
    assert_replay_of(deliver(p, secret, body, HOOK, timeout=DEFAULT_TIMEOUT), ok)
    assert upstream.total() == 2


def test_standard_webhooks_secret_rotation(start_proxy, upstream):
    old_raw, new_raw = os.urandom(24), os.urandom(24)
    old = "whsec_" + base64.b64encode(old_raw).decode()
    new = "whsec_" + base64.b64encode(new_raw).decode()
    p = start_proxy(routes=[{"path": "/hooks/std", "key_from": "header:webhook-id",
                             "verify": "standard-webhooks",
                             "secret": ["${WH_OLD}", "${WH_NEW}"]}],
                    env={"WH_OLD": old, "WH_NEW": new})

    def std_deliver(msg_id, body, raw):
        ts = str(int(time.time()))
        mac = hmac.new(raw, ("%s.%s." % (msg_id, ts)).encode() + body, hashlib.sha256).digest()
        return p.request("POST", "/hooks/std",
                         [("webhook-id", msg_id), ("webhook-timestamp", ts),
                          ("webhook-signature", "v1," + base64.b64encode(mac).decode()),
                          ("Content-Type", "application/json")], body)

    m1, m2 = "msg_" + uuid.uuid4().hex, "msg_" + uuid.uuid4().hex
    body = b'{"type": "invoice.paid"}'
    assert_problem(std_deliver(m1, body, os.urandom(24)), 401, "signature-invalid")
    a = std_deliver(m1, body, old_raw)
    assert a.status == 201
    b = std_deliver(m2, body, new_raw)
    assert b.status == 201
    assert_replay_of(std_deliver(m1, body, new_raw), a)
    assert upstream.total() == 2


def test_a_webhook_route_refuses_methods_it_does_not_verify(start_proxy, upstream):
    """A PUT to a Stripe route with methods: [POST] is 405 with Allow: POST, never forwarded
    unverified."""
    p = start_proxy(routes=[{"path": "/webhooks/stripe", "methods": ["POST"],
                             "key_from": "json:/id", "verify": "stripe",
                             "secret": "whsec_test_secret_0123"}])
    before = upstream.total()
    r = p.request("PUT", "/webhooks/stripe", [("Stripe-Signature", "t=1,v1=00"),
                                               ("Content-Type", "application/json")],
                  b'{"id":"evt_forged"}')
    assert_problem(r, 405, "method-not-allowed")
    assert r.header("Allow") == "POST"
    assert upstream.total() == before


def test_a_webhook_route_writes_verify_out_and_none_warns(tmp_path, upstream, redis):
    """`-t`: key_from without verify is an ordinary protected route that reads a client's key
    (docs/client-contract.md#the-key-in-the-body), so no warning; a queued delivery is a webhook
    receiver's and is refused without verify (a forged delivery could pre-claim an event id);
    with an explicit verify: none the route is a webhook receiver and passes with a warning."""
    route = {"path": "/wh", "methods": ["POST"], "key_from": "json:/id"}
    r = check_config(tmp_path, build_config(8080, 9901, upstream.url, redis.url,
                                            routes=[route]))
    assert r.returncode == 0 and "pre-claim" not in r.stderr, r.stderr
    r = check_config(tmp_path, build_config(8080, 9901, upstream.url, redis.url,
                                            routes=[dict(route, delivery={"mode": "queued"})]))
    assert r.returncode == 1 and "delivery needs verify" in r.stderr, r.stderr
    r = check_config(tmp_path, build_config(8080, 9901, upstream.url, redis.url,
                                            routes=[dict(route, verify="none")]))
    assert r.returncode == 0, r.stderr
    assert "warning: route '/wh'" in r.stderr and "pre-claim" in r.stderr, r.stderr


def test_one_event_id_sent_to_two_webhook_routes_reaches_both(start_proxy, upstream):
    """A provider sends one event id to every endpoint subscribed to the event: the record
    id includes the route, so each endpoint's delivery reaches its receiver once and only
    its own redelivery replays."""
    hook = {"methods": ["POST"], "key_from": "header:X-Event-Id", "verify": "none"}
    p = start_proxy(routes=[dict(hook, path="/hooks/billing"), dict(hook, path="/hooks/ledger")])
    event = "evt_" + uuid.uuid4().hex
    before = upstream.total()
    for path in ("/hooks/billing", "/hooks/ledger"):
        r = p.post(path=path, headers=[("X-Event-Id", event)], body=b'{"id": "x"}')
        assert r.status < 300 and not r.replayed, (path, r)
        again = p.post(path=path, headers=[("X-Event-Id", event)], body=b'{"id": "x"}')
        assert again.replayed and again.body == r.body, (path, again)
    assert upstream.total() == before + 2
