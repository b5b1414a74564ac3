"""Helpers the proxy's behaviour tests share, over harness.py's Proxy, Response and
RedisServer (harness.py starts the processes and speaks HTTP and RESP; this module is what the
test files do with them). One home for each, so no test file copies one or imports another:

  keys         new_key
  metrics      metrics_text, parse_exposition, metric_number, metrics_samples, metric,
               metric_sum, metric_values, wait_metric, wait_waiting, promtool_path,
               promtool_check
  record keys  record_keys
  traffic      Traffic (client threads sending keyed POSTs), Attempt
  waits        assert_stays_unready (the waits on a state are harness.py's wait_until,
               wait_ready, log_line; time that must pass is harness.hold)
  answers      assert_problem, assert_retry_after, assert_outcome_unknown,
               assert_not_replayed, assert_replay_of, assert_replayed, executions_of_body,
               access_lines, json_lines, upstream_record_ids
  threads      in_background, concurrently
  the binary   run_bin, listening_sockets, proc_status, rss_bytes, sanitized, under_tsan,
               require_binary, check_file, check_config, run_check, rewrite, reload_and_wait,
               assert_still_protects
  test servers read_request
  records      keyring_text, write_keyring, new_keyring_secret, raw, records, head, pay
  admin        new_token, token_file, fingerprint, bearer, stdout_json, audit_lines,
               access_record_id, record_id_cli, redis_contents
  node         node_packages (tests/clients' npm packages: the Stripe and Svix clients, the
               OpenAPI validator)

Plain functions and classes; nothing here starts a process of its own but run_bin,
check_file (and check_config, run_check, record_id_cli on them), which wait for the binary to
exit, Traffic's threads, and node_packages' `npm ci`.
"""

import base64
import collections
import hashlib
import http.client
import json
import math
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import (REPO, build_config, hold, pace, proxy_binary, readyz, to_yaml,
                     wait_until)

PROBLEM_PREFIX = "urn:idempotency-proxy:problem:"


# --------------------------------------------------------------------------
# keys
# --------------------------------------------------------------------------

def new_key(tag="k"):
    """A fresh idempotency key, "TAG-<32 hex digits>"."""
    return "%s-%s" % (tag, uuid.uuid4().hex)


# --------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------

PROMTOOL_PACKAGE = "prometheus"  # Debian 12: /usr/bin/promtool is in package prometheus


def metrics_text(p, timeout=None):
    """p's /metrics (the admin listener) as text; timeout: the request's bound in seconds
    (None: http_request's default)."""
    kw = {} if timeout is None else {"timeout": timeout}
    r = p.admin("GET", "/metrics", **kw)
    assert r.status == 200, r
    return r.body.decode()


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+(-?\d+))?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def _unescape(v):
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), v)


def metric_number(s):
    """A sample value of the text format (+Inf, -Inf included) as a float."""
    if s in ("+Inf", "Inf"):
        return math.inf
    if s == "-Inf":
        return -math.inf
    return float(s)


def _labels(raw, n=0):
    """{label: value} of a sample's label text (what is between its braces)."""
    labels = {}
    pos = 0
    while pos < len(raw):
        lm = _LABEL.match(raw, pos)
        assert lm, "line %d: bad labels %r" % (n, raw)
        assert lm.group(1) not in labels, "line %d: label %s twice" % (n, lm.group(1))
        labels[lm.group(1)] = _unescape(lm.group(2))
        pos = lm.end()
    return labels


def parse_exposition(text):
    """Text format 0.0.4 -> (types {family: type}, samples [(name, {labels}, value)])."""
    types, samples = {}, []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                assert parts[2] not in types, "line %d: second TYPE for %s" % (n, parts[2])
                types[parts[2]] = parts[3].strip()
            continue
        m = _SAMPLE.match(line)
        assert m, "line %d is not a sample: %r" % (n, line)
        samples.append((m.group(1), _labels(m.group(2) or "", n), metric_number(m.group(3))))
    return types, samples


def metrics_samples(p, text=None, timeout=None):
    """[(name, {label: value}, float)] of p's /metrics (or of text, /metrics as read before)."""
    return parse_exposition(text if text is not None else metrics_text(p, timeout))[1]


def _matching(samples, name, labels):
    return [v for n, l, v in samples
            if n == name and all(l.get(k) == str(x) for k, x in labels.items())]


def metric(p, name, labels=None, text=None, absent=None, required=False, unique=False,
           timeout=None, **label_kw):
    """The value (a float) of p's first /metrics sample `name` whose labels include the ones
    asked for; `absent` (None) when there is none.

    The labels may come in `name` as /metrics writes them ('x_total{route="/a"}'), in
    `labels` as a dict or that label text ('kind="moved"'), or as keywords (phase="claim").
    required: no such sample fails the test; unique: more than one fails it. text: /metrics
    as read before (no new request); timeout: the request's bound in seconds."""
    want = {}
    if "{" in name:
        name, raw = name[:-1].split("{", 1)
        want.update(_labels(raw))
    if isinstance(labels, str):
        want.update(_labels(labels))
    elif labels:
        want.update(labels)
    want.update(label_kw)
    values = _matching(metrics_samples(p, text, timeout), name, want)
    assert not required or values, "no %s%s in /metrics" % (name, want or "")
    assert not unique or len(values) <= 1, (name, want, values)
    return values[0] if values else absent


def metric_sum(p, name, **labels):
    """The sum of p's samples of metric `name` whose labels include `labels` (0 when none)."""
    return sum(_matching(metrics_samples(p), name, labels))


def metric_values(p, name):
    """{sample as /metrics writes it, labels included: value} of every sample whose name
    starts with `name` (a histogram's _bucket, _sum and _count too)."""
    return {line.split(" ")[0]: float(line.rsplit(" ", 1)[1])
            for line in metrics_text(p).splitlines() if line.startswith(name)}


def wait_metric(p, name, pred, what=None, **labels):
    """Waits until pred(metric_sum(p, name, **labels)) holds; returns that value."""
    value = [None]

    def check():
        value[0] = metric_sum(p, name, **labels)
        return pred(value[0])
    wait_until(check, what=what or "%s%r" % (name, labels))
    return value[0]


def wait_waiting(p, n):
    """Waits until exactly n requests of p wait on another request's claim."""
    return wait_metric(p, "idempotency_proxy_waiting_requests", lambda v: v == n,
                       what="%d requests waiting" % n)


def promtool_path():
    path = shutil.which("promtool")
    if path is None and os.path.exists("/usr/bin/promtool"):
        path = "/usr/bin/promtool"
    if path is None:
        pytest.fail("promtool is not installed: it comes with the Debian package %r "
                    "(apt-get install -y %s); tests/install-deps.sh should install it"
                    % (PROMTOOL_PACKAGE, PROMTOOL_PACKAGE), pytrace=False)
    return path


def promtool_check(text_bytes):
    """`promtool check metrics` on the exposition; fails the test on any finding."""
    p = subprocess.run([promtool_path(), "check", "metrics"], input=text_bytes,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    out = (p.stdout + p.stderr).decode(errors="replace").strip()
    # exit 1: unparsable, 3: lint problems; a lint finding counts as a failure too
    assert p.returncode == 0 and not out, (
        "promtool check metrics: exit %d\n%s\n--- exposition ---\n%s"
        % (p.returncode, out, text_bytes.decode(errors="replace")))


# --------------------------------------------------------------------------
# record keys
# --------------------------------------------------------------------------

def record_keys(redis, prefix="idem", db=0, inbox=True, census=False):
    """The keys of redis (database db) that start with prefix, sorted: the proxy's records and,
    unless inbox=False, its inbox's streams and keys (":inbox:" in the key); with census=True
    the census of held records' lock and result too (":census:", docs/operations.md "Held
    records"), which are no records."""
    return [k for k in redis.keys("*", db=db)
            if str(k).startswith(prefix) and (inbox or ":inbox:" not in str(k))
            and (census or ":census:" not in str(k))]


# --------------------------------------------------------------------------
# traffic
# --------------------------------------------------------------------------

# One request a Traffic thread sent: kind "fresh" (a key's first), "replay" or "retry";
# status -1 when no answer came (body: the error); seconds it took; sent: time.monotonic().
Attempt = collections.namedtuple("Attempt", "key kind status body seconds replayed sent")


class Traffic:
    """Client threads that send keyed POSTs through the proxies (one after another) until
    stopped; every request is kept in .answers as an Attempt. After a key's first answer a
    thread, by `then`:

      "replay"  sends the key once more when it was 201 (kind "replay"): a finished key's retry;
      "twice"   sends it once more whatever came (kind "retry"); a pair that is not two 201s
                with one body goes to .bad as (key, first, retry);
      "retry"   sends it again, after retry_s, while the answer is in retry_on (-1: none came),
                as a payments client does, and after finish() for up to its grace seconds; a
                2xx acknowledges the key (.acked: key -> time), another status gives it up
                (.gave_up: (key, status)).

    Every key is new_key(tag) (tag may name the thread: "t{i}") and goes in .keys; a thread
    pauses pause_s between keys. body: bytes, a function of the key, or None (Proxy.post's
    default); timeout: each request's bound in seconds (None: http_request's default).
    `with Traffic(...) as t:` starts and finishes it; or t.start() ... t.finish(grace)."""

    def __init__(self, proxies, threads=4, then="replay", body=b'{"amount": 7}', timeout=10,
                 tag="t{i}", retry_on=(503, 409, -1), retry_s=0.1, pause_s=0.0, join_s=30):
        assert then in ("replay", "twice", "retry"), then
        self.proxies = proxies if isinstance(proxies, (list, tuple)) else [proxies]
        self.then, self.body, self.timeout, self.tag = then, body, timeout, tag
        self.retry_on, self.retry_s, self.pause_s, self.join_s = retry_on, retry_s, pause_s, \
            join_s
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.answers = []   # Attempt, every request
        self.sending = {}   # thread -> when its request in flight was sent
        self.keys, self.bad, self.acked, self.gave_up = [], [], {}, []
        self.deadline = math.inf
        self.errors = []
        self.started = None
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(threads)]

    def _one(self, i, p, key, kind):
        t = time.monotonic()
        with self.lock:
            self.sending[i] = t
        body = self.body(key) if callable(self.body) else self.body
        kw = {} if self.timeout is None else {"timeout": self.timeout}
        if body is not None:
            kw["body"] = body
        try:
            r = p.post(key=key, **kw)
            status, rbody, replayed = r.status, r.body, r.replayed
        except Exception as e:  # an answer that never came: the test decides what it means
            r, status, rbody, replayed = None, -1, repr(e).encode(), False
        with self.lock:
            self.answers.append(Attempt(key, kind, status, rbody, time.monotonic() - t,
                                        replayed, t))
            del self.sending[i]
        return r, status

    def _key(self, i, n):
        p = self.proxies[n % len(self.proxies)]
        key = new_key(self.tag.format(i=i))
        with self.lock:
            self.keys.append(key)
        first, status = self._one(i, p, key, "fresh")
        p = self.proxies[(n + 1) % len(self.proxies)]
        if self.then == "replay" and status == 201:
            self._one(i, p, key, "replay")
        elif self.then == "twice":
            retry, _ = self._one(i, p, key, "retry")
            if first is None or retry is None or first.status != 201 or \
                    retry.status != 201 or retry.body != first.body:
                with self.lock:
                    self.bad.append((key, first, retry))
        elif self.then == "retry":
            self._retry(i, p, key, status)

    def _retry(self, i, p, key, status):
        while True:
            if 200 <= status < 300:
                with self.lock:
                    self.acked[key] = time.monotonic()
                return
            if status not in self.retry_on or (self.stop.is_set()
                                               and time.monotonic() > self.deadline):
                with self.lock:
                    self.gave_up.append((key, status))
                return
            pace(self.retry_s)  # the client's back-off before it retries the key
            _, status = self._one(i, p, key, "retry")

    def _run(self, i):
        n = 0
        try:
            while not self.stop.is_set():
                self._key(i, n)
                n += 1
                if self.pause_s:
                    pace(self.pause_s)
        except BaseException as e:  # a fault of the helper itself: finish() raises it
            self.errors.append(e)

    def start(self):
        self.started = time.monotonic()
        for t in self.threads:
            t.start()
        return self

    def finish(self, grace=15):
        """Stop sending new keys ("retry": a key being retried may take grace seconds more);
        waits up to join_s for each thread."""
        self.deadline = time.monotonic() + grace
        self.stop.set()
        for t in self.threads:
            t.join(self.join_s)
        assert not self.errors, self.errors

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.finish()

    def ok(self, since=0.0):
        """How many requests sent at `since` or later were answered 201."""
        with self.lock:
            return sum(1 for a in self.answers if a.status == 201 and a.sent >= since)

    def answered_since(self, t):
        """The answers to requests sent at t or later."""
        with self.lock:
            return [a for a in self.answers if a.sent >= t]

    def all_sent_after(self, t):
        """Every request in flight now was sent at t or later: the ones before are answered."""
        with self.lock:
            return all(sent >= t for sent in self.sending.values())

    def acked_since(self, t):
        """How many keys were first acknowledged at t or later ("retry")."""
        with self.lock:
            return sum(1 for at in self.acked.values() if at >= t)

    def successes_after(self, t):
        """Time of the first 2xx answer to a request sent at t or later (None: none)."""
        with self.lock:
            times = [a.sent + a.seconds for a in self.answers
                     if a.sent >= t and 200 <= a.status < 300]
        return min(times) if times else None

    def longest_gap(self, start, end):
        """The longest time in [start, end] without a 2xx answer, seconds."""
        with self.lock:
            times = sorted(a.sent + a.seconds for a in self.answers if 200 <= a.status < 300)
        points = [start] + [t for t in times if start < t < end] + [end]
        return max(b - a for a, b in zip(points, points[1:]))

    def check(self, upstream, allowed=(201,), replay_allowed=None, bound_s=5):
        """Every answer came within bound_s with an allowed status (replay_allowed for a
        replay, default the same); a replay is the stored answer; no key ran twice.
        Returns the answers."""
        firsts = {}
        for key, kind, status, body, secs, replayed, _ in self.answers:
            assert secs < bound_s, (key, kind, status, secs)
            assert status in (replay_allowed or allowed if kind == "replay" else allowed), \
                (key, kind, status, body[:200])
            if kind == "fresh" and status == 201:
                firsts[key] = body
        for key, kind, status, body, secs, replayed, _ in self.answers:
            if kind == "replay" and status == 201:
                assert replayed and body == firsts[key], (key, body[:200])
        keys = {a.key for a in self.answers}
        twice = [k for k in keys if upstream.executions(k) > 1]
        assert not twice, "keys executed twice: %r" % twice[:5]
        return self.answers


# --------------------------------------------------------------------------
# waits
# --------------------------------------------------------------------------

def assert_stays_unready(p, seconds=1.5, redis_down=False):
    """/readyz answers 503 every time it is asked (every 50 ms) for `seconds`; with
    redis_down, idempotency_proxy_redis_up is 0 each time too (reconnects happen in here)."""
    deadline = time.monotonic() + seconds
    seen = set()
    while time.monotonic() < deadline:
        seen.add(readyz(p))
        if redis_down:
            assert metric(p, "idempotency_proxy_redis_up", required=True) == 0
        hold(0.05, "a span in which the proxy must stay unready: looked at every 50 ms")
    assert seen == {503}, seen


# --------------------------------------------------------------------------
# answers
# --------------------------------------------------------------------------

def assert_problem(r, status, cause):
    assert r.status == status, r
    assert r.is_problem(), "expected application/problem+json: %r" % r
    doc = r.json()
    for field in ("type", "title", "status", "detail"):
        assert field in doc, "problem without %r: %r" % (field, doc)
    assert doc["type"].startswith(PROBLEM_PREFIX), doc
    assert doc["type"].endswith(":" + cause), "expected cause %r: %r" % (cause, doc)
    assert doc["status"] == status, doc
    assert isinstance(doc["title"], str) and doc["title"], doc
    assert isinstance(doc["detail"], str) and doc["detail"], doc
    return doc


def assert_retry_after(r):
    v = r.header("Retry-After")
    assert v is not None, "no Retry-After: %r" % r
    assert re.fullmatch(r"\d+", v.strip()) or re.match(r"[A-Z][a-z]{2}, \d\d ", v), \
        "Retry-After is neither delta-seconds nor an HTTP-date: %r" % v


# every outcome-unknown answer's Retry-After (docs/client-contract.md#outcome-unknown)
OUTCOME_UNKNOWN_RETRY_AFTER = "120"


def assert_outcome_unknown(r, replayed, record_id=None):
    """r is 502 outcome-unknown as the client contract says: the record id in the problem's
    `record_id` and in Idempotency-Record-Id (the same 32 hex; record_id when given),
    Retry-After: 120, and Idempotent-Replayed: true exactly when replayed (never on the first
    answer). Returns the record id."""
    doc = assert_problem(r, 502, "outcome-unknown")
    rid = doc.get("record_id")
    assert isinstance(rid, str) and re.fullmatch(r"[0-9a-f]{32}", rid), doc
    assert r.header_all("Idempotency-Record-Id") == [rid], r
    if record_id is not None:
        assert rid == record_id, (rid, record_id)
    assert r.header_all("Retry-After") == [OUTCOME_UNKNOWN_RETRY_AFTER], r
    if replayed:
        assert r.header_all("Idempotent-Replayed") == ["true"], r
    else:
        assert_not_replayed(r)
    return rid


def upstream_record_ids(upstream, key, name="idempotency-record-id"):
    """The values of field name (lower case) in each execution of key the upstream saw, in
    order: one list per execution."""
    return [[v for k, v in e["headers"] if k.lower() == name]
            for e in upstream.history() if e["key"] == key]


def assert_not_replayed(r):
    assert not r.has_header("Idempotent-Replayed"), \
        "first execution must not carry Idempotent-Replayed: %r" % r


def assert_replay_of(replay, first, framing=True):
    """replay is first's stored answer, marked once as a replay; with framing, in one fresh
    Content-Length and no Transfer-Encoding."""
    assert replay.status == first.status, (replay, first)
    assert replay.body == first.body, (replay, first)
    assert replay.header_all("Idempotent-Replayed") == ["true"], replay
    if not framing:
        return
    cl = replay.header_all("Content-Length")
    assert cl == [str(len(replay.body))], "replay needs one fresh Content-Length: %r" % replay
    assert not replay.has_header("Transfer-Encoding"), replay


def assert_replayed(r, first):
    """r carries first's status and body and Idempotent-Replayed: true (once); its framing
    is not looked at."""
    assert_replay_of(r, first, framing=False)


def executions_of_body(upstream, body):
    h = hashlib.sha256(body).hexdigest()
    return sum(1 for e in upstream.history() if e["body_sha256"] == h)


def access_lines(p, n=None, so_far=False, requests_only=False):
    """The proxy's access-log lines (stdout, flushed every 100 ms and at exit), each parsed as
    JSON: n=None: every one, once the proxy has exited; n >= 1: once there are at least n
    (waits); n=0: after a span in which none may come; so_far=True (n=None): what p has
    flushed until now, without a wait, p running. requests_only: only the lines of a request
    (they carry a status; the log's own JSON lines do not), which n then counts. Audit lines,
    which log.audit's default sends to stdout too, are not access-log lines: left out."""
    def lines():
        out = [d for d in json_lines(p.stdout_text())  # a line being written is not one yet
               if d.get("audit") is not True]
        return [d for d in out if "status" in d] if requests_only else out

    if so_far:
        assert n is None, "so_far reads without waiting: no n"
    elif n is None:
        assert not p.alive(), "all of the access log: stop the proxy first, or wait for n lines"
    elif n:
        wait_until(lambda: len(lines()) >= n, what="%d access-log lines" % n)
    else:
        hold(0.35, "a span in which no access line may appear: stdout is flushed every 100 ms")
    return lines()


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


# --------------------------------------------------------------------------
# test servers
# --------------------------------------------------------------------------

def read_request(rfile):
    """One HTTP/1.1 request from rfile (a socket's makefile("rb")), its head parsed by
    http.client.parse_headers and its body read by Content-Length: (request line, headers,
    body), or None when the peer closed before a request. socket.timeout passes through."""
    line = rfile.readline(65537)
    if not line:
        return None
    headers = http.client.parse_headers(rfile)
    return line, headers, rfile.read(int(headers.get("Content-Length") or 0))


# --------------------------------------------------------------------------
# threads
# --------------------------------------------------------------------------

def in_background(fn, *args, **kw):
    ex = ThreadPoolExecutor(1)
    fut = ex.submit(fn, *args, **kw)
    ex.shutdown(wait=False)
    return fut


def concurrently(n, fn):
    """Run fn(i) for i in range(n) on n threads started together; results in order."""
    barrier = threading.Barrier(n)

    def run(i):
        barrier.wait(10)
        return fn(i)

    with ThreadPoolExecutor(n) as ex:
        return list(ex.map(run, range(n)))


# --------------------------------------------------------------------------
# the binary
# --------------------------------------------------------------------------

def run_bin(args, timeout=20, cwd=None):
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    p = subprocess.run([proxy_binary()] + args, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                       cwd=cwd, env=env)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def listening_sockets(port):
    """How many sockets listen on 127.0.0.1:port (/proc/net/tcp, state 0A): one per worker
    while it accepts; 0 once every worker has begun its drain (it stops accepting first)."""
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return sum(1 for r in rows if r[3] == "0A" and r[1] == "0100007F:%04X" % port)


def proc_status(pid):
    """VmRSS and VmHWM (the peak) of the process pid, from /proc/<pid>/status, in bytes."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                out[name] = int(value.split()[0]) * 1024
    return out


def rss_bytes(pid):
    """The resident set of pid (VmRSS), bytes; AssertionError when /proc has none."""
    rss = proc_status(pid).get("VmRSS")
    if rss is None:
        raise AssertionError("no VmRSS for pid %d" % pid)
    return rss


def _mapped(pid):
    with open("/proc/%d/maps" % pid) as f:
        return f.read()


def sanitized(pid):
    """Whether pid runs under ASan or TSan, whose shadow memory and quarantine no memory bound
    of the proxy's own can describe (/proc/<pid>/maps)."""
    maps = _mapped(pid)
    return "libasan" in maps or "libtsan" in maps


def under_tsan(pid):
    """Whether pid runs ThreadSanitizer's runtime (its memory is not the proxy's own); False
    when pid is gone."""
    try:
        return "libtsan" in _mapped(pid)
    except OSError:
        return False


def require_binary():
    if not os.path.exists(proxy_binary()):
        pytest.fail("proxy binary not found at %s" % proxy_binary())


def check_file(path, env=None, wrapper=()):
    """`idempotency-proxy -t -c path` under a command prefix wrapper, in this environment
    without UP_PORT and REDIS_HOST and with env added; the CompletedProcess (text)."""
    e = dict(os.environ)
    e.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    for var in ("UP_PORT", "REDIS_HOST"):
        e.pop(var, None)
    e.update(env or {})
    return subprocess.run(list(wrapper) + [proxy_binary(), "-t", "-c", str(path)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          errors="replace", timeout=30, env=e)


def check_config(tmp_path, cfg):
    """check_file on the config dict cfg, written as check.yaml."""
    path = tmp_path / "check.yaml"
    path.write_text(to_yaml(cfg) + "\n")
    return check_file(path)


def run_check(tmp_path, text, env=None, name="check.yaml", wrapper=()):
    """check_file on text, written as name; (returncode, stdout + stderr, path)."""
    path = tmp_path / name
    path.write_text(text)
    r = check_file(path, env, wrapper)
    return r.returncode, r.stdout + r.stderr, path


def rewrite(p, up, redis_server, **kw):
    """p's config file as build_config writes it for up and redis_server, with kw."""
    cfg = build_config(p.port, p.admin_port, up.url, redis_server.url, **kw)
    with open(p.config_path, "w") as f:
        f.write(to_yaml(cfg) + "\n")


def reload_and_wait(p, marker):
    """SIGHUP, then wait for one more log line containing marker ('reloaded', 'reload refused')."""
    before = p.stderr_text().count(marker)
    p.signal(signal.SIGHUP)
    wait_until(lambda: p.stderr_text().count(marker) > before, what=marker)


def assert_still_protects(p, upstream, path="/v1/payments"):
    """A keyed request is forwarded once and its retry replayed: the proxy serves as before."""
    k = new_key()
    first = p.post(path=path, key=k)
    assert first.status == 201, first
    assert_replayed(p.post(path=path, key=k), first)
    assert upstream.executions(k) == 1


# --------------------------------------------------------------------------
# records (encryption.keyring)
# --------------------------------------------------------------------------

def new_keyring_secret():
    """A keyring key's secret: base64 of 32 random bytes."""
    return base64.b64encode(os.urandom(32)).decode()


def keyring_text(*keys):
    """keys: [(id, secret)] as the YAML of a keyring."""
    return "keys:\n" + "".join("  - id: %s\n    secret: \"%s\"\n" % k for k in keys)


def write_keyring(path, *keys, text=None, mode=0o600):
    """The keyring file at path: keyring_text(*keys), or text as it is; mode; its path (str)."""
    with open(path, "w") as f:
        f.write(keyring_text(*keys) if text is None else text)
    os.chmod(path, mode)
    return str(path)


def raw(redis, key):
    """The value of a string key, as bytes."""
    v = redis.cmd("GET", key)
    return v.encode() if isinstance(v, str) else v


def records(redis):
    """{redis key: value bytes} of every record (IR1, IR2 or IR3)."""
    out = {}
    for k in redis.keys("*"):
        if redis.cmd("TYPE", k) == "string":
            v = raw(redis, k)
            if v[:2] == b"IR":
                out[k] = v
    return out


def head(value):
    """(version, state, fingerprint, answer flag, key id, route) of a record value
    (proxy/idem/record.h: IR3's key id and route come after its mode and list length)."""
    if value[:3] == b"IR1":
        return 1, chr(value[3]), value[36:68].decode(), "P", "", ""
    version = int(value[2:3])
    at = 128 if version == 3 else 123
    id_len, route_len = int(value[117:119]), int(value[119:123])
    key_id = value[at:at + id_len].decode()
    route = value[at + id_len:at + id_len + route_len].decode()
    return version, chr(value[3]), value[36:68].decode(), chr(value[116]), key_id, route


def pay(p, key, marker, body=None):
    """A payment whose body, answer (X-Demo-Binary echoes the body) and a header carry marker."""
    body = body if body is not None else b'{"amount": 100, "note": "%s"}' % marker.encode()
    return p.post(key=key, body=body, headers=[("X-Demo-Binary", "1"),
                                               ("X-Demo-Header", "X-Marker: %s-h" % marker)])


# --------------------------------------------------------------------------
# admin
# --------------------------------------------------------------------------

def new_token():
    return "tok-" + uuid.uuid4().hex + uuid.uuid4().hex


def token_file(tmp_path, token, name="admin-token"):
    path = tmp_path / name
    path.write_text(token + "\n")
    return path


def fingerprint(token):
    return hashlib.sha256(token.encode()).hexdigest()[:12]


def bearer(token):
    return [("Authorization", "Bearer " + token)]


def stdout_json(p):
    lines = []
    for line in p.stdout_text().splitlines():
        if line.strip():
            lines.append(json.loads(line))
    return lines


def access_ids(p, path="/v1/payments"):
    """The record ids of p's access-log lines for path (audit lines left out), oldest first."""
    return [l["record_id"] for l in stdout_json(p)
            if "audit" not in l and l.get("path") == path]


# the demo upstream reads the request, then closes the connection: the outcome is unknown
CLOSE = [("X-Demo-Fault", "close")]


def hold_outcome_unknown(p, key, headers=()):
    """A keyed POST to /v1/payments whose upstream closes the connection after reading it:
    502, and the record is held as outcome unknown. Returns the record id its access-log line
    printed."""
    seen = len(access_ids(p))
    r = p.post(key=key, headers=CLOSE + list(headers))
    assert r.status == 502, r
    return wait_until(lambda: access_ids(p)[seen:] and access_ids(p)[seen],
                      what="the access-log line of the held request")


def start_with_admin_token(start_proxy, tmp_path, token, route="/v1/payments*", **kw):
    """A proxy protecting route, its admin listener on 0.0.0.0 behind token."""
    return start_proxy(routes=[{"path": route}], admin_host="0.0.0.0",
                       admin_token_file=token_file(tmp_path, token), **kw)


def audit_lines(p):
    return [l for l in stdout_json(p) if l.get("audit") is True]


# the audit actions of requests that change nothing (docs/operations.md "The audit trail")
READ_ACTIONS = {"show", "list", "lookup", "inbox", "none", "bulk-resolve-dry-run",
                "bulk-purge-dry-run"}


def change_lines(p):
    """The audit lines of changes, refused or not, as the proxy's reads and authentication
    refusals leave out: one per change, one per record a bulk change changed (not the bulk
    request's own line, whose record_id is null)."""
    return [l for l in audit_lines(p)
            if l["action"] not in READ_ACTIONS and l["status"] not in (401, 429) and
            not (l["action"] in ("bulk-resolve", "bulk-purge") and l["record_id"] is None and
                 l["status"] == 200)]


def access_record_id(p, path):
    """The record id of the access-log line of path (waits for the 100 ms flush)."""
    def find():
        ids = [l["record_id"] for l in stdout_json(p) if "audit" not in l and l["path"] == path]
        return ids[-1] if ids else None
    return wait_until(find, what="an access-log line for %s" % path)


def record_id_cli(p, path, key, headers=(), method=None):
    """The binary's `record-id` answer for a request to path with key (pure: no Redis is
    asked): its JSON document and its stderr."""
    args = ["record-id", "-c", p.config_path, "--path", path, "--key", key]
    for h in headers:
        args += ["--header", h]
    if method:
        args += ["--method", method]
    rc, out, err = run_bin(args, timeout=30, cwd=p.workdir)
    assert rc == 0, err
    return json.loads(out), err


def redis_contents(redis):
    """Every key's value by its type: what an admin change would alter (consumer-group
    bookkeeping, which the inbox's polls touch, is left out)."""
    out = {}
    for key in redis.keys():
        kind = redis.cmd("TYPE", key)
        if kind == "string":
            out[key] = redis.cmd("GET", key)
        elif kind == "stream":
            out[key] = redis.cmd("XRANGE", key, "-", "+")
        elif kind == "zset":
            out[key] = redis.cmd("ZRANGE", key, 0, -1, "WITHSCORES")
        elif kind == "hash":
            out[key] = sorted(redis.cmd("HGETALL", key))
        else:
            out[key] = (kind, redis.cmd("DUMP", key))
    return out


# --------------------------------------------------------------------------
# node
# --------------------------------------------------------------------------

CLIENTS = os.path.join(REPO, "tests", "clients")


def node_packages():
    """(node, node_modules) with tests/clients' locked packages (the Stripe and Svix clients,
    the OpenAPI validator): `npm ci` runs once per lock file, into
    <cache>/idempotency-proxy-tests/node-<hash>/ (<cache>: $XDG_CACHE_HOME or ~/.cache). Fails
    the test, not skips it, without node and npm."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("this test needs node and npm on PATH to run tests/clients' packages "
                    "(tests/install-deps.sh --tests installs Debian's nodejs and npm)",
                    pytrace=False)
    files = ("package.json", "package-lock.json")
    digest = hashlib.sha256()
    for name in files:
        with open(os.path.join(CLIENTS, name), "rb") as f:
            digest.update(f.read())
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = os.path.join(cache, "idempotency-proxy-tests", "node-" + digest.hexdigest()[:16])
    done = os.path.join(root, "installed")
    if not os.path.exists(done):
        staging = "%s.tmp%d" % (root, os.getpid())
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        for name in files:
            shutil.copy(os.path.join(CLIENTS, name), staging)
        r = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                           cwd=staging, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=600)
        if r.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            pytest.fail("npm ci in %s failed (%d):\n%s%s" % (staging, r.returncode,
                                                           r.stdout[-3000:], r.stderr[-3000:]),
                        pytrace=False)
        with open(os.path.join(staging, "installed"), "w") as f:
            f.write("ok\n")
        try:
            os.rename(staging, root)      # atomic: a parallel run may have won the race
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    return node, os.path.join(root, "node_modules")
