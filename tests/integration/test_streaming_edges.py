"""Streaming at its edges (docs/operations.md "Streaming", docs/client-contract.md "Framing"):
what an attacker's bytes must not do to a streamed exchange. A chunked body that turns bad
after its exchange began ends that exchange (nothing left counted or in flight); chunk data
not followed by CRLF and a NUL inside a framing field are refused, so no request hides in a
body; a keyed answer too large to record keeps a kept-alive connection; pipelined requests
sent before a half-close are all answered; a Content-Length no long long holds is refused."""

import socket
import time

import pytest

from harness import HTTPError, _Reader, build_request, read_response, wait_until
from proxy_helpers import assert_problem, metric, new_key

GENEROUS_S = 20.0


def exchange(port, data, method="POST", timeout=GENEROUS_S):
    """Send raw bytes on a new connection; the first answer, or None when it closed first."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        try:
            return read_response(s, method, timeout)
        except (ConnectionError, OSError, HTTPError):
            return None


def test_a_bad_chunk_after_a_streamed_exchange_began_ends_it_and_leaves_nothing_held(
        start_proxy, upstream):
    p = start_proxy()
    bad = (b"POST /v2/anything HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"1\r\na\r\nzz\r\n")
    for _ in range(20):
        exchange(p.port, bad)
    wait_until(lambda: metric(p, "idempotency_proxy_in_flight_requests", required=True) == 0,
               what="no streamed exchange left in flight")
    wait_until(lambda: metric(p, "idempotency_proxy_buffered_bytes", required=True) == 0,
               what="nothing left counted")
    key = new_key()
    assert p.post(key=key).status == 201
    assert upstream.executions(key) == 1


def test_chunk_data_not_followed_by_crlf_is_refused_and_hides_no_request(start_proxy,
                                                                           upstream):
    p = start_proxy()
    smuggle = (b"POST /v2/sink HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"2\r\nAB\n40\r\n\r\nGET /v2/smuggled HTTP/1.1\r\nHost: x\r\nX: pppp\r\n\r\n\r\n"
               b"0\r\n\r\n")
    with socket.create_connection(("127.0.0.1", p.port), timeout=GENEROUS_S) as s:
        s.sendall(smuggle)
        reader = _Reader(s, time.monotonic() + GENEROUS_S)
        try:
            first = read_response(s, "POST", GENEROUS_S, reader=reader)
        except (ConnectionError, OSError, HTTPError):
            first = None
        rest = reader.until_close()
    last = upstream.last_request()
    assert last is None or last["path"] != "/v2/smuggled", last
    assert b"HTTP/1.1" not in rest, rest   # one answer at most, then the connection closed
    assert first is None or first.status in (400, 502), first
    two = exchange(p.port, b"POST /v2/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"1\r\nAXX0\r\n\r\n")
    assert two is None or two.status == 400, two


@pytest.mark.parametrize("framing", [
    pytest.param(b"Transfer-Encoding: chunked\x00x\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                 id="nul-inside-transfer-encoding"),
    pytest.param(b"Content-Length: 9223372036854775808\r\n\r\n", id="length-past-2^63"),
])
def test_framing_no_two_parsers_would_agree_on_is_invalid_framing(start_proxy, upstream,
                                                                   framing):
    p = start_proxy()
    r = exchange(p.port, b"POST /v2/x HTTP/1.1\r\nHost: x\r\n" + framing)
    assert r is not None, "no answer"
    assert_problem(r, 400, "invalid-framing")
    assert upstream.last_request() is None


def test_a_keyed_answer_too_large_to_record_keeps_the_kept_alive_connection(start_proxy,
                                                                            upstream):
    p = start_proxy(limits={"max_stored_response": "64KiB"})
    k1, k2 = new_key(), new_key()
    first = build_request("POST", "/v1/payments?demo_blob=70000", [("Idempotency-Key", k1)],
                          b"{}", port=p.port)
    second = build_request("POST", "/v1/payments", [("Idempotency-Key", k2)], b"{}",
                           port=p.port)
    with socket.create_connection(("127.0.0.1", p.port), timeout=GENEROUS_S) as s:
        s.sendall(first + second)
        reader = _Reader(s, time.monotonic() + GENEROUS_S)
        a = read_response(s, "POST", GENEROUS_S, reader=reader)
        b = read_response(s, "POST", GENEROUS_S, reader=reader)
    assert a.status == 201 and len(a.body) == 70000, (a.status, len(a.body))
    assert b.status == 201, b
    assert upstream.executions(k1) == 1 and upstream.executions(k2) == 1


def test_requests_pipelined_before_a_half_close_are_all_answered(start_proxy, upstream):
    p = start_proxy()
    data = b"".join(build_request("GET", "/v2/item/%d" % i, port=p.port) for i in range(3))
    with socket.create_connection(("127.0.0.1", p.port), timeout=GENEROUS_S) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        reader = _Reader(s, time.monotonic() + GENEROUS_S)
        answers = [read_response(s, "GET", GENEROUS_S, reader=reader) for _ in range(3)]
        rest = reader.until_close()
    assert [a.status for a in answers] == [200, 200, 200], answers
    assert rest == b""
