"""harness.py - real processes over real sockets for the integration suite.

Plain helpers (no pytest in here) so that they can be used from conftest.py,
from test modules and from a Python prompt while debugging:

  http_request()   a raw-socket HTTP/1.1 client (duplicate headers, raw header
                   lines, binary bodies, a hard timeout)
  RedisServer      a throw-away redis-server with a tiny RESP client
  Upstream         tests/upstream/payments_api.py as a process
  Proxy            build/proxy/idempotency-proxy as a process
  to_yaml()        a small YAML emitter for the proxy's config file
"""

import json
import os
import random
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
UPSTREAM_SCRIPT = os.path.join(REPO, "tests", "upstream", "payments_api.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
DEFAULT_TIMEOUT = 15.0

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer")


def proxy_binary():
    return os.environ.get("IDEM_PROXY_BIN",
                          os.path.join(REPO, "build", "proxy", "idempotency-proxy"))


class _PortRegistry:
    """The ports this test run has handed out, shared by every pytest-xdist worker of the run.

    A port handed out stays free until its server binds it, and two xdist workers are two
    processes: a port is recorded in a file named by the run (PYTEST_XDIST_TESTRUNUID, under an
    flock) so that no other worker hands it out again.
    Without xdist the set stays in this process.
    """

    def __init__(self):
        self.local = set()
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
        self.path = (os.path.join("/tmp", "idem-test-ports-%s" % re.sub(r"\W", "", run))
                     if run else None)

    def claim(self, pick, also=lambda port: ()):
        """pick() -> a candidate port, or None. The first candidate that no one had, with the
        ports also(port) names (None: unusable), none of them had either; all now recorded."""
        if self.path is None:
            return self._first_new(pick, also, self.local)
        import fcntl
        with open(self.path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            taken = {int(x) for x in f.read().split()}
            before = set(taken)
            port = self._first_new(pick, also, taken)
            f.write("".join("%d\n" % x for x in taken - before))
            f.flush()
            return port

    @staticmethod
    def _first_new(pick, also, taken):
        while True:
            port = pick()
            if port is None or port in taken:
                continue
            more = also(port)
            if more is None or any(x in taken for x in more):
                continue
            taken.add(port)
            taken.update(more)
            return port


_ports_handed_out = _PortRegistry()


# Ports are handed out below the kernel's ephemeral range (ip_local_port_range), from
# _PORT_FLOOR up: a port in that range, free when it is handed out, can become the local port
# of any outgoing connection (the suite makes thousands a second) before the server it is for
# binds it, and that server then fails with EADDRINUSE (a cluster node did, once in a loaded
# run). Outgoing connections never take a port below the range.
_PORT_FLOOR = 10000
_port_choice = random.SystemRandom()


def _ephemeral_low():
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port):
    """Whether 127.0.0.1:port can be bound now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _unbound_port(span=0):
    """A port on 127.0.0.1 that nobody has bound now, such that port + span also lies below the
    ephemeral range (span 10000: a cluster node's bus port); the kernel's own choice, in the
    ephemeral range, only where the range leaves no room below it."""
    top = _ephemeral_low() - 1 - span
    if top - _PORT_FLOOR >= 1000:
        for _ in range(100):
            port = _port_choice.randint(_PORT_FLOOR, top)
            if _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port():
    """A TCP port on 127.0.0.1 that nobody listened on a moment ago, below the kernel's
    ephemeral range (so no outgoing connection takes it before its server binds it).

    A port is never handed out twice in one test run, across xdist workers too: two calls
    for a proxy's listen and admin_listen must differ.
    """
    return _ports_handed_out.claim(_unbound_port)


def port_accepts(port, host="127.0.0.1", timeout=0.2):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------
# HTTP client
# --------------------------------------------------------------------------

class Response:
    """status, reason, headers as [(name, value)] in wire order, body bytes."""

    def __init__(self, status, reason, headers, body, elapsed, interim=()):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.elapsed = elapsed
        self.interim = list(interim)  # 1xx responses seen before this one

    def header_all(self, name):
        n = name.lower()
        return [v for k, v in self.headers if k.lower() == n]

    def header(self, name, default=None):
        vals = self.header_all(name)
        return vals[0] if vals else default

    def has_header(self, name):
        return bool(self.header_all(name))

    @property
    def replayed(self):
        return self.header("Idempotent-Replayed") == "true"

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    @property
    def content_type(self):
        return (self.header("Content-Type") or "").split(";")[0].strip().lower()

    def is_problem(self):
        return self.content_type == "application/problem+json"

    def problem(self):
        assert self.is_problem(), "not a problem+json answer: %r" % self
        return self.json()

    def __repr__(self):
        body = self.body if len(self.body) <= 400 else self.body[:400] + b"..."
        return "<Response %d %s headers=%r body=%r elapsed=%.3fs>" % (
            self.status, self.reason, self.headers, body, self.elapsed)


class HTTPError(Exception):
    pass


class _Reader:
    def __init__(self, sock, deadline):
        self.sock = sock
        self.buf = b""
        self.deadline = deadline
        self.eof = False

    def _fill(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("HTTP response not complete within the timeout")
        self.sock.settimeout(left)
        data = self.sock.recv(65536)
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def line(self):
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise HTTPError("connection closed in the middle of a line: %r" % self.buf)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exactly(self, n):
        while len(self.buf) < n:
            if not self._fill():
                raise HTTPError("connection closed after %d of %d body bytes"
                                % (len(self.buf), n))
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def until_close(self):
        while self._fill():
            pass
        data, self.buf = self.buf, b""
        return data


def _encode_header_lines(headers):
    out = []
    for h in headers or ():
        if isinstance(h, bytes):
            out.append(h)
        elif isinstance(h, str):
            out.append(h.encode("latin-1"))
        else:
            k, v = h
            k = k.encode("latin-1") if isinstance(k, str) else k
            v = v.encode("latin-1") if isinstance(v, str) else v
            out.append(k + b": " + v)
    return out


def build_request(method, path, headers=(), body=None, host="127.0.0.1", port=None,
                  content_length=True):
    """Bytes of one request. headers: (name, value) pairs or raw str/bytes lines."""
    lines = [("%s %s HTTP/1.1" % (method, path)).encode("latin-1")]
    given = _encode_header_lines(headers)
    names = {l.split(b":", 1)[0].strip().lower() for l in given}
    if b"host" not in names:
        lines.append(b"Host: " + ("%s:%s" % (host, port) if port else host).encode())
    lines.extend(given)
    if isinstance(body, str):
        body = body.encode("utf-8")
    if body is None:
        body = b""
    if content_length and b"content-length" not in names and b"transfer-encoding" not in names:
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def read_response(sock, method="POST", timeout=DEFAULT_TIMEOUT, reader=None, start=None):
    start = time.monotonic() if start is None else start
    r = reader or _Reader(sock, start + timeout)
    interim = []
    while True:
        status_line = r.line()
        m = re.match(rb"HTTP/1\.[01] (\d{3})(?: (.*))?$", status_line)
        if not m:
            raise HTTPError("bad status line %r" % status_line)
        status = int(m.group(1))
        reason = (m.group(2) or b"").decode("latin-1")
        headers = []
        while True:
            line = r.line()
            if line == b"":
                break
            if b":" not in line:
                raise HTTPError("bad header line %r" % line)
            k, v = line.split(b":", 1)
            headers.append((k.decode("latin-1"), v.strip(b" \t").decode("latin-1")))
        if 100 <= status < 200 and status != 101:
            interim.append((status, headers))
            continue
        break
    hmap = [(k.lower(), v) for k, v in headers]
    te = [v.lower() for k, v in hmap if k == "transfer-encoding"]
    cl = [v for k, v in hmap if k == "content-length"]
    if method == "HEAD" or status in (204, 304):
        body = b""
    elif te and "chunked" in te[-1]:
        parts = []
        while True:
            size_line = r.line()
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while r.line() != b"":  # trailers
                    pass
                break
            parts.append(r.exactly(size))
            if r.exactly(2) != b"\r\n":
                raise HTTPError("chunk not followed by CRLF")
        body = b"".join(parts)
    elif cl:
        if len(set(cl)) != 1:
            raise HTTPError("conflicting Content-Length headers %r" % cl)
        body = r.exactly(int(cl[0]))
    else:
        body = r.until_close()
    return Response(status, reason, headers, body, time.monotonic() - start, interim)


def http_request(port, method="GET", path="/", headers=(), body=None, timeout=DEFAULT_TIMEOUT,
                 host="127.0.0.1", raw=None):
    """One request on a fresh connection; returns a Response.

    headers: list of (name, value) pairs (duplicates kept, order kept) or raw
    header lines as str/bytes (sent verbatim, e.g. "Idempotency-Key: a\\x01b").
    raw: bytes sent verbatim instead of building a request.
    Raises socket.timeout if the whole exchange takes longer than timeout.
    """
    start = time.monotonic()
    data = raw if raw is not None else build_request(method, path, headers, body, host, port)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(data)
        return read_response(sock, method, timeout, start=start)


class Connection:
    """A keep-alive connection for several requests in a row."""

    def __init__(self, port, host="127.0.0.1", timeout=DEFAULT_TIMEOUT):
        self.port, self.host, self.timeout = port, host, timeout
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.reader = None

    def request(self, method, path, headers=(), body=None):
        start = time.monotonic()
        self.sock.sendall(build_request(method, path, headers, body, self.host, self.port))
        if self.reader is None:
            self.reader = _Reader(self.sock, start + self.timeout)
        self.reader.deadline = start + self.timeout
        return read_response(self.sock, method, self.timeout, reader=self.reader, start=start)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def get_json(port, path, timeout=DEFAULT_TIMEOUT):
    r = http_request(port, "GET", path, timeout=timeout)
    assert r.status == 200, r
    return r.json()


# --------------------------------------------------------------------------
# processes
# --------------------------------------------------------------------------

def _terminate(proc, sig=signal.SIGTERM, timeout=10.0):
    """Send sig, wait up to timeout; SIGKILL after that. Returns (rc, killed)."""
    if proc.poll() is not None:
        return proc.returncode, False
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass
    try:
        return proc.wait(timeout), False
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(5), True


class RedisError(Exception):
    pass


def redis_server_binary():
    """$IDEM_REDIS_SERVER (e.g. valkey-server), default redis-server."""
    return os.environ.get("IDEM_REDIS_SERVER") or "redis-server"


def documented_lines(doc, section, line):
    """{heading: words} of every `### heading` under `## section` of docs/doc whose text has a
    line matching the regex `line` (re.M), split into words: group 1 of the match."""
    with open(os.path.join(REPO, "docs", doc), encoding="utf-8") as f:
        text = f.read()
    start = text.index("\n## %s\n" % section)
    end = text.find("\n## ", start + 1)
    found = {}
    for m in re.finditer(r"^### ([^\n]+)\n(.*?)(?=^### |\Z)",
                         text[start:end if end > 0 else len(text)], re.M | re.S):
        match = re.search(line, m.group(2), re.M)
        if match:
            found[m.group(1).strip()] = match.group(1).split()
    return found


def documented_acl_users():
    """{heading: [rules]} of every `### ... user` under `## ACL users` in docs/redis.md, each
    the rules of its `ACL SETUSER idem-proxy ...` line (`>PASSWORD` as written)."""
    return documented_lines("redis.md", "ACL users", r"^ACL SETUSER idem-proxy (.+)$")


def documented_acl_rules(heading, password):
    """The rules of docs/redis.md's ACL line under `### heading`, its `>PASSWORD` as password."""
    users = documented_acl_users()
    assert heading in users, "docs/redis.md has no `### %s` with an ACL SETUSER line" % heading
    rules = [">" + password if r == ">PASSWORD" else r for r in users[heading]]
    assert ">" + password in rules, rules
    return rules


def documented_access_strings():
    """{heading: [rules]} of every `### ...` under `## Access strings` in
    docs/managed-redis.md that has an access string (a fenced line starting with `on `): the
    strings a managed service takes, without a password."""
    return documented_lines("managed-redis.md", "Access strings", r"^```\n(on .+)\n```$")


class RedisServer:
    """redis-server on 127.0.0.1:port with no persistence; restartable.

    binary: the server program, default redis_server_binary() ($IDEM_REDIS_SERVER,
    so the suite also runs against valkey-server); both take the same options.
    """

    def __init__(self, workdir, port=None, extra_args=(), password=None, unix_path=None,
                 binary=None, host="127.0.0.1"):
        self.workdir = workdir
        self.binary = binary or redis_server_binary()
        self.host = host  # the loopback address it binds (127.0.0.2 in a test's namespace)
        self.port = port or free_port()
        self.extra_args = list(extra_args)
        self.password = password
        self.unix_path = unix_path
        if password:
            self.extra_args += ["--requirepass", password]
        if unix_path:
            self.extra_args += ["--unixsocket", unix_path, "--unixsocketperm", "700"]
        self.proc = None
        self.log_path = os.path.join(workdir, "redis-%d.log" % self.port)
        self.acl = None  # (user, password, rules): set on each start, and named by url

    def run_as(self, user, password, rules):
        """From now on the proxy connects as user (ACL SETUSER user reset rules..., applied
        now and after every restart); the test's own commands stay the default user's."""
        self.acl = (user, password, list(rules))
        if self.proc is not None and self.proc.poll() is None:
            self.cmd("ACL", "SETUSER", user, "reset", *rules)
        return self

    @property
    def url(self):
        if self.acl is not None:
            return "redis://%s:%s@%s:%d/0" % (self.acl[0], self.acl[1], self.host, self.port)
        return "redis://%s:%d/0" % (self.host, self.port)

    def url_db(self, db):
        return "redis://%s:%d/%d" % (self.host, self.port, db)

    def argv(self):
        """The server's command line (a subclass may start another server the same way)."""
        return [self.binary, "--port", str(self.port), "--bind", self.host,
                "--save", "", "--appendonly", "no", "--dir", self.workdir,
                "--daemonize", "no", "--protected-mode", "no",
                "--logfile", self.log_path] + self.extra_args

    def start(self, timeout=10.0):
        assert self.proc is None or self.proc.poll() is not None, "redis already running"
        os.makedirs(self.workdir, exist_ok=True)
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %s: %s"
                                   % (self.binary, self.proc.returncode, self._log_tail()))
            try:
                if self.cmd("PING") == "PONG":
                    if self.acl is not None:
                        self.cmd("ACL", "SETUSER", self.acl[0], "reset", *self.acl[2])
                    return self
            except (OSError, RedisError):
                pass
            time.sleep(0.02)
        raise RuntimeError("%s did not answer PING: %s" % (self.binary, self._log_tail()))

    def _log_tail(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc is not None:
            self.resume()
            _terminate(self.proc, signal.SIGTERM, 10)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def pause(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    # -- a tiny RESP2 client: one connection per command keeps it simple
    def cmd(self, *args, timeout=5.0, db=0):
        """One command on a fresh connection (AUTH and SELECT first when needed)."""
        pre = []
        if self.password:
            pre.append(("AUTH", self.password))
        if db:
            pre.append(("SELECT", db))
        data = b"".join(_resp_encode(c) for c in pre + [args])
        with socket.create_connection((self.host, self.port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(data)
            reader = _Reader(s, time.monotonic() + timeout)
            for _ in pre:
                _resp_read(reader)
            return _resp_read(reader)

    def keys(self, pattern="*", db=0):
        return sorted(self.cmd("KEYS", pattern, db=db), key=str)

    def flushall(self):
        return self.cmd("FLUSHALL")


def _resp_encode(args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, int):
            a = str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


def _resp_read(r):
    line = r.line()
    t, rest = line[:1], line[1:]
    if t == b"+":
        return rest.decode("utf-8", "backslashreplace")
    if t == b"-":
        raise RedisError(rest.decode("utf-8", "backslashreplace"))
    if t == b":":
        return int(rest)
    if t == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = r.exactly(n + 2)[:-2]
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data
    if t == b"*":
        n = int(rest)
        if n < 0:
            return None
        return [_resp_read(r) for _ in range(n)]
    raise RedisError("bad RESP line %r" % line)


class Upstream:
    """tests/upstream/payments_api.py on 127.0.0.1:port (port 0: free_port() picks a new one
    at each start, below the kernel's ephemeral range: a port the kernel picked could be one
    that another test's proxy still sends to after its own upstream stopped)."""

    def __init__(self, workdir, port=0, extra_args=(), unix_path=None):
        self.workdir = workdir
        self.requested_port = port
        self.extra_args = list(extra_args)
        self.unix_path = unix_path
        self.proc = None
        self.port = None
        self.stderr_path = os.path.join(workdir, "upstream-%d.err" % id(self))

    def start(self, timeout=10.0):
        if self.unix_path:
            where = ["--unix", self.unix_path]
        else:
            where = ["--listen", "127.0.0.1:%d" % (self.requested_port or free_port())]
        self._err = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen([PYTHON, UPSTREAM_SCRIPT] + where + self.extra_args,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._err)
        deadline = time.monotonic() + timeout
        line = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                line = self.proc.stdout.readline()
                break
            if self.proc.poll() is not None:
                break
        m = re.match(rb"listening on (?:unix:(.+)|(.+):(\d+))\s*$", line)
        if not m:
            self.stop()
            raise RuntimeError("upstream did not start (%r): %s" % (line, self.stderr_text()))
        if m.group(3):
            self.port = int(m.group(3))
        # a control connection target: with a unix socket we cannot inspect over TCP
        return self

    def stderr_text(self):
        try:
            with open(self.stderr_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    @property
    def url(self):
        if self.unix_path:
            return "unix:%s" % self.unix_path
        return "http://127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc is not None:
            rc, _ = _terminate(self.proc, signal.SIGTERM, 10)
            try:
                self.proc.stdout.close()
            except OSError:
                pass
            try:
                self._err.close()
            except (OSError, AttributeError):
                pass
            return rc
        return None

    # -- inspection (over TCP; not available for a unix-socket upstream)
    def _get(self, path):
        if self.unix_path:
            return _unix_get_json(self.unix_path, path)
        return get_json(self.port, path)

    def executions(self, key):
        return self._get("/_demo/executions?key=" + urllib.parse.quote(key, safe=""))["count"]

    def stats(self):
        return self._get("/_demo/stats")

    def total(self):
        return self.stats()["total"]

    def requests(self):
        """Every request outside /_demo/, GETs included."""
        return self.stats()["requests"]

    def last_headers(self):
        return self._get("/_demo/last-headers")

    def last_request(self):
        return self._get("/_demo/last-request")

    def history(self):
        return self._get("/_demo/history")

    def transfer(self, tag):
        """The record of the large transfer named tag (/_demo/blob, /_demo/sink, an execution's
        demo_blob=N: see payments_api.py), None while there is none."""
        r = http_request(self.port, "GET",
                         "/_demo/transfers?tag=" + urllib.parse.quote(tag, safe=""))
        if r.status == 404:
            return None
        assert r.status == 200, r
        return r.json()

    def reset(self):
        if self.unix_path:
            raise NotImplementedError
        r = http_request(self.port, "POST", "/_demo/reset")
        assert r.status == 200, r


def _unix_get_json(path, url_path, timeout=DEFAULT_TIMEOUT):
    start = time.monotonic()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(build_request("GET", url_path, host="localhost"))
        r = read_response(s, "GET", timeout, start=start)
    assert r.status == 200, r
    return r.json()


# --------------------------------------------------------------------------
# YAML
# --------------------------------------------------------------------------

_PLAIN_OK = re.compile(r"^[A-Za-z0-9_/.][A-Za-z0-9_/.:*+@%=,-]*$")
_YAML_SPECIAL = re.compile(r"^(?:true|false|yes|no|on|off|null|~|y|n|[-+]?[0-9][0-9_.eE+-]*)$",
                           re.IGNORECASE)


def yaml_scalar(v):
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return '""'
    if isinstance(v, (int, float)):
        return str(v)
    s = str(v)
    if _PLAIN_OK.match(s) and not _YAML_SPECIAL.match(s) and ": " not in s and " #" not in s:
        return s
    return json.dumps(s)  # a JSON string is a valid YAML double-quoted scalar


def to_yaml(obj, indent=0):
    """Block-style YAML for dicts of dicts/lists/scalars (lists of scalars in flow style)."""
    pad = "  " * indent
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, dict):
                if not v:
                    out.append("%s%s: {}" % (pad, k))
                else:
                    out.append("%s%s:" % (pad, k))
                    out.append(to_yaml(v, indent + 1))
            elif isinstance(v, (list, tuple)):
                if all(not isinstance(x, (dict, list, tuple)) for x in v):
                    out.append("%s%s: [%s]" % (pad, k, ", ".join(yaml_scalar(x) for x in v)))
                else:
                    out.append("%s%s:" % (pad, k))
                    out.append(to_yaml(list(v), indent + 1))
            else:
                out.append("%s%s: %s" % (pad, k, yaml_scalar(v)))
    elif isinstance(obj, list):
        for item in obj:
            if isinstance(item, dict):
                sub = to_yaml(item, indent + 1).split("\n")
                first = sub[0][len(pad) + 2:]
                out.append("%s- %s" % (pad, first))
                out.extend(sub[1:])
            else:
                out.append("%s- %s" % (pad, yaml_scalar(item)))
    return "\n".join(l for l in out if l != "")


# --------------------------------------------------------------------------
# the proxy
# --------------------------------------------------------------------------

DEFAULT_ROUTES = [
    {"path": "/v1/payments*"},                      # POST/PATCH protected, key optional
    {"path": "/v1/strict*", "require_key": True},
]

TOP_LEVEL = ("listen", "admin_listen", "admin", "workers", "upstream", "redis", "limits",
             "defaults", "routes", "errors", "log", "encryption", "health_listen", "readiness",
             "replayed_header_on_first")

# IDEM_TEST_WORKERS=N runs every proxy that build_config writes with `workers: N`
# (tests/run.sh runs the suite once that way); a test's own workers= wins.
TEST_WORKERS = os.environ.get("IDEM_TEST_WORKERS")


def deep_merge(base, over):
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def build_config(port, admin_port, upstream_url, redis_url, routes=None, admin_host="127.0.0.1",
                 **overrides):
    """The proxy's config as a dict.

    overrides: a top-level section name (upstream=, redis=, limits=, defaults=)
    takes a dict that is merged into that section; listen=/admin_listen=/admin=/routes=
    replace; any other keyword is a route policy and goes into `defaults:`.
    A value of None removes the key. admin_host: the address admin_listen binds.
    """
    cfg = {
        "listen": "127.0.0.1:%d" % port,
        "admin_listen": "%s:%d" % (admin_host, admin_port) if admin_port else "",
        "workers": int(TEST_WORKERS) if TEST_WORKERS else None,
        "upstream": {"url": upstream_url, "connect_timeout": "2s", "timeout": "30s"},
        "redis": {"url": redis_url, "key_prefix": "idem", "timeout": "500ms"},
        "limits": {"max_request_body": "1MiB", "max_stored_response": "1MiB"},
        "defaults": {},
        "routes": list(DEFAULT_ROUTES if routes is None else routes),
    }
    for k, v in overrides.items():
        if k in ("upstream", "redis", "limits", "defaults") and isinstance(v, dict):
            cfg[k] = deep_merge(cfg[k], v)
        elif k in TOP_LEVEL:
            cfg[k] = v
        else:
            cfg["defaults"][k] = v

    def prune(d):
        if isinstance(d, dict):
            return {k: prune(v) for k, v in d.items() if v is not None}
        return d
    cfg = prune(cfg)
    if not cfg["defaults"]:
        del cfg["defaults"]
    return cfg


class Proxy:
    """The daemon as a process: BIN -c FILE, stdout and stderr to files."""

    def __init__(self, workdir, name, config_text, port, admin_port, env=None, args=None,
                 wrapper=None):
        self.workdir = workdir
        self.wrapper = list(wrapper or [])  # a command prefix, e.g. ["ip", "netns", "exec", NS]
        self.name = name
        self.port = port
        self.admin_port = admin_port
        self.config_path = os.path.join(workdir, "%s.yaml" % name)
        self.stdout_path = os.path.join(workdir, "%s.out" % name)
        self.stderr_path = os.path.join(workdir, "%s.err" % name)
        self.env = dict(os.environ)
        self.env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        self.env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
        self.env.update(env or {})
        self.args = args
        self.proc = None
        self.returncode = None
        with open(self.config_path, "w") as f:
            f.write(config_text)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    @property
    def admin_url(self):
        return "http://127.0.0.1:%d" % self.admin_port if self.admin_port else None

    def start(self, timeout=20.0, wait_port=True):
        bin_ = proxy_binary()
        args = [bin_, "-c", self.config_path] if self.args is None else [bin_] + self.args
        args = self.wrapper + args
        self._out = open(self.stdout_path, "ab")
        self._err = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._out,
                                     stderr=self._err, env=self.env, cwd=self.workdir)
        if not wait_port:
            return self
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("proxy exited with %s before listening on %d.\nstderr:\n%s"
                                   % (self.proc.returncode, self.port, self.stderr_text()))
            if port_accepts(self.port):
                break
            time.sleep(0.02)
        else:
            raise RuntimeError("proxy did not listen on %d within %.0fs.\nstderr:\n%s"
                               % (self.port, timeout, self.stderr_text()))
        # Each worker binds listen, then admin_listen: wait for the admin port too, so that a
        # test's first admin request does not race the bind on a loaded machine. A config
        # whose admin listener is meant to fail leaves the test to see that for itself.
        while self.admin_port and time.monotonic() < deadline and self.proc.poll() is None:
            if port_accepts(self.admin_port):
                break
            time.sleep(0.02)
        return self

    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def drain_bound_s(self):
        """How long a SIGTERM may take by the docs (operations.md: the proxy finishes in-flight
        exchanges for at most upstream.timeout + 5 s), from this proxy's own config."""
        try:
            import yaml
            with open(self.config_path) as f:
                cfg = yaml.safe_load(f) or {}
            timeout = (cfg.get("upstream") or {}).get("timeout") or "30s"
        except Exception:  # a config a test wrote broken on purpose: the default
            timeout = "30s"
        return duration_s(str(timeout)) + 5.0

    def stop(self, timeout=15.0):
        """SIGTERM and wait; returns the exit code (None if it had to be killed)."""
        if self.proc is None:
            return None
        rc, killed = _terminate(self.proc, signal.SIGTERM, timeout)
        self._close_files()
        self.returncode = None if killed else rc
        return self.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self._close_files()

    def wait(self, timeout=15.0):
        rc = self.proc.wait(timeout)
        self._close_files()
        return rc

    def _close_files(self):
        for f in (getattr(self, "_out", None), getattr(self, "_err", None)):
            try:
                if f:
                    f.flush()
            except (OSError, ValueError):
                pass

    def stderr_text(self):
        return read_text(self.stderr_path)

    def stdout_text(self):
        return read_text(self.stdout_path)

    def sanitizer_report(self):
        text = self.stderr_text() + self.stdout_text()
        if any(m in text for m in SANITIZER_MARKERS):
            return text
        return None

    # -- convenience
    def request(self, method="POST", path="/v1/payments", headers=(), body=None, **kw):
        return http_request(self.port, method, path, headers, body, **kw)

    def post(self, path="/v1/payments", key=None, body=b'{"amount": 100}', headers=(), **kw):
        hs = list(headers)
        if key is not None:
            hs.insert(0, ("Idempotency-Key", key))
        if body is not None and not any(
                (isinstance(h, tuple) and h[0].lower() == "content-type") for h in hs):
            hs.append(("Content-Type", "application/json"))
        return http_request(self.port, "POST", path, hs, body, **kw)

    def admin(self, method, path, **kw):
        assert self.admin_port, "admin listener disabled"
        return http_request(self.admin_port, method, path, **kw)


def duration_s(text):
    """A config duration ("500ms", "30s", "2m", "1h") in seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*", text)
    assert m, "not a duration: %r" % text
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def read_text(path):
    """A log file's text so far ("" when it does not exist yet)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


# One generous bound for every wait on a state: it only catches a hang. A test that waits for
# what it needs never fails because a busy machine was slow; it fails when the state never comes.
# IDEM_TEST_WAIT_S raises it for a very slow machine (a sanitizer build under stress, say).
WAIT_S = float(os.environ.get("IDEM_TEST_WAIT_S", "30"))


def wait_until(pred, timeout=None, interval=0.02, what="condition"):
    """pred()'s first truthy value within timeout seconds (default WAIT_S, the bound that only
    catches a hang), else AssertionError naming what and pred's last value.

    A timeout given here is part of what the test asserts (a contract's upper bound, such as
    "followed within 2 s"); a wait for a state leaves it out."""
    timeout = WAIT_S if timeout is None else timeout
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("not within %.1f s: %s (last: %r)" % (timeout, what, last))


wait_for = wait_until


def hold(seconds, why):
    """Let `seconds` of time pass where the time itself is what the test is about: a lease, a
    retention or a backoff that must run out, or a span in which something must NOT happen.
    `why` says which (it is the reason this is not a wait for a state; tests never call
    time.sleep themselves: tests/unit/check_test_waits.py)."""
    assert why, "hold() needs the reason the time must pass"
    if seconds > 0:
        time.sleep(seconds)


def hold_until(t, why):
    """hold() until time.monotonic() reaches t."""
    hold(t - time.monotonic(), why)


def pace(seconds):
    """A client's think time between the requests of a load loop (never a wait for a state)."""
    time.sleep(seconds)


def stopped_after(build):
    """The body of a factory fixture (`yield from stopped_after(build)`): the test gets
    make(**kw), which builds build(n, **kw) (n: how many were made before it), starts it and
    returns what start() returns; every one made is stopped at teardown, in order, also one
    whose start failed."""
    made = []

    def make(**kw):
        thing = build(len(made), **kw)
        made.append(thing)
        return thing.start()

    yield make
    for thing in made:
        thing.stop()


def readyz(p):
    """The status of p's /readyz."""
    return p.admin("GET", "/readyz").status


REPLICAS_SHORT = (503, "too few replicas acknowledge writes (redis.min_replicas)")


def unready_reason(p):
    """p's /readyz as (status, the reason line)."""
    r = p.admin("GET", "/readyz")
    return r.status, r.body.decode().strip()


def wait_ready(p, timeout=20):
    """/readyz answers 200 within timeout seconds; else the last /readyz body and the proxy's
    log tail in the AssertionError, so that a slow start says which check held it."""
    try:
        wait_until(lambda: readyz(p) == 200, timeout=timeout, interval=0.05, what="/readyz 200")
    except AssertionError as e:
        r = p.admin("GET", "/readyz")
        log = p.stderr_text() + p.stdout_text()
        raise AssertionError("%s; /readyz %d %r; log tail:\n%s"
                             % (e, r.status, r.body[:400], log[-3000:])) from None


def log_lines(p, *words):
    """Every stderr line of p that holds every word."""
    return [l for l in p.stderr_text().splitlines() if all(w in l for w in words)]


def log_line(p, *words, timeout=15):
    """The first stderr line of p that holds every word (waits for it)."""
    return wait_until(lambda: log_lines(p, *words), timeout=timeout,
                      what="a log line with %r" % (words,))[0]


# --------------------------------------------------------------------------
# a wall clock that steps (libfaketime)

def faketime_library():
    """libfaketime's thread-safe build (the proxy has threads), or None when not installed."""
    import glob
    libs = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1") +
                  glob.glob("/usr/local/lib/faketime/libfaketimeMT.so.1"))
    return libs[0] if libs else None


class SteppedClock:
    """The environment that runs a process under libfaketime with its wall clock offset by
    what a file says, read at every call (FAKETIME_NO_CACHE), and its monotonic clock left
    alone (FAKETIME_DONT_FAKE_MONOTONIC: 0.9.10 ignores the bare DONT_FAKE_MONOTONIC).
    step("-60") moves the wall clock of every process started with .env 60 s back."""

    def __init__(self, workdir, library):
        self.path = os.path.join(workdir, "faketimerc")
        self.step("+0")
        preload = " ".join(x for x in (library, os.environ.get("LD_PRELOAD")) if x)
        self.env = {"LD_PRELOAD": preload, "FAKETIME_TIMESTAMP_FILE": self.path,
                    "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                    # a sanitizer build checks that its runtime comes first: here it does not
                    "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS",
                                                   "detect_leaks=1:abort_on_error=0")
                    + ":verify_asan_link_order=0"}

    def step(self, offset):
        with open(self.path + ".new", "w") as f:
            f.write(offset + "\n")
        os.replace(self.path + ".new", self.path)  # whole: never a half-written line


def wall_clock_of(p):
    """p's wall clock, unix seconds, from the Date header of its admin answer."""
    import email.utils
    date = p.admin("GET", "/healthz").header("Date")
    return email.utils.parsedate_to_datetime(date).timestamp()
