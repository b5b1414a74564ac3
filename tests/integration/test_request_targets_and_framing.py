"""Request targets and framing: the HTTP edge fails closed.

Paths that cannot be normalised, every spelling of a protected path, limits the
config accepts, body framing libevent may read otherwise than the client, route
patterns and the route of unprotected methods in the access log. Real processes
over real sockets; each test asserts what the client and the upstream observe.
"""

import json
import socket
import subprocess
import time
import uuid

import pytest

from harness import (
    DEFAULT_TIMEOUT, _Reader, build_config, free_port, http_request, proxy_binary, read_response, to_yaml,
    wait_until,
)
from inbox_helpers import deliver
from proxy_helpers import assert_problem, new_key

STRICT = [{"path": "/v1/payments*", "require_key": True}]


def raw_post(port, target, headers=b"", body=b"{}"):
    """POST with the target sent byte for byte (curl --path-as-is)."""
    raw = (b"POST " + target + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
           headers + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    return http_request(port, raw=raw)


# --------------------------------------------------------------------------
# a path that cannot be normalised is refused, never matched raw
# --------------------------------------------------------------------------

def test_path_longer_than_4k_is_normalised_not_matched_raw(start_proxy, upstream):
    p = start_proxy(routes=STRICT)
    target = b"/" + b"a" * 4100 + b"/../v1/payments"
    assert_problem(raw_post(p.port, target), 400, "missing-key")
    # a canonical-looking 5,000-byte path under the route, spelled with a double slash
    assert_problem(raw_post(p.port, b"//v1/payments/" + b"x" * 5000), 400, "missing-key")
    assert upstream.total() == 0


@pytest.mark.parametrize("method,target", [
    ("POST", b"/v1%2Fpayments"),            # matched once decoded
    ("GET", b"/elsewhere%2Fthing"),         # matched by no route
    ("DELETE", b"/other/x%00y"),
])
def test_path_that_cannot_be_normalised_is_invalid_target_for_every_request(
        start_proxy, upstream, method, target):
    p = start_proxy(routes=STRICT)
    raw = (method.encode() + b" " + target + b" HTTP/1.1\r\nHost: x\r\nIdempotency-Key: " +
           new_key().encode() + b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
    assert_problem(http_request(p.port, method, raw=raw), 400, "invalid-target")
    assert upstream.total() == 0


def test_a_target_with_a_space_or_a_fragment_is_refused(start_proxy, upstream):
    """A target with a space (`/v1/ payments`) or a fragment (`/v1/pay#ments`) is 400
    invalid-target: nothing claimed, nothing forwarded."""
    p = start_proxy(routes=[{"path": "/v1/*", "require_key": True}])
    before = upstream.total()
    for target in (b"/v1/ payments", b"/v1/pay#ments", b"/v1/payments?a=1#frag"):
        k = new_key()
        raw = (b"POST " + target + b" HTTP/1.1\r\nHost: x\r\nIdempotency-Key: " + k.encode() +
               b"\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
               b"Connection: close\r\n\r\n{}")
        r = p.request(raw=raw)
        assert_problem(r, 400, "invalid-target")
    assert upstream.total() == before


# --------------------------------------------------------------------------
# spellings of a protected path a WHATWG URL parser reads as the same
# --------------------------------------------------------------------------

SPELLINGS = [
    (b"/v1\\payments", "missing-key"),
    (b"\\v1\\payments", "invalid-target"),  # neither origin-form nor absolute-form
    (b"/v1\\payments\\", "missing-key"),
    (b"/v1/x\\..\\payments", "missing-key"),
    (b"/v1/%2e%2E/v1/payments", "missing-key"),
    (b"/V1//PAYMENTS/", "missing-key"),
    (b"/v1%5Cpayments", "invalid-target"),
    (b"/v1%5cpayments", "invalid-target"),
    (b"/v1%2Fpayments", "invalid-target"),
    (b"/v1%2fpayments", "invalid-target"),
    (b"/v1/payments%3F", "invalid-target"),
    (b"/v1/payments%23x", "invalid-target"),
    (b"/v1/payments%00", "invalid-target"),
    (b"/v1/payments%0D%0A", "invalid-target"),
    (b"/v1%C0%AFpayments", "invalid-target"),
    (b"/v1/%C0%AE%C0%AE/v1/payments", "invalid-target"),
    (b"/v1/payments%FF", "invalid-target"),
]


@pytest.mark.parametrize("target,cause", SPELLINGS, ids=[t.decode() for t, _ in SPELLINGS])
def test_each_spelling_of_a_require_key_route_is_refused(start_proxy, upstream, target, cause):
    p = start_proxy(routes=STRICT)
    assert_problem(raw_post(p.port, target), 400, cause)
    assert upstream.total() == 0


def test_backslash_spelling_with_a_key_is_protected(start_proxy, upstream):
    p = start_proxy(routes=STRICT)
    key = new_key()
    first = raw_post(p.port, b"/v1\\payments", b"Idempotency-Key: " + key.encode() + b"\r\n")
    assert first.status == 201, first
    again = raw_post(p.port, b"/v1\\payments", b"Idempotency-Key: " + key.encode() + b"\r\n")
    assert again.status == 201 and again.header("Idempotent-Replayed") == "true", again
    assert again.body == first.body
    assert upstream.executions(key) == 1


def test_unsigned_webhook_with_a_backslash_gets_the_signature_check(start_proxy, upstream):
    secret = "whsec_" + uuid.uuid4().hex
    p = start_proxy(routes=[{"path": "/webhooks/stripe", "key_from": "json:/id",
                             "verify": "stripe", "secret": secret}])
    for target in (b"/webhooks\\stripe", b"/webhooks\\stripe\\", b"/Webhooks\\Stripe"):
        assert_problem(raw_post(p.port, target, body=b'{"id": "evt_forged"}'), 401,
                       "signature-invalid")
    assert_problem(raw_post(p.port, b"/webhooks%5Cstripe", body=b'{"id": "evt_forged"}'), 400,
                   "invalid-target")
    assert upstream.total() == 0


# --------------------------------------------------------------------------
# every limit the config accepts holds end to end
# --------------------------------------------------------------------------

def test_header_key_above_4k_within_key_max_length(start_proxy, upstream):
    p = start_proxy(key_max_length=8192)
    key = "k" * 5000
    first = p.post(key=key)
    assert first.status == 201, first
    again = p.post(key=key)
    assert again.status == 201 and again.header("Idempotent-Replayed") == "true", again
    assert upstream.executions(key) == 1
    assert_problem(p.post(key="k" * 8193), 400, "invalid-key")


def test_json_event_id_above_4k_within_key_max_length(start_proxy, upstream):
    secret = "whsec_" + uuid.uuid4().hex
    p = start_proxy(routes=[{"path": "/webhooks/stripe", "key_from": "json:/id",
                             "verify": "stripe", "secret": secret, "key_max_length": 8192}])
    body = json.dumps({"id": "evt_" + "e" * 5000, "type": "charge.succeeded"}).encode()
    first = deliver(p, secret, body, "/webhooks/stripe", timeout=DEFAULT_TIMEOUT)
    assert first.status == 201, first
    again = deliver(p, secret, body, "/webhooks/stripe", timeout=DEFAULT_TIMEOUT)
    assert again.status == 201 and again.header("Idempotent-Replayed") == "true", again
    assert upstream.total() == 1


def test_replay_keeps_a_header_name_above_256_bytes(proxy, upstream):
    key = new_key()
    name = "X-" + "N" * 300
    hs = [("X-Demo-Header", name + ": long-name")]
    first = proxy.post(key=key, headers=hs)
    assert first.status == 201 and first.header(name) == "long-name", first
    again = proxy.post(key=key, headers=hs)
    assert again.header("Idempotent-Replayed") == "true", again
    assert again.header(name) == "long-name", again
    assert upstream.executions(key) == 1


# --------------------------------------------------------------------------
# route patterns are normalised; shadowed ones are named
# --------------------------------------------------------------------------

def write_config(tmp_path, upstream, redis, routes, name="edge.yaml"):
    cfg = build_config(free_port(), None, upstream.url, redis.url, routes=routes)
    path = tmp_path / name
    path.write_text(to_yaml(cfg) + "\n")
    return path, to_yaml(cfg).splitlines()


def config_line(lines, text):
    return next(i + 1 for i, l in enumerate(lines) if text in l)


def test_check_warns_of_shadowed_routes(tmp_path, upstream, redis):
    path, lines = write_config(tmp_path, upstream, redis, [
        {"path": "/v1/payments*"}, {"path": "/v1/payments/refunds"},
        {"path": "/v2/x"}, {"path": "/V2/x/"}, {"path": "/v3/y"}])
    r = subprocess.run([proxy_binary(), "-t", "-c", str(path)], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 0 and r.stdout == "configuration OK\n", r
    warnings = r.stderr.splitlines()
    assert len(warnings) == 2, r.stderr
    assert warnings[0].startswith("idempotency-proxy: %s:%d: warning: route "
                                  "'/v1/payments/refunds'"
                                  % (path, config_line(lines, "/v1/payments/refunds"))), r.stderr
    assert "line %d ('/v1/payments*')" % config_line(lines, "/v1/payments*") in warnings[0]
    assert warnings[1].startswith("idempotency-proxy: %s:%d: warning: route '/V2/x/'"
                                  % (path, config_line(lines, "/V2/x/"))), r.stderr


def test_daemon_logs_shadowed_routes_at_startup(start_proxy):
    p = start_proxy(routes=[{"path": "/v1/*"}, {"path": "/v1/payments*"}])
    wait_until(lambda: "warning: route '/v1/payments*' is never reached" in p.stderr_text(),
               what="shadowed-route warning in the log")


def test_check_refuses_a_pattern_no_request_can_match(tmp_path, upstream, redis):
    path, lines = write_config(tmp_path, upstream, redis,
                               [{"path": "/v1/payments"}, {"path": "/v1%2Frefunds*"}])
    r = subprocess.run([proxy_binary(), "-t", "-c", str(path)], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 1, r
    assert r.stderr.startswith("idempotency-proxy: %s:%d: " %
                               (path, config_line(lines, "/v1%2Frefunds*"))), r.stderr
    assert "no request can ever match it" in r.stderr, r.stderr


def test_oddly_spelled_pattern_protects_the_canonical_path(start_proxy, upstream):
    p = start_proxy(routes=[{"path": "/V1//Payments/", "require_key": True},
                            {"path": "/v2\\items/*", "require_key": True}])
    assert_problem(p.post("/v1/payments"), 400, "missing-key")
    assert_problem(p.post("/v2/items/1"), 400, "missing-key")
    assert upstream.total() == 0
    assert p.post("/v2/items").status == 201  # a prefix written with '/' keeps it


# --------------------------------------------------------------------------
# body framing libevent 2.1 may read otherwise: 400, close, nothing forwarded
# --------------------------------------------------------------------------

SMUGGLED = (b"POST /v1/payments HTTP/1.1\r\nHost: x\r\nIdempotency-Key: smuggled-1\r\n"
            b"Content-Length: 0\r\n\r\n")
assert len(SMUGGLED) == 87


def answers_on_one_connection(port, data, method, timeout=5.0):
    """Send data in one write; the first answer, what came after it, and whether it closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        reader = _Reader(s, time.monotonic() + timeout)
        first = read_response(s, method, timeout, reader=reader)
        rest, closed = reader.buf, False
        s.settimeout(1.0)
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    closed = True
                    break
                rest += chunk
        except socket.timeout:
            pass
    return first, rest, closed


def head(extra):
    return b"HEAD /v1/payments HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n"


def post(extra, version=b"1.1"):
    return b"POST /v1/payments HTTP/" + version + b"\r\nHost: x\r\n" + extra + b"\r\n"


# (name, method, bytes, cause): cause "invalid-framing" when the request reaches the proxy's
# handler; None when libevent 2.1.12 refuses it on its own (text/html 4xx + close)
FRAMING = [
    ("head-content-length", "HEAD", head(b"Content-Length: 87\r\n") + SMUGGLED,
     "invalid-framing"),
    ("head-chunked", "HEAD", head(b"Transfer-Encoding: chunked\r\n") +
     b"57\r\n" + SMUGGLED + b"\r\n0\r\n\r\n", "invalid-framing"),
    ("te-on-http-1.0", "POST", post(b"Transfer-Encoding: chunked\r\n", b"1.0") +
     b"0\r\n\r\n" + SMUGGLED, "invalid-framing"),
    ("te-not-chunked-with-cl", "POST", post(b"Transfer-Encoding: gzip\r\nContent-Length: 87\r\n")
     + SMUGGLED, None),
    ("cl-twice", "POST", post(b"Content-Length: 0\r\nContent-Length: 87\r\n") + SMUGGLED,
     "invalid-framing"),
    ("cl-same-twice", "POST", post(b"Content-Length: 87\r\nContent-Length: 87\r\n") + SMUGGLED,
     "invalid-framing"),
    ("cl-plus", "POST", post(b"Content-Length: +87\r\n") + SMUGGLED, "invalid-framing"),
    ("cl-tab", "POST", post(b"Content-Length:\t87\r\n") + SMUGGLED, "invalid-framing"),
    ("cl-folded", "POST", post(b"Content-Length:\r\n 87\r\n") + SMUGGLED, "invalid-framing"),
    ("te-not-chunked", "POST", post(b"Transfer-Encoding: gzip, chunked\r\n") + SMUGGLED, None),
    ("te-chunked-folded", "POST", post(b"Transfer-Encoding:\r\n chunked\r\n") + SMUGGLED,
     None),
    ("te-twice", "POST", post(b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n")
     + b"0\r\n\r\n" + SMUGGLED, None),
    ("te-and-cl", "POST", post(b"Content-Length: 92\r\nTransfer-Encoding: chunked\r\n") +
     b"0\r\n\r\n" + SMUGGLED, None),
    ("cl-inner-space", "POST", post(b"Content-Length: 8 7\r\n") + SMUGGLED, None),
    ("cl-list", "POST", post(b"Content-Length: 87, 87\r\n") + SMUGGLED, None),
    ("cl-hex", "POST", post(b"Content-Length: 0x57\r\n") + SMUGGLED, None),
    # an upstream parser that ends its header block at "X-Note : hi" reads the body as a
    # next request, unclaimed (RFC 9112 section 5.1 says refuse it)
    ("space-before-colon", "POST", post(b"Idempotency-Key: sbc-1\r\nX-Note : hi\r\n"
                                        b"Content-Length: 87\r\n") + SMUGGLED,
     "invalid-framing"),
    ("key-space-before-colon", "POST", post(b"Idempotency-Key : sbc-2\r\n"
                                            b"Content-Length: 87\r\n") + SMUGGLED,
     "invalid-framing"),
    ("tab-in-field-name", "POST", post(b"X\tNote: hi\r\nContent-Length: 87\r\n") + SMUGGLED,
     "invalid-framing"),
    ("trace-content-length", "TRACE",
     b"TRACE /v1/payments HTTP/1.1\r\nHost: x\r\nContent-Length: 87\r\n\r\n" + SMUGGLED, None),
]


@pytest.mark.parametrize("name,method,data,cause", FRAMING, ids=[f[0] for f in FRAMING])
def test_ambiguous_framing_gets_one_answer_and_a_closed_connection(
        start_proxy, upstream, name, method, data, cause):
    p = start_proxy(routes=[{"path": "/v1/payments*", "methods": ["POST", "HEAD"]}])
    first, rest, closed = answers_on_one_connection(p.port, data, method)
    if cause is None:
        assert first.status in (400, 413, 501), (name, first)
    elif method == "HEAD":
        assert first.status == 400 and first.content_type == "application/problem+json", first
    else:
        assert_problem(first, 400, cause)
    assert first.header("Connection", "").lower() == "close", first
    assert rest == b"" and closed, (name, rest, closed)
    assert upstream.executions("smuggled-1") == 0
    assert upstream.total() == 0


def test_plain_framing_still_keeps_the_connection(start_proxy, upstream):
    """Content-Length: 0 on HEAD and OWS around a length leave nothing unread."""
    p = start_proxy()
    key = new_key()
    data = (head(b"Content-Length: 0\r\n") +
            post(b"Idempotency-Key: " + key.encode() + b"\r\nContent-Length:   2  \r\n") + b"{}")
    with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
        s.sendall(data)
        reader = _Reader(s, time.monotonic() + 5)
        a = read_response(s, "HEAD", 5, reader=reader)
        b = read_response(s, "POST", 5, reader=reader)
    assert a.status != 400 and b.status == 201, (a, b)
    assert upstream.executions(key) == 1


# --------------------------------------------------------------------------
# the route of an unprotected method is logged and counted
# --------------------------------------------------------------------------

def test_unprotected_method_logs_and_counts_its_route(proxy, upstream):
    r = proxy.request("GET", "/v1/payments/pay_1?x=1")
    assert r.status == 200, r

    def logged():
        for line in proxy.stdout_text().splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if doc.get("method") == "GET" and doc.get("path") == "/v1/payments/pay_1":
                return doc
        return None
    doc = wait_until(logged, what="access log line of the GET")
    assert doc["route"] == "/v1/payments" and doc["outcome"] == "pass-through", doc
    metrics = proxy.admin("GET", "/metrics").body.decode()
    assert ('idempotency_proxy_requests_total{route="/v1/payments",outcome="pass-through"} 1'
            in metrics), metrics
