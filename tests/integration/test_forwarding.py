"""What the proxy forwards to the upstream (headers, query, body; no hop-by-hop fields;
never through the environment's HTTP proxy) and how it serves a client connection (keep-alive,
pipelining, Expect: 100-continue, HTTP/1.0).

Real processes over real sockets: redis-server, tests/upstream/payments_api.py and the
proxy binary; each test asserts what the client and the upstream observe.
"""

import hashlib
import re
import socket
import time

from harness import Connection, _Reader, build_request, http_request, log_lines, read_response
from proxy_helpers import (
    new_key, access_lines, assert_problem, assert_replay_of, record_id_cli, reload_and_wait,
    rewrite, run_check, upstream_record_ids,
)


# --------------------------------------------------------------------------
# what reaches the upstream
# --------------------------------------------------------------------------

def test_request_headers_query_and_body_are_forwarded(proxy, upstream):
    key = new_key()
    body = b'{"amount": 12}'
    r = proxy.post("/v1/payments/a%20b?x=1&y=%2F&z", key=key, body=body,
                   headers=[("Authorization", "Bearer tok"), ("X-Trace", "t1"),
                            ("X-Trace", "t2")])
    assert r.status == 201
    doc = r.json()
    assert doc["query"] == "x=1&y=%2F&z"
    assert doc["path"] in ("/v1/payments/a b", "/v1/payments/a%20b")
    seen = upstream.last_headers()
    assert seen["authorization"] == ["Bearer tok"]
    assert seen["content-type"] == ["application/json"]
    assert ",".join(v.replace(" ", "") for v in seen["x-trace"]) == "t1,t2"
    assert upstream.last_request()["body_sha256"] == hashlib.sha256(body).hexdigest()


def test_hop_by_hop_request_headers_are_not_forwarded(proxy, upstream):
    r = proxy.post(key=new_key(), headers=[("Keep-Alive", "timeout=5"), ("TE", "trailers"),
                                           ("Proxy-Authorization", "Basic c2VjcmV0"),
                                           ("Connection", "keep-alive, TE")])
    assert r.status == 201
    seen = upstream.last_headers()
    for h in ("keep-alive", "proxy-authorization"):
        assert h not in seen, "hop-by-hop %s forwarded: %r" % (h, seen)
    assert "trailers" not in ",".join(seen.get("te", [])), seen


def test_every_x_forwarded_for_line_reaches_the_upstream(proxy, upstream):
    """Every X-Forwarded-For line reaches the upstream, joined in order, the client address
    appended."""
    r = proxy.post(key=new_key(), headers=[("X-Forwarded-For", "203.0.113.1"),
                                           ("X-Forwarded-For", "198.51.100.2")])
    assert r.status == 201
    seen = upstream.last_headers().get("x-forwarded-for")
    assert seen == ["203.0.113.1, 198.51.100.2, 127.0.0.1"], seen


# --------------------------------------------------------------------------
# the record id the upstream is told (docs/operations.md#correlating-with-the-upstream)
# --------------------------------------------------------------------------

def test_upstream_receives_the_record_id_on_a_first_execution_never_on_a_replay(proxy,
                                                                                upstream):
    """The first execution carries Idempotency-Record-Id: the record id that `record-id`,
    GET /records/<id> and the access line name (never the key); the replay reaches no one."""
    key = new_key()
    first = proxy.post(key=key)
    assert first.status == 201, first
    assert_replay_of(proxy.post(key=key), first)
    assert upstream.requests() == 1, "the replay reached the upstream"
    sent = upstream_record_ids(upstream, key)
    assert len(sent) == 1 and len(sent[0]) == 1, sent
    rid = sent[0][0]
    assert re.fullmatch(r"[0-9a-f]{32}", rid) and key not in rid, rid
    assert rid == record_id_cli(proxy, "/v1/payments", key)[0]["record_id"]
    info = proxy.admin("GET", "/records/" + rid)
    assert info.status == 200 and info.json()["record_id"] == rid, info
    lines = access_lines(proxy, 2, requests_only=True)
    assert [l["record_id"] for l in lines] == [rid, rid], lines
    assert [l["outcome"] for l in lines] == ["forwarded", "replayed"], lines


def test_a_client_sent_record_id_header_is_not_passed_on(proxy, upstream):
    """A client cannot choose the correlation: its field of that name is dropped from a
    protected request (which gets the real id), an unkeyed one and a pass-through GET."""
    forged = [("Idempotency-Record-Id", "0" * 32), ("idempotency-record-id", "forged")]
    key = new_key()
    assert proxy.post(key=key, headers=forged).status == 201
    sent = upstream_record_ids(upstream, key)
    assert sent == [[record_id_cli(proxy, "/v1/payments", key)[0]["record_id"]]], sent
    unkeyed = http_request(proxy.port, "POST", "/v1/payments",
                           [("Content-Type", "application/json")] + forged, b'{"amount": 3}')
    assert unkeyed.status == 201, unkeyed
    assert upstream_record_ids(upstream, "") == [[]]
    got = http_request(proxy.port, "GET", "/v1/other", forged)
    assert got.status == 200, got
    names = [k.lower() for k, _ in upstream.last_request()["headers"]]
    assert upstream.last_request()["method"] == "GET" and \
        "idempotency-record-id" not in names, upstream.last_request()


def alike(headers, name="idempotency-record-id"):
    """The (name, value) pairs of headers whose name is name once '-' and '_' read alike, in
    any case: the spellings a CGI or WSGI upstream reads as one variable."""
    fold = name.lower().replace("_", "-")
    return [(k, v) for k, v in headers if k.lower().replace("_", "-") == fold]


def test_a_connection_option_cannot_strip_the_record_id(proxy, upstream):
    """A client's Connection header that names the record id field does not keep it from the
    upstream (the proxy's own field is not the client's hop-by-hop field); the other fields
    it names are still stripped."""
    for connection in ("keep-alive, Idempotency-Record-Id, X-Hop", "idempotency-record-id,x-hop",
                       "X-Hop,Idempotency-Record-Id, close"):
        key = new_key()
        r = proxy.post(key=key, headers=[("Connection", connection), ("X-Hop", "1"),
                                         ("Idempotency-Record-Id", "forged")])
        assert r.status == 201, (connection, r)
        rid = record_id_cli(proxy, "/v1/payments", key)[0]["record_id"]
        sent = [e["headers"] for e in upstream.history() if e["key"] == key]
        assert len(sent) == 1, (connection, sent)
        assert alike(sent[0]) == [("Idempotency-Record-Id", rid)], (connection, sent)
        assert alike(sent[0], "x-hop") == [], (connection, sent)


def test_a_client_field_spelled_with_underscores_is_not_passed_on(proxy, upstream):
    """Idempotency_Record_Id (any case, '-' and '_' mixed) is dropped from every forwarded
    request: a CGI or WSGI upstream would read it as the record id. A protected request
    carries only the proxy's field; an unkeyed POST and a pass-through GET carry none."""
    forged = [("Idempotency_Record_Id", "forged-1"), ("IDEMPOTENCY_RECORD_ID", "forged-2"),
              ("idempotency-record_id", "forged-3")]
    key = new_key()
    assert proxy.post(key=key, headers=forged).status == 201
    rid = record_id_cli(proxy, "/v1/payments", key)[0]["record_id"]
    sent = [e for e in upstream.history() if e["key"] == key]
    assert len(sent) == 1 and alike(sent[0]["headers"]) == [("Idempotency-Record-Id", rid)], \
        sent
    unkeyed = http_request(proxy.port, "POST", "/v1/payments",
                           [("Content-Type", "application/json")] + forged, b'{"amount": 3}')
    assert unkeyed.status == 201, unkeyed
    assert alike(upstream.last_request()["headers"]) == [], upstream.last_request()
    got = http_request(proxy.port, "GET", "/v1/other", forged)
    assert got.status == 200, got
    assert upstream.last_request()["method"] == "GET", upstream.last_request()
    assert alike(upstream.last_request()["headers"]) == [], upstream.last_request()


def test_record_id_header_refuses_names_upstreams_act_on(tmp_path):
    """`-t` refuses, naming the line, a record_id_header an upstream or an intermediary acts
    on (the proxy drops the client's field of that name), '_' read as '-'."""
    for name in ("X-Forwarded-Proto", "X-Forwarded-Host", "X-Real-IP", "Range", "If-Match",
                 "if-none-match", "Via", "Max-Forwards", "Cache-Control", "Pragma",
                 "Accept-Language", "Origin", "Referer", "User-Agent", "Prefer",
                 "X_Forwarded_Proto"):
        rc, out, path = run_check(tmp_path, "routes:\n  - path: /v1/payments*\n"
                                  "upstream:\n  record_id_header: %s\n" % name)
        assert rc != 0 and "configuration OK" not in out, (name, out)
        assert "%s:4:" % path in out and "upstreams or intermediaries act on" in out, (name, out)
    for name in ("X_Forwarded_For", "Idempotency_Key", "Content_Type"):
        rc, out, path = run_check(tmp_path, "upstream:\n  record_id_header: %s\n" % name)
        assert rc != 0 and "%s:2:" % path in out and "needs as the client sent it" in out, \
            (name, out)
    rc, out, _ = run_check(tmp_path, "upstream:\n  record_id_header: X-Ledger-Ref\n")
    assert rc == 0, out


def test_record_id_header_empty_sends_none_and_drops_nothing(start_proxy, upstream):
    p = start_proxy(upstream={"record_id_header": ""})
    key, plain = new_key(), new_key()
    assert p.post(key=key).status == 201
    assert p.post(key=plain, headers=[("Idempotency-Record-Id", "from-the-client")]).status == 201
    assert upstream_record_ids(upstream, key) == [[]]
    assert upstream_record_ids(upstream, plain) == [["from-the-client"]]


def test_record_id_header_name_is_configurable_and_a_reload_applies_it(start_proxy, upstream,
                                                                       redis):
    p = start_proxy(upstream={"record_id_header": "X-Proxy-Record"})
    before = new_key()
    assert p.post(key=before).status == 201
    rid = record_id_cli(p, "/v1/payments", before)[0]["record_id"]
    assert upstream_record_ids(upstream, before, "x-proxy-record") == [[rid]]
    assert upstream_record_ids(upstream, before) == [[]]
    rewrite(p, upstream, redis, upstream={"record_id_header": "X-Ledger-Ref"})
    reload_and_wait(p, "reloaded")
    after = new_key()
    assert p.post(key=after).status == 201
    rid = record_id_cli(p, "/v1/payments", after)[0]["record_id"]
    assert upstream_record_ids(upstream, after, "x-ledger-ref") == [[rid]]
    assert upstream_record_ids(upstream, after, "x-proxy-record") == [[]]


def test_after_a_rename_the_old_record_id_name_is_still_dropped_until_restart(start_proxy,
                                                                             upstream, redis):
    """The upstream's logs still hold the old name: after a reload renames the field (or sets
    it to ""), a client's field under the old name ('-' and '_' alike) is still dropped from
    every forwarded request, and the log says so."""
    p = start_proxy(upstream={"record_id_header": "X-Proxy-Record"})
    forged = [("X-Proxy-Record", "forged"), ("x_proxy_record", "forged")]
    rewrite(p, upstream, redis, upstream={"record_id_header": "X-Ledger-Ref"})
    reload_and_wait(p, "reloaded")
    assert log_lines(p, "record_id_header was X-Proxy-Record", "until the proxy restarts")
    key = new_key()
    assert p.post(key=key, headers=forged).status == 201
    rid = record_id_cli(p, "/v1/payments", key)[0]["record_id"]
    sent = [e for e in upstream.history() if e["key"] == key]
    assert alike(sent[0]["headers"], "x-proxy-record") == [], sent
    assert alike(sent[0]["headers"], "x-ledger-ref") == [("X-Ledger-Ref", rid)], sent
    assert http_request(p.port, "GET", "/v1/other", forged).status == 200
    assert alike(upstream.last_request()["headers"], "x-proxy-record") == [], \
        upstream.last_request()
    # "" sends none, and drops both names it had
    rewrite(p, upstream, redis, upstream={"record_id_header": ""})
    reload_and_wait(p, "reloaded")
    key = new_key()
    assert p.post(key=key, headers=forged + [("X-Ledger-Ref", "forged")]).status == 201
    sent = [e for e in upstream.history() if e["key"] == key]
    assert alike(sent[0]["headers"], "x-proxy-record") == [], sent
    assert alike(sent[0]["headers"], "x-ledger-ref") == [], sent
    assert upstream_record_ids(upstream, key) == [[]]


def test_the_upstream_is_reached_directly_whatever_proxy_the_environment_names(start_proxy,
                                                                               upstream):
    """http_proxy / all_proxy in the environment (a pod may set them for its application)
    are ignored: payments, with their Authorization, go to the upstream directly, never
    through that proxy."""
    trap = socket.socket()
    trap.bind(("127.0.0.1", 0))
    trap.listen(8)
    proxy_url = "http://127.0.0.1:%d" % trap.getsockname()[1]
    try:
        p = start_proxy(env={"http_proxy": proxy_url, "HTTP_PROXY": proxy_url,
                             "all_proxy": proxy_url, "ALL_PROXY": proxy_url,
                             "no_proxy": "", "NO_PROXY": ""})
        k = new_key()
        r = p.post(key=k)
        assert r.status == 201, r
        assert upstream.executions(k) == 1
        trap.setblocking(False)
        try:
            trap.accept()
            raise AssertionError("the upstream call went to the environment's proxy")
        except BlockingIOError:
            pass
    finally:
        trap.close()


# --------------------------------------------------------------------------
# client connections
# --------------------------------------------------------------------------

def test_keep_alive_client_connection_serves_several_requests(proxy, upstream):
    key = new_key()
    with Connection(proxy.port) as c:
        first = c.request("POST", "/v1/payments", [("Idempotency-Key", key)], b"a")
        replay = c.request("POST", "/v1/payments", [("Idempotency-Key", key)], b"a")
        mismatch = c.request("POST", "/v1/payments", [("Idempotency-Key", key)], b"b")
        bad = c.request("POST", "/v1/payments", ["Idempotency-Key:"], b"a")
        plain = c.request("GET", "/v1/payments")
    assert first.status == 201
    assert_replay_of(replay, first)
    assert_problem(mismatch, 409, "key-reuse-mismatch")
    assert_problem(bad, 400, "invalid-key")
    assert plain.status == 200
    assert upstream.total() == 1


def test_pipelined_requests_are_answered_in_order(proxy, upstream):
    k1, k2 = new_key(), new_key()
    data = (build_request("POST", "/v1/payments", [("Idempotency-Key", k1),
                                                    ("X-Demo-Delay-Ms", "300")], b"one") +
            build_request("POST", "/v1/payments", [("Idempotency-Key", k2)], b"two") +
            build_request("POST", "/v1/payments", [("Idempotency-Key", k1),
                                                    ("X-Demo-Delay-Ms", "300")], b"one"))
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=15) as s:
        s.sendall(data)
        reader = _Reader(s, time.monotonic() + 15)
        rs = [read_response(s, "POST", reader=reader) for _ in range(3)]
    assert [r.status for r in rs] == [201, 201, 201], rs
    assert rs[0].json()["body_sha256"] == hashlib.sha256(b"one").hexdigest()
    assert rs[1].json()["body_sha256"] == hashlib.sha256(b"two").hexdigest()
    assert_replay_of(rs[2], rs[0])
    assert upstream.total() == 2


def test_expect_100_continue(start_proxy, upstream):
    p = start_proxy(limits={"max_request_body": "4KiB"})
    body = b"e" * 2048
    key = new_key()
    head = build_request("POST", "/v1/payments", [("Idempotency-Key", key),
                                                   ("Expect", "100-continue"),
                                                   ("Content-Length", str(len(body)))])
    with socket.create_connection(("127.0.0.1", p.port), timeout=15) as s:
        s.sendall(head)
        s.settimeout(2)
        try:
            early = s.recv(4096)
        except socket.timeout:
            early = b""  # the proxy need not send 100; the client sends the body anyway
        assert early == b"" or early.startswith(b"HTTP/1.1 100"), early
        s.sendall(body)
        reader = _Reader(s, time.monotonic() + 15)
        rest = early.split(b"\r\n\r\n", 1)[1] if early else b""
        reader.buf = rest
        r = read_response(s, "POST", reader=reader)
    assert r.status == 201, r
    assert upstream.total() == 1
    # too large with Expect: a 413 problem, either at once or after the body
    head = build_request("POST", "/v1/payments", [("Idempotency-Key", new_key()),
                                                   ("Expect", "100-continue"),
                                                   ("Content-Length", "5000")])
    with socket.create_connection(("127.0.0.1", p.port), timeout=15) as s:
        s.sendall(head)
        s.settimeout(5)
        first = s.recv(4096)
        if first.startswith(b"HTTP/1.1 100"):
            s.sendall(b"f" * 5000)
            reader = _Reader(s, time.monotonic() + 15)
            reader.buf = first.split(b"\r\n\r\n", 1)[1]
            r = read_response(s, "POST", reader=reader)
        else:
            reader = _Reader(s, time.monotonic() + 15)
            reader.buf = first
            r = read_response(s, "POST", reader=reader)
    assert_problem(r, 413, "body-too-large")
    assert upstream.total() == 1


def test_http10_client(proxy, upstream):
    key = new_key()
    raw = ("POST /v1/payments HTTP/1.0\r\nHost: x\r\nIdempotency-Key: %s\r\n"
           "Content-Length: 2\r\n\r\n{}" % key).encode()
    first = http_request(proxy.port, raw=raw)
    assert first.status == 201, first
    again = http_request(proxy.port, raw=raw)
    assert again.status == 201 and again.replayed and again.body == first.body
    assert upstream.total() == 1
