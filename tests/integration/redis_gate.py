"""redis_gate.py - a TCP forwarder between the proxy and a real redis-server that can
hold back one command, as a fault injector over real sockets.

    gate = RedisGate(redis.port).start()
    proxy = start_proxy(redis={"url": gate.url})
    gate.hold_next(("EVALSHA", "EVAL"), ms=600)   # the next such command waits 600 ms

A held command, and everything the client sent after it on that connection, reaches
Redis only after the delay, in order, even when the client has closed the connection
meanwhile (the proxy drops a connection on which a command timed out): the command
times out at the proxy but still lands in Redis, later.

    gate.before_next(("XADD",), lambda: redis.cmd("CONFIG", "SET", "min-replicas-to-write", "1"))

runs the action in the gate's thread just before the next such command goes on to Redis,
so that a real Redis state change (here: writes refused with NOREPLICAS) meets exactly
that command and what follows it. `containing=b"..."` narrows either to a command whose
bytes contain that string (e.g. one key).

    release = threading.Event()
    gate.hold_next(("CLUSTER",), until=release)   # ... until release is set
    gate.hold_replies()        # Redis's answers to the proxy's connections wait here
    gate.hold_replies(from_command="SET")   # ... from the answer to the next SET on
    gate.release_replies()     # ... and go out now, in order
    gate.cut(); gate.heal()    # a partition: every byte either way is dropped meanwhile

The proxy's connections are the ones whose client sent ROLE (its connection setup);
other clients of the node (a replica's replication link) are never held by the above. For a
replica that replicates through the gate (REPLICAOF 127.0.0.1 gate.port):

    gate.hold_stream()         # what the primary sends the replica from now on stays here
    gate.held_stream()         # ... those bytes (the replication stream)
    gate.pass_on(n)            # the first n of them go to the replica, then the link is cut
                               # for good: nothing more either way, a reconnect is refused

Commands from hiredis are RESP arrays of bulk strings; only their boundaries and names
are read here, the bytes are forwarded unchanged.
"""

import collections
import socket
import threading
import time


def _split_commands(buf):
    """(list of (NAME, raw bytes) for every complete command in buf, the rest)."""
    out = []
    pos = 0
    while True:
        start = pos
        end = buf.find(b"\r\n", pos)
        if end < 0 or buf[pos:pos + 1] != b"*":
            break
        n = int(buf[pos + 1:end])
        pos = end + 2
        args = []
        complete = True
        for _ in range(n):
            end = buf.find(b"\r\n", pos)
            if end < 0:
                complete = False
                break
            size = int(buf[pos + 1:end])
            if len(buf) < end + 2 + size + 2:
                complete = False
                break
            args.append(buf[end + 2:end + 2 + size])
            pos = end + 2 + size + 2
        if not complete:
            pos = start
            break
        out.append((args[0].upper() if args else b"", buf[start:pos]))
    return out, buf[pos:]


def _reply_end(buf, pos=0):
    """Where the RESP2 reply that starts at pos in buf ends, or -1 when it is incomplete."""
    line = buf.find(b"\r\n", pos)
    if line < 0:
        return -1
    kind = buf[pos:pos + 1]
    if kind in (b"+", b"-", b":"):
        return line + 2
    n = int(buf[pos + 1:line])
    if kind == b"$":
        end = line + 2 + n + 2
        return line + 2 if n < 0 else end if len(buf) >= end else -1
    pos = line + 2
    for _ in range(max(n, 0)):  # "*": n replies follow
        pos = _reply_end(buf, pos)
        if pos < 0:
            return -1
    return pos


class RedisGate:
    """127.0.0.1:port forwarding to target_host:target_port (a node on another loopback
    address in a test's namespace); .held counts held commands."""

    def __init__(self, target_port, target_host="127.0.0.1"):
        self.target_port = target_port
        self.target_host = target_host
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.hold_names = ()
        self.hold_ms = 0
        self.held = 0
        self.delivered = threading.Event()  # the last held command went to Redis
        self.hold_containing = None
        self.action_names = ()
        self.action_containing = None
        self.action = None
        self.acted = threading.Event()  # the action ran, and its command went to Redis
        self.hold_until = None
        self.stopping = False
        self.replies_held = False
        self.hold_from = None       # hold_replies' from_command
        self.replies_buffered = 0   # bytes of answers held back so far
        self.forwarded = 0          # bytes of answers passed on to clients
        self.received = 0           # bytes clients sent
        self.is_cut = False
        self.closed = False         # pass_on(): cut for good, new connections refused
        self.stream_held = False    # hold_stream()
        self.stream = b""           # what the node sent other clients meanwhile
        self._conns = []            # per connection: {"client", "proxy", "pending", ...}

    @property
    def url(self):
        return "redis://127.0.0.1:%d/0" % self.port

    def start(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self):
        self.stopping = True
        try:
            self.lsock.close()
        except OSError:
            pass

    def hold_next(self, names=("EVALSHA", "EVAL"), ms=600, containing=None, until=None):
        """The next command named one of names (on any connection) waits ms first, or,
        with until (a threading.Event), until it is set."""
        with self.lock:
            self.hold_names = tuple(n.encode().upper() for n in names)
            self.hold_ms = ms
            self.hold_containing = containing
            self.hold_until = until
            self.delivered.clear()

    def before_next(self, names, action, containing=None):
        """Run action() right before the next command named one of names goes to Redis."""
        with self.lock:
            self.action_names = tuple(n.encode().upper() for n in names)
            self.action_containing = containing
            self.action = action
            self.acted.clear()

    def _take_hold(self, name, raw):
        """(what holds the command back: ms, an Event to wait for, or 0; the action to
        run before it, or None)."""
        ms, action = 0, None
        with self.lock:
            if name in self.hold_names and (self.hold_containing is None
                                            or self.hold_containing in raw):
                self.hold_names = ()
                self.held += 1
                ms = self.hold_until or self.hold_ms
            if name in self.action_names and (self.action_containing is None
                                              or self.action_containing in raw):
                self.action_names = ()
                action = self.action
        return ms, action

    def hold_replies(self, from_command=None):
        """From now on the answers to the proxy's connections wait in the gate; with
        from_command (a command name), from the answer to the next command so named on
        (the answers before it go on)."""
        with self.lock:
            self.replies_held = True
            self.hold_from = from_command.encode().upper() if from_command else None

    def held_replies(self):
        """The answers held back so far, as one byte string per connection."""
        with self.lock:
            return [b"".join(conn["pending"]) for conn in self._conns if conn["pending"]]

    def release_replies(self):
        """The answers held back go out now, in order (each is in the client's socket
        when this returns), and are no longer held."""
        with self.lock:
            self.replies_held = False
            for conn in self._conns:
                if conn["pending"]:  # one write: they reach the client together
                    self._send(conn, b"".join(conn["pending"]))
                conn["pending"] = []
                conn["holding"] = False

    def cut(self):
        """A partition: from now on every byte either way is read and dropped."""
        self.is_cut = True

    def heal(self):
        self.is_cut = False

    def hold_stream(self):
        """From now on what the node sends on a connection that is not the proxy's (a
        replica's replication link) stays in the gate instead of going on."""
        with self.lock:
            self.stream_held = True

    def held_stream(self):
        """The bytes hold_stream() kept so far."""
        with self.lock:
            return self.stream

    def pass_on(self, n):
        """The first n bytes held go to every client that is not the proxy, then the gate is
        cut for good: nothing more either way, every connection shut, a new one refused."""
        with self.lock:
            self.is_cut = self.closed = True
            for conn in self._conns:
                if not conn["proxy"]:
                    self._send(conn, self.stream[:n])
                for sock in (conn["client"], conn["server"]):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

    def _send(self, conn, data):
        try:
            conn["client"].sendall(data)
            self.forwarded += len(data)
        except OSError:
            pass  # the client left; keep reading until Redis closes

    def _accept(self):
        while not self.stopping:
            try:
                client, _ = self.lsock.accept()
            except OSError:
                return
            if self.closed:
                client.close()
                continue
            try:
                server = socket.create_connection((self.target_host, self.target_port),
                                                  timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle delay
            # sent: the names of the commands not answered yet (the proxy's connections)
            conn = {"client": client, "server": server, "proxy": False, "pending": [], "holding": False,
                    "sent": collections.deque(), "rbuf": b""}
            with self.lock:
                self._conns.append(conn)
            threading.Thread(target=self._client_to_server, args=(conn, server),
                             daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(conn, server),
                             daemon=True).start()

    def _client_to_server(self, conn, server):
        client = conn["client"]
        buf = b""
        try:
            while True:
                try:
                    data = client.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    break
                self.received += len(data)
                if self.is_cut:
                    continue
                buf += data
                cmds, buf = _split_commands(buf)
                # the proxy's setup sends ROLE in one write with the commands before it
                if any(name == b"ROLE" for name, _ in cmds):
                    conn["proxy"] = True
                for name, raw in cmds:
                    conn["sent"].append(name)
                    ms, action = self._take_hold(name, raw)
                    if isinstance(ms, threading.Event):
                        ms.wait()  # everything behind it waits too
                    elif ms:
                        time.sleep(ms / 1000.0)  # everything behind it waits too
                    if action is not None:
                        action()
                    server.sendall(raw)
                    if ms:
                        self.delivered.set()
                    if action is not None:
                        self.acted.set()
            if buf:
                server.sendall(buf)
            # the client is gone: let Redis run what it got, then close
            server.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            try:
                client.close()
            except OSError:
                pass

    def _server_to_client(self, conn, server):
        try:
            while True:
                data = server.recv(65536)
                if not data:
                    break
                if self.is_cut:
                    continue
                if not conn["proxy"]:
                    with self.lock:
                        held = self.stream_held
                        if held:
                            self.stream += data
                    if not held:
                        self._send(conn, data)
                    continue
                conn["rbuf"] += data
                while True:
                    end = _reply_end(conn["rbuf"])
                    if end < 0:
                        break
                    reply, conn["rbuf"] = conn["rbuf"][:end], conn["rbuf"][end:]
                    name = conn["sent"].popleft() if conn["sent"] else b""
                    with self.lock:
                        if self.replies_held and (conn["holding"] or self.hold_from in
                                                  (None, name)):
                            conn["holding"] = True
                            conn["pending"].append(reply)
                            self.replies_buffered += len(reply)
                        else:
                            self._send(conn, reply)
        except OSError:
            pass
        finally:
            with self.lock:
                if conn in self._conns:
                    self._conns.remove(conn)
            server.close()
            try:
                conn["client"].shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
