"""redis_topology.py - the Redis set-ups of the store's tests (test_redis_connection.py,
test_sentinel.py, test_cluster.py, test_replicated_claims.py...), as plain helpers (no
pytest), all real:

  Pki              a CA, server and client certificates made by `openssl` in a
                   temp dir (EC P-256 keys, SANs for 127.0.0.1 and localhost)
  tls_args()       redis-server / valkey-server options for a TLS port beside the
                   plain one (the plain port stays for the harness' RESP client)
  acl_setuser()    ACL SETUSER through the harness' client
  NetNs            a network namespace made with `ip netns add`: loopback up, its own
                   /etc/netns/<ns>/resolv.conf (bind-mounted over /etc/resolv.conf
                   by `ip netns exec`), entered by the calling thread with setns(2)
                   so that the processes it starts (redis, upstream) live in it
  SilentResolver   a UDP socket on 127.0.0.1:53 that reads queries and never answers
  AnsweringResolver  the same socket answering A queries for one name with an address
                   the test changes (a DNS-based failover), NODATA for other types
  sentinel_binary()  redis-sentinel, or valkey-sentinel beside $IDEM_REDIS_SERVER=valkey-server
  Sentinel         a redis-sentinel process in a temp dir monitoring one master (a
                   RedisServer: restartable, killable, the same RESP client)
  SentinelGroup    a primary, its replicas and sentinels on loopback ports: who the
                   sentinels name, failover, waiting for a replica to rejoin
  SwitchListener   a thread subscribed to +switch-master at one sentinel: every move of
                   the primary the sentinels announce, with its time
  ACL_COMMANDS, ACL_RULES  the proxy's minimal ACL (README "Redis in production")
  replica_pair()   a primary and one replica, linked and in sync (a context manager)
  replicas_online(), wait_replicas()  a primary's replicas that are synced (state=online)
  ClusterGroup     a Redis Cluster on loopback (redis-server --cluster-enabled yes, joined
                   by redis-cli --cluster create): primaries, replicas, slots, stability;
                   with relays=True each node is reached through a RedisGate that it
                   announces as its address, so a test can hold one node's answers;
                   cluster_redis() its redis section, redis_cli() commands piped to a node,
                   redirections() the proxies' MOVED or ASK count

Needs root (CAP_SYS_ADMIN) for NetNs; iproute2 and openssl (tests/install-deps.sh).
"""

import contextlib
import ctypes
import re
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
import uuid

from harness import RedisError, RedisServer, _Reader, _resp_encode, _resp_read, \
    free_port, redis_server_binary, wait_until
from proxy_helpers import metric
from redis_gate import RedisGate
import harness

CLONE_NEWNET = 0x40000000


def openssl(*args, cwd):
    p = subprocess.run(["openssl"] + list(args), cwd=cwd, capture_output=True, text=True,
                       timeout=30)
    if p.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (" ".join(args), p.stderr[-2000:]))
    return p.stdout


class Pki:
    """Certificates in dir: ca(name), server(ca, name, sans), client(ca, name).

    Each returns paths; a CA is (cert, key), a leaf (cert, key) signed by its CA.
    """

    def __init__(self, dir):
        self.dir = dir
        os.makedirs(dir, exist_ok=True)

    def _path(self, name, ext):
        return os.path.join(self.dir, "%s.%s" % (name, ext))

    def _key(self, name):
        key = self._path(name, "key")
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-out", key, cwd=self.dir)
        return key

    def ca(self, name):
        key = self._key(name)
        cert = self._path(name, "crt")
        openssl("req", "-x509", "-new", "-key", key, "-out", cert, "-days", "2",
                "-subj", "/CN=idempotency-proxy test CA %s" % name,
                "-addext", "basicConstraints=critical,CA:TRUE",
                "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=self.dir)
        return cert, key

    def _leaf(self, ca, name, extensions):
        key = self._key(name)
        csr = self._path(name, "csr")
        cert = self._path(name, "crt")
        ext = self._path(name, "ext")
        with open(ext, "w") as f:
            f.write(extensions)
        openssl("req", "-new", "-key", key, "-out", csr, "-subj", "/CN=%s" % name,
                cwd=self.dir)
        openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1],
                "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext, cwd=self.dir)
        return cert, key

    def server(self, ca, name, sans=("IP:127.0.0.1", "DNS:localhost")):
        return self._leaf(ca, name, "basicConstraints=CA:FALSE\n"
                                    "keyUsage=critical,digitalSignature\n"
                                    "extendedKeyUsage=serverAuth\n"
                                    "subjectAltName=%s\n" % ",".join(sans))

    def client(self, ca, name):
        return self._leaf(ca, name, "basicConstraints=CA:FALSE\n"
                                    "keyUsage=critical,digitalSignature\n"
                                    "extendedKeyUsage=clientAuth\n")


def tls_args(tls_port, server, ca, auth_clients=False):
    """Options for a TLS port next to the plain one; auth_clients: mutual TLS."""
    return ["--tls-port", str(tls_port), "--tls-cert-file", server[0],
            "--tls-key-file", server[1], "--tls-ca-cert-file", ca[0],
            "--tls-auth-clients", "yes" if auth_clients else "no"]


def acl_setuser(redis, user, *rules):
    """ACL SETUSER user rules... on redis (a harness RedisServer, default user)."""
    return redis.cmd("ACL", "SETUSER", user, *rules)


# The proxy's exact command list (README "Redis in production"): the minimal ACL.
ACL_COMMANDS = ["select", "role", "ping", "get", "set", "del", "pttl", "eval",
                "evalsha", "wait", "scan", "getrange"]
ACL_RULES = ["on", "resetkeys", "~idem:*", "resetchannels", "-@all"] + \
    ["+" + c for c in ACL_COMMANDS]


def in_sync(primary, replica):
    """Both ends see the link up (the primary: online, so WAIT counts it) and the replica
    has applied everything the primary wrote."""
    info = replica.cmd("INFO", "replication")
    theirs = primary.cmd("INFO", "replication")
    if "master_link_status:up" not in info or not re.search(r"^slave0:.*state=online", theirs,
                                                             re.M):
        return False
    offset = int(re.search(r"^master_repl_offset:(\d+)", theirs, re.M).group(1))
    mine = int(re.search(r"^slave_repl_offset:(\d+)", info, re.M).group(1))
    return mine >= offset


@contextlib.contextmanager
def replica_pair(tmp_path, primary_args=()):
    """A primary (with primary_args) and one replica (--replicaof), linked and in sync:
    (primary, replica)."""
    # no 5 s wait for more replicas before the first (diskless) full sync
    primary = RedisServer(str(tmp_path / "primary"),
                          extra_args=["--repl-diskless-sync-delay", "0"] +
                          list(primary_args)).start()
    replica = RedisServer(str(tmp_path / "replica"),
                          extra_args=["--replicaof", "127.0.0.1", str(primary.port)]).start()
    try:
        wait_until(lambda: in_sync(primary, replica), interval=0.05,
                   what="the replica linked to the primary")
        yield primary, replica
    finally:
        for srv in (replica, primary):
            srv.resume()
            srv.kill()


def replicas_online(primary):
    """How many replicas primary has online: synced (state=online in INFO replication), not
    merely connected (a replica in wait_bgsave has none of the data yet); -1 when primary
    does not answer."""
    try:
        info = primary.cmd("INFO", "replication", timeout=2)
    except (OSError, RedisError):
        return -1
    return sum(1 for line in info.splitlines()
               if line.startswith("slave") and "state=online" in line)


def wait_replicas(primary, n, timeout=20):
    """Until primary has n replicas online (replicas_online; Sentinel may promote a replica
    that is merely connected)."""
    wait_until(lambda: replicas_online(primary) >= n, timeout=timeout, interval=0.05,
               what="%d replicas online at %d" % (n, primary.port))


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc


class NetNs:
    """A network namespace for one test: `with NetNs(resolv_conf) as ns:`.

    Inside the with block the calling thread is in the namespace (setns), so the
    sockets it opens and the processes and threads it starts are there too; the
    proxy is started through ns.wrapper (`ip netns exec NS`), which also bind-mounts
    /etc/netns/NS/resolv.conf over /etc/resolv.conf for it. Leaving the block
    returns the thread to its own namespace and deletes NS.
    """

    def __init__(self, resolv_conf):
        self.name = "idem-test-%s" % uuid.uuid4().hex[:10]
        self.resolv_conf = resolv_conf
        self.etc = os.path.join("/etc/netns", self.name)
        self._home = None

    @property
    def wrapper(self):
        return ["ip", "netns", "exec", self.name]

    def __enter__(self):
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        try:
            os.makedirs(self.etc)
            with open(os.path.join(self.etc, "resolv.conf"), "w") as f:
                f.write(self.resolv_conf)
            subprocess.run(self.wrapper + ["ip", "link", "set", "lo", "up"], check=True,
                           capture_output=True)
            self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
            fd = os.open("/run/netns/%s" % self.name, os.O_RDONLY)
            try:
                if _libc().setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns into %s" % self.name)
            finally:
                os.close(fd)
        except BaseException:
            self._cleanup()
            raise
        return self

    def __exit__(self, *exc):
        self._cleanup()

    def _cleanup(self):
        if self._home is not None:
            _libc().setns(self._home, CLONE_NEWNET)
            os.close(self._home)
            self._home = None
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        shutil.rmtree(self.etc, ignore_errors=True)

    @staticmethod
    def available():
        """Why a namespace cannot be made here, or None."""
        if os.geteuid() != 0:
            return "needs root (ip netns add, setns)"
        if shutil.which("ip") is None:
            return "needs iproute2 (ip)"
        return None


class SilentResolver:
    """UDP 127.0.0.1:53 in the current namespace: reads every query, answers none."""

    def __init__(self, host="127.0.0.1", port=53):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, port))
        self.queries = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def answer(self, query):
        """The reply datagram to query, or None for no reply."""
        return None

    def _run(self):
        self.sock.settimeout(0.2)
        while not self._stop:
            try:
                query, peer = self.sock.recvfrom(4096)
                self.queries += 1
                reply = self.answer(query)
                if reply is not None:
                    self.sock.sendto(reply, peer)
            except socket.timeout:
                continue
            except OSError:
                return

    def close(self):
        self._stop = True
        self._thread.join(2)
        self.sock.close()


class AnsweringResolver(SilentResolver):
    """Answers A queries for name with self.address (an IPv4 string the test may change:
    a DNS-based failover), NODATA for its other types, NXDOMAIN for other names. One
    question per query, as stub resolvers send; the question is echoed byte for byte
    (evdns randomises the case of the name and checks it comes back)."""

    def __init__(self, name, address, **kw):
        self.name = name.lower().rstrip(".")
        self.address = address
        super().__init__(**kw)

    def answer(self, query):
        if len(query) < 12:
            return None
        labels, i = [], 12
        while i < len(query) and query[i] != 0:
            labels.append(query[i + 1:i + 1 + query[i]].decode("ascii", "replace").lower())
            i += 1 + query[i]
        if i + 5 > len(query):
            return None
        question = query[12:i + 5]
        qtype = struct.unpack("!H", query[i + 1:i + 3])[0]
        rcode, records = 0, b""
        if ".".join(labels) != self.name:
            rcode = 3  # NXDOMAIN
        elif qtype == 1:  # A: one record, the name as a pointer to the question, TTL 0
            records = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 0, 4) + \
                socket.inet_aton(self.address)
        flags = 0x8180 | rcode  # a response, recursion desired and available
        header = query[:2] + struct.pack("!HHHHH", flags, 1, 1 if records else 0, 0, 0)
        return header + question + records


def sentinel_binary():
    """redis-sentinel, or valkey-sentinel when $IDEM_REDIS_SERVER is valkey-server (the
    Debian packages redis-sentinel and valkey-sentinel, tests/install-deps.sh --tests)."""
    server = os.path.basename(redis_server_binary())
    return "valkey-sentinel" if server.startswith("valkey") else "redis-sentinel"


class Sentinel(RedisServer):
    """A sentinel on 127.0.0.1:port monitoring master_name at 127.0.0.1:master_port.

    Its config file is written in workdir (the sentinel rewrites it as it learns);
    down_after_ms and failover_timeout_ms as written in sentinel.conf. password:
    requirepass of the sentinel itself (its clients AUTH with it); users: ACL lines
    (`user NAME on >PASS +@all`) for an ACL user at the sentinel.
    """

    def __init__(self, workdir, master_name, master_port, quorum=2, down_after_ms=1000,
                 failover_timeout_ms=3000, binary=None, port=None, password=None,
                 users=(), extra_conf=(), master_host="127.0.0.1"):
        super().__init__(workdir, port=port, binary=binary or sentinel_binary())
        self.sentinel_password = password
        self.password = password  # the RESP client AUTHs with it
        self.conf_path = os.path.join(workdir, "sentinel-%d.conf" % self.port)
        self.log_path = os.path.join(workdir, "sentinel-%d.log" % self.port)
        lines = ["port %d" % self.port, "bind %s" % self.host, "daemonize no",
                 "protected-mode no", "dir %s" % workdir, "logfile %s" % self.log_path,
                 "sentinel monitor %s %s %d %d" % (master_name, master_host, master_port,
                                                   quorum),
                 "sentinel down-after-milliseconds %s %d" % (master_name, down_after_ms),
                 "sentinel failover-timeout %s %d" % (master_name, failover_timeout_ms),
                 "sentinel parallel-syncs %s 1" % master_name]
        if password:
            lines.append("requirepass %s" % password)
        lines += list(users) + list(extra_conf)
        os.makedirs(workdir, exist_ok=True)
        with open(self.conf_path, "w") as f:
            f.write("\n".join(lines) + "\n")

    def argv(self):
        return [self.binary, self.conf_path]

    def master_addr(self, name):
        """"host:port" this sentinel names for master name, or None."""
        try:
            r = self.cmd("SENTINEL", "get-master-addr-by-name", name, timeout=2)
        except (OSError, RedisError):
            return None
        return "%s:%s" % (r[0], r[1]) if r else None

    def log_text(self):
        return self._log_tail()


class SentinelGroup:
    """A primary, n_replicas replicas and n_sentinels sentinels, all on loopback ports in
    workdir; node_args go to every data node (e.g. min-replicas-to-write). nodes[0]
    starts as the primary. The sentinels' down-after-milliseconds is down_after_ms,
    their quorum 2 (1 with a single sentinel). password: requirepass of the data nodes
    (masterauth and the sentinels' auth-pass follow); sentinel_password and
    sentinel_users: the sentinels' own (see Sentinel)."""

    def __init__(self, workdir, name="payments", n_replicas=1, n_sentinels=3,
                 down_after_ms=1000, failover_timeout_ms=3000, node_args=(),
                 server_binary=None, sentinel_bin=None, password=None,
                 sentinel_password=None, sentinel_users=()):
        self.workdir = workdir
        self.name = name
        self.down_after_ms = down_after_ms
        # diskless full syncs start at once (the default waits 5 s for more replicas)
        self.node_args = ["--repl-diskless-sync-delay", "0"] + list(node_args) + \
            (["--masterauth", password] if password else [])
        primary = RedisServer(os.path.join(workdir, "node0"), extra_args=self.node_args,
                              binary=server_binary, password=password)
        self.nodes = [primary]
        for i in range(n_replicas):
            self.nodes.append(RedisServer(
                os.path.join(workdir, "node%d" % (i + 1)), binary=server_binary,
                password=password,
                extra_args=self.node_args + ["--replicaof", "127.0.0.1", str(primary.port)]))
        auth = ["sentinel auth-pass %s %s" % (name, password)] if password else []
        self.sentinels = [
            Sentinel(os.path.join(workdir, "sentinel%d" % i), name, primary.port,
                     quorum=min(2, n_sentinels), down_after_ms=down_after_ms,
                     failover_timeout_ms=failover_timeout_ms, binary=sentinel_bin,
                     password=sentinel_password, users=sentinel_users, extra_conf=auth)
            for i in range(n_sentinels)]

    def start(self):
        for node in self.nodes:
            node.start()
        self.wait_replicas(self.nodes[0], len(self.nodes) - 1)
        for s in self.sentinels:
            s.start()
        # every sentinel knows the others and the replicas before a failover is asked for
        wait_until(lambda: all(
            self._num(s, "num-other-sentinels") == len(self.sentinels) - 1 and
            self._num(s, "num-slaves") == len(self.nodes) - 1 for s in self.sentinels),
            timeout=20, interval=0.05, what="the sentinels to know each other and the replicas")
        return self

    def stop(self):
        for p in self.sentinels + self.nodes:
            p.resume()
            p.kill()

    def _num(self, sentinel, field):
        try:
            info = sentinel.cmd("SENTINEL", "master", self.name, timeout=2)
        except (OSError, RedisError):
            return -1
        fields = dict(zip(info[0::2], info[1::2]))
        return int(fields.get(field, -1))

    @property
    def sentinel_addresses(self):
        return ["127.0.0.1:%d" % s.port for s in self.sentinels]

    def named(self):
        """The primary every running sentinel names ("127.0.0.1:port"), or None if they
        do not agree."""
        names = {s.master_addr(self.name) for s in self.sentinels if s.running}
        return names.pop() if len(names) == 1 else None

    def node_at(self, address):
        return next(n for n in self.nodes if "127.0.0.1:%d" % n.port == address)

    def primary(self):
        return self.node_at(self.named())

    @staticmethod
    def role(node):
        try:
            return node.cmd("ROLE", timeout=2)[0]
        except (OSError, RedisError):
            return None

    def wait_replicas(self, primary, n, timeout=20):
        wait_replicas(primary, n, timeout)

    def wait_named(self, not_address, timeout=30):
        """Until every running sentinel names one primary other than not_address whose
        ROLE says master; returns its address."""
        def moved():
            a = self.named()
            return a if a and a != not_address and self.role(self.node_at(a)) == "master" \
                else None
        return wait_until(moved, timeout=timeout, interval=0.05,
                          what="the sentinels to name a new primary")


class SwitchListener:
    """Subscribed to +switch-master at sentinel (a Sentinel) in a thread: .switches is
    [(monotonic time, "name old_ip old_port new_ip new_port")], every failover the
    sentinels announced, including any the test did not ask for (a loaded machine can
    make Sentinel fail over on its own)."""

    def __init__(self, sentinel):
        self.switches = []
        self._sock = socket.create_connection((sentinel.host, sentinel.port), timeout=5)
        pre = [("AUTH", sentinel.password)] if sentinel.password else []
        self._sock.sendall(b"".join(_resp_encode(c) for c in pre + [("SUBSCRIBE",
                                                                    "+switch-master")]))
        self._reader = _Reader(self._sock, time.monotonic() + 3600)
        for _ in pre + [None]:
            _resp_read(self._reader)  # +OK, then the subscription's confirmation
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            while True:
                msg = _resp_read(self._reader)
                if isinstance(msg, list) and len(msg) == 3 and msg[0] == "message":
                    self.switches.append((time.monotonic(), msg[2]))
        except Exception:  # closed
            return

    def close(self):
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._thread.join(2)


def cluster_free_port():
    """A free port whose cluster bus port (port + 10000) is free too. The bus port is
    handed out with it (harness._ports_handed_out), so no later free_port() gives it to
    another node, whose bind would then fail once this node listens on its bus."""
    def bus(port):
        ok = port + 10000 <= 65535 and harness._bindable(port + 10000)
        return (port + 10000,) if ok else None

    return harness._ports_handed_out.claim(lambda: harness._unbound_port(span=10000), bus)


def _text(v):
    """A RESP bulk string as str (the client answers bytes or str)."""
    return v.decode() if isinstance(v, bytes) else v


class ClusterGroup:
    """A Redis Cluster on loopback: n_primaries primaries, each with replicas_per replicas,
    every node a RedisServer started with --cluster-enabled yes in its own dir of workdir,
    joined by `redis-cli --cluster create ... --cluster-replicas N --cluster-yes`.
    node_timeout_ms is cluster-node-timeout (how soon a dead primary's replica takes
    over); node_args go to every node (e.g. --min-replicas-to-write), node_args_for(i) (if
    given) to node i besides (e.g. its TLS port).

    relays: every node announces a RedisGate in front of it as its client address
    (cluster-announce-port; the bus stays direct), so clients that follow the slot map,
    the proxy and the replicas, reach it through the gate (gate_of(node)); the test's
    own node.cmd() goes to the node directly."""

    def __init__(self, workdir, n_primaries=3, replicas_per=1, node_timeout_ms=2000,
                 node_args=(), node_args_for=None, relays=False):
        self.workdir = workdir
        self.node_timeout_ms = node_timeout_ms
        self.node_args = list(node_args)
        self.relays = relays
        self.nodes = []
        self.gates = {}
        for i in range(n_primaries * (1 + replicas_per)):
            self.nodes.append(self._node(i, list(node_args_for(i)) if node_args_for else []))
        self.replicas_per = replicas_per

    def _node(self, i, args):
        d = os.path.join(self.workdir, "cnode%d" % i)
        port = cluster_free_port()
        announce = []
        if self.relays:
            self.gates[port] = RedisGate(port)
            announce = ["--cluster-announce-port", str(self.gates[port].port),
                        "--cluster-announce-bus-port", str(port + 10000)]
        return RedisServer(d, port=port, extra_args=[
            "--cluster-enabled", "yes", "--cluster-config-file", os.path.join(d, "nodes.conf"),
            "--cluster-node-timeout", str(self.node_timeout_ms), "--repl-diskless-sync-delay",
            "0", "--cluster-replica-validity-factor", "0"] + announce + self.node_args + args)

    def add_empty_primary(self, timeout=30):
        """One more primary, without slots, joined by CLUSTER MEET; once every node knows
        it. Returns it."""
        node = self._node(len(self.nodes), [])
        if self.relays:
            self.gate_of(node).start()
        node.start()
        self.nodes[0].cmd("CLUSTER", "MEET", "127.0.0.1", str(node.port), timeout=2)
        nid = self.node_id(node)
        wait_until(lambda: all(nid in n.cmd("CLUSTER", "NODES", timeout=2) and
                               self._info(n).get("cluster_known_nodes") ==
                               str(len(self.nodes) + 1) for n in self.alive() + [node]),
                   timeout=timeout, interval=0.1, what="every node to know the new primary")
        self.nodes.append(node)
        return node

    def gate_of(self, node):
        return self.gates[node.port]

    def announced(self, node):
        """The port the cluster names for node (its gate's with relays)."""
        return self.gates[node.port].port if self.gates else node.port

    def start(self, timeout=60):
        for gate in self.gates.values():
            gate.start()
        for node in self.nodes:
            node.start()
        subprocess.run(["redis-cli", "--cluster", "create"] +
                       ["127.0.0.1:%d" % n.port for n in self.nodes] +
                       ["--cluster-replicas", str(self.replicas_per), "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=timeout)
        self.wait_stable(timeout)
        return self

    def stop(self):
        for n in self.nodes:
            n.resume()
            n.kill()
        for gate in self.gates.values():
            gate.stop()

    def alive(self):
        return [n for n in self.nodes if n.proc is not None and n.proc.poll() is None]

    def node_at(self, port):
        return next(n for n in self.nodes if n.port == port)

    def _info(self, node):
        text = _text(node.cmd("CLUSTER", "INFO", timeout=2))
        return dict(l.split(":", 1) for l in text.split("\r\n") if ":" in l)

    def primaries(self):
        """The live nodes whose ROLE is master and that own slots."""
        out = []
        for n in self.alive():
            try:
                role = n.cmd("ROLE", timeout=2)
            except (OSError, RedisError):
                continue
            if role[0] in (b"master", "master") and self.slots_of(n):
                out.append(n)
        return out

    def replica_of(self, primary):
        """A live replica of primary."""
        for n in self.alive():
            role = n.cmd("ROLE", timeout=2)
            if role[0] in (b"slave", "slave") and int(role[2]) == self.announced(primary):
                return n
        return None

    def slots_of(self, node):
        """The slots node says it owns (CLUSTER MYSHARDID is 7.2: read CLUSTER SLOTS)."""
        out = []
        for r in node.cmd("CLUSTER", "SLOTS", timeout=2):
            if int(r[2][1]) == self.announced(node):
                out.extend(range(int(r[0]), int(r[1]) + 1))
        return out

    def node_id(self, node):
        return _text(node.cmd("CLUSTER", "MYID", timeout=2))

    def wait_stable(self, timeout=60):
        """cluster_state ok everywhere, every primary's replicas attached, and each live
        node's CLUSTER SLOTS the same (ranges, primaries' addresses and ports). On a timeout the error says which of these was still
        missing at the last look (a loaded run once waited past 60 s, and said only that)."""
        last = ["not looked yet"]

        def stable():
            try:
                states = {n.port: self._info(n).get("cluster_state") for n in self.alive()}
                views = {n.port: sorted((int(r[0]), int(r[1]), _text(r[2][0]), int(r[2][1]),
                                         len(r) - 3)
                                        for r in n.cmd("CLUSTER", "SLOTS", timeout=2))
                         for n in self.alive()}
            except (OSError, RedisError) as e:
                last[0] = "a node did not answer: %r" % (e,)
                return False
            if any(st != "ok" for st in states.values()):
                last[0] = "cluster_state by node: %r" % states
                return False
            first = next(iter(views.values()))
            if any(v != first for v in views.values()):
                last[0] = "the nodes' CLUSTER SLOTS differ: %r" % views
                return False
            if sum(e - s + 1 for s, e, _, _, _ in first) != 16384:
                last[0] = "slots not all served: %r" % first
                return False
            if any(n != self.replicas_per for _, _, _, _, n in first):
                last[0] = "replicas per range (want %d): %r" % (self.replicas_per, first)
                return False
            return True
        try:
            wait_until(stable, timeout=timeout, interval=0.1, what="the cluster to be stable")
        except AssertionError as e:
            raise AssertionError("%s; at the last look: %s%s"
                                 % (e, last[0], self._unstable_nodes())) from None

    def _unstable_nodes(self):
        """What each live node that does not say cluster_state:ok sees: its CLUSTER NODES and
        the end of its log (the evidence when wait_stable runs out)."""
        out = []
        for n in self.alive():
            try:
                if self._info(n).get("cluster_state") == "ok":
                    continue
                nodes = _text(n.cmd("CLUSTER", "NODES", timeout=2))
            except (OSError, RedisError) as e:
                nodes = "(no answer: %r)" % (e,)
            out.append("\n--- node %d, CLUSTER NODES:\n%s\n--- its log:\n%s"
                       % (n.port, nodes, n._log_tail()[-1500:]))
        return "".join(out)

    def keys_per_node(self):
        """DBSIZE of each live primary, by port."""
        return {n.port: int(n.cmd("DBSIZE", timeout=2)) for n in self.primaries()}

    def addresses(self):
        return ["127.0.0.1:%d" % self.announced(n) for n in self.nodes]


def cluster_redis(cluster, **kw):
    """The redis section for the cluster (redis.url left out); redis.timeout 2 s, so that a
    loaded CI machine does not time out the commands of the traffic these tests run."""
    return dict({"url": None, "cluster": {"addresses": cluster.addresses()[:2]},
                 "timeout": "2s"}, **kw)


def redis_cli(node, lines):
    """Commands piped through one redis-cli connection to node; its output."""
    out = subprocess.run(["redis-cli", "-p", str(node.port)], input="\n".join(lines) + "\n",
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         check=True, timeout=60).stdout
    assert "ERR" not in out, out[-2000:]
    return out


def redirections(proxies, kind):
    return sum(metric(p, "idempotency_proxy_redis_cluster_redirections_total",
                      'kind="%s"' % kind) or 0 for p in proxies)
