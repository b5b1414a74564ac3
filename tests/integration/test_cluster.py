"""Redis Cluster (README "Redis Cluster"): records spread over the primaries by key slot;
MOVED and ASK are followed without running a key twice; a failover is followed.

Real processes only: six redis-server nodes with --cluster-enabled yes on free loopback
ports (redis_topology.ClusterGroup: three primaries, three replicas, joined with
`redis-cli --cluster create`), started once for the module to keep CI time low; the
demo upstream and the proxy binary. Tests that change the cluster's shape (resharding,
failover) leave it with every slot served, and each waits for the cluster to be stable
first.
"""

import re
import signal
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import wait_ready, wait_until
from redis_topology import ClusterGroup


def new_key(tag="c"):
    return "%s-%s" % (tag, uuid.uuid4().hex)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    g = ClusterGroup(str(tmp_path_factory.mktemp("cluster")), node_timeout_ms=2000)
    g.start()
    yield g
    g.stop()


@pytest.fixture
def fresh_cluster(cluster):
    """The module's cluster, stable and empty."""
    cluster.wait_stable()
    for n in cluster.primaries():
        n.cmd("FLUSHALL")
    return cluster


def cluster_redis(cluster, **kw):
    """The redis section for the cluster (redis.url left out)."""
    return dict({"url": None, "cluster": {"addresses": cluster.addresses()[:2]}}, **kw)


def metric(p, name, labels=None):
    text = p.admin("GET", "/metrics").body.decode()
    pat = re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else "") + r" (\S+)$"
    m = re.search("^" + pat, text, re.M)
    return float(m.group(1)) if m else None


def record_counts(cluster):
    """Record keys on each primary, by port (SCAN over the idem prefix)."""
    out = {}
    for n in cluster.primaries():
        keys, cursor = [], "0"
        while True:
            cursor, batch = n.cmd("SCAN", cursor, "MATCH", "idem:*", "COUNT", 1000)
            keys += batch
            if cursor in ("0", b"0"):
                break
        out[n.port] = len(keys)
    return out


def post_body(p, key, amount):
    return p.post(key=key, body=b'{"amount": %d}' % amount, timeout=10)


# --------------------------------------------------------------------------
# 1. records spread over the primaries
# --------------------------------------------------------------------------

def test_keyed_traffic_spreads_over_every_primary(fresh_cluster, start_proxy, upstream):
    c = fresh_cluster
    proxies = [start_proxy(redis=cluster_redis(c), workers=2) for _ in range(2)]
    for p in proxies:
        wait_ready(p, timeout=15)
    keys = [new_key() for _ in range(60)]
    first = {}
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: post_body(proxies[i % 2], keys[i], 100 + i),
                                range(len(keys))))
    for k, r in zip(keys, results):
        assert r.status == 201, r
        first[k] = r.body
    counts = record_counts(c)
    assert len(counts) == 3 and all(n >= 5 for n in counts.values()), counts
    assert sum(counts.values()) == len(keys), counts
    # replays through the other proxy: the stored answer, no second execution
    for i, k in enumerate(keys):
        r = post_body(proxies[(i + 1) % 2], k, 100 + i)
        assert r.status == 201 and r.body == first[k], r
        assert r.header("Idempotent-Replayed") == "true", r
        assert upstream.executions(k) == 1
    # a reused key with another body
    r = post_body(proxies[0], keys[0], 999)
    assert r.status == 409, r
    assert upstream.executions(keys[0]) == 1
    assert metric(proxies[0], "idempotency_proxy_redis_cluster_nodes") == 3
    assert metric(proxies[0], "idempotency_proxy_redis_cluster_map_refreshes_total") >= 1
    # the admin API routes by slot too
    r = proxies[0].admin("GET", "/records/%s" % keys[1])
    assert r.status in (200, 404), r
