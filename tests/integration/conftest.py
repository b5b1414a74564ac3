"""Fixtures for the integration suite: real redis-server, the demo upstream and the
proxy binary as processes on loopback ports.

    /usr/bin/python3 -m pytest -q tests/integration

The proxy binary is $IDEM_PROXY_BIN, default <repo>/build/proxy/idempotency-proxy.
Every proxy a test started is SIGTERMed at teardown, and the test errors if the
proxy's output carries an AddressSanitizer / LeakSanitizer / UBSan report or if it
did not exit within its documented drain bound (upstream.timeout + 5 s) and a margin
for a busy machine.
"""

import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import (  # noqa: E402
    Proxy, RedisServer, SteppedClock, Upstream, build_config, documented_acl_rules,
    faketime_library, free_port, proxy_binary, stopped_after, to_yaml,
)
from inbox_helpers import Receiver  # noqa: E402

# IDEM_TEST_ACL_USER="Webhook inbox user" (a heading of docs/redis.md's ACL users): the proxy
# reaches the `redis` fixture as exactly that documented user (tests/run.sh runs the inbox's
# test files so); the tests' own commands stay the default user's.
ACL_USER = os.environ.get("IDEM_TEST_ACL_USER") or None
ACL_PASSWORD = "acl-run-password"

TEST_BUDGET_S = int(os.environ.get("IDEM_TEST_BUDGET_S", "120"))

# A proxy's SIGTERM takes at most upstream.timeout + 5 s by the docs; a busy machine this long more.
DRAIN_MARGIN_S = 10


class TestTimeout(Exception):
    pass


@pytest.fixture(autouse=True)
def _budget():
    """Every test ends: a SIGALRM after TEST_BUDGET_S seconds fails it."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def on_alarm(signum, frame):
        raise TestTimeout("test ran longer than %d s" % TEST_BUDGET_S)

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TEST_BUDGET_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def workdir(tmp_path):
    return str(tmp_path)


@pytest.fixture
def redis(tmp_path):
    """A fresh redis-server: .port .url .cmd(*args) .keys(pat) .stop() .start() .pause() .resume()"""
    srv = RedisServer(str(tmp_path / "redis"))
    if ACL_USER is not None:
        srv.run_as("idem-proxy", ACL_PASSWORD, documented_acl_rules(ACL_USER, ACL_PASSWORD))
    srv.start()
    yield srv
    srv.resume()
    srv.kill()


@pytest.fixture
def redis_factory(tmp_path):
    """redis_factory(password=None, unix_path=None, extra_args=()) -> another started
    RedisServer (binary: $IDEM_REDIS_SERVER)."""
    started = []

    def make(password=None, unix_path=None, extra_args=()):
        srv = RedisServer(str(tmp_path / ("redis%d" % (len(started) + 2))), password=password,
                          unix_path=unix_path, extra_args=extra_args)
        started.append(srv)
        return srv.start()

    yield make
    for srv in started:
        srv.resume()
        srv.kill()


@pytest.fixture
def upstream_factory(tmp_path):
    """upstream_factory(extra_args=(), port=0, unix_path=None) -> started Upstream."""
    started = []

    def make(extra_args=(), port=0, unix_path=None):
        u = Upstream(str(tmp_path), port=port, extra_args=extra_args, unix_path=unix_path)
        started.append(u)
        return u.start()

    yield make
    for u in started:
        u.stop()


@pytest.fixture
def upstream(upstream_factory):
    """The demo payments API: .port .url .executions(key) .total() .reset() .last_headers()"""
    return upstream_factory()


@pytest.fixture
def start_proxy(request, tmp_path, redis, upstream):
    """start_proxy(routes=None, **overrides) -> started Proxy.

    Keyword arguments besides the config overrides (see harness.build_config):
      upstream_url=, redis_url=   point somewhere else than the fixtures
      admin=False                 disable the admin listener
      admin_host="0.0.0.0"        bind admin_listen there (still reached on 127.0.0.1)
      admin_token_file=PATH       admin: {token_file: PATH}
      admin_config={...}          more keys of the admin section (held_refresh="1s")
      config_text=                write exactly this YAML (ports still chosen here:
                                  use {port}, {admin_port}, {upstream}, {redis})
      env={...}                   extra environment for the process
      name=                       file name stem for config/stdout/stderr
      wrapper=[...]               a command prefix (e.g. prlimit --memlock=0:0)
    """
    if not os.path.exists(proxy_binary()):
        pytest.fail("proxy binary not found at %s (build it: meson setup build && "
                    "ninja -C build, or set IDEM_PROXY_BIN)" % proxy_binary())
    proxies = []

    def start(routes=None, upstream_url=None, redis_url=None, admin=True, config_text=None,
              env=None, name=None, wrapper=None, admin_host="127.0.0.1", admin_token_file=None,
              admin_config=None, **overrides):
        port = free_port()
        admin_port = free_port() if admin else None
        up = upstream_url or upstream.url
        rd = redis_url or redis.url
        if admin_token_file is not None or admin_config:
            overrides["admin"] = dict(admin_config or {})
            if admin_token_file is not None:
                overrides["admin"]["token_file"] = str(admin_token_file)
        if config_text is None:
            cfg = build_config(port, admin_port, up, rd, routes=routes, admin_host=admin_host,
                               **overrides)
            text = to_yaml(cfg) + "\n"
        else:
            text = config_text.format(port=port, admin_port=admin_port or 0, upstream=up,
                                      redis=rd)
        p = Proxy(str(tmp_path), name or "proxy%d" % (len(proxies) + 1), text, port,
                  admin_port, env=env, wrapper=wrapper)
        proxies.append(p)
        p.start()
        return p

    start.proxies = proxies
    yield start

    problems = []
    for p in proxies:
        if p.proc is None:
            continue
        was_alive = p.alive()
        bound = p.drain_bound_s()
        rc = p.stop(timeout=bound + DRAIN_MARGIN_S)
        report = p.sanitizer_report()
        if report:
            problems.append("%s: sanitizer report:\n%s" % (p.name, report[-6000:]))
        if was_alive and rc is None:
            problems.append("%s: did not exit within %.0f s of SIGTERM (its drain bound, "
                            "upstream.timeout + 5 s, and %d s); stderr:\n%s"
                            % (p.name, bound + DRAIN_MARGIN_S, DRAIN_MARGIN_S,
                               p.stderr_text()[-3000:]))
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


@pytest.fixture
def proxy(start_proxy):
    """A proxy with the default routes (/v1/payments* optional key, /v1/strict* required)."""
    return start_proxy()


@pytest.fixture
def receiver_factory(tmp_path):
    """make(delay=0.0, status=200): a started inbox Receiver (inbox_helpers.py), stopped at
    teardown."""
    yield from stopped_after(lambda n, delay=0.0, status=200:
                             Receiver(str(tmp_path), delay, status))


@pytest.fixture
def stepped_clock(tmp_path):
    """A SteppedClock: start a process with env=stepped_clock.env, then .step("-60")."""
    library = faketime_library()
    if library is None:
        pytest.skip("libfaketime not installed (tests/install-deps.sh --tests)")
    return SteppedClock(str(tmp_path), library)


def pytest_report_header(config):
    b = proxy_binary()
    return "idempotency-proxy binary: %s (%s)" % (b, "present" if os.path.exists(b) else "MISSING")




def pytest_configure(config):
    """The port registries of earlier xdist runs (harness._PortRegistry) go once they are old."""
    import glob
    import time
    if hasattr(config, "workerinput"):
        return
    for path in glob.glob("/tmp/idem-test-ports-*"):
        try:
            if os.path.getmtime(path) < time.time() - 6 * 3600:
                os.unlink(path)
        except OSError:
            pass
