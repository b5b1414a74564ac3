"""Worker threads (`workers: N`): one port shared by every worker, one execution per key
across workers, metrics, SIGHUP and SIGTERM reach every worker.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py and the
proxy binary; each test asserts what the client and the upstream observe.
"""

import os
import signal
import subprocess

import pytest

from harness import (
    Connection, build_config, free_port, port_accepts, proxy_binary, to_yaml, wait_until,
)
from proxy_helpers import (
    assert_problem, concurrently, in_background, listening_sockets, metric_sum, new_key,
    require_binary, run_bin,
)

# Every test here runs a proxy with several worker threads: tests/run.sh runs them
# under ThreadSanitizer too (docs/internals.md).
pytestmark = pytest.mark.threads


def test_workers_listen_on_one_port_each_in_a_thread_of_its_own(start_proxy, upstream):
    p = start_proxy(workers=3)
    # the port accepts once worker 0 listens; the others bind right after
    wait_until(lambda: listening_sockets(p.port) == 3, what="3 listening sockets")
    assert len(os.listdir("/proc/%d/task" % p.pid())) >= 3
    rs = concurrently(30, lambda i: p.post(key=new_key()))
    assert {r.status for r in rs} == {201}, rs
    assert upstream.total() == 30


def test_a_second_proxy_cannot_share_the_port_of_a_running_one(start_proxy, tmp_path, upstream,
                                                               redis):
    """SO_REUSEPORT lets any socket that sets it bind the port: a second instance started on
    the same port by mistake must still be refused, not silently take half the clients."""
    p = start_proxy(workers=2)
    wait_until(lambda: listening_sockets(p.port) == 2, what="2 listening sockets")
    cfg = build_config(p.port, free_port(), upstream.url, redis.url, workers=2)
    path = tmp_path / "second.yaml"
    path.write_text(to_yaml(cfg) + "\n")
    rc, out, err = run_bin(["-c", str(path)], timeout=20)
    assert rc == 1, (out, err)
    assert "in use" in err.lower(), err
    assert listening_sockets(p.port) == 2
    assert p.post(key=new_key()).status == 201


def test_two_proxies_starting_at_once_on_one_port_cannot_both_run(tmp_path, upstream, redis):
    """Both could pass the "is the port free" check before either binds its SO_REUSEPORT
    sockets; the endpoint lock lets exactly one of them run, every time."""
    require_binary()
    port = free_port()
    path = tmp_path / "twins.yaml"
    path.write_text(to_yaml(build_config(port, None, upstream.url, redis.url, workers=4)) + "\n")
    for attempt in range(10):
        twins = [subprocess.Popen([proxy_binary(), "-c", str(path)], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for _ in range(2)]
        try:
            wait_until(lambda: any(t.poll() is not None for t in twins),
                       what="one of the two proxies to give up (attempt %d)" % attempt)
            # the other one runs: it listens on all its 4 sockets (unless it exits too)
            wait_until(lambda: listening_sockets(port) == 4
                       or all(t.poll() is not None for t in twins),
                       what="the survivor's 4 sockets (attempt %d)" % attempt)
            running = [t for t in twins if t.poll() is None]
            refused = [t for t in twins if t.poll() is not None]
            assert len(running) == 1 and len(refused) == 1, [t.poll() for t in twins]
            assert refused[0].returncode == 1
            assert b"in use" in refused[0].stderr.read()
            assert listening_sockets(port) == 4
        finally:
            for t in twins:
                if t.poll() is None:
                    t.send_signal(signal.SIGTERM)
                t.wait(15)
                t.stderr.close()
        wait_until(lambda: listening_sockets(port) == 0, what="the port to close")


def test_concurrent_identical_requests_across_workers_execute_once(start_proxy, upstream):
    """Each request on a connection of its own, so the kernel spreads them over the workers:
    one executes, the others wait (woken across threads) and replay it."""
    p = start_proxy(workers=4)
    key = new_key()
    rs = concurrently(40, lambda i: p.post(key=key, headers=[("X-Demo-Delay-Ms", "300")]))
    assert upstream.total() == 1
    assert {r.status for r in rs} == {201}, rs
    assert len({r.body for r in rs}) == 1, "answers differ"
    assert sum(r.replayed for r in rs) == 39


def test_metrics_count_the_requests_of_every_worker(start_proxy, upstream):
    p = start_proxy(workers=4)
    before = metric_sum(p, "idempotency_proxy_requests_total")
    rs = concurrently(40, lambda i: p.post(key=new_key()))
    assert {r.status for r in rs} == {201}, rs
    # 40 connections over 4 workers: counting worker 0's alone would miss about 30
    assert metric_sum(p, "idempotency_proxy_requests_total") - before == 40


def test_sighup_reload_reaches_every_worker(start_proxy, upstream, redis):
    p = start_proxy(workers=4, routes=[{"path": "/v1/payments*"}])
    cfg = build_config(p.port, p.admin_port, upstream.url, redis.url, workers=4,
                       routes=[{"path": "/v1/payments*", "require_key": True}])
    with open(p.config_path, "w") as f:
        f.write(to_yaml(cfg) + "\n")
    p.signal(signal.SIGHUP)

    def every_worker_requires_the_key():
        return {r.status for r in concurrently(40, lambda i: p.post(key=None))} == {400}

    wait_until(every_worker_requires_the_key, what="require_key in every worker")
    for r in concurrently(40, lambda i: p.post(key=None)):
        assert_problem(r, 400, "missing-key")


def test_sighup_refuses_a_change_of_workers(start_proxy, upstream, redis):
    p = start_proxy(workers=2)
    wait_until(lambda: listening_sockets(p.port) == 2, what="2 listening sockets")
    cfg = build_config(p.port, p.admin_port, upstream.url, redis.url, workers=3)
    with open(p.config_path, "w") as f:
        f.write(to_yaml(cfg) + "\n")
    p.signal(signal.SIGHUP)
    wait_until(lambda: "reload refused" in p.stderr_text(), what="reload refused")
    assert "workers changed" in p.stderr_text()
    assert listening_sockets(p.port) == 2
    assert p.post(key=new_key()).status == 201


def test_sigterm_idle_workers_refuse_late_requests_until_the_drain_ends(start_proxy, upstream):
    """A worker with nothing in flight keeps running while another drains, so a request on
    one of its kept-alive connections gets 503 shutting-down, not a silent connection."""
    p = start_proxy(workers=4)
    slow = in_background(p.post, key=new_key(), headers=[("X-Demo-Delay-Ms", "2000")])
    wait_until(lambda: upstream.total() == 1)
    conns = [Connection(p.port) for _ in range(8)]  # spread over the 4 workers
    try:
        for c in conns:
            assert c.request("GET", "/v1/payments").status == 200
        p.signal(signal.SIGTERM)
        # every worker has begun its drain: it stops accepting first
        wait_until(lambda: listening_sockets(p.port) == 0, what="every worker draining")
        for c in conns:
            late = c.request("POST", "/v1/payments", [("Idempotency-Key", new_key())], b"{}")
            assert_problem(late, 503, "shutting-down")
    finally:
        for c in conns:
            c.close()
    assert slow.result().status == 201
    assert upstream.total() == 1  # no late POST was forwarded
    assert p.wait(15) == 0


def test_sigterm_drains_every_worker_and_exits_0(start_proxy, upstream):
    p = start_proxy(workers=4)
    keys = [new_key() for _ in range(12)]
    fs = [in_background(p.post, key=k, headers=[("X-Demo-Delay-Ms", "1500")]) for k in keys]
    wait_until(lambda: upstream.total() == 12, what="12 requests upstream")
    p.signal(signal.SIGTERM)
    rs = [f.result() for f in fs]
    assert [r.status for r in rs] == [201] * 12, rs
    assert p.wait(15) == 0
    assert not port_accepts(p.port)
    assert all(upstream.executions(k) == 1 for k in keys)
