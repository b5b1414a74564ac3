"""Helpers the proxy's behaviour tests share (test_replay.py, test_leases.py, test_store.py
and the other feature files): fresh keys, assertions on problem answers and replays, threads
that run requests together, the binary run on a command line. Plain functions over
harness.py's Response and RedisServer; nothing here starts a process of its own but run_bin
and check_config, which wait for the binary to exit.
"""

import hashlib
import json
import os
import re
import subprocess
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import proxy_binary, to_yaml

PROBLEM_PREFIX = "urn:idempotency-proxy:problem:"


def new_key(tag="k"):
    return "%s-%s" % (tag, uuid.uuid4().hex)


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


def assert_not_replayed(r):
    assert not r.has_header("Idempotent-Replayed"), \
        "first execution must not carry Idempotent-Replayed: %r" % r


def assert_replay_of(replay, first):
    assert replay.status == first.status, (replay, first)
    assert replay.body == first.body, (replay, first)
    assert replay.header_all("Idempotent-Replayed") == ["true"], replay
    cl = replay.header_all("Content-Length")
    assert cl == [str(len(replay.body))], "replay needs one fresh Content-Length: %r" % replay
    assert not replay.has_header("Transfer-Encoding"), replay


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


def prefixed_keys(redis, prefix="idem"):
    return [k for k in redis.keys("*") if str(k).startswith(prefix)]


def executions_of_body(upstream, body):
    h = hashlib.sha256(body).hexdigest()
    return sum(1 for e in upstream.history() if e["body_sha256"] == h)


def run_bin(args, timeout=20, cwd=None):
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    p = subprocess.run([proxy_binary()] + args, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                       cwd=cwd, env=env)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def require_binary():
    if not os.path.exists(proxy_binary()):
        pytest.fail("proxy binary not found at %s" % proxy_binary())


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


def check_config(tmp_path, cfg):
    """`idempotency-proxy -t -c FILE` on the config dict cfg; the CompletedProcess (text)."""
    path = tmp_path / "check.yaml"
    path.write_text(to_yaml(cfg) + "\n")
    return subprocess.run([proxy_binary(), "-t", "-c", str(path)], capture_output=True,
                          text=True, timeout=30)
