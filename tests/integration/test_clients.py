"""Real client libraries against the real proxy.

Stripe's Node SDK (`stripe` on npm) decides success by the absence of an
`error` member in the JSON body, not by the status, and retries by the
`Stripe-Should-Retry` header before its own rules; Svix (`svix` on npm) signs
webhook deliveries with `svix-*` headers. The packages are pinned in
tests/clients/package-lock.json and installed once with `npm ci` into
~/.cache/idempotency-proxy-tests/node-<hash of the lock>/ ($XDG_CACHE_HOME
when set); node and npm are required (tests/install-deps.sh --tests).
"""

import base64
import json
import os
import subprocess
import threading
import time

import pytest

from harness import REPO, free_port, http_request, wait_until
from proxy_helpers import assert_problem, metric, node_packages

CLIENTS = os.path.join(REPO, "tests", "clients")
STRIPE_KEY = "sk_test_x"                      # the SDK sends "Authorization: Bearer sk_test_x"
STRIPE_PATH = "/v1/payment_intents"
STRIPE_BODY = b"amount=100&currency=usd"      # how the SDK form-encodes the params below
STRIPE_PARAMS = {"amount": 100, "currency": "usd"}
STRIPE_ROUTES = [{"path": "/v1/*", "require_key": True}]


# --------------------------------------------------------------------------
# the node packages
# --------------------------------------------------------------------------

@pytest.fixture(scope="session")
def node_clients():
    """node_clients(script, *args, stdin=b"") -> stdout of tests/clients/<script> under node."""
    node, modules = node_packages()
    env = dict(os.environ, NODE_PATH=modules)

    def run(script, *args, stdin=b""):
        r = subprocess.run([node, os.path.join(CLIENTS, script)] + [str(a) for a in args],
                           input=stdin, capture_output=True, env=env, timeout=90)
        assert r.returncode == 0, "%s failed (%d): %s" % (script, r.returncode,
                                                         r.stderr.decode(errors="replace"))
        return r.stdout.decode()

    return run


def stripe_create(node_clients, proxy, key, params=STRIPE_PARAMS):
    """paymentIntents.create(params, {idempotencyKey: key}) through the SDK: its outcome."""
    out = node_clients("stripe_call.js",
                       json.dumps({"port": proxy.port, "key": key, "params": params}))
    res = json.loads(out.strip().splitlines()[-1])
    res.pop("ms")                                             # how long the call took
    return res


def outcomes(proxy):
    """The access log's outcome of each request to STRIPE_PATH, in order (stops the proxy:
    the log is flushed at exit, so every line the SDK caused is there)."""
    proxy.stop()
    seen = []
    for line in proxy.stdout_text().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc.get("path") == STRIPE_PATH:
            seen.append(doc.get("outcome"))
    return seen


def raw_post(proxy, key, extra=(), body=STRIPE_BODY, **kw):
    """The SDK's request by hand (same target, body and Authorization: same record)."""
    headers = [("Idempotency-Key", key), ("Authorization", "Bearer " + STRIPE_KEY),
               ("Content-Type", "application/x-www-form-urlencoded")] + list(extra)
    return http_request(proxy.port, "POST", STRIPE_PATH, headers, body, **kw)


def stripe_proxy(start_proxy, **kw):
    return start_proxy(routes=STRIPE_ROUTES, errors={"format": "stripe"}, **kw)


def assert_rejected(res, status, code, stripe_type, should_retry):
    assert res["resolved"] is False, "the SDK resolved a proxy error as a success: %r" % res
    assert res["statusCode"] == status, res
    assert res["code"] == code, res
    assert res["rawType"] == stripe_type, res
    assert res["shouldRetry"] == should_retry, res
    assert res["contentType"] == "application/json", res


# --------------------------------------------------------------------------
# errors.format: stripe
# --------------------------------------------------------------------------

def test_stripe_format_answer_shape(start_proxy):
    p = stripe_proxy(start_proxy)
    r = http_request(p.port, "POST", STRIPE_PATH, [("Content-Type", "application/json")], b"{}")
    assert r.status == 400
    assert r.header("Content-Type") == "application/json"
    assert r.header("Stripe-Should-Retry") == "false"
    doc = json.loads(r.body)
    assert list(doc) == ["error"], doc
    assert doc["error"]["type"] == "invalid_request_error"
    assert doc["error"]["code"] == "missing-key"
    assert isinstance(doc["error"]["message"], str) and doc["error"]["message"]


def test_stripe_sdk_first_call_and_retry_resolve_with_the_upstream_id(start_proxy, upstream,
                                                                      node_clients):
    p = stripe_proxy(start_proxy)
    first = stripe_create(node_clients, p, "sdk-ok-1")
    assert first["resolved"] is True and first["id"].startswith("ord_"), first
    again = stripe_create(node_clients, p, "sdk-ok-1")
    assert again == first
    assert upstream.executions("sdk-ok-1") == 1
    assert outcomes(p) == ["forwarded", "replayed"]


def test_stripe_sdk_rejects_key_reuse_mismatch_without_retrying(start_proxy, upstream,
                                                                node_clients):
    p = stripe_proxy(start_proxy)
    assert stripe_create(node_clients, p, "sdk-mismatch")["resolved"] is True
    res = stripe_create(node_clients, p, "sdk-mismatch", {"amount": 200, "currency": "usd"})
    assert_rejected(res, 409, "key-reuse-mismatch", "idempotency_error", "false")
    assert upstream.executions("sdk-mismatch") == 1
    assert outcomes(p) == ["forwarded", "mismatch"]          # Stripe-Should-Retry: false held


def test_stripe_sdk_gets_the_record_id_on_outcome_unknown_and_then_the_resolution(
        start_proxy, upstream, node_clients):
    """The first request is sent and its answer lost: 502 outcome-unknown in the Stripe shape,
    with the record id (error object and Idempotency-Record-Id) and Retry-After. The SDK is told
    to retry (Stripe-Should-Retry: true): its retries get the same while the record is held,
    counted as answers from a hold, and its error hands the application the record id and
    Retry-After. Once an operator has resolved the record (PUT with a reason), the
    application's next call resolves with the answer recorded; nothing executes again."""
    p = stripe_proxy(start_proxy, on_ambiguous="hold")
    first = raw_post(p, "sdk-unknown", [("X-Demo-Fault", "close")])
    assert first.status == 502 and first.header("Content-Type") == "application/json", first
    err = json.loads(first.body)["error"]
    assert err["code"] == "outcome-unknown" and err["type"] == "api_error", err
    rid = err["record_id"]
    assert first.header("Idempotency-Record-Id") == rid, first
    assert first.header("Retry-After") == "120", first
    assert first.header("Stripe-Should-Retry") == "true", first
    assert not first.has_header("Idempotent-Replayed"), first

    res = stripe_create(node_clients, p, "sdk-unknown")
    assert_rejected(res, 502, "outcome-unknown", "api_error", "true")
    assert (res["recordId"], res["recordIdHeader"], res["retryAfter"]) == (rid, rid, "120"), res
    assert metric(p, "idempotency_proxy_held_answers_total") == 3  # the call and its 2 retries

    found = {"id": "pi_found_at_the_upstream", "object": "payment_intent", "amount": 100}
    resolution = {"status": 200, "headers": [["Content-Type", "application/json"]],
                  "body_base64": base64.b64encode(json.dumps(found).encode()).decode(),
                  "reason": "ticket 4711: the upstream's row for this record id shows it paid"}
    r = p.admin("PUT", "/records/" + rid, headers=[("Content-Type", "application/json")],
                body=json.dumps(resolution).encode())
    assert r.status == 200, r
    again = stripe_create(node_clients, p, "sdk-unknown")
    assert again == {"resolved": True, "id": "pi_found_at_the_upstream"}, again
    assert upstream.executions("sdk-unknown") == 1
    assert outcomes(p) == ["ambiguous"] + ["outcome-unknown"] * 3 + ["replayed"]


def test_stripe_sdk_rejects_request_in_progress_after_its_retries(start_proxy, upstream,
                                                                  node_clients):
    p = stripe_proxy(start_proxy, in_flight="reject")
    holder = {}
    t = threading.Thread(target=lambda: holder.setdefault(
        "r", raw_post(p, "sdk-busy", [("X-Demo-Delay-Ms", "5000")], timeout=30)))
    t.start()
    try:
        wait_until(lambda: upstream.executions("sdk-busy") == 1, what="first request upstream")
        started = time.monotonic()
        res = stripe_create(node_clients, p, "sdk-busy")
        assert time.monotonic() - started < 4.5, "the first request ended before the SDK gave up"
        assert_rejected(res, 409, "request-in-progress", "idempotency_error", "true")
    finally:
        t.join(30)
    assert holder["r"].status == 201
    assert upstream.executions("sdk-busy") == 1
    # the first request, then the SDK's call and its 2 retries (Stripe-Should-Retry: true)
    assert sorted(outcomes(p)) == ["forwarded"] + ["in-flight-rejected"] * 3


def test_stripe_sdk_rejects_store_unavailable_after_its_retries(start_proxy, redis, upstream,
                                                                node_clients):
    p = stripe_proxy(start_proxy)
    redis.stop()
    res = stripe_create(node_clients, p, "sdk-store")
    assert_rejected(res, 503, "store-unavailable", "api_error", "true")
    assert upstream.total() == 0
    assert outcomes(p) == ["store-error"] * 3


def test_stripe_sdk_resolves_proxy_errors_in_the_problem_format(start_proxy, upstream,
                                                                node_clients):
    """Why errors.format exists: with the default format the SDK takes a 409 problem for a
    charge (no `error` member) and resolves with an undefined id, after retrying it twice."""
    p = start_proxy(routes=STRIPE_ROUTES)
    assert stripe_create(node_clients, p, "sdk-problem")["resolved"] is True
    res = stripe_create(node_clients, p, "sdk-problem", {"amount": 200, "currency": "usd"})
    assert res == {"resolved": True, "id": None}
    assert upstream.executions("sdk-problem") == 1
    assert outcomes(p) == ["forwarded"] + ["mismatch"] * 3


def test_stripe_sdk_throws_on_its_route_while_another_route_answers_problem_json(
        start_proxy, upstream, node_clients):
    """errors.format per route (docs/client-contract.md#errors-per-route): the SDK's route says
    stripe, the top level (and so /v2/) problem. The SDK throws a typed error on its route: a
    key under key_min_length (400) as StripeInvalidRequestError, a key reused with another
    amount (409) as StripeAPIError, stripe-node 22 choosing the class by status, with the
    type idempotency_error and the code; the same reuse on /v2/ is an RFC 9457 problem."""
    p = start_proxy(routes=[{"path": "/v1/*", "require_key": True, "key_min_length": 8,
                             "errors": {"format": "stripe"}},
                            {"path": "/v2/*", "require_key": True}])
    res = stripe_create(node_clients, p, "k-1")
    assert_rejected(res, 400, "invalid-key", "invalid_request_error", "false")
    assert res["name"] == "StripeInvalidRequestError", res
    assert upstream.total() == 0
    assert stripe_create(node_clients, p, "sdk-route")["resolved"] is True
    res = stripe_create(node_clients, p, "sdk-route", {"amount": 200, "currency": "usd"})
    assert_rejected(res, 409, "key-reuse-mismatch", "idempotency_error", "false")
    assert res["name"] == "StripeAPIError" and res["type"] == "StripeAPIError", res
    assert upstream.executions("sdk-route") == 1
    headers = [("Idempotency-Key", "raw-route"), ("Content-Type", "application/json")]
    assert http_request(p.port, "POST", "/v2/payments", headers, b'{"amount": 1}').status == 201
    r = http_request(p.port, "POST", "/v2/payments", headers, b'{"amount": 2}')
    assert_problem(r, 409, "key-reuse-mismatch")
    assert not r.has_header("Stripe-Should-Retry"), r
    assert upstream.executions("raw-route") == 1


# --------------------------------------------------------------------------
# verify: standard-webhooks with Svix's default header names
# --------------------------------------------------------------------------

SVIX_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SVIX_PATH = "/webhooks/svix"


def svix_proxy(start_proxy, key_from="header:webhook-id"):
    return start_proxy(routes=[{"path": SVIX_PATH, "methods": ["POST"], "key_from": key_from,
                                "verify": "standard-webhooks", "secret": SVIX_SECRET}])


def svix_headers(node_clients, msg_id, body, prefix="svix", ts=None):
    """The headers of a delivery signed by Svix's library (svix-* by default)."""
    ts = int(time.time()) if ts is None else ts
    sig = node_clients("svix_sign.js", SVIX_SECRET, msg_id, ts, stdin=body).strip()
    assert sig.startswith("v1,"), sig
    return [(prefix + "-id", msg_id), (prefix + "-timestamp", str(ts)),
            (prefix + "-signature", sig), ("Content-Type", "application/json")]


def test_svix_delivery_is_forwarded_once_and_its_duplicate_replayed(start_proxy, upstream,
                                                                    node_clients):
    p = svix_proxy(start_proxy)
    body = b'{"type":"invoice.paid","data":{"id":"inv_42"}}'
    headers = svix_headers(node_clients, "msg_svix_1", body)
    first = http_request(p.port, "POST", SVIX_PATH, headers, body)
    assert first.status == 201, first
    again = http_request(p.port, "POST", SVIX_PATH, headers, body)
    assert again.status == 201 and again.body == first.body
    assert again.header("Idempotent-Replayed") == "true"
    assert upstream.total() == 1


def test_svix_delivery_with_a_bad_signature_gets_401(start_proxy, upstream, node_clients):
    p = svix_proxy(start_proxy)
    body = b'{"type":"invoice.paid"}'
    headers = svix_headers(node_clients, "msg_svix_bad", body)
    r = http_request(p.port, "POST", SVIX_PATH, headers, body + b" ")
    assert r.status == 401, r
    assert r.problem()["type"].endswith(":signature-invalid")
    assert upstream.total() == 0


def test_svix_and_standard_spellings_of_one_message_share_the_key(start_proxy, upstream,
                                                                  node_clients):
    """key_from: header:svix-id also takes the id of a webhook-* delivery (the set that
    verified), so a redelivery in the other spelling is replayed, not executed again."""
    p = svix_proxy(start_proxy, key_from="header:svix-id")
    body = b'{"type":"payment.succeeded"}'
    first = http_request(p.port, "POST", SVIX_PATH,
                         svix_headers(node_clients, "msg_both", body, prefix="webhook"), body)
    assert first.status == 201, first
    again = http_request(p.port, "POST", SVIX_PATH,
                         svix_headers(node_clients, "msg_both", body, prefix="svix"), body)
    assert again.status == 201 and again.body == first.body
    assert again.header("Idempotent-Replayed") == "true"
    assert upstream.total() == 1


def test_svix_key_is_the_signed_id_not_an_unsigned_webhook_id(start_proxy, upstream,
                                                             node_clients):
    p = svix_proxy(start_proxy)
    body = b'{"type":"payment.succeeded"}'
    forged = svix_headers(node_clients, "msg_real", body) + [("webhook-id", "msg_victim")]
    assert http_request(p.port, "POST", SVIX_PATH, forged, body).status == 201
    victim = http_request(p.port, "POST", SVIX_PATH,
                          svix_headers(node_clients, "msg_victim", body), body)
    assert victim.status == 201 and not victim.has_header("Idempotent-Replayed")
    assert upstream.total() == 2


# --------------------------------------------------------------------------
# what the log says (stderr)
# --------------------------------------------------------------------------

def test_upstream_unreachable_log_names_the_address_and_curl_reason(start_proxy):
    port = free_port()                       # nothing listens there
    p = start_proxy(upstream_url="http://127.0.0.1:%d/legacy" % port)
    r = p.post(key="unreachable-1")
    assert r.status == 502 and r.problem()["type"].endswith(":upstream-unavailable")
    assert "127.0.0.1" not in r.body.decode()            # the address is for the log only
    line = wait_until(lambda: next((ln for ln in p.stderr_text().splitlines()
                                    if "upstream unreachable" in ln), None),
                      what="the upstream unreachable warning")
    assert "http://127.0.0.1:%d:" % port in line, line
    assert "/legacy" not in line, line
    assert "Failed to connect to 127.0.0.1 port %d" % port in line, line
    assert "(curl 7)" in line, line


def test_upstream_unreachable_log_names_the_unix_socket(start_proxy, tmp_path):
    path = str(tmp_path / "no-such-upstream.sock")
    p = start_proxy(upstream_url="unix:" + path)
    assert p.post(key="unreachable-unix").status == 502
    line = wait_until(lambda: next((ln for ln in p.stderr_text().splitlines()
                                    if "upstream unreachable" in ln), None),
                      what="the upstream unreachable warning")
    assert "unix:%s: " % path in line, line
    assert "(curl 7)" in line, line


def test_startup_line_counts_one_worker_and_one_route(start_proxy):
    p = start_proxy(workers=1, routes=[{"path": "/v1/payments*"}])
    line = wait_until(lambda: next((ln for ln in p.stderr_text().splitlines()
                                    if "listening on" in ln), None), what="the startup line")
    assert " with 1 worker, " in line and line.endswith(", 1 route"), line


# --------------------------------------------------------------------------
# the documents a user reads stand alone
# --------------------------------------------------------------------------

def test_user_documents_send_readers_nowhere_outside_the_repository():
    """README.md is the contract: no document a user reads points at files this repository
    does not have (a CONTRACT.md, a ../shared folder)."""
    docs = ["README.md", "tests/integration/README.md"] + [
        os.path.join("conf", name) for name in sorted(os.listdir(os.path.join(REPO, "conf")))]
    found = []
    for rel in docs:
        with open(os.path.join(REPO, rel), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if "CONTRACT" in line or "shared/" in line:
                    found.append("%s:%d: %s" % (rel, n, line.strip()))
    assert not found, "\n".join(found)
