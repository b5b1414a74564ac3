"""Helpers of the webhook inbox's tests (test_inbox.py, test_inbox_controls.py and the
files that queue deliveries): the receivers, a queued route, signed Stripe deliveries (for
every test that sends one, test_webhooks.py's too) and the admin listener's /inbox. The
`receiver_factory` fixture (conftest.py) starts Receivers.

  Receiver            tests/upstream/inbox_receiver.py on a fixed port (slow, down, 500)
  VerifyingReceiver   tests/receivers/verify_receiver.js: verifies the proxy's signature
                      with the `standardwebhooks` npm package
  queued_route, start_inbox_proxy, new_secret, sign_secret, stripe_body, stripe_signature,
  deliver, inbox, inbox_ok, inbox_empty, by_event
"""

import base64
import hashlib
import hmac
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import uuid

import pytest

from harness import PYTHON, REPO, _terminate, free_port, port_accepts, wait_until

RECEIVER_SCRIPT = os.path.join(REPO, "tests", "upstream", "inbox_receiver.py")
ROUTE = "/webhooks/stripe"
ENCODED = urllib.parse.quote(ROUTE, safe="")


class Receiver:
    """inbox_receiver.py on a fixed port: stop() and start() again keep the port and the log."""

    def __init__(self, workdir, delay=0.0, status=200):
        self.port = free_port()
        self.log = os.path.join(workdir, "receiver-%d.jsonl" % self.port)
        self.delay, self.status = delay, status
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([PYTHON, RECEIVER_SCRIPT, "--port", str(self.port),
                                      "--log", self.log, "--delay", str(self.delay),
                                      "--status", str(self.status)],
                                     stdin=subprocess.DEVNULL)
        wait_until(lambda: port_accepts(self.port), what="receiver listening")
        return self

    def stop(self):
        if self.proc is not None:
            _terminate(self.proc, signal.SIGKILL, 5)
            self.proc = None

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def attempts(self):
        """Every attempt logged so far; a line the receiver is still writing (no newline yet)
        is left for the next look."""
        try:
            with open(self.log) as f:
                text = f.read()
        except FileNotFoundError:
            return []
        return [json.loads(l) for l in text.split("\n")[:-1] if l.strip()]

    def control(self, **state):
        import urllib.request
        req = urllib.request.Request(self.url + "/_control", data=json.dumps(state).encode(),
                                     method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())


def queued_route(secret, **delivery):
    d = {"mode": "queued", "max_attempts": 12, "max_age": "72h",
         "backoff": {"initial": "1s", "max": "1h"}, "visibility_timeout": "30s",
         "concurrency": 16, "ack_status": 202}
    d.update(delivery)
    return {"path": ROUTE, "key_from": "json:/id", "verify": "stripe", "secret": secret,
            "delivery": d}


def start_inbox_proxy(start_proxy, receiver, secret, timeout="60s", workers=None, **delivery):
    extra = {"workers": workers} if workers else {}
    return start_proxy(routes=[queued_route(secret, **delivery)], upstream_url=receiver.url,
                       upstream={"timeout": timeout}, env={"STRIPE_SECRET": secret}, **extra)


def new_secret():
    return "whsec_" + uuid.uuid4().hex


def stripe_body(evt, **extra):
    doc = {"id": evt, "type": "payment_intent.succeeded", "pending_webhooks": 1}
    doc.update(extra)
    return json.dumps(doc).encode()


def stripe_signature(secret, body, t):
    """The Stripe-Signature header value of body signed with secret at t (Unix seconds):
    `t=<t>,v1=<hex HMAC-SHA256 of "<t>." + body>` (docs/webhooks.md, `verify: stripe`)."""
    mac = hmac.new(secret.encode(), b"%d." % t + body, hashlib.sha256).hexdigest()
    return "t=%d,v1=%s" % (t, mac)


def deliver(p, secret, body, path=ROUTE, headers=(), age_s=0, timeout=10):
    """POST body to p's path as Stripe delivers it: JSON, signed with secret age_s seconds ago
    (0: now), then the extra headers (name, value); timeout in seconds. Returns the Response."""
    signature = stripe_signature(secret, body, int(time.time()) - age_s)
    return p.request("POST", path, [("Stripe-Signature", signature),
                                    ("Content-Type", "application/json")] + list(headers),
                     body, timeout=timeout)


def inbox(p):
    r = p.admin("GET", "/inbox")
    assert r.status == 200, r
    routes = r.json()["routes"]
    assert [x["route"] for x in routes] == [ROUTE]
    return routes[0]


def by_event(attempts):
    out = {}
    for a in attempts:
        out.setdefault(a["event"], []).append(a)
    return out


def inbox_ok(p):
    r = p.admin("GET", "/inbox")
    return r.status == 200


def inbox_empty(p, route=ROUTE):
    """Nothing of route is in its stream, pending or scheduled: no delivery can follow."""
    r = p.admin("GET", "/inbox")
    assert r.status == 200, r
    stats = [x for x in r.json()["routes"] if x["route"] == route][0]
    return (stats["depth"], stats["pending"], stats["scheduled"]) == (0, 0, 0)


RECEIVERS = os.path.join(REPO, "tests", "receivers")


def sign_secret():
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


def node_modules():
    """tests/receivers/node_modules, as tests/install-deps.sh --tests leaves it."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("needs node and npm on PATH (tests/install-deps.sh --tests)", pytrace=False)
    modules = os.path.join(RECEIVERS, "node_modules")
    if not os.path.isdir(os.path.join(modules, "standardwebhooks")):
        r = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                           cwd=RECEIVERS, stdin=subprocess.DEVNULL, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, "npm ci in tests/receivers failed:\n%s%s" % (r.stdout, r.stderr)
    return node, modules


class VerifyingReceiver(Receiver):
    """verify_receiver.js on a fixed port; its log outlives a restart. stop(), url and
    attempts() are Receiver's."""

    def __init__(self, workdir, secret):
        self.node, self.modules = node_modules()
        self.port = free_port()
        self.log = os.path.join(workdir, "verify-%d.jsonl" % self.port)
        self.secret = secret
        self.proc = None

    def start(self, refuse_first=0):
        env = dict(os.environ, NODE_PATH=self.modules, SIGN_SECRET=self.secret)
        self.proc = subprocess.Popen([self.node, os.path.join(RECEIVERS, "verify_receiver.js"),
                                      str(self.port), self.log, str(refuse_first)],
                                     stdin=subprocess.DEVNULL, env=env)
        wait_until(lambda: port_accepts(self.port), what="node receiver listening")
        return self
