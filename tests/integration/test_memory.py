"""Memory under load: the budget of buffered bytes (README "Memory", `limits.max_buffered`).

Request bodies and upstream answers are held whole. A new request is admitted only while its
body and a reservation of max_stored_response for its answer fit under max_buffered, else it
gets 503 overloaded before anything is claimed or forwarded; what an admitted request holds
later is counted and never cut off. Real binary, real redis-server, the demo upstream; the
memory figures are the proxy's own VmRSS / VmHWM from /proc.
"""
import concurrent.futures
import os
import signal
import socket
import threading
import time

import pytest

from harness import (
    HTTPError, _Reader, build_config, build_request, hold_until, http_request, read_response,
    to_yaml, wait_until,
)
from proxy_helpers import metric, new_key, proc_status, sanitized

# tests/run.sh runs this file under ThreadSanitizer with two worker threads a proxy
# (IDEM_TEST_WORKERS=2): its requests meet across workers (docs/internals.md).
pytestmark = pytest.mark.threads

MIB = 1 << 20
KIB = 1 << 10
PROBLEM = "urn:idempotency-proxy:problem:"

# README "Memory", the bound: RSS < fixed + bodies being received + counted, where
#   fixed: the idle process (about 12 MiB + 0.5 MiB per worker), up to 16 KiB per open client
#          connection, 80 KiB per upstream transfer (curl's buffers: up to 256 kept per worker);
#   bodies being received: what each connection sent of its request so far (here the whole
#          1 MiB body, its head and the slack of libevent's read chunks);
#   counted (idempotency_proxy_buffered_bytes): at most max_buffered x the largest ratio of
#          what a request holds at its peak to what it reserved at admission (its body and
#          64 KiB for its answer); at its peak a first execution holds its body and answer
#          while the answer arrives, then its answer and three copies of its record.
PER_CONNECTION = 16 * KIB
PER_UPSTREAM_TRANSFER = 80 * KIB
UPSTREAM_TRANSFERS_KEPT = 256     # per worker
RECEIVE_SLACK = 64 * KIB          # per body being received
ANSWER_RESERVATION = 64 * KIB
RECORD_OVERHEAD = 4 * KIB         # a record's head and stored header fields, beside the body
WORKERS = int(os.environ.get("IDEM_TEST_WORKERS") or 1)  # as harness.build_config writes it


class BodyReader(_Reader):
    """The harness's reader, collecting a body in one growing buffer: a large answer read in
    small pieces is not copied over and over (a slow reader's 32 MiB come 8 KiB at a time)."""

    def exactly(self, n):
        if len(self.buf) >= n:
            return super().exactly(n)
        out = bytearray(self.buf)
        self.buf = b""
        while len(out) < n:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("HTTP response not complete within the timeout")
            self.sock.settimeout(left)
            data = self.sock.recv(min(MIB, n - len(out)))
            if not data:
                raise HTTPError("connection closed after %d of %d body bytes" % (len(out), n))
            out += data
        return bytes(out)


def read_answer(sock, timeout):
    start = time.monotonic()
    return read_response(sock, "POST", timeout, reader=BodyReader(sock, start + timeout),
                         start=start)


def post(port, path, key, body, headers=(), timeout=120.0):
    """POST path with body (sent after the head, without a copy of it); a Response."""
    head = build_request("POST", path, [("Idempotency-Key", key),
                                        ("Content-Type", "application/octet-stream"),
                                        ("Content-Length", str(len(body)))] + list(headers),
                         None, port=port)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(head)
        s.sendall(body)
        return read_answer(s, timeout)


def overloaded(r):
    return (r.status == 503 and r.is_problem() and
            r.problem()["type"] == PROBLEM + "overloaded")


def order_of(body):
    """The order id the demo upstream writes at the start of an X-Demo-Size body."""
    return body.split(b":", 1)[0].decode()


# --------------------------------------------------------------------------
# 200 concurrent clients, 1 MiB bodies, 1 MiB answers
# --------------------------------------------------------------------------

CLIENTS = 200
BODY_BYTES = MIB
ANSWER_BYTES = MIB
# Every admitted request sits at the upstream at once: without a budget all 200 bodies,
# answers and records would be held together.
UPSTREAM_DELAY_MS = 1000
DEFAULT_MAX_BUFFERED = 64 * MIB
RETRIERS = 32  # the refused keys sent again, so many at a time


def test_200_clients_with_1mib_bodies_and_answers_stay_under_the_bound_and_execute_once(
        start_proxy, upstream):
    if hasattr(signal, "SIGALRM"):  # generous under sanitizers on a busy 2-core machine
        signal.alarm(max(signal.alarm(0), 300))
    # the limits are the defaults (max_buffered 64 MiB). A sanitizer build on a busy machine
    # reads a Redis reply late while it hashes 200 MiB of bodies (7 s under TSan once, past a
    # 5 s redis.timeout): the proxy then answers 503 store-unavailable, correctly, but that is
    # not what this test measures, so redis.timeout is a generous bound here
    p = start_proxy(log={"access": "errors"}, redis={"timeout": "30s"})
    pid = p.pid()
    idle = proc_status(pid)["VmRSS"]
    body = os.urandom(BODY_BYTES)
    keys = [new_key() for _ in range(CLIENTS)]
    first = [None] * CLIENTS
    final = [None] * CLIENTS
    answered_at = [None] * CLIENTS  # monotonic time of each first answer
    go = threading.Barrier(CLIENTS + 1)
    headers = [("X-Demo-Size", str(ANSWER_BYTES)), ("X-Demo-Delay-Ms", str(UPSTREAM_DELAY_MS))]

    def client(i):
        go.wait()
        try:
            first[i] = final[i] = post(p.port, "/v1/payments", keys[i], body, headers)
        except Exception as e:  # a hang or a cut connection: reported below
            first[i] = final[i] = e
        answered_at[i] = time.monotonic()

    def retry(i):
        """A refused key was never claimed: sent again, it executes once."""
        r, at, deadline = final[i], answered_at[i], time.monotonic() + 120
        while hasattr(r, "status") and overloaded(r) and time.monotonic() < deadline:
            hold_until(at + float(r.header("Retry-After", "1")),
                       "the client sends again no sooner than its Retry-After says")
            try:
                r = post(p.port, "/v1/payments", keys[i], body, headers)
            except Exception as e:
                r = e
            at = time.monotonic()
        final[i] = r

    peak_counted = [0.0]
    stop = threading.Event()

    def sample_counted():
        while not stop.is_set():
            try:
                peak_counted[0] = max(peak_counted[0],
                                      metric(p, "idempotency_proxy_buffered_bytes",
                                             required=True, timeout=30))
            except Exception:  # no such gauge (an older binary): no figure
                pass
            stop.wait(0.02)  # the sampling period

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    sampler = threading.Thread(target=sample_counted, daemon=True)
    sampler.start()
    go.wait()
    for t in threads:
        t.join(240)
    # then the refused ones again, 32 at a time (room for 60 under the default budget), each
    # when its Retry-After (1 s) has run out since its refusal
    with concurrent.futures.ThreadPoolExecutor(RETRIERS) as pool:
        list(pool.map(retry, [i for i, r in enumerate(first)
                              if hasattr(r, "status") and overloaded(r)]))
    stop.set()
    sampler.join(10)
    mem = proc_status(pid)
    history = upstream.history()

    # ---- the invariants, all checked, all reported
    problems = []
    hung = [keys[i] for i, t in enumerate(threads) if t.is_alive()]
    if hung:
        problems.append("%d clients never got an answer" % len(hung))
    peak = max(BODY_BYTES + ANSWER_BYTES, ANSWER_BYTES + 3 * (ANSWER_BYTES + RECORD_OVERHEAD))
    counted_bound = DEFAULT_MAX_BUFFERED * peak // (BODY_BYTES + ANSWER_RESERVATION)
    bound = (idle + CLIENTS * PER_CONNECTION +
             WORKERS * UPSTREAM_TRANSFERS_KEPT * PER_UPSTREAM_TRANSFER +
             CLIENTS * (BODY_BYTES + RECEIVE_SLACK) + counted_bound)
    if mem["VmHWM"] > bound and not sanitized(pid):
        problems.append("VmHWM %.0f MiB is past the bound of %.0f MiB"
                        % (mem["VmHWM"] / MIB, bound / MIB))
    if peak_counted[0] > counted_bound:
        problems.append("buffered bytes reached %.1f MiB, past %.1f MiB"
                        % (peak_counted[0] / MIB, counted_bound / MIB))
    # every client got its answer or 503 overloaded first, nothing else
    broken = [(keys[i], r) for i, r in enumerate(first)
              if not hasattr(r, "status") or not (r.status == 201 or overloaded(r))]
    if broken:
        problems.append("%d first answers neither 201 nor 503 overloaded, e.g. %r"
                        % (len(broken), broken[0]))
    refused = [i for i, r in enumerate(first) if hasattr(r, "status") and overloaded(r)]
    if not refused:
        problems.append("no request got 503 overloaded: nothing bounds what 200 large "
                        "requests hold")
    if len(refused) == CLIENTS:
        problems.append("every request was refused")
    for i in refused:
        r = first[i]
        if r.header("Retry-After") != "1" or r.header("Cache-Control") != "no-store":
            problems.append("a 503 overloaded without Retry-After: 1: %r" % r)
            break
    # in the end each key executed exactly once and its client got that execution's answer
    executions = {}
    for h in history:
        executions.setdefault(h["key"], []).append(h)
    twice = [k for k, runs in executions.items() if len(runs) > 1]
    if twice:
        problems.append("%d keys executed more than once, e.g. %s" % (len(twice), twice[0]))
    for i, key in enumerate(keys):
        r, runs = final[i], executions.get(key, [])
        answered = (hasattr(r, "status") and r.status == 201 and not r.replayed and
                    len(r.body) == ANSWER_BYTES)
        if not answered or len(runs) != 1 or order_of(r.body) != runs[0]["id"]:
            problems.append("key %s: final answer %r, %d executions" % (key, r, len(runs)))
            break
    refusals = None
    if not problems:
        refusals = metric(p, "idempotency_proxy_overloaded_total", required=True, timeout=30)
        if refusals < len(refused):
            problems.append("overloaded_total %d < %d refusals seen" % (refusals, len(refused)))
        if metric(p, "idempotency_proxy_max_buffered_bytes",
                  required=True, timeout=30) != DEFAULT_MAX_BUFFERED:
            problems.append("max_buffered is not the documented default")
        # what was counted is given back: no body or answer is held any more
        wait_until(lambda: metric(p, "idempotency_proxy_buffered_bytes",
                                  required=True, timeout=30) == 0,
                   interval=0.1, what="buffered bytes back to 0")
    print("\nmemory: idle %.0f MiB, VmHWM %.0f MiB (bound %.0f MiB)%s; counted peak %.1f MiB "
          "(bound %.1f MiB); %d of %d first refused with 503 overloaded, %s refusals in all; "
          "%d executions"
          % (idle / MIB, mem["VmHWM"] / MIB, bound / MIB,
             " (sanitizer build: not checked)" if sanitized(pid) else "",
             peak_counted[0] / MIB, counted_bound / MIB, len(refused), CLIENTS, refusals,
             len(history)))
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------
# the refusal itself
# --------------------------------------------------------------------------

# Room for one request at a time: a body of up to 1 KiB and a 1 KiB answer reservation.
ONE_AT_A_TIME = {"max_request_body": "1KiB", "max_stored_response": "1KiB",
                 "max_buffered": "2KiB"}


def hold_one_in_flight(p, key, delay_ms=3000):
    """Start a protected request that sits at the upstream; returns its thread and result."""
    out = {}

    def run():
        out["r"] = post(p.port, "/v1/payments", key, b'{"amount": 1}',
                        [("X-Demo-Delay-Ms", str(delay_ms))], timeout=60)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    wait_until(lambda: metric(p, "idempotency_proxy_upstream_in_flight",
                              required=True, timeout=30) == 1,
               what="the first request at the upstream")
    return t, out


def test_past_the_budget_a_new_request_gets_503_overloaded_before_anything_is_claimed(
        start_proxy, upstream, redis):
    p = start_proxy(limits=ONE_AT_A_TIME)
    held, key = new_key("held"), new_key("refused")
    t, out = hold_one_in_flight(p, held)
    r = post(p.port, "/v1/payments", key, b'{"amount": 2}', timeout=30)
    assert overloaded(r), r
    problem = r.problem()
    assert problem["status"] == 503 and problem["detail"], problem
    assert r.header("Retry-After") == "1" and not r.replayed, r
    # nothing forwarded, nothing claimed
    assert upstream.executions(key) == 0
    assert len(redis.keys("idem:{*")) == 1, redis.keys("idem:{*")
    # an unprotected request is refused the same way
    r = http_request(p.port, "POST", "/v2/unrouted", body=b"x", timeout=30)
    assert overloaded(r), r
    assert upstream.requests() == 1
    assert metric(p, "idempotency_proxy_overloaded_total", required=True, timeout=30) == 2
    t.join(30)
    assert out["r"].status == 201, out
    # the refused key was never claimed: once there is room it executes, once
    wait_until(lambda: metric(p, "idempotency_proxy_buffered_bytes",
                              required=True, timeout=30) == 0,
               what="the first request's bytes given back")
    r = post(p.port, "/v1/payments", key, b'{"amount": 2}', timeout=30)
    assert r.status == 201 and not r.replayed, r
    assert upstream.executions(key) == 1


def test_overloaded_in_the_stripe_format_tells_the_sdk_to_retry(start_proxy, upstream):
    p = start_proxy(limits=ONE_AT_A_TIME, errors={"format": "stripe"})
    t, out = hold_one_in_flight(p, new_key("held"))
    key = new_key("refused")
    r = post(p.port, "/v1/payments", key, b'{"amount": 2}', timeout=30)
    assert r.status == 503 and r.content_type == "application/json", r
    assert r.json()["error"]["type"] == "api_error", r
    assert r.json()["error"]["code"] == "overloaded", r
    assert r.header("Stripe-Should-Retry") == "true" and r.header("Retry-After") == "1", r
    assert upstream.executions(key) == 0
    t.join(30)


# --------------------------------------------------------------------------
# never cut off: what an admitted request holds later is counted, not refused
# --------------------------------------------------------------------------

def test_an_answer_larger_than_the_budget_reaches_its_client_whole(start_proxy, upstream):
    p = start_proxy(limits=ONE_AT_A_TIME)
    # pass-through (no route) and protected (a tombstone): both far past max_buffered
    for path, key in (("/v2/unrouted", new_key("pass")), ("/v1/payments", new_key("big"))):
        r = post(p.port, path, key, b"{}", [("X-Demo-Size", str(3 * MIB))], timeout=60)
        assert r.status == 201 and len(r.body) == 3 * MIB, (path, r.status, len(r.body))
        assert order_of(r.body).startswith("ord_"), r.body[:40]
    wait_until(lambda: metric(p, "idempotency_proxy_buffered_bytes",
                              required=True, timeout=30) == 0,
               what="buffered bytes back to 0")


STREAM_WINDOW = 64 * KIB     # limits.stream_window's default


def test_a_slow_reader_of_a_pass_through_answer_holds_a_window_not_the_answer(start_proxy,
                                                                             upstream):
    """A pass-through answer streams at its reader's pace (docs/operations.md#streaming): a
    client that reads a 32 MiB answer slowly holds two windows of the budget (its body's and
    its answer's), not the answer, so payments meanwhile are taken on; it still gets every
    byte."""
    p = start_proxy()
    big = 32 * MIB  # far more than the loopback socket buffers take
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a client that reads slowly
    s.settimeout(60)
    s.connect(("127.0.0.1", p.port))
    try:
        s.sendall(build_request("POST", "/v2/unrouted", [("X-Demo-Size", str(big))], b"{}",
                                port=p.port))
        assert s.recv(1, socket.MSG_PEEK) == b"H"   # its answer has begun
        assert upstream.total() == 1
        assert metric(p, "idempotency_proxy_buffered_bytes", required=True,
                      timeout=30) == 2 * STREAM_WINDOW
        # meanwhile payments are taken on as usual
        key = new_key("meanwhile")
        r = post(p.port, "/v1/payments", key, b"{}", timeout=30)
        assert r.status == 201, r
        assert upstream.executions(key) == 1
        # the slow reader is not cut off: it gets every byte
        r = read_answer(s, 120)
        assert r.status == 201 and len(r.body) == big, (r.status, len(r.body))
    finally:
        s.close()
    wait_until(lambda: metric(p, "idempotency_proxy_buffered_bytes",
                              required=True, timeout=30) == 0,
               what="buffered bytes back to 0 once it was read")


def test_a_reload_applies_a_new_max_buffered_to_new_requests(start_proxy, upstream, redis):
    p = start_proxy(limits=ONE_AT_A_TIME)
    assert metric(p, "idempotency_proxy_max_buffered_bytes", required=True, timeout=30) == 2 * KIB
    cfg = build_config(p.port, p.admin_port, upstream.url, redis.url,
                       limits=dict(ONE_AT_A_TIME, max_buffered="1MiB"))
    with open(p.config_path, "w") as f:
        f.write(to_yaml(cfg) + "\n")
    before = p.stderr_text().count("reloaded")
    p.signal(signal.SIGHUP)
    wait_until(lambda: p.stderr_text().count("reloaded") > before, what="reloaded")
    assert metric(p, "idempotency_proxy_max_buffered_bytes", required=True, timeout=30) == MIB
    # two requests at once now fit
    t, out = hold_one_in_flight(p, new_key("held"))
    key = new_key("second")
    r = post(p.port, "/v1/payments", key, b"{}", timeout=30)
    assert r.status == 201, r
    t.join(30)
    assert out["r"].status == 201, out
