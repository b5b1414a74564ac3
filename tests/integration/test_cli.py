"""The command line (`-t`, `-V`, `-h`), startup failures reported in one line, and
the shipped configs.

Real processes over real sockets: redis-server, tests/upstream/payments_api.py and the
proxy binary; each test asserts what the client and the upstream observe.
"""

import os
import re
import socket

import pytest

from harness import REPO, build_config, free_port, to_yaml, wait_ready
from proxy_helpers import new_key, assert_problem, assert_replay_of, run_bin, require_binary


# --------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------

def good_config_text():
    return to_yaml(build_config(free_port(), free_port(), "http://127.0.0.1:3000",
                                "redis://127.0.0.1:6379/0")) + "\n"


def test_cli_check_good_config(tmp_path):
    require_binary()
    path = tmp_path / "good.yaml"
    path.write_text(good_config_text())
    rc, out, err = run_bin(["-t", "-c", str(path)])
    assert rc == 0, (out, err)
    assert "configuration OK" in out + err


BAD_CONFIGS = {
    # name: (text, line of the error)
    "unknown-key": ("listen: 127.0.0.1:8080\nadmin_listen: \"\"\nbogus_key: 1\n"
                    "upstream:\n  url: http://127.0.0.1:3000\n", 3),
    "duplicate-key": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                      "  url: http://127.0.0.1:3001\n", 4),
    "wrong-type": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                   "defaults:\n  require_key: maybe\n", 5),
    "bad-duration": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                     "defaults:\n  lease: 10 parsecs\n", 5),
    "bad-size": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                 "limits:\n  max_request_body: 1GB\n", 5),
    "bad-mismatch-status": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                            "defaults:\n  mismatch_status: 418\n", 5),
    "bad-upstream-scheme": ("listen: 127.0.0.1:8080\nupstream:\n  url: ftp://127.0.0.1:3000\n", 3),
    "bad-in-flight": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                      "defaults:\n  in_flight: sometimes\n", 5),
    "bad-method": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                   "routes:\n  - path: /v1/payments*\n    methods: [POST, FETCH]\n", 6),
    "bad-listen": ("listen: 127.0.0.1:99999\nupstream:\n  url: http://127.0.0.1:3000\n", 1),
    "unknown-route-key": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                          "routes:\n  - path: /v1/payments*\n    requires_key: true\n", 6),
    "zero-workers": ("listen: 127.0.0.1:8080\nupstream:\n  url: http://127.0.0.1:3000\n"
                     "workers: 0\n", 4),
    "too-many-workers": ("listen: 127.0.0.1:8080\nworkers: 65\n", 2),
    "bad-workers": ("listen: 127.0.0.1:8080\nworkers: two\n", 2),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_cli_check_bad_config_reports_the_line(tmp_path, case):
    require_binary()
    text, line = BAD_CONFIGS[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    rc, out, err = run_bin(["-t", "-c", str(path)])
    assert rc == 1, (rc, out, err)
    assert (":%d:" % line) in out + err, (out, err)
    assert "configuration OK" not in out + err


def test_cli_version():
    require_binary()
    rc, out, err = run_bin(["-V"])
    assert rc == 0, (out, err)
    assert re.search(r"\d+\.\d+(\.\d+)?", out + err), (out, err)


def test_cli_help():
    require_binary()
    rc, out, err = run_bin(["-h"])
    assert rc == 0, (out, err)
    assert "-c" in out + err


def test_bad_config_at_startup_fails_with_one_line(tmp_path):
    require_binary()
    path = tmp_path / "bad.yaml"
    path.write_text(BAD_CONFIGS["unknown-key"][0])
    rc, out, err = run_bin(["-c", str(path)])
    assert rc != 0
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and ":3:" in lines[0], err


@pytest.mark.threads
@pytest.mark.parametrize("workers", [1, 2])
def test_listen_port_in_use_fails_with_one_line(tmp_path, workers):
    """Also with several workers, whose own sockets share the port (SO_REUSEPORT)."""
    require_binary()
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        cfg = build_config(port, free_port(), "http://127.0.0.1:3000",
                           "redis://127.0.0.1:%d/0" % free_port(), workers=workers)
        path = tmp_path / "inuse.yaml"
        path.write_text(to_yaml(cfg) + "\n")
        rc, out, err = run_bin(["-c", str(path)], timeout=20)
    assert rc != 0, (out, err)
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1, "expected one clear line on stderr, got:\n" + err
    assert str(port) in lines[0] or "in use" in lines[0].lower(), lines[0]


def test_unparsable_redis_url_fails_at_startup(tmp_path):
    require_binary()
    cfg = build_config(free_port(), free_port(), "http://127.0.0.1:3000",
                       "redis://127.0.0.1:notaport/0")
    path = tmp_path / "badredis.yaml"
    path.write_text(to_yaml(cfg) + "\n")
    rc, out, err = run_bin(["-c", str(path)], timeout=20)
    assert rc != 0, (out, err)
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1, err


# --------------------------------------------------------------------------
# the shipped configs
# --------------------------------------------------------------------------

def contract_example_config(port, admin_port, upstream_url, redis_url):
    return """\
listen: 127.0.0.1:%d                 # client-facing listener
admin_listen: 127.0.0.1:%d         # health, readiness, metrics, key admin ("" disables)
upstream:
  url: %s         # http://, https://, or unix:/path/to.sock
  connect_timeout: 2s
  timeout: 30s                       # whole exchange
redis:
  url: %s      # redis://[:password@]host:port/db ; unix:/path
  password: ${REDIS_PASSWORD}        # optional
  key_prefix: idem
  timeout: 500ms                     # per command; hiredis 0.14 has none, so the proxy times it
limits:
  max_request_body: 1MiB             # larger -> 413, nothing claimed, nothing forwarded
  max_stored_response: 1MiB
defaults:                            # every route inherits these; a route may override any
  key_header: Idempotency-Key
  methods: [POST, PATCH]
  require_key: false                 # true: a protected method without a key -> 400
  key_max_length: 255
  fingerprint: request               # request (method+path+query+body) | none
  scope_headers: [Authorization]     # keys live in a namespace per value of these headers
  lease: 60s                         # claim lease, renewed while the upstream works
  retention: 24h                     # how long a finished record is kept
  in_flight: wait                    # wait | reject
  wait_timeout: 10s                  # wait this long for the first request, then 409
  mismatch_status: 409               # 409 | 422 (the IETF draft's choice)
  release_statuses: [408, 425, 429, 503]   # upstream said "not processed": forget the key
  on_ambiguous: hold                 # hold | release   (see 6)
  on_store_error: reject             # reject (503) | pass (forward unprotected)
routes:                              # first match wins; no match -> plain pass-through
  - path: /v1/payments*              # exact, or prefix with a trailing *
    require_key: true
""" % (port, admin_port, upstream_url, redis_url)


def test_the_contract_example_config_runs(start_proxy, upstream, redis, tmp_path):
    require_binary()
    path = tmp_path / "example.yaml"
    path.write_text(contract_example_config(free_port(), free_port(), upstream.url, redis.url))
    rc, out, err = run_bin(["-t", "-c", str(path)])
    assert rc == 0 and "configuration OK" in out + err, (out, err)
    p = start_proxy(config_text=contract_example_config(0, 0, "{upstream}", "{redis}")
                    .replace("127.0.0.1:0                 #", "127.0.0.1:{port}  #")
                    .replace("127.0.0.1:0         #", "127.0.0.1:{admin_port}  #")
                    .replace("${REDIS_PASSWORD}", "${{REDIS_PASSWORD}}"),
                    env={"REDIS_PASSWORD": ""})
    assert_problem(p.post(key=None), 400, "missing-key")
    wait_ready(p)  # its defaults: redis.reassert.grace after the first connection
    key = new_key()
    first = p.post(key=key)
    assert first.status == 201
    assert_replay_of(p.post(key=key), first)


@pytest.mark.parametrize("name", ["idempotency-proxy.yaml", "webhooks.yaml"])
def test_shipped_configs_are_valid(name):
    require_binary()
    path = os.path.join(REPO, "conf", name)
    if not os.path.exists(path):
        pytest.skip("%s not shipped" % name)
    # the README's example secrets (a secret needs at least 16 bytes)
    env = {"STRIPE_WEBHOOK_SECRET": "whsec_test_secret",
           "GITHUB_WEBHOOK_SECRET": "It's a Secret to Everybody",
           "WEBHOOK_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
           "WEBHOOK_SECRET_PREVIOUS": "whsec_cHJldmlvdXMta2V5LTI0LWJ5dGVzLW9r"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        rc, out, err = run_bin(["-t", "-c", path])
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert rc == 0 and "configuration OK" in out + err, (out, err)
