"""The deployment files agree with each other and with the proxy (issue 5, "Ship it as a sidecar").

    docker/Dockerfile                   image: EXPOSE, HEALTHCHECK, USER, CMD config path
    docker/idempotency-proxy.yaml       the config baked into the image (compose topology)
    docker/compose.yaml                 redis + payments-api + proxy
    docker/kubernetes/sidecar.yaml      ConfigMap, Secret, Deployment (app + sidecar), Service
    conf/idempotency-proxy.yaml         the annotated sample: the schema the others must use

No Docker engine is needed: the files are parsed (Debian's python3-yaml), the
configs are checked by the proxy binary ($IDEM_PROXY_BIN, `-t -c`), the compose
demo's curl is run against the same processes on loopback ports, and
docker/check-image-recipe.sh builds and starts the image's install tree.
IDEM_SKIP_IMAGE_RECIPE=1 skips only that last test.
"""

import json
import os
import re
import subprocess
import time
import urllib.parse

import pytest

from harness import REPO, RedisServer, Upstream, free_port, port_accepts, proxy_binary

try:
    import yaml
except ImportError:  # Debian: apt-get install python3-yaml (tests/install-deps.sh)
    yaml = None

DOCKER = os.path.join(REPO, "docker")
DOCKERFILE = os.path.join(DOCKER, "Dockerfile")
CONTAINER_CONFIG = os.path.join(DOCKER, "idempotency-proxy.yaml")
COMPOSE = os.path.join(DOCKER, "compose.yaml")
SIDECAR = os.path.join(DOCKER, "kubernetes", "sidecar.yaml")
SAMPLE_CONFIG = os.path.join(REPO, "conf", "idempotency-proxy.yaml")
BUILD_SH = os.path.join(DOCKER, "build.sh")
RECIPE_CHECK = os.path.join(DOCKER, "check-image-recipe.sh")
READMES = [os.path.join(REPO, "README.md")]

CONFIG_PATH = "/etc/idempotency-proxy/idempotency-proxy.yaml"
PROXY_CONTAINER = "idempotency-proxy"


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


def sidecar_objects():
    docs = [d for d in need_yaml().safe_load_all(read(SIDECAR)) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    return by_kind


def one(by_kind, kind):
    assert len(by_kind.get(kind, [])) == 1, "expected one %s in sidecar.yaml" % kind
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


def configmap_config(by_kind):
    data = one(by_kind, "ConfigMap")["data"]
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


def test_dockerfile_exposes_the_container_configs_ports():
    cfg = container_config()
    exposed = {int(p.split("/")[0]) for e in instructions("EXPOSE") for p in e.split()}
    assert exposed == {host_port(cfg["listen"])[1], host_port(cfg["admin_listen"])[1]} == {8080, 9901}


def test_dockerfile_healthcheck_gets_healthz_on_the_admin_port():
    hc = instructions("HEALTHCHECK")
    assert len(hc) == 1, hc
    argv = exec_form(hc[0])
    urls = [a for a in argv if a.startswith("http://")]
    assert len(urls) == 1, argv
    u = urllib.parse.urlsplit(urls[0])
    assert u.path == "/healthz"
    assert u.port == host_port(container_config()["admin_listen"])[1]
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


# --------------------------------------------------------------------------
# the container config
# --------------------------------------------------------------------------

def test_container_config_binds_all_interfaces_for_clients_and_probes():
    cfg = container_config()
    assert cfg["listen"] == "0.0.0.0:8080"
    assert cfg["admin_listen"] == "0.0.0.0:9901"


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


def test_container_config_loads():
    rc, out = check_config(CONTAINER_CONFIG)
    assert (rc, out) == (0, "configuration OK")


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
    assert published == {host_port(cfg["listen"])[1], host_port(cfg["admin_listen"])[1]}
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
        port, admin_port = free_port(), free_port()
        text = read(CONTAINER_CONFIG)
        cfg = container_config()
        for old, new in ((cfg["listen"], "127.0.0.1:%d" % port),
                         (cfg["admin_listen"], "127.0.0.1:%d" % admin_port),
                         (cfg["upstream"]["url"], upstream.url),
                         (cfg["redis"]["url"], redis.url)):
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        conf = tmp_path / "proxy.yaml"
        conf.write_text(text)
        env = dict(os.environ, REDIS_PASSWORD=password)
        with open(tmp_path / "proxy.err", "wb") as err:
            proc = subprocess.Popen([proxy_binary(), "-c", str(conf)], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=err, env=env)
        deadline = time.monotonic() + 10
        ready = None
        while time.monotonic() < deadline and proc.poll() is None:
            if port_accepts(admin_port):
                ready = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                        "http://127.0.0.1:%d/readyz" % admin_port],
                                       capture_output=True, text=True).stdout
                if ready == "200":
                    break
            time.sleep(0.05)
        assert ready == "200", "proxy not ready (Redis AUTH?): %s" % (tmp_path / "proxy.err").read_text()

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
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(15)
        upstream.stop()
        redis.kill()


# --------------------------------------------------------------------------
# Kubernetes
# --------------------------------------------------------------------------

def test_sidecar_yaml_has_configmap_secret_deployment_and_service():
    by_kind = sidecar_objects()
    for kind in ("ConfigMap", "Secret", "Deployment", "Service"):
        one(by_kind, kind)
    assert set(pod_containers(by_kind)) == {"app", PROXY_CONTAINER}


def test_configmap_is_the_container_config_with_the_upstream_in_the_pod():
    by_kind = sidecar_objects()
    cm, baked = configmap_config(by_kind), container_config()
    app_port = int(re.search(r":(\d+)$", str(app_listen(by_kind))).group(1))
    assert cm["upstream"]["url"] == "http://127.0.0.1:%d" % app_port
    cm["upstream"]["url"] = baked["upstream"]["url"]
    assert cm == baked
    assert cm["redis"]["password"] == "${REDIS_PASSWORD}"


def test_configmap_config_loads(tmp_path):
    text = one(sidecar_objects(), "ConfigMap")["data"][os.path.basename(CONFIG_PATH)]
    path = tmp_path / "idempotency-proxy.yaml"
    path.write_text(text)
    rc, out = check_config(str(path))
    assert (rc, out) == (0, "configuration OK")


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


def test_sidecar_reads_the_redis_password_from_the_secret():
    by_kind = sidecar_objects()
    secret = one(by_kind, "Secret")
    env = {e["name"]: e for e in pod_containers(by_kind)[PROXY_CONTAINER]["env"]}
    ref = env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"]
    assert ref["key"] in dict(secret.get("stringData", {}), **secret.get("data", {}))


def test_sidecar_mounts_the_configmap_at_the_documented_path():
    by_kind = sidecar_objects()
    spec = one(by_kind, "Deployment")["spec"]["template"]["spec"]
    proxy = pod_containers(by_kind)[PROXY_CONTAINER]
    if "args" in proxy:
        assert proxy["args"] == exec_form(instructions("CMD")[-1])
    assert "command" not in proxy, "keep the image's ENTRYPOINT"
    volumes = {v["name"]: v for v in spec["volumes"]}
    cm_name = one(by_kind, "ConfigMap")["metadata"]["name"]
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


def test_sidecar_probes_hit_readyz_and_healthz_on_the_admin_port():
    proxy = pod_containers(sidecar_objects())[PROXY_CONTAINER]
    admin = host_port(container_config()["admin_listen"])[1]
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = proxy[probe]["httpGet"]
        assert get["path"] == path
        assert container_port(proxy, get["port"]) == admin


def test_sidecar_declares_the_configs_ports():
    proxy = pod_containers(sidecar_objects())[PROXY_CONTAINER]
    cfg = configmap_config(sidecar_objects())
    assert {p["containerPort"] for p in proxy["ports"]} == {
        host_port(cfg["listen"])[1], host_port(cfg["admin_listen"])[1]}


def test_sidecar_runs_as_the_images_non_root_user_with_resources():
    proxy = pod_containers(sidecar_objects())[PROXY_CONTAINER]
    sc = proxy["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc.get("runAsUser", image_uid()) == image_uid()
    assert sc.get("allowPrivilegeEscalation") is False
    assert proxy["resources"]["requests"] and proxy["resources"]["limits"]


def test_pod_grace_period_covers_the_proxys_drain():
    by_kind = sidecar_objects()
    spec = one(by_kind, "Deployment")["spec"]["template"]["spec"]
    timeout = configmap_config(by_kind)["upstream"]["timeout"]
    m = re.fullmatch(r"(\d+)s", timeout)
    assert m, "upstream.timeout %r: expected seconds" % timeout
    # SIGTERM drain: at most upstream.timeout + 5 s (README, README "Command line")
    assert spec.get("terminationGracePeriodSeconds", 30) > int(m.group(1)) + 5


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
    pytest.fail("README.md has no Deploy section "
                "(a mermaid diagram and compose.yaml's curl)", pytrace=False)


def test_deploy_docs_show_the_compose_curl_and_the_image_facts():
    text = deploy_docs()
    for fact in (CONFIG_PATH, "8080", "9901", "/healthz", "/readyz", "appendfsync",
                 str(image_uid())):
        assert fact in text, fact


# --------------------------------------------------------------------------
# the image recipe, built and run without Docker
# --------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("IDEM_SKIP_IMAGE_RECIPE") == "1",
                    reason="IDEM_SKIP_IMAGE_RECIPE=1")
def test_image_recipe_builds_and_the_install_tree_runs():
    p = subprocess.run([RECIPE_CHECK], capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0 and p.stdout.rstrip().endswith("image recipe: OK"), \
        p.stdout[-8000:] + p.stderr[-2000:]
