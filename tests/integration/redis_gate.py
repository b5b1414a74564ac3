"""redis_gate.py - a TCP forwarder between the proxy and a real redis-server that can
hold back one command, as a fault injector over real sockets.

    gate = RedisGate(redis.port).start()
    proxy = start_proxy(redis={"url": gate.url})
    gate.hold_next(("EVALSHA", "EVAL"), ms=600)   # the next such command waits 600 ms

A held command, and everything the client sent after it on that connection, reaches
Redis only after the delay, in order, even when the client has closed the connection
meanwhile (the proxy drops a connection on which a command timed out): the command
times out at the proxy but still lands in Redis, later.

Commands from hiredis are RESP arrays of bulk strings; only their boundaries and names
are read here, the bytes are forwarded unchanged.
"""

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


class RedisGate:
    """127.0.0.1:port forwarding to 127.0.0.1:target_port; .held counts held commands."""

    def __init__(self, target_port):
        self.target_port = target_port
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
        self.stopping = False

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

    def hold_next(self, names=("EVALSHA", "EVAL"), ms=600):
        """The next command named one of names (on any connection) waits ms first."""
        with self.lock:
            self.hold_names = tuple(n.encode().upper() for n in names)
            self.hold_ms = ms
            self.delivered.clear()

    def _take_hold(self, name):
        with self.lock:
            if name in self.hold_names:
                self.hold_names = ()
                self.held += 1
                return self.hold_ms
        return 0

    def _accept(self):
        while not self.stopping:
            try:
                client, _ = self.lsock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._client_to_server, args=(client, server),
                             daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(client, server),
                             daemon=True).start()

    def _client_to_server(self, client, server):
        buf = b""
        try:
            while True:
                try:
                    data = client.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    break
                buf += data
                cmds, buf = _split_commands(buf)
                for name, raw in cmds:
                    ms = self._take_hold(name)
                    if ms:
                        time.sleep(ms / 1000.0)  # everything behind it waits too
                    server.sendall(raw)
                    if ms:
                        self.delivered.set()
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

    def _server_to_client(self, client, server):
        try:
            while True:
                data = server.recv(65536)
                if not data:
                    break
                try:
                    client.sendall(data)
                except OSError:
                    pass  # the client left; keep reading until Redis closes
        except OSError:
            pass
        finally:
            server.close()
            try:
                client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
