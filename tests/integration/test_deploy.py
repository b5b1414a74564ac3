"""The deployment files agree with each other and with the proxy.

    docker/Dockerfile                   image: EXPOSE, HEALTHCHECK, USER, CMD config path
    docker/idempotency-proxy.yaml       the config baked into the image (compose topology)
    docker/compose.yaml                 redis + payments-api + proxy
    docker/kubernetes/                  a kustomize base: sidecar.yaml (ConfigMap, Deployment
                                        (app + sidecar), Service, PodDisruptionBudget,
                                        NetworkPolicy, the Redis CA mount) and
                                        kustomization.yaml (the Secrets, generated from files
                                        the user creates: Redis password, admin operators,
                                        keyring; the Redis user's ConfigMap)
    conf/idempotency-proxy.yaml         the annotated sample: the schema the others must use

No Docker engine or cluster is needed: the files are parsed (Debian's python3-yaml), the
Kubernetes base is rendered by Debian's kubectl 1.20 (`kubectl kustomize`, in a copy with
the secret files made as kustomization.yaml says) and its objects parsed, the
configs are checked by the proxy binary ($IDEM_PROXY_BIN, `-t -c`), the compose
demo's curl is run against the same processes on loopback ports, and the
scripts of docker/ and tests/ pass shellcheck. The image itself is built and
run by docker/test-image.sh, which tests/run.sh runs once.
"""

import functools
import glob
import hashlib
import json
import base64
import os
import re
import shutil
import subprocess
import urllib.parse

import pytest

from harness import (REPO, RedisServer, Upstream, free_port, port_accepts, proxy_binary,
                     wait_until)

try:
    import yaml
except ImportError:  # Debian: apt-get install python3-yaml (tests/install-deps.sh)
    yaml = None

DOCKER = os.path.join(REPO, "docker")
DOCKERFILE = os.path.join(DOCKER, "Dockerfile")
CONTAINER_CONFIG = os.path.join(DOCKER, "idempotency-proxy.yaml")
COMPOSE = os.path.join(DOCKER, "compose.yaml")
KUBERNETES = os.path.join(DOCKER, "kubernetes")
SIDECAR = os.path.join(KUBERNETES, "sidecar.yaml")
KUSTOMIZATION = os.path.join(KUBERNETES, "kustomization.yaml")
SAMPLE_CONFIG = os.path.join(REPO, "conf", "idempotency-proxy.yaml")
BUILD_SH = os.path.join(DOCKER, "build.sh")
READMES = [os.path.join(REPO, "README.md"), os.path.join(REPO, "docs", "operations.md")]

CONFIG_PATH = "/etc/idempotency-proxy/idempotency-proxy.yaml"
PROXY_CONTAINER = "idempotency-proxy"
# where the Kubernetes example mounts the Redis password (redis.password_file)
SIDECAR_REDIS_PASSWORD_FILE = "/etc/idempotency-proxy-redis/password"


# --------------------------------------------------------------------------
# parsing helpers
# --------------------------------------------------------------------------

def need_yaml():
    if yaml is None:
        pytest.fail("python3-yaml is not installed (apt-get install python3-yaml; "
                    "tests/install-deps.sh should list it)", pytrace=False)
    return yaml


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def load_yaml(path):
    return need_yaml().safe_load(read(path))


def host_port(text):
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def url_host_port(url, default_port):
    u = urllib.parse.urlsplit(url)
    return u.hostname, u.port or default_port


def dockerfile():
    """[(stage index, INSTRUCTION, argument text)], continuation lines joined."""
    out, stage, pending = [], -1, ""
    for raw in read(DOCKERFILE).splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        instr, _, args = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            stage += 1
        out.append((stage, instr, args.strip()))
    return out


def instructions(name, stage=None):
    return [a for s, i, a in dockerfile() if i == name and (stage is None or s == stage)]


def last_stage():
    return max(s for s, _, _ in dockerfile())


def exec_form(args):
    """The JSON array of an exec-form instruction (CMD, ENTRYPOINT, HEALTHCHECK ... CMD)."""
    m = re.search(r"(\[.*\])\s*$", args)
    assert m, "not an exec-form (JSON array) instruction: %r" % args
    return json.loads(m.group(1))


def image_uid():
    user = instructions("USER", last_stage())[-1]
    return int(user.split(":")[0])


def container_config():
    return load_yaml(CONTAINER_CONFIG)


def compose():
    return load_yaml(COMPOSE)


def compose_interpolate(text, env=None):
    """Compose's ${VAR}, ${VAR:-default} and $$ against env (default: an empty environment)."""
    env = env or {}

    def sub(m):
        name, default = m.group(1), m.group(3)
        value = env.get(name)
        if value in (None, "") and default is not None:
            return default
        return value or ""
    text = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:?-([^}]*))?\}", sub, text)
    return text.replace("$$", "$")


def kubectl():
    """Debian 12's kubectl (kubernetes-client 1.20, kustomize built in), as CI has it:
    $IDEM_KUBECTL; else the copy tests/install-deps.sh unpacks into tests/.kubectl where
    another package (a cloud SDK) owns /usr/bin/kubectl; else /usr/bin/kubectl when
    kubernetes-client installed it. Never another kubectl: a newer kustomize accepts what
    1.20's refuses."""
    if os.environ.get("IDEM_KUBECTL"):
        return os.environ["IDEM_KUBECTL"]
    unpacked = os.path.join(REPO, "tests", ".kubectl", "usr", "bin", "kubectl")
    if os.access(unpacked, os.X_OK):
        return unpacked
    owner = subprocess.run(["dpkg-query", "-S", "/usr/bin/kubectl"], capture_output=True,
                           text=True)
    if owner.returncode == 0 and owner.stdout.startswith("kubernetes-client:"):
        return "/usr/bin/kubectl"
    pytest.fail("Debian's kubectl is not installed (tests/install-deps.sh --tests installs "
                "kubernetes-client, or unpacks it into tests/.kubectl)", pytrace=False)


def kustomize(base):
    """`kubectl kustomize base` -> (exit code, stdout, stderr)."""
    p = subprocess.run([kubectl(), "kustomize", str(base)], capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout, p.stderr


def kustomization_comment_command(pattern):
    """The shell command in kustomization.yaml's comments that matches pattern (a regex over
    the comment text, its lines joined; continuation backslashes kept)."""
    text = "\n".join(re.sub(r"^#\s?", "", line) for line in read(KUSTOMIZATION).splitlines()
                     if line.startswith("#"))
    m = re.search(pattern, text, re.S)
    assert m, "kustomization.yaml documents no command matching %r" % pattern
    return re.sub(r"\\\n\s*", " ", m.group(0)).strip()


def make_secret_inputs(base):
    """The three files kustomization.yaml asks the user to make, made in base as it says
    (its printf lines for the password and the keyring; its format for the operators):
    {file name: bytes}."""
    env = dict(os.environ, REDIS_PASSWORD="deploy-" + os.urandom(12).hex())
    for pattern in (r"umask 077; printf '%s\\n' \"\$REDIS_PASSWORD\" > redis-password",
                    r"printf 'keys:.*?> keyring\.yaml"):
        command = "umask 077; " + kustomization_comment_command(pattern)
        subprocess.run(["bash", "-ec", command], cwd=str(base), env=env, check=True)
    token = os.urandom(32).hex()
    (base / "operators.yaml").write_text(
        "operators:\n  - name: oncall-alice\n    token_sha256: %s\n    rights: [read, resolve]\n"
        % hashlib.sha256(token.encode()).hexdigest())
    return {name: (base / name).read_bytes() for name in SECRET_INPUTS}


# the files the user creates beside kustomization.yaml, one per generated Secret
SECRET_INPUTS = ("redis-password", "operators.yaml", "keyring.yaml")


@functools.lru_cache(maxsize=None)
def rendered():
    """docker/kubernetes rendered as `kubectl kustomize` renders it, from a copy with the
    secret files made: ({kind: [objects]}, {secret file name: bytes})."""
    import pathlib
    import tempfile
    with tempfile.TemporaryDirectory(prefix="idem-kustomize-") as tmp:
        base = pathlib.Path(tmp) / "kubernetes"
        shutil.copytree(KUBERNETES, str(base))
        for name in SECRET_INPUTS:       # a checkout where the user made them: not theirs
            if (base / name).exists():
                (base / name).unlink()
        inputs = make_secret_inputs(base)
        rc, out, err = kustomize(base)
    assert rc == 0, "kubectl kustomize docker/kubernetes failed: %s" % err
    by_kind = {}
    for d in need_yaml().safe_load_all(out):
        if d:
            by_kind.setdefault(d["kind"], []).append(d)
    return by_kind, inputs


def sidecar_objects():
    """The objects `kubectl kustomize docker/kubernetes` applies, by kind."""
    return rendered()[0]


def secret_data(secret):
    """{key: bytes} of a rendered Secret (kustomize writes data, base64)."""
    assert "stringData" not in secret, secret["metadata"]["name"]
    return {k: base64.b64decode(v) for k, v in secret.get("data", {}).items()}


def one(by_kind, kind):
    assert len(by_kind.get(kind, [])) == 1, "expected one %s in the rendered base" % kind
    return by_kind[kind][0]


def pod_containers(by_kind):
    spec = one(by_kind, "Deployment")["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec["containers"]}


def container_port(container, port):
    """A probe's or Service's port (number or name) as a number on this container."""
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    raise AssertionError("no port named %r on container %s" % (port, container["name"]))


def config_map(by_kind):
    """The ConfigMap with the proxy's config (the other holds REDIS_USERNAME)."""
    maps = [c for c in by_kind.get("ConfigMap", [])
            if os.path.basename(CONFIG_PATH) in c.get("data", {})]
    assert len(maps) == 1, "expected one ConfigMap with %s" % os.path.basename(CONFIG_PATH)
    return maps[0]


def configmap_config(by_kind):
    data = config_map(by_kind)["data"]
    return need_yaml().safe_load(data[os.path.basename(CONFIG_PATH)])


def check_config(path, env=None):
    """`idempotency-proxy -t -c path` -> (exit code, output)."""
    binary = proxy_binary()
    if not os.path.exists(binary):
        pytest.fail("proxy binary not found at %s (ninja -C build, or set IDEM_PROXY_BIN)" % binary)
    e = dict(os.environ)
    e.update(env or {"REDIS_PASSWORD": "deploy-test"})
    p = subprocess.run([binary, "-t", "-c", path], capture_output=True, text=True, env=e,
                       timeout=30)
    return p.returncode, (p.stdout + p.stderr).strip()


def admin_token_path(cfg):
    """The admin.token_file a deployment config names (the image's needs one: admin on 0.0.0.0)."""
    path = (cfg.get("admin") or {}).get("token_file")
    assert path, "admin_listen %s needs admin.token_file" % cfg["admin_listen"]
    return path


def with_token_file(text, tmp_path, token="deploy-test-token-0123456789abcdef0123"):
    """text with its admin.token_file pointing at a token file written in tmp_path."""
    path = admin_token_path(need_yaml().safe_load(text))
    token_file = tmp_path / "admin-token"
    token_file.write_text(token + "\n")
    assert text.count(path) == 1, path
    return text.replace(path, str(token_file))


def operators_path(cfg):
    """The admin.operators_file a deployment config names (the Kubernetes example's)."""
    path = (cfg.get("admin") or {}).get("operators_file")
    assert path, "the sidecar's config names its operators (admin.operators_file)"
    return path


def with_operators_file(text, tmp_path, operators=None):
    """text with its admin.operators_file pointing at an operators file written in tmp_path
    (one operator by default), and its log.audit file, if any, in tmp_path too."""
    cfg = need_yaml().safe_load(text)
    path = operators_path(cfg)
    ops = tmp_path / "operators.yaml"
    ops.write_text(operators or "operators:\n  - name: deploy-test\n    token_sha256: %s\n"
                   "    rights: [read]\n" % ("ab" * 32))
    assert text.count(path) == 1, path
    return text.replace(path, str(ops))


def check_config_text(text, tmp_path, name="idempotency-proxy.yaml"):
    """check_config of text; the Kubernetes example's Redis password file is one in tmp_path."""
    if SIDECAR_REDIS_PASSWORD_FILE in text:
        password = tmp_path / "redis-password"
        password.write_text("deploy-test\n")
        text = text.replace(SIDECAR_REDIS_PASSWORD_FILE, str(password))
    path = tmp_path / name
    path.write_text(text)
    return check_config(str(path))


def demo_curl():
    """The one curl in compose.yaml's header comment."""
    for line in read(COMPOSE).splitlines():
        m = re.match(r"#\s+(curl .*)$", line)
        if m:
            return m.group(1).strip()
    raise AssertionError("no '#   curl ...' line at the top of docker/compose.yaml")


# --------------------------------------------------------------------------
# Dockerfile
# --------------------------------------------------------------------------

def test_dockerfile_builds_on_bookworm_with_build_sh_and_runs_on_bookworm_slim():
    froms = instructions("FROM")
    assert len(froms) == 2, froms
    assert re.fullmatch(r"debian:bookworm\s+AS\s+build", froms[0], re.I), froms[0]
    assert froms[1] == "debian:bookworm-slim", froms[1]
    assert any("docker/build.sh" in r for r in instructions("RUN", 0))
    assert any(c.startswith("--from=build ") for c in instructions("COPY", 1))


def test_dockerfile_runtime_stage_installs_exactly_runtime_packages_txt():
    runs = " ".join(instructions("RUN", last_stage()))
    assert "runtime-packages.txt" in runs
    assert "apt-get install" in runs and "--no-install-recommends" in runs
    assert "rm -rf /var/lib/apt/lists/*" in runs
    assert any("docker/runtime-packages.txt" in c for c in instructions("COPY", last_stage()))


def config_ports(cfg):
    return {host_port(cfg[k])[1] for k in ("listen", "admin_listen", "health_listen")}


def test_dockerfile_exposes_the_container_configs_ports():
    cfg = container_config()
    exposed = {int(p.split("/")[0]) for e in instructions("EXPOSE") for p in e.split()}
    assert exposed == config_ports(cfg) == {8080, 9901, 9902}


def test_dockerfile_healthcheck_gets_healthz_on_the_health_port():
    hc = instructions("HEALTHCHECK")
    assert len(hc) == 1, hc
    argv = exec_form(hc[0])
    urls = [a for a in argv if a.startswith("http://")]
    assert len(urls) == 1, argv
    u = urllib.parse.urlsplit(urls[0])
    assert u.path == "/healthz"
    assert u.port == host_port(container_config()["health_listen"])[1]
    # the slim image has no curl of its own: runtime-packages.txt must bring it
    if argv[0] == "curl":
        assert re.search(r"^curl\b", read(os.path.join(DOCKER, "runtime-packages.txt")), re.M)
        assert "-f" in argv or "-fsS" in argv or "--fail" in argv, "curl without -f exits 0 on a 5xx"


def test_dockerfile_runs_the_proxy_with_the_documented_config_path():
    assert exec_form(instructions("ENTRYPOINT")[-1]) == ["idempotency-proxy"]
    assert exec_form(instructions("CMD")[-1]) == ["-c", CONFIG_PATH]
    assert instructions("STOPSIGNAL") == ["SIGTERM"]
    # build.sh puts the container config there; the runtime stage copies the install tree to /
    assert re.search(r"docker/idempotency-proxy\.yaml\"?\s+\"?\$destdir" + re.escape(CONFIG_PATH),
                     read(BUILD_SH)), "build.sh does not install docker/idempotency-proxy.yaml at " + CONFIG_PATH


def test_dockerfile_user_is_numeric_and_not_root():
    assert image_uid() > 0


def test_dockerfile_runs_its_pipes_under_pipefail():
    # docker/test-image.sh builds and runs the image; a failed command early in a pipe
    # of a RUN line would not fail that build without pipefail
    for stage in range(last_stage() + 1):
        shells = instructions("SHELL", stage)
        assert shells and exec_form(shells[0])[:3] == ["/bin/bash", "-o", "pipefail"], (stage, shells)


# --------------------------------------------------------------------------
# the container config
# --------------------------------------------------------------------------

def test_container_config_binds_all_interfaces_for_clients_and_probes():
    cfg = container_config()
    assert cfg["listen"] == "0.0.0.0:8080"
    assert cfg["admin_listen"] == "0.0.0.0:9901"
    assert cfg["health_listen"] == "0.0.0.0:9902"


def test_container_config_takes_the_redis_password_from_the_environment():
    cfg = container_config()
    assert cfg["redis"]["password"] == "${REDIS_PASSWORD}"
    assert "@" not in cfg["redis"]["url"], "no password in the Redis URL"


def sample_keys():
    """Key paths of conf/idempotency-proxy.yaml, plus the route keys its comments document."""
    sample = load_yaml(SAMPLE_CONFIG)
    keys = set()
    for k, v in sample.items():
        keys.add(k)
        if isinstance(v, dict):
            keys.update("%s.%s" % (k, sub) for sub in v)
    # a section's keys without a default are commented out: `  # token_file: ...`
    section = None
    for line in read(SAMPLE_CONFIG).split("\nroutes:", 1)[0].splitlines():
        top = re.match(r"^([a-z_]+):", line)
        if top:
            section = top.group(1)
        commented = re.match(r"^  # ?([a-z_]+):", line)
        if commented and section:
            keys.add("%s.%s" % (section, commented.group(1)))
    route_keys = {"path"} | set(sample["defaults"])
    for r in sample.get("routes", []):
        route_keys |= set(r)
    routes_text = read(SAMPLE_CONFIG).split("\nroutes:", 1)[1]
    route_keys |= set(re.findall(r"^\s*#?\s*-?\s*([a-z_]+):", routes_text, re.M))
    return keys, route_keys


def test_container_config_uses_only_keys_of_the_sample_config():
    keys, route_keys = sample_keys()
    cfg = container_config()
    for k, v in cfg.items():
        assert k in keys, "unknown top-level key %s" % k
        if isinstance(v, dict):
            for sub in v:
                assert "%s.%s" % (k, sub) in keys, "unknown key %s.%s" % (k, sub)
    for r in cfg.get("routes", []):
        assert set(r) <= route_keys, set(r) - route_keys


def test_container_config_loads(tmp_path):
    rc, out = check_config_text(with_token_file(read(CONTAINER_CONFIG), tmp_path), tmp_path)
    assert (rc, out) == (0, "configuration OK")


def test_container_config_needs_its_admin_token_file(tmp_path):
    # fail closed: without the mounted token the admin listener on 0.0.0.0 never starts open
    text = read(CONTAINER_CONFIG)
    path = admin_token_path(container_config())
    rc, out = check_config(CONTAINER_CONFIG)
    line = text.splitlines().index("  token_file: %s" % path) + 1
    assert rc == 1 and "%s:%d: admin.token_file: %s: cannot open" % (CONTAINER_CONFIG, line, path) in out, out
    without = "\n".join(l for l in text.splitlines() if not l.startswith(("admin:", "  token_file:")))
    rc, out = check_config_text(without + "\n", tmp_path)
    admin_line = without.splitlines().index("admin_listen: 0.0.0.0:9901") + 1
    assert rc == 1 and (":%d: admin_listen 0.0.0.0:9901 is not a loopback address" % admin_line) in out, out


# --------------------------------------------------------------------------
# docker compose
# --------------------------------------------------------------------------

def test_compose_has_redis_payments_api_and_proxy():
    assert set(compose()["services"]) == {"redis", "payments-api", "proxy"}


def test_compose_redis_keeps_an_aof_fsynced_every_second_on_a_named_volume():
    c = compose()
    redis = c["services"]["redis"]
    assert redis["image"].startswith("redis:7")
    cmd = redis["command"]
    assert cmd[0] == "redis-server"
    assert cmd[cmd.index("--appendonly") + 1] == "yes"
    assert cmd[cmd.index("--appendfsync") + 1] == "everysec"
    volume, _, target = redis["volumes"][0].partition(":")
    assert target == "/data" and volume in c["volumes"]


def test_compose_builds_the_proxy_from_the_dockerfile_with_the_repo_as_context():
    build = compose()["services"]["proxy"]["build"]
    context = os.path.normpath(os.path.join(DOCKER, build["context"]))
    assert context == REPO
    assert os.path.normpath(os.path.join(context, build["dockerfile"])) == DOCKERFILE


def test_compose_proxy_publishes_the_configs_ports_and_starts_after_its_dependencies():
    proxy = compose()["services"]["proxy"]
    cfg = container_config()
    published = {int(str(p).rsplit(":", 1)[1]) for p in proxy["ports"]}
    assert published == config_ports(cfg)
    # every published port on the host's loopback only
    assert all(str(p).startswith("127.0.0.1:") for p in proxy["ports"]), proxy["ports"]
    assert {"redis", "payments-api"} <= set(proxy["depends_on"])


def test_compose_topology_matches_the_container_configs_urls():
    c = compose()
    cfg = container_config()
    up_host, up_port = url_host_port(cfg["upstream"]["url"], 80)
    api = c["services"][up_host]
    assert up_host == "payments-api"
    cmd = api["command"]
    listen_host, listen_port = host_port(cmd[cmd.index("--listen") + 1])
    assert (listen_host, listen_port) == ("0.0.0.0", up_port)
    # the demo upstream is mounted from this repository at the path the command runs
    mounts = dict(v.split(":")[:2] for v in api["volumes"])
    script = [a for a in cmd if a.endswith("payments_api.py")][0]
    source = [s for s, t in mounts.items() if t == script][0]
    assert os.path.normpath(os.path.join(DOCKER, source)) == os.path.join(
        REPO, "tests", "upstream", "payments_api.py")
    assert url_host_port(cfg["redis"]["url"], 6379) == ("redis", 6379)
    assert "redis" in c["services"]


def test_compose_gives_redis_and_the_proxy_the_same_password():
    c = compose()
    cmd = c["services"]["redis"]["command"]
    requirepass = cmd[cmd.index("--requirepass") + 1]
    proxy_env = c["services"]["proxy"]["environment"]
    assert proxy_env["REDIS_PASSWORD"] == requirepass
    for env in ({}, {"REDIS_PASSWORD": "from-the-shell"}):
        assert compose_interpolate(requirepass, env)  # never an empty password
        assert compose_interpolate(proxy_env["REDIS_PASSWORD"], env) == compose_interpolate(requirepass, env)


def compose_admin_token_source():
    """The host file compose mounts where the image's config reads its admin token."""
    target = admin_token_path(container_config())
    mounts = [compose_interpolate(v).rsplit(":", 2) for v in compose()["services"]["proxy"]["volumes"]]
    sources = [src for src, dst, mode in mounts if dst == target and mode == "ro"]
    assert len(sources) == 1, mounts
    return os.path.normpath(os.path.join(DOCKER, sources[0]))


def test_compose_mounts_a_valid_admin_token_where_the_config_reads_it(tmp_path):
    source = compose_admin_token_source()
    assert os.path.isfile(source), source
    assert os.stat(source).st_mode & 0o004, "uid 10001 in the container must read the demo token"
    text = read(CONTAINER_CONFIG).replace(admin_token_path(container_config()), source)
    rc, out = check_config_text(text, tmp_path)
    assert (rc, out) == (0, "configuration OK")
    # ADMIN_TOKEN_FILE replaces the demo's token
    proxy = compose()["services"]["proxy"]
    assert any(compose_interpolate(v, {"ADMIN_TOKEN_FILE": "/secrets/t"}).startswith("/secrets/t:")
               for v in proxy["volumes"]), proxy["volumes"]


def test_compose_demo_curl_shows_a_replay(tmp_path):
    """compose.yaml's one curl, against the compose services as local processes."""
    c = compose()
    password = compose_interpolate(c["services"]["proxy"]["environment"]["REDIS_PASSWORD"])
    redis_cmd = [compose_interpolate(a) for a in c["services"]["redis"]["command"]]
    redis = RedisServer(str(tmp_path / "redis"), extra_args=redis_cmd[1:], password=password)
    upstream = Upstream(str(tmp_path))
    proc = None
    try:
        redis.start()
        assert redis.cmd("CONFIG", "GET", "appendfsync") == ["appendfsync", "everysec"]
        upstream.start()
        port, admin_port, health_port = free_port(), free_port(), free_port()
        text = read(CONTAINER_CONFIG)
        cfg = container_config()
        for old, new in ((cfg["listen"], "127.0.0.1:%d" % port),
                         (cfg["admin_listen"], "127.0.0.1:%d" % admin_port),
                         (cfg["health_listen"], "127.0.0.1:%d" % health_port),
                         (cfg["upstream"]["url"], upstream.url),
                         (cfg["redis"]["url"], redis.url),
                         (admin_token_path(cfg), compose_admin_token_source())):
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        conf = tmp_path / "proxy.yaml"
        conf.write_text(text)
        env = dict(os.environ, REDIS_PASSWORD=password)
        with open(tmp_path / "proxy.err", "wb") as err:
            proc = subprocess.Popen([proxy_binary(), "-c", str(conf)], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=err, env=env)

        def readyz():
            """"200" once curl gets 200 from /readyz, "exited" once the proxy is gone."""
            if proc.poll() is not None:
                return "exited"
            if not port_accepts(health_port):
                return None
            code = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                   "http://127.0.0.1:%d/readyz" % health_port],
                                  capture_output=True, text=True).stdout
            return code if code == "200" else None
        try:
            ready = wait_until(readyz, interval=0.05, what="/readyz 200 or the proxy's exit")
        except AssertionError as e:
            ready = str(e)
        assert ready == "200", "proxy not ready (Redis AUTH?): %s: %s" % (
            ready, (tmp_path / "proxy.err").read_text())

        published = "http://127.0.0.1:%d" % host_port(cfg["listen"])[1]
        line = demo_curl()
        assert line.count(published) == 2, "the curl should send the same payment twice"
        out = subprocess.run(["bash", "-c", line.replace(published, "http://127.0.0.1:%d" % port)],
                             capture_output=True, timeout=30)
        assert out.returncode == 0, out.stderr
        answers = re.split(rb"(?=^HTTP/1\.1 )", out.stdout, flags=re.M)
        answers = [a for a in answers if a.startswith(b"HTTP/1.1 ")]
        assert len(answers) == 2, out.stdout
        (h1, b1), (h2, b2) = (a.split(b"\r\n\r\n", 1) for a in answers)
        assert h1.split(b"\r\n")[0] == h2.split(b"\r\n")[0] == b"HTTP/1.1 201 Created"
        assert b"idempotent-replayed" not in h1.lower()
        assert re.search(rb"^Idempotent-Replayed: true\r?$", h2, re.M | re.I)
        assert b1 == b2
        assert upstream.total() == 1
        # the admin endpoints take the demo's token, and only it
        with open(compose_admin_token_source()) as f:
            token = f.read().strip()
        def curl(url, h=()):
            return subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}"]
                                  + list(h) + [url], capture_output=True, text=True).stdout
        url = "http://127.0.0.1:%d/inbox" % admin_port
        codes = [curl(url, h) for h in ([], ["-H", "Authorization: Bearer " + token])]
        assert codes == ["401", "200"], codes
        # the compose header's /metrics: on the health port, with no token; not the admin's
        assert "curl -s http://127.0.0.1:%d/metrics" % host_port(cfg["health_listen"])[1] \
            in read(COMPOSE)
        assert curl("http://127.0.0.1:%d/metrics" % health_port) == "200"
        assert curl("http://127.0.0.1:%d/metrics" % admin_port) == "401"
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(15)
        upstream.stop()
        redis.kill()


# --------------------------------------------------------------------------
# Kubernetes
# --------------------------------------------------------------------------

def generated_from(name):
    """The files: of kustomization.yaml's secretGenerator entry for the Secret name."""
    gens = [g for g in load_yaml(KUSTOMIZATION).get("secretGenerator", []) if g["name"] == name]
    assert len(gens) == 1, "kustomization.yaml generates no Secret %s" % name
    return gens[0].get("files", [])


# kind: (how many, apiVersion)
RENDERED_KINDS = {"ConfigMap": (2, "v1"), "Secret": (3, "v1"), "Deployment": (1, "apps/v1"),
                  "Service": (1, "v1"), "PodDisruptionBudget": (1, "policy/v1"),
                  "NetworkPolicy": (1, "networking.k8s.io/v1")}


def test_kubernetes_base_renders_and_every_object_parses():
    by_kind = sidecar_objects()
    assert {k: len(v) for k, v in by_kind.items()} == {
        k: n for k, (n, _) in RENDERED_KINDS.items()}
    for kind, objects in by_kind.items():
        for o in objects:
            assert o["apiVersion"] == RENDERED_KINDS[kind][1], o
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", o["metadata"]["name"]), o
            assert all(isinstance(v, str) for v in o.get("data", {}).values()), o
    # the proxy's config in the ConfigMap is YAML (test_configmap_config_loads: -t takes it)
    assert isinstance(configmap_config(by_kind), dict)
    # sidecar.yaml alone holds no Secret: every one is generated from a file
    assert all(d["kind"] != "Secret" for d in need_yaml().safe_load_all(read(SIDECAR)) if d)


def test_rendered_secrets_hold_only_the_files_the_user_made():
    by_kind, inputs = rendered()
    held = {}
    for s in by_kind["Secret"]:
        for key, value in secret_data(s).items():
            held[(s["metadata"]["name"], key)] = value
    # each Secret value is one of the files made for this render, byte for byte, and each
    # file is in one Secret: nothing in the applied set comes from the repository
    assert sorted(held.values()) == sorted(inputs.values()), sorted(held)
    for value in held.values():
        assert not re.search(rb"change-me|placeholder|example|replace", value, re.I), value


@pytest.mark.parametrize("missing", SECRET_INPUTS)
def test_rendering_without_a_secret_file_fails_naming_it(tmp_path, missing):
    base = tmp_path / "kubernetes"
    shutil.copytree(KUBERNETES, str(base))
    for name in SECRET_INPUTS:
        if (base / name).exists():
            (base / name).unlink()
    make_secret_inputs(base)
    (base / missing).unlink()
    rc, out, err = kustomize(base)
    assert rc != 0 and out == "", out
    assert str(base / missing) in err, err


def test_the_secret_files_stay_out_of_git_and_the_image():
    ignored = [line.strip() for line in read(os.path.join(REPO, ".gitignore")).splitlines()]
    dockerignore = read(os.path.join(DOCKER, "Dockerfile.dockerignore")).splitlines()
    for name in SECRET_INPUTS:
        assert "/docker/kubernetes/" + name in ignored, name
        assert "docker/kubernetes/" + name in dockerignore, name
    if os.path.isdir(os.path.join(REPO, ".git")) or os.path.isfile(os.path.join(REPO, ".git")):
        tracked = subprocess.run(["git", "-C", REPO, "ls-files", "docker/kubernetes"],
                                 capture_output=True, text=True, check=True).stdout.split()
        assert sorted(tracked) == ["docker/kubernetes/kustomization.yaml",
                                   "docker/kubernetes/sidecar.yaml"], tracked


def test_redis_username_reaches_the_config_from_the_generated_configmap(tmp_path):
    by_kind, inputs = rendered()
    assert configmap_config(by_kind)["redis"]["username"] == "${REDIS_USERNAME}"
    proxy = pod_containers(by_kind)[PROXY_CONTAINER]
    env = {e["name"]: e for e in proxy.get("env", [])}
    ref = env["REDIS_USERNAME"]["valueFrom"]["configMapKeyRef"]
    maps = {c["metadata"]["name"]: c for c in by_kind["ConfigMap"]}
    username = maps[ref["name"]]["data"][ref["key"]]
    assert username == "idem-proxy", "the ACL user of docs/redis.md"
    # the whole config as the pod sees it: the generated files at its paths, the env set
    text = config_map(by_kind)["data"][os.path.basename(CONFIG_PATH)]
    secrets = {s["metadata"]["name"]: secret_data(s) for s in by_kind["Secret"]}
    pod = one(by_kind, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for m in proxy["volumeMounts"]:
        source = volumes[m["name"]].get("secret")
        if not source:
            continue
        for item in source["items"]:
            path = os.path.join(m["mountPath"], item["path"])
            local = tmp_path / item["path"]
            local.write_bytes(secrets[source["secretName"]][item["key"]])
            os.chmod(local, 0o440)
            assert text.count(path) == 1, path
            text = text.replace(path, str(local))
    config = tmp_path / "idempotency-proxy.yaml"
    config.write_text(text)
    rc, out = check_config(str(config), env={"REDIS_USERNAME": username})
    assert (rc, out) == (0, "configuration OK"), out


def test_sidecar_sets_min_replicas_and_points_to_the_decision_table():
    text = config_map(sidecar_objects())["data"][os.path.basename(CONFIG_PATH)]
    m = re.search(r"((?:^ *#.*\n)+) *min_replicas: (\d+)$", text, re.M)
    assert m, "redis.min_replicas is not set, or has no comment above it"
    assert "docs/managed-redis.md#decision-table" in m.group(1), m.group(1)
    # what the pod's Redis is told about AOF: not that a managed service has it
    assert "run it with AOF" not in read(SIDECAR)


def test_kubernetes_base_has_configmap_secrets_deployment_and_service():
    by_kind = sidecar_objects()
    for kind in ("Deployment", "Service"):
        one(by_kind, kind)
    config_map(by_kind)
    # the Redis password, the admin operators and the keyring
    assert len(by_kind["Secret"]) == 3, by_kind["Secret"]
    assert set(pod_containers(by_kind)) == {"app", PROXY_CONTAINER}


def test_configmap_is_the_container_config_with_the_upstream_in_the_pod():
    by_kind = sidecar_objects()
    cm, baked = configmap_config(by_kind), container_config()
    app_port = int(re.search(r":(\d+)$", str(app_listen(by_kind))).group(1))
    assert cm["upstream"]["url"] == "http://127.0.0.1:%d" % app_port
    cm["upstream"]["url"] = baked["upstream"]["url"]
    # the Kubernetes example mounts a keyring from a Secret; the image's demo has none
    assert cm.pop("encryption") == {"keyring": "/etc/idempotency-proxy-keyring/keyring.yaml"}
    # in a pod the admin API stays on loopback (kubectl exec), the probes on the health port,
    # and the pod stays in its Service while Redis is away (docs/operations.md, "Kubernetes")
    assert host_port(cm["admin_listen"]) == ("127.0.0.1", host_port(baked["admin_listen"])[1])
    cm["admin_listen"] = baked["admin_listen"]
    assert cm.pop("readiness") == "process" and "readiness" not in baked
    # named operators, audited apart from the access log; the image's demo has one token
    assert cm.pop("admin") == {"operators_file": "/etc/idempotency-proxy-operators/operators.yaml"}
    assert cm.pop("log") == {"audit": "stderr"} and "log" not in baked
    baked.pop("admin")
    # and the Redis password from a Secret's file; the image's from $REDIS_PASSWORD
    assert cm["redis"].pop("password_file") == SIDECAR_REDIS_PASSWORD_FILE
    # one replica, no AOF: min_replicas 0 with re-assertion (the decision table's first row),
    # said explicitly; the compose demo's one node has AOF and the default
    assert cm["redis"].pop("min_replicas") == 0 and "min_replicas" not in baked["redis"]
    assert "reassert" not in cm["redis"], "re-assertion keeps its defaults"
    assert baked["redis"].pop("password") == "${REDIS_PASSWORD}"
    assert cm == baked


def with_keyring_file(text, tmp_path, keyring_text):
    """text with its encryption.keyring pointing at keyring_text written in tmp_path (0440)."""
    path = need_yaml().safe_load(text)["encryption"]["keyring"]
    keyring = tmp_path / "keyring.yaml"
    keyring.write_text(keyring_text)
    os.chmod(keyring, 0o440)
    assert text.count(path) == 1, path
    return text.replace(path, str(keyring))


def test_configmap_config_loads(tmp_path):
    text = config_map(sidecar_objects())["data"][os.path.basename(CONFIG_PATH)]
    good = 'keys:\n  - id: 2026-12\n    secret: "%s"\n' % base64.b64encode(os.urandom(32)).decode()
    rc, out = check_config_text(
        with_keyring_file(with_operators_file(text, tmp_path), tmp_path, good), tmp_path)
    assert (rc, out) == (0, "configuration OK")


def test_sidecar_mounts_the_keyring_from_a_secret_group_readable():
    by_kind = sidecar_objects()
    pod = one(by_kind, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in pod_containers(by_kind)[PROXY_CONTAINER]["volumeMounts"]}
    secret = volumes["idempotency-proxy-keyring"]["secret"]
    assert secret["defaultMode"] == 0o440 and pod["securityContext"]["fsGroup"]
    assert not secret.get("optional"), "without its keyring the proxy must not start"
    mount = mounts["idempotency-proxy-keyring"]
    assert mount["readOnly"] and mount["mountPath"] == "/etc/idempotency-proxy-keyring"
    names = [s["metadata"]["name"] for s in by_kind["Secret"]]
    assert secret["secretName"] in names


def test_sidecar_keyring_made_as_documented_is_one_the_proxy_takes(tmp_path):
    by_kind, inputs = rendered()
    text = config_map(by_kind)["data"][os.path.basename(CONFIG_PATH)]
    keyring = [s for s in by_kind["Secret"] if s["metadata"]["name"] == "idempotency-proxy-keyring"]
    made = secret_data(keyring[0])["keyring.yaml"]
    assert made == inputs["keyring.yaml"]
    rc, out = check_config_text(
        with_keyring_file(with_operators_file(text, tmp_path), tmp_path, made.decode()), tmp_path)
    assert (rc, out) == (0, "configuration OK"), made


def app_listen(by_kind):
    app = pod_containers(by_kind)["app"]
    values = [e.get("value", "") for e in app.get("env", [])] + app.get("args", [])
    found = [v for v in values if re.fullmatch(r"[\d.]+:\d+", str(v))]
    assert len(found) == 1, "the app's listen address (host:port) should be spelled out once"
    return found[0]


def test_app_listens_on_the_pods_loopback_only():
    by_kind = sidecar_objects()
    assert app_listen(by_kind).startswith("127.0.0.1:")
    app = pod_containers(by_kind)["app"]
    assert not app.get("ports"), "the app should declare no ports: only the proxy reaches it"


def test_sidecar_reads_the_redis_password_from_a_secret_file():
    by_kind = sidecar_objects()
    assert configmap_config(by_kind)["redis"]["password_file"] == SIDECAR_REDIS_PASSWORD_FILE
    spec = one(by_kind, "Deployment")["spec"]["template"]["spec"]
    proxy = pod_containers(by_kind)[PROXY_CONTAINER]
    # not in the environment, which whoever reads the process's environment reads too
    assert all("PASSWORD" not in e["name"] for e in proxy.get("env", [])), proxy.get("env")
    mounts = [m for m in proxy["volumeMounts"]
              if m["mountPath"] == os.path.dirname(SIDECAR_REDIS_PASSWORD_FILE)]
    assert len(mounts) == 1 and mounts[0]["readOnly"] is True, proxy["volumeMounts"]
    secret = {v["name"]: v for v in spec["volumes"]}[mounts[0]["name"]]["secret"]
    assert not secret.get("optional"), "without its password the proxy would start without AUTH"
    assert [i["path"] for i in secret["items"]] == [os.path.basename(SIDECAR_REDIS_PASSWORD_FILE)]
    assert secret["defaultMode"] & 0o007 == 0, oct(secret["defaultMode"])
    secrets = [s for s in by_kind["Secret"] if s["metadata"]["name"] == secret["secretName"]]
    assert len(secrets) == 1, secret
    key = secret["items"][0]["key"]
    # kustomization.yaml's secretGenerator: the key from the file redis-password
    assert secret_data(secrets[0])[key] == rendered()[1]["redis-password"]
    assert generated_from(secret["secretName"]) == ["%s=redis-password" % key]


def test_sidecar_mounts_the_configmap_at_the_documented_path():
    by_kind = sidecar_objects()
    spec = one(by_kind, "Deployment")["spec"]["template"]["spec"]
    proxy = pod_containers(by_kind)[PROXY_CONTAINER]
    if "args" in proxy:
        assert proxy["args"] == exec_form(instructions("CMD")[-1])
    assert "command" not in proxy, "keep the image's ENTRYPOINT"
    volumes = {v["name"]: v for v in spec["volumes"]}
    cm_name = config_map(by_kind)["metadata"]["name"]
    mounted = []
    for m in proxy["volumeMounts"]:
        vol = volumes[m["name"]]
        if vol.get("configMap", {}).get("name") != cm_name:
            continue
        if "subPath" in m:
            mounted.append((m["mountPath"], m["subPath"]))
        else:
            mounted.append((os.path.join(m["mountPath"], os.path.basename(CONFIG_PATH)),
                            os.path.basename(CONFIG_PATH)))
    assert mounted == [(CONFIG_PATH, os.path.basename(CONFIG_PATH))]


def test_sidecar_probes_hit_readyz_and_healthz_on_the_health_port():
    by_kind = sidecar_objects()
    proxy = pod_containers(by_kind)[PROXY_CONTAINER]
    health = host_port(configmap_config(by_kind)["health_listen"])[1]
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = proxy[probe]["httpGet"]
        assert get["path"] == path
        assert container_port(proxy, get["port"]) == health
        # the probes are open: they must not need (or carry) the admin token
        assert "httpHeaders" not in get, get


def test_sidecar_mounts_the_operators_secret_where_the_config_reads_it(tmp_path):
    by_kind = sidecar_objects()
    cfg = configmap_config(by_kind)
    ops_file = operators_path(cfg)
    assert "token_file" not in cfg["admin"], "named operators, not one shared token"
    assert cfg["log"]["audit"] == "stderr", "the audit apart from the access log (stdout)"
    spec = one(by_kind, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    proxy = pod_containers(by_kind)[PROXY_CONTAINER]
    mounts = [m for m in proxy["volumeMounts"] if m["mountPath"] == os.path.dirname(ops_file)]
    assert len(mounts) == 1 and mounts[0]["readOnly"] is True, proxy["volumeMounts"]
    secret = volumes[mounts[0]["name"]]["secret"]
    assert not secret.get("optional"), "without its operators the proxy must not start"
    assert [i["path"] for i in secret["items"]] == [os.path.basename(ops_file)], secret
    # group-readable by the proxy's group only (fsGroup), not by everyone in the container
    assert secret["defaultMode"] & 0o007 == 0, oct(secret["defaultMode"])
    assert spec["securityContext"]["fsGroup"] == proxy["securityContext"]["runAsGroup"]
    # only the proxy mounts it
    others = [c for name, c in pod_containers(by_kind).items() if name != PROXY_CONTAINER]
    assert all(m["name"] != mounts[0]["name"] for c in others for m in c.get("volumeMounts", []))
    names = {s["metadata"]["name"]: s for s in by_kind["Secret"]}
    made = secret_data(names[secret["secretName"]])[secret["items"][0]["key"]]
    assert made == rendered()[1]["operators.yaml"]
    # the file made in kustomization.yaml's format is one the proxy takes
    text = config_map(by_kind)["data"][os.path.basename(CONFIG_PATH)]
    good = 'keys:\n  - id: k\n    secret: "%s"\n' % base64.b64encode(os.urandom(32)).decode()
    rc, out = check_config_text(with_keyring_file(
        with_operators_file(text, tmp_path, made.decode()), tmp_path, good), tmp_path)
    assert (rc, out) == (0, "configuration OK"), out
    assert generated_from(secret["secretName"]) == [secret["items"][0]["key"]]
    # the way in it documents: the operator's own token on the CLI's stdin
    assert "--token-file - " in read(SIDECAR) and "kubectl exec -i" in read(SIDECAR)


def test_sidecar_declares_the_configs_ports():
    proxy = pod_containers(sidecar_objects())[PROXY_CONTAINER]
    cfg = configmap_config(sidecar_objects())
    assert {p["containerPort"] for p in proxy["ports"]} == {
        host_port(cfg["listen"])[1], host_port(cfg["health_listen"])[1]}
    names = {p["name"]: p["containerPort"] for p in proxy["ports"]}
    assert names["health"] == host_port(cfg["health_listen"])[1]


def test_sidecar_keeps_the_admin_api_on_loopback_and_scrapes_the_health_port(tmp_path):
    by_kind = sidecar_objects()
    cfg = configmap_config(by_kind)
    assert host_port(cfg["admin_listen"])[0] == "127.0.0.1"
    assert host_port(cfg["health_listen"])[0] == "0.0.0.0"
    assert cfg["readiness"] == "process"
    annotations = one(by_kind, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == host_port(cfg["health_listen"])[1]
    assert annotations["prometheus.io/path"] == "/metrics"


def project_version():
    """meson.build's project version: the release the manifests must deploy."""
    m = re.search(r"^project\([^)]*?version\s*:\s*'([^']+)'", read(os.path.join(REPO, "meson.build")),
                  re.M | re.S)
    assert m, "no version in meson.build's project()"
    return m.group(1)


def test_sidecar_deploys_the_release_meson_build_names():
    # an older image makes other record ids than the docs describe (CHANGELOG.md)
    proxy = pod_containers(sidecar_objects())[PROXY_CONTAINER]
    name, _, tag = proxy["image"].rpartition(":")
    assert name.endswith("/idempotency-proxy"), proxy["image"]
    assert tag == project_version(), "sidecar.yaml deploys %s, meson.build is %s" % (
        tag, project_version())


def test_sidecar_runs_as_the_images_non_root_user_with_resources():
    proxy = pod_containers(sidecar_objects())[PROXY_CONTAINER]
    sc = proxy["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc.get("runAsUser", image_uid()) == image_uid()
    assert sc.get("allowPrivilegeEscalation") is False
    assert proxy["resources"]["requests"] and proxy["resources"]["limits"]


def quantity_bytes(text, units):
    """"512Mi" (a Kubernetes quantity) or "64MiB" (a config size) in bytes, by units."""
    m = re.fullmatch(r"(\d+)([A-Za-z]*)", str(text))
    assert m and m.group(2) in units, "unexpected size %r" % text
    return int(m.group(1)) * units[m.group(2)]


CONFIG_SIZE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
K8S_QUANTITY_UNITS = {"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}


def test_sidecar_memory_limit_holds_the_documented_bound_of_its_config():
    # README "Memory": with answers up to 64 KiB, RSS < fixed + 4 x max_buffered (records
    # being written) + the bodies being received; the example promises room for 100 bodies of
    # max_request_body (with libevent's slack) beside about 50 MiB of fixed overhead
    by_kind = sidecar_objects()
    limits = configmap_config(by_kind).get("limits") or {}
    size = lambda key, default: quantity_bytes(limits.get(key, default), CONFIG_SIZE_UNITS)
    buffered, body = size("max_buffered", "64MiB"), size("max_request_body", "1MiB")
    need = (50 << 20) + 4 * buffered + 100 * (body + max(body, 64 << 10))
    proxy = pod_containers(by_kind)[PROXY_CONTAINER]
    limit = quantity_bytes(proxy["resources"]["limits"]["memory"], K8S_QUANTITY_UNITS)
    assert limit >= need, "memory limit %d MiB < %d MiB" % (limit >> 20, need >> 20)


def test_pod_grace_period_covers_the_proxys_drain():
    by_kind = sidecar_objects()
    spec = one(by_kind, "Deployment")["spec"]["template"]["spec"]
    timeout = configmap_config(by_kind)["upstream"]["timeout"]
    m = re.fullmatch(r"(\d+)s", timeout)
    assert m, "upstream.timeout %r: expected seconds" % timeout
    # SIGTERM drain: at most upstream.timeout + 5 s (README, README "Command line")
    assert spec.get("terminationGracePeriodSeconds", 30) > int(m.group(1)) + 5


def pod_labels(by_kind):
    return one(by_kind, "Deployment")["spec"]["template"]["metadata"]["labels"]


def test_disruption_budget_keeps_a_pod_serving_while_one_is_evicted():
    by_kind = sidecar_objects()
    pdb = one(by_kind, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels(by_kind).items()
    replicas = one(by_kind, "Deployment")["spec"]["replicas"]
    spec = pdb["spec"]
    if "maxUnavailable" in spec:
        assert 1 <= int(spec["maxUnavailable"]) < replicas, spec
    else:
        assert 1 <= int(spec["minAvailable"]) < replicas, spec


def test_network_policy_admits_only_monitoring_to_the_health_port_and_nothing_to_the_admin_api():
    by_kind = sidecar_objects()
    policy = one(by_kind, "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels(by_kind).items()
    assert "Ingress" in policy["policyTypes"]
    proxy = pod_containers(by_kind)[PROXY_CONTAINER]
    cfg = configmap_config(by_kind)
    listen, health = host_port(cfg["listen"])[1], host_port(cfg["health_listen"])[1]
    opened = {}
    for rule in policy["ingress"]:
        ports = [container_port(proxy, p["port"]) for p in rule.get("ports", [])]
        assert ports, "a rule without ports opens every port: %r" % rule
        for port in ports:
            opened.setdefault(port, []).append(rule.get("from"))
    # nothing to the admin API's port (it binds loopback anyway)
    assert set(opened) == {listen, health}, opened
    assert None in opened[listen], "clients must reach the proxy's %d" % listen
    # the health port: from selected namespaces only, never from everywhere
    for sources in opened[health]:
        assert sources, "port %d open to every source" % health
        for s in sources:
            assert set(s) == {"namespaceSelector"} and s["namespaceSelector"]["matchLabels"], s


def redis_ca_example(by_kind):
    """The commented redis.tls.ca_file of the ConfigMap's config: (its text, the path)."""
    text = config_map(by_kind)["data"][os.path.basename(CONFIG_PATH)]
    m = re.search(r"^(\s*)#\s*tls:\n\1#\s+ca_file:\s*(\S+)\s*$", text, re.M)
    assert m, "no commented `tls: ca_file:` example in the ConfigMap's redis section"
    return text, m.group(2)


def test_redis_ca_bundle_is_mounted_read_only_where_the_config_points():
    by_kind = sidecar_objects()
    _, ca_file = redis_ca_example(by_kind)
    spec = one(by_kind, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    proxy = pod_containers(by_kind)[PROXY_CONTAINER]
    mounts = [m for m in proxy["volumeMounts"] if m["mountPath"] == os.path.dirname(ca_file)]
    assert len(mounts) == 1, proxy["volumeMounts"]
    assert mounts[0]["readOnly"] is True
    source = volumes[mounts[0]["name"]]
    kind = "configMap" if "configMap" in source else "secret"
    ref = source[kind]
    # optional: a pod for a Redis without TLS starts without the bundle
    assert ref.get("optional") is True, source
    # kubectl create configmap NAME --from-file=ca.pem=...: the key is the file's name
    assert os.path.basename(ca_file) == "ca.pem"
    assert ref.get("name") or ref.get("secretName")
    assert ref.get("name", ref.get("secretName")) in read(SIDECAR).split(
        "--from-file=ca.pem=")[0], "the kubectl line names the volume's ConfigMap"


def test_redis_ca_example_is_a_valid_config(tmp_path):
    text, ca_file = redis_ca_example(sidecar_objects())
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    text = re.sub(r"^(\s*)# ?(\s*)(tls:|ca_file:)", r"\1\2\3", text, flags=re.M)
    text = text.replace(ca_file, str(ca)).replace("url: redis://", "url: rediss://")
    good = 'keys:\n  - id: k\n    secret: "%s"\n' % base64.b64encode(os.urandom(32)).decode()
    rc, out = check_config_text(
        with_keyring_file(with_operators_file(text, tmp_path), tmp_path, good), tmp_path)
    assert (rc, out) == (0, "configuration OK"), text


def test_service_targets_the_proxy_not_the_app():
    by_kind = sidecar_objects()
    svc = one(by_kind, "Service")
    pod_labels = one(by_kind, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    proxy = pod_containers(by_kind)[PROXY_CONTAINER]
    listen = host_port(configmap_config(by_kind)["listen"])[1]
    ports = svc["spec"]["ports"]
    assert ports and all(container_port(proxy, p["targetPort"]) == listen for p in ports)


# --------------------------------------------------------------------------
# docs
# --------------------------------------------------------------------------

def deploy_docs():
    texts = [read(p) for p in READMES if os.path.exists(p)]
    for t in texts:
        if "```mermaid" in t and demo_curl() in t:
            return t
    pytest.fail("neither README.md nor docs/operations.md has the Deploy section "
                "(a mermaid diagram and compose.yaml's curl)", pytrace=False)


def test_deploy_docs_show_the_compose_curl_and_the_image_facts():
    text = deploy_docs()
    for fact in (CONFIG_PATH, "8080", "9901", "/healthz", "/readyz", "appendfsync",
                 str(image_uid())):
        assert fact in text, fact


# --------------------------------------------------------------------------
# the scripts
# --------------------------------------------------------------------------

def test_docker_and_test_scripts_pass_shellcheck():
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed (tests/install-deps.sh --tests installs it)",
                    pytrace=False)
    scripts = sorted(glob.glob(os.path.join(DOCKER, "*.sh")) + glob.glob(os.path.join(REPO, "tests", "*.sh")))
    assert os.path.join(DOCKER, "test-image.sh") in scripts
    p = subprocess.run(["shellcheck", *scripts], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-8000:] + p.stderr[-2000:]
