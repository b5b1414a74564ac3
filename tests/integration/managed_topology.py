"""managed_topology.py - Redis as the managed services run it in their smallest replicated
shape (ElastiCache, Memorystore, Azure: docs/managed-redis.md), for test_managed_redis.py.
Plain helpers (no pytest), all real: redis-server or valkey-server processes
($IDEM_REDIS_SERVER), in the network namespace of the calling thread (redis_topology.NetNs).

  LagGate       a RedisGate whose replication stream reaches the replica lag_ms late (the
                lag of asynchronous replication between zones): what the primary acknowledged
                in the last lag_ms is not on the replica yet, and is lost when the primary's
                node dies (the bytes still on their way are dropped with it); sever() and
                restore() cut the replica off for a while
  ManagedRedis  a primary and one or two replicas, each node on its own loopback address
                (127.0.0.2, .3, .4) with the same ports, as a service's nodes are:
                  - no persistence (no AOF, no RDB saves): a node that restarts is empty;
                  - TLS on tls_port, the certificate naming only NAME (DNS), the proxy's
                    only way in; the plain port is the harness's;
                  - the proxy's ACL user, with docs/redis.md's "Core user with the
                    eviction-policy check" line; the default user has a password the
                    proxy is never given;
                  - CONFIG renamed away (config_command is the new name, the harness's;
                    the proxy reads maxmemory-policy from INFO);
                  - NAME answered by an AnsweringResolver (127.0.0.1:53 in the namespace)
                    with the primary's address;
                  - every replica replicates through a LagGate of its own.
                Events, as the services do them:
                  failover()         the primary SIGKILLed; after detect_s a replica is
                                     promoted (REPLICAOF NO ONE), NAME moves to it, the
                                     other replica follows it, and replace_s later the old
                                     primary comes back empty as its replica (full resync)
                  replace_replica()  a replica removed (killed, its data gone) and, after
                                     replace_s, an empty one in its place (full resync)
                  lose_replica(s)    a replica cut off from the primary for s seconds,
                                     then back with its data (partial resync)

Needs root for the namespace (NetNs), and openssl (Pki).
"""

import collections
import os
import socket
import threading
import time
import uuid

from harness import RedisError, RedisServer, documented_acl_rules, free_port, wait_until
from redis_gate import RedisGate
from redis_topology import AnsweringResolver, Pki, tls_args, wait_replicas

NAME = "redis.managed.test"
ACL_HEADING = "Core user with the eviction-policy check"  # docs/redis.md, ACL users
PROXY_USER = "idem-proxy"


def _link_up(replica):
    try:
        return "master_link_status:up" in replica.cmd("INFO", "replication", timeout=2)
    except (OSError, RedisError):
        return False


class LagGate(RedisGate):
    """127.0.0.1:port forwarding to a primary at target_host:target_port for a replica
    (REPLICAOF 127.0.0.1 port): what the primary sends reaches the replica lag_ms late; what
    the replica sends (REPLCONF ACK) goes at once. When the primary's connection ends (a
    SIGKILL), the bytes still delayed are dropped: they were on the dead node's side."""

    def __init__(self, target_port, target_host, lag_ms):
        super().__init__(target_port, target_host)
        self.lag_s = lag_ms / 1000.0
        self._due = collections.deque()  # (when, conn, bytes), in the order they came
        self._cv = threading.Condition()
        threading.Thread(target=self._deliver, daemon=True).start()

    def _send(self, conn, data):
        if conn["proxy"]:
            return super()._send(conn, data)
        with self._cv:
            self._due.append((time.monotonic() + self.lag_s, conn, data))
            self._cv.notify()
        return None

    def _deliver(self):
        while not self.stopping:
            with self._cv:
                if not self._due:
                    self._cv.wait(0.2)
                    continue
                when, conn, data = self._due[0]
            delay = when - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with self._cv:
                self._due.popleft()
            # a connection the primary closed was shut: sendall fails, the bytes are dropped
            RedisGate._send(self, conn, data)

    def sever(self):
        """The replica cut off: every link through the gate shut (the primary sees its
        replica go), a new one refused until restore()."""
        with self.lock:
            self.closed = True
            conns = list(self._conns)
        for conn in conns:
            for sock in (conn["client"], conn["server"]):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def restore(self):
        """The replica may connect again (it does within a second, PSYNC from its offset)."""
        self.closed = False

    def stop(self):
        super().stop()
        with self._cv:
            self._cv.notify()


class ManagedRedis:
    """A primary and `replicas` replicas as a managed service runs them (module doc), in
    workdir. lag_ms: the replication delay of every replica's link; detect_s: how long
    after the primary dies the service promotes a replica; replace_s: how long a lost node
    (the old primary, a replaced replica) is away before it is back, empty. .primary,
    .replicas(), .nodes; .url and .redis_section() are what the proxy is given."""

    def __init__(self, workdir, replicas=1, lag_ms=100, detect_s=1.0, replace_s=1.0,
                 binary=None):
        assert 1 <= replicas <= 2, replicas
        self.workdir = workdir
        self.lag_ms, self.detect_s, self.replace_s = lag_ms, detect_s, replace_s
        secret = uuid.uuid4().hex
        self.default_password = "default-" + secret[:12]  # the harness's, never the proxy's
        self.config_command = "CONFIG-" + secret[12:24]
        self.proxy_password = "proxy-" + secret[24:]
        pki = Pki(os.path.join(workdir, "pki"))
        self.ca = pki.ca("managed")
        cert = pki.server(self.ca, "managed-node", sans=("DNS:" + NAME,))
        self.port, self.tls_port = free_port(), free_port()
        rules = documented_acl_rules(ACL_HEADING, self.proxy_password)
        self.nodes, self._args = [], {}
        for i in range(1 + replicas):
            node = RedisServer(
                os.path.join(workdir, "node%d" % i), port=self.port, host="127.0.0.%d" % (i + 2),
                binary=binary, password=self.default_password,
                extra_args=tls_args(self.tls_port, cert, self.ca) + [
                    "--rename-command", "CONFIG", self.config_command,
                    "--masterauth", self.default_password,
                    "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
                    "--repl-backlog-size", "16mb"])
            node.run_as(PROXY_USER, self.proxy_password, rules)
            self._args[node.host] = list(node.extra_args)
            self.nodes.append(node)
        self.primary = self.nodes[0]
        self.links = {}  # replica's host -> the LagGate it replicates through
        self.resolver = None

    @property
    def url(self):
        return "rediss://%s:%s@%s:%d/0" % (PROXY_USER, self.proxy_password, NAME,
                                           self.tls_port)

    def redis_section(self, **kw):
        """The proxy's redis section: the URL by NAME, TLS with the service's CA."""
        return dict({"url": self.url, "tls": {"ca_file": self.ca[0]}}, **kw)

    def replicas(self):
        return [n for n in self.nodes if n is not self.primary]

    def config(self, *args):
        """CONFIG ... on the primary under its secret name (the harness may, the proxy not)."""
        return self.primary.cmd(self.config_command, *args)

    def start(self):
        self.primary.start()
        for r in self.replicas():
            self._start_replica(r)
        self.wait_replicas()
        self.resolver = AnsweringResolver(NAME, self.primary.host)
        return self

    def stop(self):
        for n in self.nodes:
            n.resume()
            n.kill()
        for gate in self.links.values():
            gate.stop()
        if self.resolver is not None:
            self.resolver.close()

    def _link(self, node):
        """A new LagGate to the primary for node (the one before, if any, stopped): its
        REPLICAOF arguments."""
        gate = LagGate(self.primary.port, self.primary.host, self.lag_ms).start()
        old = self.links.pop(node.host, None)
        if old is not None:
            old.stop()
        self.links[node.host] = gate
        node.extra_args = self._args[node.host] + ["--replicaof", "127.0.0.1", str(gate.port)]
        return ["127.0.0.1", str(gate.port)]

    def _start_replica(self, node):
        """node started empty (no persistence) as a replica of the primary."""
        self._link(node)
        node.start()

    def wait_replicas(self, timeout=30):
        """Until every replica is online at the primary and has the link up itself (the
        primary says online once it has sent the data, which the replica gets lag_ms later)."""
        wait_replicas(self.primary, len(self.nodes) - 1, timeout=timeout)
        wait_until(lambda: all(_link_up(r) for r in self.replicas()), timeout=timeout,
                   interval=0.05, what="every replica's link to the primary up")

    def _replace_with_empty(self, node, at):
        """replace_s after node was lost, the service provisions it again: node started empty
        as a replica; once every replica is online. Adds started and rejoined to at, returns
        it."""
        time.sleep(self.replace_s)  # the service provisions the replacement
        at["started"] = time.monotonic()
        self._start_replica(node)
        self.wait_replicas()
        at["rejoined"] = time.monotonic()
        return at

    def failover(self):
        """The primary SIGKILLed; detect_s later a replica promoted and NAME moved to it;
        the other replica follows it; replace_s later the old primary back, empty, as its
        replica; once every replica is online. Returns {step: monotonic time}: killed,
        promoted, started (the old primary), rejoined."""
        old, new = self.primary, self.replicas()[0]
        at = {"killed": time.monotonic()}
        old.kill()
        time.sleep(self.detect_s)  # the service notices the primary is gone
        new.cmd("REPLICAOF", "NO", "ONE")
        self.links.pop(new.host).stop()
        new.extra_args = list(self._args[new.host])
        self.primary = new
        self.resolver.address = new.host
        at["promoted"] = time.monotonic()
        for r in self.replicas():
            if r is not old:
                r.cmd("REPLICAOF", *self._link(r))
        return self._replace_with_empty(old, at)

    def replace_replica(self):
        """A replica removed (SIGKILL: its data goes with it) and replace_s later an empty
        one in its place, replicating from scratch; once it is online. Returns {step: time}:
        removed, started, rejoined."""
        node = self.replicas()[0]
        at = {"removed": time.monotonic()}
        node.kill()
        return self._replace_with_empty(node, at)

    def lose_replica(self, seconds=2.0):
        """A replica cut off from the primary for `seconds` (the primary sees it go), then
        reachable again: it resumes from its offset. Returns {step: time}: lost, back,
        rejoined."""
        node = self.replicas()[0]
        gate = self.links[node.host]
        at = {"lost": time.monotonic()}
        gate.sever()
        time.sleep(seconds)  # the replica is away
        gate.restore()
        at["back"] = time.monotonic()
        self.wait_replicas()
        at["rejoined"] = time.monotonic()
        return at
