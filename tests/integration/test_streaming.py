"""Streaming: pass-through traffic both ways with back-pressure, protected answers too large to
store, and the limits of client connections (`limits.max_connections`, `header_timeout`,
`idle_timeout`; `stream_window` keeps its default here).

The contract under test: pass-through traffic (no route, an unprotected method, no key where
none is required) streams both ways, each direction holding at most `limits.stream_window`
(default 64 KiB) per exchange, at the pace of the slower side; a protected answer larger than
`limits.max_stored_response` streams on to its first client and is recorded as a tombstone (a
retry gets `502 response-not-replayable`, the upstream does not run again). A client that goes
away closes the upstream's side, an upstream that breaks off closes the client's side, within a
second, for both framings. Over `limits.max_connections` a connection is refused or closed at
once; headers not complete within `limits.header_timeout`, or a connection silent for
`limits.idle_timeout`, are closed.

Large bodies come from the demo upstream's /_demo/blob (N deterministic bytes, with a
Content-Length or chunked, reset after K bytes on request), go to its /_demo/sink (it answers
the SHA-256 of what it read), or from an execution with `?demo_blob=N`; it records each under a
tag (/_demo/transfers, harness's Upstream.transfer): bytes written or read, their SHA-256, and
when a write failed, CLOCK_MONOTONIC, which this process shares. Clients here are raw sockets
that read and send at a set pace (20 MB/s) and hash what passed, never holding it whole. Memory
figures are the proxy's VmRSS and VmHWM from /proc, not checked under sanitizers.
"""

import collections
import hashlib
import json
import os
import re
import resource
import select
import socket
import struct
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from harness import DEFAULT_ROUTES, WAIT_S, build_request, http_request, pace, wait_until
from proxy_helpers import (
    PROBLEM_PREFIX, assert_problem, in_background, new_key, proc_status, rss_bytes, sanitized,
)

KIB = 1 << 10
MIB = 1 << 20
RATE = 20_000_000                  # bytes a second: the pace of the slow clients

# A streamed exchange holds at most stream_window per direction: RSS stays within this of the
# idle process's while one runs (one exchange, and the small requests beside it)
STREAMING_RSS_SLACK = 32 * MIB
# once the connections that held memory are gone (memory may be given back lazily)
SETTLED_RSS_SLACK = 16 * MIB

# The bound docs/operations.md "Memory" gives for a proxy whose clients stream (keep these two
# in step with it): RSS < limits.max_buffered + PER_CONNECTION_BOUND x limits.max_connections +
# FIXED_BOUND; documented_memory_bound is the one place that computes it
PER_CONNECTION_BOUND = 420 * KIB
FIXED_BOUND = 48 * MIB
DEFAULT_MAX_BUFFERED = 64 * MIB

# a protected route besides the defaults whose answers are large (?demo_blob=N)
EXPORTS = list(DEFAULT_ROUTES) + [{"path": "/v1/exports*"}]


def size_bytes(text):
    """A config size ("64KiB", "1MiB", "512", "1GiB") in bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*(B|KiB|MiB|GiB)?\s*", str(text))
    assert m, "not a size: %r" % text
    return int(m.group(1)) * {None: 1, "B": 1, "KiB": KIB, "MiB": MIB, "GiB": 1 << 30}[m.group(2)]


def proxy_config(p):
    """p's config file as a dict."""
    with open(p.config_path) as f:
        return yaml.safe_load(f)


def documented_memory_bound(config):
    """The RSS a proxy with this config (a dict as build_config writes it, or its `limits`)
    stays under by docs/operations.md "Memory": max_buffered + 64 KiB per connection it may
    hold (limits.max_connections) + 48 MiB."""
    limits = config.get("limits", config) or {}
    max_buffered = size_bytes(limits.get("max_buffered", DEFAULT_MAX_BUFFERED))
    return max_buffered + PER_CONNECTION_BOUND * int(limits["max_connections"]) + FIXED_BOUND


def overloaded(status, problem_type):
    return status == 503 and problem_type == PROBLEM_PREFIX + "overloaded"


# --------------------------------------------------------------------------
# clients for large bodies
# --------------------------------------------------------------------------

class Throttle:
    """Keeps a client at `rate` bytes a second: after each piece it is let through no sooner
    than its share of the time has passed."""

    def __init__(self, rate):
        self.rate, self.start, self.done = rate, time.monotonic(), 0

    def account(self, n):
        self.done += n
        ahead = self.done / self.rate - (time.monotonic() - self.start)
        if ahead > 0:
            pace(ahead)  # the client's own reading or sending speed


Head = collections.namedtuple("Head", "status reason headers")
Body = collections.namedtuple("Body", "length sha256 complete trailers eof_at reset")


def header_of(head, name, default=None):
    vals = [v for k, v in head.headers if k.lower() == name.lower()]
    return vals[0] if vals else default


class Stream:
    """One client connection for large bodies, on a raw socket: answers read piece by piece
    (hashed, never held whole, at a set pace if asked), a stall of WAIT_S fails it."""

    def __init__(self, port):
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        self.buf = bytearray()
        self.eof = False
        self.eof_at = None   # time.monotonic() when the connection was seen closed
        self.reset = False

    def send(self, data):
        self.sock.sendall(data)

    def send_paced(self, pieces, rate):
        """Send every piece at `rate` bytes a second; (length, SHA-256) of what was sent."""
        h, n, throttle = hashlib.sha256(), 0, Throttle(rate)
        for piece in pieces:
            self.sock.sendall(piece)
            h.update(piece)
            n += len(piece)
            throttle.account(len(piece))
        return n, h.hexdigest()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _fill(self):
        if self.eof:
            return False
        try:
            data = self.sock.recv(256 * KIB)
        except ConnectionResetError:
            self.reset, data = True, b""
        except socket.timeout:
            raise AssertionError("neither a byte nor a close in %.0f s: the connection hangs "
                                 "(so far: %r)" % (WAIT_S, bytes(self.buf[:200]))) from None
        if not data:
            self.eof, self.eof_at = True, time.monotonic()
            return False
        self.buf += data
        return True

    def _line(self):
        """The next CRLF-terminated line, None when the connection closed before it."""
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return line
            if not self._fill():
                return None

    def _take(self, n, sink):
        """Pass up to n bytes to sink; how many there were before the connection closed."""
        got = 0
        while got < n:
            if not self.buf and not self._fill():
                break
            piece = bytes(self.buf[:n - got])
            del self.buf[:len(piece)]
            sink(piece)
            got += len(piece)
        return got

    def next_head(self):
        """The next answer head, a 1xx included; None when the connection closed first."""
        line = self._line()
        if line is None:
            return None
        m = re.match(rb"HTTP/1\.[01] (\d{3})(?: (.*))?$", line)
        assert m, "not a status line: %r" % line
        headers = []
        while True:
            h = self._line()
            if h is None:
                return None
            if h == b"":
                break
            k, _, v = h.partition(b":")
            headers.append((k.strip().decode("latin-1"), v.strip().decode("latin-1")))
        return Head(int(m.group(1)), (m.group(2) or b"").decode("latin-1"), headers)

    def head(self):
        """The next final answer's head (1xx passed over); None when the connection closed."""
        while True:
            h = self.next_head()
            if h is None or not (100 <= h.status < 200):
                return h

    def body(self, head, method="GET", rate=None, limit=None):
        """Reads head's body by its framing (Content-Length, chunked with trailers, or until
        close), at `rate` bytes a second if given, stopping after `limit` bytes if given:
        Body(length, sha256, complete by its framing, trailers, eof_at, reset)."""
        h, count = hashlib.sha256(), [0]
        throttle = Throttle(rate) if rate else None

        def take(piece):
            h.update(piece)
            count[0] += len(piece)
            if throttle:
                throttle.account(len(piece))

        te = (header_of(head, "Transfer-Encoding") or "").lower()
        cl = header_of(head, "Content-Length")
        complete, trailers = False, []
        if method == "HEAD" or head.status in (204, 304):
            complete = True
        elif "chunked" in te:
            while limit is None or count[0] < limit:
                line = self._line()
                if line is None:
                    break
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while True:
                        t = self._line()
                        if t is None or t == b"":
                            complete = t == b""
                            break
                        k, _, v = t.partition(b":")
                        trailers.append((k.strip().decode("latin-1"),
                                         v.strip().decode("latin-1")))
                    break
                if self._take(size, take) < size:
                    break
                crlf = self._line()
                if crlf is None:
                    break
                assert crlf == b"", "a chunk not followed by CRLF: %r" % crlf[:40]
        elif cl is not None:
            n = int(cl)
            complete = self._take(n if limit is None else min(n, limit), take) == n
        else:
            self._take(1 << 62 if limit is None else limit, take)
            complete = self.eof
        return Body(count[0], h.hexdigest(), complete, trailers, self.eof_at, self.reset)

    def json_body(self, head):
        """head's body (a small one, Content-Length framed) as JSON."""
        out = bytearray()
        n = int(header_of(head, "Content-Length"))
        assert self._take(n, out.extend) == n, "a JSON answer cut short"
        return json.loads(bytes(out))

    def closed_within(self, seconds):
        """Whether the proxy closes this connection (EOF or reset, whatever it sent before)
        within `seconds`; the bytes it sent meanwhile go to self.buf."""
        deadline = time.monotonic() + seconds
        while not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if select.select([self.sock], [], [], left)[0]:
                self._fill()
        return True


def upload_pieces(size, seed):
    """size bytes for an upload, 64 KiB at a time, no two pieces alike."""
    base = os.urandom(64 * KIB)
    for i in range(0, size, 64 * KIB):
        yield (struct.pack(">QQ", seed, i) + base[16:])[:size - i]


def transfer_ended(upstream, tag):
    """The upstream's record of transfer tag once it is over (complete, write-error, reset or
    read-error)."""
    def ended():
        rec = upstream.transfer(tag)
        return rec if rec and rec["state"] not in ("sending", "receiving") else None
    return wait_until(ended, what="the upstream's transfer %s over" % tag)


def new_tag(what):
    return "%s-%s" % (what, uuid.uuid4().hex[:12])


class RssSampler:
    """The peak of pid's VmRSS, read every 10 ms while in the with block."""

    def __init__(self, pid):
        self.pid, self.peak, self.samples = pid, 0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
                self.samples += 1
            except (OSError, AssertionError):  # the process is gone: the test says so
                return
            self.stop.wait(0.01)  # the sampling period

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)


def warm_up(p):
    """A keyed payment, a GET and a small streamed download, so that the idle RSS measured
    next already has the Redis connection, an upstream connection and the buffers of a
    streamed exchange."""
    assert p.post(key=new_key("warm")).status == 201
    assert http_request(p.port, "GET", "/v1/payments").status == 200
    s = Stream(p.port)
    try:
        s.send(build_request("GET", "/_demo/blob?size=%d" % MIB, port=p.port))
        head = s.head()
        assert head is not None and head.status == 200, head
        assert s.body(head).complete
    finally:
        s.close()


def small_traffic(p, payments=200, gets=200, threads=4, spread_s=10.0):
    """`payments` keyed POSTs and `gets` GETs, each on a fresh connection, from `threads`
    threads, spread over about spread_s seconds: [(kind, status, problem type, error)]."""
    jobs = [(kind, i) for i in range(max(payments, gets))
            for kind in ("payment", "get") if i < (payments if kind == "payment" else gets)]
    interval = spread_s * threads / len(jobs)

    def worker(t):
        out = []
        for kind, i in jobs[t::threads]:
            started = time.monotonic()
            try:
                if kind == "payment":
                    r = p.post(key=new_key("small"), body=b'{"amount": %d}' % i, timeout=WAIT_S)
                else:
                    r = http_request(p.port, "GET", "/v1/payments?n=%d" % i, timeout=WAIT_S)
                out.append((kind, r.status, r.json().get("type") if r.is_problem() else None,
                            None))
            except Exception as e:  # no answer within WAIT_S, or a broken connection
                out.append((kind, None, None, repr(e)))
            pace(max(0.0, interval - (time.monotonic() - started)))  # the client's think time
        return out

    with ThreadPoolExecutor(threads) as ex:
        return [r for rs in ex.map(worker, range(threads)) for r in rs]


def traffic_problems(results):
    """What went wrong among small_traffic's answers: every payment 201, every GET 200."""
    want = {"payment": 201, "get": 200}
    bad = collections.Counter((kind, status, ptype, err and err[:80])
                              for kind, status, ptype, err in results if status != want[kind])
    return ["%d %s answered %s%s%s" % (n, kind, status, " " + ptype if ptype else "",
                                       " " + err if err else "")
            for (kind, status, ptype, err), n in bad.most_common()]


def raise_nofile(n):
    """Raise this process's RLIMIT_NOFILE (and so the proxy's, started after) to at least n;
    the old limits, to restore. Skips the test when the hard limit is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= n:
        return soft, hard
    if hard != resource.RLIM_INFINITY and hard < n:
        pytest.skip("RLIMIT_NOFILE hard limit %d < %d: cannot hold the connections" % (hard, n))
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))
    except (ValueError, OSError) as e:
        pytest.skip("cannot raise RLIMIT_NOFILE to %d: %s" % (n, e))
    return soft, hard


# --------------------------------------------------------------------------
# pass-through, both ways, at the client's pace
# --------------------------------------------------------------------------

DOWNLOAD = 512 * MIB
UPLOAD = 256 * MIB


def rss_problems(pid, idle, peak, slack, what):
    """Whether the peak of pid's RSS stayed within slack of its idle RSS (a list of problems)."""
    if not peak:
        return ["no RSS sample of the proxy during the %s" % what]
    if sanitized(pid):
        print("\n%s: sanitizer build, RSS not checked (idle %.1f MiB, peak %.1f MiB)"
              % (what, idle / MIB, peak / MIB))
        return []
    print("\n%s: RSS idle %.1f MiB, peak %.1f MiB (bound %.1f MiB), VmHWM %.1f MiB"
          % (what, idle / MIB, peak / MIB, (idle + slack) / MIB,
             proc_status(pid)["VmHWM"] / MIB))
    if peak > idle + slack:
        return ["RSS reached %.1f MiB, %.1f MiB over the idle %.1f MiB (at most %.0f MiB "
                "over): the proxy holds what passes through instead of streaming it"
                % (peak / MIB, (peak - idle) / MIB, idle / MIB, slack / MIB)]
    return []


@pytest.mark.slow
def test_a_512mib_download_streams_at_its_readers_pace_while_small_requests_are_served(
        start_proxy, upstream):
    # upstream.timeout bounds each stall, not the transfer; 120 s keeps a busy machine clear of it
    p = start_proxy(upstream={"timeout": "120s"}, log={"access": "errors"})
    pid = p.pid()
    warm_up(p)
    idle = rss_bytes(pid)
    tag = new_tag("download")
    s = Stream(p.port)
    problems = []
    try:
        s.send(build_request("GET", "/_demo/blob?size=%d&seed=7&tag=%s" % (DOWNLOAD, tag),
                             port=p.port))
        with RssSampler(pid) as rss:
            head = s.head()
            assert head is not None and head.status == 200, head
            reading = in_background(s.body, head, rate=RATE)
            traffic = small_traffic(p, spread_s=15.0)
            overlapped = not reading.done()
            body = reading.result(timeout=120)
    finally:
        s.close()
    problems += traffic_problems(traffic)
    if not overlapped:
        problems.append("the download was over before the small requests: they did not run "
                        "beside it")
    rec = transfer_ended(upstream, tag)
    if not (body.complete and body.length == DOWNLOAD == rec["bytes"]
            and body.sha256 == rec["sha256"] and rec["state"] == "complete"):
        problems.append("the download did not arrive byte for byte: read %d bytes (complete: "
                        "%s, sha256 %s); the upstream wrote %d (%s, sha256 %s)"
                        % (body.length, body.complete, body.sha256, rec["bytes"], rec["state"],
                           rec["sha256"]))
    problems += rss_problems(pid, idle, rss.peak, STREAMING_RSS_SLACK, "512 MiB download")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_a_256mib_upload_streams_at_its_senders_pace_while_small_requests_are_served(
        start_proxy, upstream):
    # max_request_body well past the upload, so that the test holds whether or not that limit
    # applies to pass-through bodies; max_buffered must be at least max_request_body + 64 KiB
    p = start_proxy(upstream={"timeout": "120s"}, log={"access": "errors"},
                    limits={"max_request_body": "300MiB", "max_buffered": "512MiB"})
    pid = p.pid()
    warm_up(p)
    idle = rss_bytes(pid)
    tag = new_tag("upload")
    s = Stream(p.port)
    problems = []
    try:
        s.send(build_request("POST", "/_demo/sink?tag=%s" % tag,
                             [("Content-Type", "application/octet-stream"),
                              ("Content-Length", str(UPLOAD))], None, port=p.port))
        with RssSampler(pid) as rss:
            sending = in_background(s.send_paced, upload_pieces(UPLOAD, 11), RATE)
            traffic = small_traffic(p, spread_s=8.0)
            overlapped = not sending.done()
            sent_len, sent_sha = sending.result(timeout=120)
            head = s.head()
            assert head is not None and head.status == 200, head
            got = s.json_body(head)
    finally:
        s.close()
    problems += traffic_problems(traffic)
    if not overlapped:
        problems.append("the upload was over before the small requests: they did not run "
                        "beside it")
    rec = transfer_ended(upstream, tag)
    if not (got["length"] == sent_len == UPLOAD and got["sha256"] == sent_sha
            and rec["state"] == "complete"):
        problems.append("the upload did not arrive byte for byte: sent %d bytes (sha256 %s); "
                        "the upstream read %d (sha256 %s, %s)"
                        % (sent_len, sent_sha, got["length"], got["sha256"], rec["state"]))
    problems += rss_problems(pid, idle, rss.peak, STREAMING_RSS_SLACK, "256 MiB upload")
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------
# a protected answer too large to store
# --------------------------------------------------------------------------

EXPORT = 50 * MIB


@pytest.mark.slow
def test_a_50mib_protected_answer_streams_to_its_first_client_and_retries_get_not_replayable(
        start_proxy, upstream):
    # limits.max_stored_response stays at build_config's 1MiB: far below the answer
    p = start_proxy(routes=EXPORTS)
    pid = p.pid()
    warm_up(p)
    idle = rss_bytes(pid)
    key, tag = new_key("export"), new_tag("export")
    path = "/v1/exports?demo_blob=%d&demo_seed=5&demo_tag=%s" % (EXPORT, tag)
    body = b'{"report": "all-payments"}'
    headers = [("Idempotency-Key", key), ("Content-Type", "application/json")]
    s = Stream(p.port)
    try:
        s.send(build_request("POST", path, headers, body, port=p.port))
        with RssSampler(pid) as rss:
            head = s.head()
            assert head is not None and head.status == 201, head
            assert header_of(head, "Idempotent-Replayed") is None, head
            got = s.body(head, method="POST", rate=RATE)
    finally:
        s.close()
    rec = transfer_ended(upstream, tag)
    assert got.complete and got.length == EXPORT == rec["bytes"], (got, rec)
    assert got.sha256 == rec["sha256"], "the first client's answer is not what the upstream sent"
    problems = rss_problems(pid, idle, rss.peak, STREAMING_RSS_SLACK, "50 MiB protected answer")
    # the retry: a tombstone, never a second execution
    retry = http_request(p.port, "POST", path, headers, body, timeout=WAIT_S)
    assert_problem(retry, 502, "response-not-replayable")
    assert retry.header_all("Idempotent-Replayed") == ["true"], retry
    assert upstream.executions(key) == 1
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------
# 1000 clients stalled mid-body
# --------------------------------------------------------------------------

STALLED = 1000
MAX_CONNECTIONS = 1100
STALL_BODY = MIB           # the Content-Length each announces; half of it is sent
FRESH_PAYMENTS = 40


def push_bodies(socks, n):
    """Send up to n body bytes on each non-blocking socket, until each has sent n, was closed
    by the proxy, or no socket took a byte for a second (the proxy reads no more: its
    back-pressure); the bytes each one sent."""
    sent = [0] * len(socks)
    piece = os.urandom(64 * KIB)
    index = {s.fileno(): i for i, s in enumerate(socks)}
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLOUT)
    pending = len(socks)
    deadline = time.monotonic() + WAIT_S
    while pending and time.monotonic() < deadline:
        events = poller.poll(1000)
        if not events:
            break   # a whole second without room on any of them
        for fd, ev in events:
            i = index[fd]
            try:
                if ev & (select.POLLERR | select.POLLHUP):
                    raise ConnectionResetError("closed by the proxy")
                sent[i] += socks[i].send(piece[:n - sent[i]])
            except BlockingIOError:
                continue
            except OSError:
                sent[i] = -1 - sent[i]   # closed by the proxy (a refusal), after so many bytes
            if sent[i] < 0 or sent[i] >= n:
                poller.unregister(fd)
                pending -= 1
    return sent


@pytest.mark.slow
def test_1000_connections_stalled_mid_body_stay_under_the_documented_memory_bound(
        start_proxy, upstream):
    old_nofile = raise_nofile(STALLED + 1000)
    socks = []
    try:
        p = start_proxy(limits={"max_connections": MAX_CONNECTIONS, "idle_timeout": "300s"},
                        log={"access": "errors"})
        pid = p.pid()
        bound = documented_memory_bound(proxy_config(p))
        warm_up(p)
        idle = rss_bytes(pid)
        keys = [new_key("stalled") for _ in range(STALLED)]
        problems = []
        with RssSampler(pid) as rss:
            for key in keys:
                s = socket.create_connection(("127.0.0.1", p.port), timeout=WAIT_S)
                socks.append(s)
                s.sendall(build_request("POST", "/v1/payments", [
                    ("Idempotency-Key", key), ("Content-Type", "application/octet-stream"),
                    ("Content-Length", str(STALL_BODY))], None, port=p.port))
                s.setblocking(False)
            sent = push_bodies(socks, STALL_BODY // 2)
            # with every one of them stalled: new clients are served or refused, never hung
            with ThreadPoolExecutor(4) as ex:
                fresh = list(ex.map(lambda i: _fresh_payment(p, i), range(FRESH_PAYMENTS)))
            hwm = proc_status(pid)["VmHWM"]
            for s in socks:
                s.close()
            socks = []
        not_ok = [f for f in fresh if not (f[0] == 201 or overloaded(f[0], f[1]))]
        if not_ok:
            problems.append("%d of %d fresh payments beside the stalled connections got neither "
                            "201 nor 503 overloaded, e.g. %r" % (len(not_ok), FRESH_PAYMENTS,
                                                                 not_ok[0]))
        served = sum(1 for f in fresh if f[0] == 201)
        print("\n%d stalled connections sent %d MiB (%d closed by the proxy); fresh payments: "
              "%d 201, %d overloaded" % (STALLED, sum(abs(x) for x in sent) // MIB,
                                         sum(1 for x in sent if x < 0), served,
                                         FRESH_PAYMENTS - served - len(not_ok)))
        if sanitized(pid):
            print("sanitizer build: RSS not checked")
        else:
            peak = max(hwm, rss.peak)
            print("RSS idle %.1f MiB, peak %.1f MiB, documented bound %.1f MiB"
                  % (idle / MIB, peak / MIB, bound / MIB))
            if peak > bound:
                problems.append("RSS reached %.1f MiB with %d connections stalled mid-body, "
                                "past the documented bound of %.1f MiB (max_buffered + %d KiB "
                                "x max_connections + %d MiB)"
                                % (peak / MIB, STALLED, bound / MIB, PER_CONNECTION_BOUND // KIB,
                                   FIXED_BOUND // MIB))
            # memory held for them is given back once they are gone (maybe lazily)
            try:
                wait_until(lambda: rss_bytes(pid) <= idle + SETTLED_RSS_SLACK,
                           what="RSS back within %d MiB of idle" % (SETTLED_RSS_SLACK // MIB))
            except AssertionError as e:
                problems.append("%s: %.1f MiB, idle was %.1f MiB"
                                % (e, rss_bytes(pid) / MIB, idle / MIB))
        # a request cut short is never forwarded
        stalled_run = set(upstream.stats()["by_key"]) & set(keys)
        if stalled_run:
            problems.append("%d stalled requests reached the upstream" % len(stalled_run))
        assert not problems, "\n".join(problems)
    finally:
        for s in socks:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, old_nofile)


def _fresh_payment(p, i):
    """(status, problem type) of one keyed payment on a new connection; (None, error) when no
    answer came within WAIT_S."""
    try:
        r = p.post(key=new_key("fresh"), body=b'{"amount": %d}' % i, timeout=WAIT_S)
        return r.status, (r.json().get("type") if r.is_problem() else None)
    except Exception as e:  # a hang (socket timeout) or a broken connection
        return None, repr(e)


# --------------------------------------------------------------------------
# slow and idle clients, the connection cap
# --------------------------------------------------------------------------

HEADER_TIMEOUT_S = 2.0
IDLE_TIMEOUT_S = 2.0
# how much later than its timeout the proxy may close a connection: a generous bound, a busy
# machine's timer included
CLOSE_MARGIN_S = 8.0


@pytest.mark.slow
def test_headers_sent_a_byte_a_second_are_closed_at_the_header_timeout(start_proxy):
    p = start_proxy(limits={"header_timeout": "2s"})
    head = build_request("GET", "/v1/payments", [("X-Slow-Client", "a" * 40)], port=p.port)
    s = Stream(p.port)
    started, n = time.monotonic(), 0
    try:
        # one byte a second; between them, whether the proxy closed the connection
        while n < len(head) and time.monotonic() - started < HEADER_TIMEOUT_S + CLOSE_MARGIN_S:
            try:
                s.send(head[n:n + 1])
            except OSError:  # the proxy closed it already
                s.eof, s.eof_at = True, time.monotonic()
                break
            n += 1
            if s.closed_within(1.0):
                break
    finally:
        s.close()
    assert s.eof, "%d of %d header bytes sent in %.1f s and the connection is still open" % (
        n, len(head), time.monotonic() - started)
    took = s.eof_at - started
    assert n < len(head), "the whole head was sent before the connection was closed"
    assert took <= HEADER_TIMEOUT_S + CLOSE_MARGIN_S, took
    # not before its time: the head was still coming
    assert took >= HEADER_TIMEOUT_S / 2, "closed after %.1f s, before header_timeout" % took
    # whatever came before the close is at most a 408, never an answer to the request
    assert not s.buf or s.buf.startswith(b"HTTP/1.1 408"), bytes(s.buf[:200])


@pytest.mark.slow
def test_a_connection_silent_past_the_idle_timeout_is_closed(start_proxy, upstream):
    p = start_proxy(limits={"idle_timeout": "2s"})
    # idle between keep-alive requests
    s = Stream(p.port)
    try:
        s.send(build_request("GET", "/v1/payments", port=p.port))
        head = s.head()
        assert head is not None and head.status == 200, head
        assert s.body(head).complete
        answered = time.monotonic()
        assert s.closed_within(IDLE_TIMEOUT_S + CLOSE_MARGIN_S), \
            "an idle keep-alive connection still open %.1f s after its answer" % (
                time.monotonic() - answered)
        assert s.eof_at - answered >= IDLE_TIMEOUT_S / 2, \
            "closed %.1f s after the answer: keep-alive not kept" % (s.eof_at - answered)
        assert not s.buf or s.buf.startswith(b"HTTP/1.1 408"), bytes(s.buf[:200])
    finally:
        s.close()
    # stalled mid-body: closed too, and the request cut short never reaches the upstream
    key = new_key("stalled")
    s = Stream(p.port)
    try:
        s.send(build_request("POST", "/v1/payments", [
            ("Idempotency-Key", key), ("Content-Type", "application/json"),
            ("Content-Length", "100")], None, port=p.port) + b'{"amount": 1, "note": "')
        stalled = time.monotonic()
        assert s.closed_within(IDLE_TIMEOUT_S + CLOSE_MARGIN_S), \
            "a request stalled mid-body still open %.1f s later" % (time.monotonic() - stalled)
        assert not s.buf or s.buf.startswith(b"HTTP/1.1 408"), bytes(s.buf[:200])
    finally:
        s.close()
    assert upstream.executions(key) == 0


CAP = 8


def _refused_or_closed_at_once(port):
    """Connection CAP+1: refused, or closed at once (EOF or reset, maybe after a 503), without
    an answer to its request. Returns (ok, what happened)."""
    try:
        s = Stream(port)
    except ConnectionRefusedError:
        return True, "refused"
    try:
        try:
            s.send(build_request("GET", "/v1/payments?over=cap", port=port))
        except OSError:
            return True, "closed before the request"
        closed = s.closed_within(5.0)
        if s.buf and not s.buf.startswith(b"HTTP/1.1 503"):
            return False, "served: %r" % bytes(s.buf[:100])
        if not closed:
            return False, "neither refused nor closed within 5 s"
        return True, "closed after %r" % bytes(s.buf[:40])
    finally:
        s.close()


def _served(port):
    """Whether a GET on a new connection is answered 200 (a refusal: False)."""
    try:
        r = http_request(port, "GET", "/v1/payments?n=1", timeout=5)
    except Exception:  # refused, closed, or no answer within 5 s
        return False
    return r.status == 200


def test_over_max_connections_a_connection_is_refused_or_closed_at_once(start_proxy):
    p = start_proxy(limits={"max_connections": CAP})
    held = []
    try:
        for _ in range(CAP):
            s = Stream(p.port)
            held.append(s)
            s.send(build_request("GET", "/v1/payments", port=p.port))
            head = s.head()
            assert head is not None and head.status == 200, head
            assert s.body(head).complete
        ok, what = _refused_or_closed_at_once(p.port)
        assert ok, "connection %d of a cap of %d: %s" % (CAP + 1, CAP, what)
        # the ones held are still served on their keep-alive connections
        for s in held[1:]:
            s.send(build_request("GET", "/v1/payments?again=1", port=p.port))
            head = s.head()
            assert head is not None and head.status == 200, head
            assert s.body(head).complete
        # one let go: a new connection is served (once the proxy has seen it closed)
        held.pop(0).close()
        wait_until(lambda: _served(p.port), what="a new connection served after one closed")
    finally:
        for s in held:
            s.close()


# --------------------------------------------------------------------------
# one side goes away: the other is closed within a second
# --------------------------------------------------------------------------

FRAMINGS = [pytest.param(False, id="content-length"), pytest.param(True, id="chunked")]
GONE_S = 1.0   # the contract: the other side is closed within a second


@pytest.mark.parametrize("chunked", FRAMINGS)
def test_a_client_that_leaves_mid_download_closes_the_upstreams_side(start_proxy, upstream,
                                                                    chunked):
    p = start_proxy(upstream={"timeout": "120s"})
    tag = new_tag("left")
    size = 256 * MIB   # far more than every buffer on the way: the upstream is still writing
    s = Stream(p.port)
    try:
        s.send(build_request("GET", "/_demo/blob?size=%d&chunked=%d&tag=%s"
                             % (size, chunked, tag), port=p.port))
        head = s.head()
        assert head is not None and head.status == 200, head
        got = s.body(head, limit=MIB)
        assert got.length >= MIB and not got.complete, got
    finally:
        left = time.monotonic()
        s.close()
    rec = transfer_ended(upstream, tag)
    assert rec["state"] == "write-error", (
        "the upstream %s (%d of %d bytes written): its side was not closed when the client "
        "left" % ("wrote the whole answer" if rec["state"] == "complete" else rec["state"],
                  rec["bytes"], size))
    assert left <= rec["ended_mono"] <= left + GONE_S, (
        "the upstream's write failed %.2f s after the client left" % (rec["ended_mono"] - left))


@pytest.mark.parametrize("chunked", FRAMINGS)
def test_an_upstream_that_resets_mid_answer_closes_the_clients_side(start_proxy, upstream,
                                                                   chunked):
    p = start_proxy()
    tag = new_tag("reset")
    size, reset_after = 64 * MIB, 4 * MIB
    s = Stream(p.port)
    try:
        s.send(build_request("GET", "/_demo/blob?size=%d&chunked=%d&reset_after=%d&tag=%s"
                             % (size, chunked, reset_after, tag), port=p.port))
        head = s.head()
        # the head was on its way before the upstream broke off: the client has it
        assert head is not None and head.status == 200, head
        got = s.body(head)
    finally:
        s.close()
    rec = transfer_ended(upstream, tag)
    assert rec["state"] == "reset", rec
    assert not got.complete, "the client read a complete answer of %d bytes" % got.length
    assert got.length <= reset_after, got
    if not chunked and header_of(head, "Content-Length") is not None:
        assert int(header_of(head, "Content-Length")) == size, head
    assert got.eof_at is not None and got.eof_at <= rec["reset_mono"] + GONE_S, (
        "the client's side closed %.2f s after the upstream's reset"
        % (got.eof_at - rec["reset_mono"]))


# --------------------------------------------------------------------------
# framing kept while streaming
# --------------------------------------------------------------------------

def test_a_chunked_pass_through_answer_keeps_its_trailers(proxy, upstream):
    tag = new_tag("trailers")
    size = 3 * MIB + 123
    s = Stream(proxy.port)
    try:
        s.send(build_request("GET", "/_demo/blob?size=%d&chunked=1&trailer=1&tag=%s"
                             % (size, tag), [("TE", "trailers")], port=proxy.port))
        head = s.head()
        assert head is not None and head.status == 200, head
        assert "chunked" in (header_of(head, "Transfer-Encoding") or "").lower(), head
        got = s.body(head)
    finally:
        s.close()
    rec = transfer_ended(upstream, tag)
    assert got.complete and got.length == size == rec["bytes"], (got, rec)
    assert got.sha256 == rec["sha256"]
    assert [v for k, v in got.trailers if k.lower() == "x-demo-sha256"] == [rec["sha256"]], \
        "the upstream's trailer did not reach the client: %r" % (got.trailers,)


def test_expect_100_continue_on_a_large_upload_gets_100_then_the_answer(start_proxy, upstream):
    # max_request_body above the upload: what is tested is the framing, not that limit
    p = start_proxy(limits={"max_request_body": "64MiB", "max_buffered": "128MiB"})
    tag = new_tag("expect")
    size = 8 * MIB
    s = Stream(p.port)
    try:
        s.send(build_request("POST", "/_demo/sink?tag=%s" % tag, [
            ("Content-Type", "application/octet-stream"), ("Content-Length", str(size)),
            ("Expect", "100-continue")], None, port=p.port))
        interim = s.next_head()   # the body waits for it
        assert interim is not None and interim.status == 100, interim
        sent_len, sent_sha = s.send_paced(upload_pieces(size, 3), 10 * RATE)
        head = s.head()
        assert head is not None and head.status == 200, head
        got = s.json_body(head)
    finally:
        s.close()
    assert got["length"] == sent_len == size and got["sha256"] == sent_sha, got
    assert transfer_ended(upstream, tag)["state"] == "complete"


def test_a_keep_alive_connection_serves_the_next_request_after_a_streamed_download(proxy,
                                                                                  upstream):
    s = Stream(proxy.port)
    try:
        for chunked in (1, 0):
            tag = new_tag("keepalive")
            s.send(build_request("GET", "/_demo/blob?size=%d&chunked=%d&seed=%d&tag=%s"
                                 % (8 * MIB, chunked, chunked, tag), port=proxy.port))
            head = s.head()
            assert head is not None and head.status == 200, head
            got = s.body(head)
            rec = transfer_ended(upstream, tag)
            assert got.complete and got.sha256 == rec["sha256"], (got, rec)
        s.send(build_request("GET", "/v1/payments?after=download", port=proxy.port))
        head = s.head()
        assert head is not None and head.status == 200, head
        assert s.body(head).complete
        assert not s.eof
    finally:
        s.close()
