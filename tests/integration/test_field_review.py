"""Findings of a fresh user's review (issue 11's kind: a limit, a spelling or a
fallback that fails open), each as the input that failed and what must hold.

Real processes over real sockets; each test asserts what the client and the
upstream observe.
"""

import signal
import socket
import subprocess
import threading
import time
import uuid

from harness import build_config, proxy_binary, to_yaml, wait_until

PROBLEM_PREFIX = "urn:idempotency-proxy:problem:"


def new_key(tag="k"):
    return "%s-%s" % (tag, uuid.uuid4().hex)


def assert_problem(r, status, cause):
    assert r.status == status, r
    assert r.is_problem(), r
    assert r.json()["type"] == PROBLEM_PREFIX + cause, r.json()


def check_config(tmp_path, cfg):
    path = tmp_path / "check.yaml"
    path.write_text(to_yaml(cfg) + "\n")
    return subprocess.run([proxy_binary(), "-t", "-c", str(path)], capture_output=True,
                          text=True, timeout=30)


def test_a_call_longer_than_retention_keeps_its_claim(start_proxy, upstream):
    """The claim's key once expired with `retention` while the upstream still worked
    (renewals kept its TTL), and the retry executed a second time."""
    p = start_proxy(lease="1s", retention="2s", wait_timeout="10s")
    k = new_key()
    slow = [("X-Demo-Delay-Ms", "4000")]
    result = {}
    t = threading.Thread(target=lambda: result.update(first=p.post(key=k, headers=slow)))
    t.start()
    time.sleep(3.0)  # past retention, the first is still at the upstream
    retry = p.post(key=k, headers=slow)
    t.join(15)
    assert result["first"].status == 201
    assert retry.status == 201 and retry.replayed, retry
    assert retry.body == result["first"].body
    assert upstream.executions(k) == 1


def test_t_refuses_a_lease_a_renewal_cannot_keep(tmp_path, upstream, redis):
    """lease: 9ms passed -t, and with renewals every 10 ms five concurrent retries executed."""
    for lease, timeout in (("9ms", "500ms"), ("999ms", "500ms"), ("1s", "1s")):
        cfg = build_config(8080, 9901, upstream.url, redis.url, lease=lease,
                           redis={"timeout": timeout})
        r = check_config(tmp_path, cfg)
        assert r.returncode == 1, (lease, timeout, r.stdout, r.stderr)
        assert "lease (" in r.stderr and "redis.timeout" in r.stderr, r.stderr
    ok = check_config(tmp_path, build_config(8080, 9901, upstream.url, redis.url, lease="1s"))
    assert ok.returncode == 0, ok.stderr


def test_sighup_with_a_differently_spelled_pattern_cannot_change_identity(start_proxy, upstream,
                                                                          redis):
    """`/v1//payments*` is the route `/v1/payments*`: a scope change under that spelling
    was accepted, and the retry of a recorded key executed again."""
    p = start_proxy(routes=[{"path": "/v1/payments*"}])
    k = new_key()
    first = p.post(key=k, headers=[("Authorization", "Bearer a")])
    assert first.status == 201
    cfg = build_config(p.port, p.admin_port, upstream.url, redis.url,
                       routes=[{"path": "/v1//payments*", "scope_headers": ["X-Account"]}])
    with open(p.config_path, "w") as f:
        f.write(to_yaml(cfg) + "\n")
    before = p.stderr_text().count("reload refused")
    p.signal(signal.SIGHUP)
    wait_until(lambda: p.stderr_text().count("reload refused") > before, what="refusal")
    retry = p.post(key=k, headers=[("Authorization", "Bearer a")])
    assert retry.status == 201 and retry.replayed and retry.body == first.body, retry
    assert upstream.executions(k) == 1


class HugeHeaderUpstream:
    """Answers every request with 201 and a header name the record cannot hold (70,000
    bytes; the codec stores names up to 65,535), counting the requests it answered."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        self.stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn):
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, rest = data.split(b"\r\n\r\n", 1)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(rest) < length:
                rest += conn.recv(65536)
            self.count += 1
            body = b'{"id":"ord_%d"}' % self.count
            conn.sendall(b"HTTP/1.1 201 Created\r\nX-" + b"a" * 70000 + b": 1\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n" % len(body) + body)

    def close(self):
        self.stop = True
        self.sock.close()


def test_an_answer_the_record_cannot_hold_is_never_executed_twice(start_proxy):
    """A header name over 65,535 bytes made the record unencodable: the claim was left to
    expire and, under on_ambiguous: release, every retry executed again."""
    up = HugeHeaderUpstream()
    try:
        p = start_proxy(upstream_url="http://127.0.0.1:%d" % up.port, lease="1s",
                        on_ambiguous="release")
        k = new_key()
        first = p.post(key=k)
        assert first.status == 201
        time.sleep(1.5)  # past the lease of a claim that would have been left behind
        for _ in range(2):
            retry = p.post(key=k)
            assert retry.status == 502 and retry.replayed, retry
            assert retry.json()["type"] == PROBLEM_PREFIX + "response-not-replayable"
        assert up.count == 1
    finally:
        up.close()


def test_a_webhook_route_refuses_methods_it_does_not_verify(start_proxy, upstream):
    """A forged PUT to the Stripe route was forwarded unsigned (methods: [POST])."""
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


def test_key_from_needs_verify_or_an_explicit_none(tmp_path, upstream, redis):
    """key_from without verify passed -t silently: a forged delivery pre-claims an event id."""
    route = {"path": "/wh", "methods": ["POST"], "key_from": "json:/id"}
    r = check_config(tmp_path, build_config(8080, 9901, upstream.url, redis.url,
                                            routes=[route]))
    assert r.returncode == 1 and "key_from needs verify" in r.stderr, r.stderr
    r = check_config(tmp_path, build_config(8080, 9901, upstream.url, redis.url,
                                            routes=[dict(route, verify="none")]))
    assert r.returncode == 0, r.stderr
    assert "warning: route '/wh'" in r.stderr and "pre-claim" in r.stderr, r.stderr


def test_a_target_with_a_space_or_a_fragment_is_refused(start_proxy, upstream):
    """`/v1/ payments` was claimed, then failed at the upstream client; `/v1/pay#ments`
    was forwarded as /v1/pay."""
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


def test_a_422_mismatch_carries_its_reason_phrase(start_proxy, upstream):
    """libevent 2.1 sent "422 Client Error"."""
    p = start_proxy(mismatch_status=422)
    k = new_key()
    assert p.post(key=k, body=b'{"amount": 1}').status == 201
    r = p.post(key=k, body=b'{"amount": 2}')
    assert r.status == 422 and r.reason == "Unprocessable Content", (r.status, r.reason)


def test_every_x_forwarded_for_line_reaches_the_upstream(proxy, upstream):
    """A second X-Forwarded-For line was dropped: the upstream saw only the first and
    the client address."""
    r = proxy.post(key=new_key(), headers=[("X-Forwarded-For", "203.0.113.1"),
                                           ("X-Forwarded-For", "198.51.100.2")])
    assert r.status == 201
    seen = upstream.last_headers().get("x-forwarded-for")
    assert seen == ["203.0.113.1, 198.51.100.2, 127.0.0.1"], seen


def test_a_bare_key_with_a_comma_is_refused_and_a_quoted_one_is_one_key(proxy, upstream):
    """`t4, t5` was taken as one key, though an intermediary may have joined two
    Idempotency-Key lines into it (RFC 9110 section 5.3)."""
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


def test_the_upstream_is_reached_directly_whatever_proxy_the_environment_names(start_proxy,
                                                                               upstream):
    """libcurl honoured http_proxy / all_proxy from the environment: a sidecar in a pod
    that sets them for its application sent payments (with their Authorization) through
    that proxy, or failed when it was unreachable."""
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


def test_a_scope_header_on_two_lines_is_refused(proxy, upstream):
    """Two Authorization lines were scoped by the first one: the record's namespace was a
    guess."""
    before = upstream.total()
    r = proxy.post(key=new_key(), headers=[("Authorization", "Bearer alice"),
                                           ("Authorization", "Bearer bob")])
    assert_problem(r, 400, "invalid-key")
    assert upstream.total() == before


def test_one_event_id_sent_to_two_webhook_routes_reaches_both(start_proxy, upstream):
    """A provider sends one event id to every endpoint subscribed to the event; the record
    id left the route out, so the second endpoint's delivery was answered as a replay of
    the first and never reached its receiver."""
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
