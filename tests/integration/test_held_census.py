"""The census of held records (docs/operations.md "Held records"): whatever made a held record,
the gauges count it.

- `kill -9` of a proxy mid-request leaves its claim; once its lease runs out, a restarted proxy
  shows it within a refresh period: `idempotency_proxy_held_records{state="claimed_expired"}`
  1, with its age; fed to promtool as the series Prometheus would scrape, the alert
  "a held record exists" of docker/prometheus/alerts.yaml fires, and the others stay quiet;
- an outcome-unknown record counts as outcome_unknown, a record resolved by an operator (state
  `R`) as resolved; a finished record and a live claim are not counted;
- a census that cannot walk (an ACL user without +scan, or without +getrange) says so once,
  publishes nothing and its age grows; the listing and bulk changes answer 503 naming NOPERM;
- a value that only starts like a held record is not counted (the census counts what the
  listing lists);
- `admin.held_refresh` applies live on `SIGHUP`;
- two proxies on one Redis: the census walks on one at a time (the lock: their SCANs never
  interleave, seen by Redis's MONITOR), and both export the same counts.

Real processes only: redis-server, the demo upstream (`X-Demo-Delay-Ms` holds a request at the
upstream, `X-Demo-Fault: close` closes the connection without an answer) and the proxy.
"""

import json
import pathlib
import re
import socket
import subprocess
import threading
import time

import pytest
import yaml

from harness import HTTPError, log_line, wait_until
from proxy_helpers import (
    assert_problem, in_background, metric, metrics_text, new_key, parse_exposition, promtool_path,
    reload_and_wait, rewrite,
)
from redis_topology import ACL_COMMANDS

# tests/run.sh runs this file under ThreadSanitizer with two worker threads a proxy
# (IDEM_TEST_WORKERS=2): the census and /metrics run on the admin worker's thread, the
# requests on the others (docs/internals.md).
pytestmark = pytest.mark.threads

REFRESH = {"held_refresh": "1s"}
HELD = "idempotency_proxy_held_records"
OLDEST = "idempotency_proxy_held_record_oldest_seconds"
EXPIRY = "idempotency_proxy_held_record_expiry_seconds"
AGE = "idempotency_proxy_held_census_age_seconds"
RESULT_KEY = "idem:census:{held}:result"
ALERTS = pathlib.Path(__file__).resolve().parents[2] / "docker" / "prometheus" / "alerts.yaml"
JOB = "idempotency-proxy"


def held(p, state):
    return metric(p, HELD, state=state, required=True, unique=True)


def wait_held(p, state, n):
    return wait_until(lambda: held(p, state) == n, what="%s{state=%s} == %d on %s"
                      % (HELD, state, n, p.name))


def census_result(redis):
    """The census result in Redis, as a dict (None: none yet)."""
    v = redis.cmd("GET", RESULT_KEY)
    return json.loads(v) if v is not None else None


def census_after(redis, t_ms):
    """The census result in Redis when its pass started after t_ms (ms since the epoch)."""
    r = census_result(redis)
    return r if r is not None and r["started_ms"] > t_ms else None


# --------------------------------------------------------------------------
# promtool on the scraped values
# --------------------------------------------------------------------------

def alert_rule(name):
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]
             if r.get("alert") == name]
    assert len(rules) == 1, name
    return rules[0]


def render(template, labels, value):
    """An annotation as Prometheus renders it, for the two forms the held alerts use."""
    out = re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels[m.group(1)], template)
    out = re.sub(r'\{\{\s*\$value\s*\|\s*printf\s+"%\.0f"\s*\}\}', "%.0f" % value, out)
    assert "{{" not in out, "a template form this test does not render: %s" % out
    return out


def scraped_series(text, instance):
    """promtool input series of the held-record gauges of one /metrics text: each sample as
    Prometheus would store it (with job and instance), its value for 10 minutes."""
    series = []
    for name, labels, value in parse_exposition(text)[1]:
        if not name.startswith("idempotency_proxy_held_"):
            continue
        labels = dict(labels, job=JOB, instance=instance)
        sel = ",".join('%s="%s"' % (k, v) for k, v in sorted(labels.items()))
        series.append({"series": "%s{%s}" % (name, sel), "values": "%r+0x10" % value})
    return series


def promtool_test(tmp_path, series, cases):
    """promtool test rules over alerts.yaml with these input series and alert cases; returns
    (exit code, output)."""
    doc = {"rule_files": [str(ALERTS)], "evaluation_interval": "1m",
           "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": cases}]}
    path = tmp_path / "held.test.yaml"
    path.write_text(yaml.safe_dump(doc, width=1000))
    proc = subprocess.run([promtool_path(), "test", "rules", str(path)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    return proc.returncode, proc.stdout


# --------------------------------------------------------------------------
# a proxy killed mid-request
# --------------------------------------------------------------------------

def test_a_killed_proxys_claim_is_counted_and_its_alert_fires(start_proxy, upstream, tmp_path):
    p1 = start_proxy(lease="1s", admin_config=REFRESH)
    key = new_key()
    hs = [("X-Demo-Delay-Ms", "5000")]
    f = in_background(p1.post, key=key, headers=hs)
    wait_until(lambda: upstream.total() == 1, what="the request at the upstream")
    p1.kill()
    with pytest.raises((HTTPError, OSError)):
        f.result()

    p2 = start_proxy(lease="1s", admin_config=REFRESH)
    # its lease (1 s) runs out, then its census (every 1 s) counts it
    wait_held(p2, "claimed_expired", 1)
    text = metrics_text(p2)
    assert metric(p2, OLDEST, state="claimed_expired", text=text) > 0
    assert metric(p2, EXPIRY, state="claimed_expired", text=text) > 0
    for state in ("outcome_unknown", "resolved"):
        assert metric(p2, HELD, state=state, text=text) == 0
        assert metric(p2, OLDEST, state=state, text=text) == 0
    assert metric(p2, AGE, text=text, required=True) >= 0

    # a customer's retry meets the hold, and nothing executes again
    r = p2.post(key=key, headers=hs)
    assert_problem(r, 502, "outcome-unknown")
    assert upstream.total() == 1
    # ... and is counted (the first answer, lost with p1, is not a held answer)
    assert metric(p2, "idempotency_proxy_held_answers_total", required=True) == 1

    # the alert, evaluated by promtool on what Prometheus would have scraped
    rule = alert_rule("IdempotencyProxyHeldRecords")
    labels = {"job": JOB, "state": "claimed_expired"}
    want = {k: render(v, labels, 1) for k, v in rule["annotations"].items()}
    cases = [
        {"eval_time": "2m", "alertname": "IdempotencyProxyHeldRecords",
         "exp_alerts": [{"exp_labels": dict(labels, severity=rule["labels"]["severity"]),
                         "exp_annotations": want}]},
        {"eval_time": "2m", "alertname": "IdempotencyProxyHeldRecordOld", "exp_alerts": []},
        {"eval_time": "2m", "alertname": "IdempotencyProxyHeldRecordExpiring", "exp_alerts": []},
        {"eval_time": "2m", "alertname": "IdempotencyProxyHeldCensusStale", "exp_alerts": []},
    ]
    series = scraped_series(metrics_text(p2), "127.0.0.1:%d" % p2.admin_port)
    # three gauges by three states, the census's age, the held answers
    assert len(series) == 3 * 3 + 2, series
    rc, out = promtool_test(tmp_path, series, cases)
    assert rc == 0, out


# --------------------------------------------------------------------------
# what counts, by state
# --------------------------------------------------------------------------

def test_held_records_count_by_state_and_nothing_else_does(start_proxy, upstream, redis):
    p = start_proxy(admin_config=REFRESH)
    assert p.post(key=new_key()).status == 201
    assert p.post(key=new_key(), headers=[("X-Demo-Fault", "close")]).status == 502
    wait_held(p, "outcome_unknown", 1)
    assert metric(p, OLDEST, state="outcome_unknown") > 0

    # a live claim (its request at the upstream) is in flight, not held
    f = in_background(p.post, key=new_key(), headers=[("X-Demo-Delay-Ms", "4000")])
    wait_until(lambda: upstream.total() == 3, what="the third request at the upstream")
    claimed_ms = int(time.time() * 1000)
    result = wait_until(lambda: census_after(redis, claimed_ms),
                        what="a census that started after the claim")
    assert {s: result["held"][s]["records"] for s in result["held"]} == \
        {"claimed_expired": 0, "outcome_unknown": 1, "resolved": 0}
    assert result["keys"] == 3
    assert f.result().status == 201

    # an operator's resolution (state R) counts as resolved, no longer as outcome_unknown
    held_key = [k for k in redis.keys("idem:{*}") if redis.cmd("GETRANGE", k, 3, 3) == "U"]
    assert len(held_key) == 1, held_key
    redis.cmd("SETRANGE", held_key[0], 3, "R")
    wait_held(p, "resolved", 1)
    assert held(p, "outcome_unknown") == 0
    assert metric(p, OLDEST, state="resolved") > 0


@pytest.mark.parametrize("missing, said", [
    ("+scan", "held census: redis answered the census's SCAN with an error (NOPERM: an ACL "
              "user without +scan +getrange?)"),
    ("+getrange", "held census: redis answered the census script with an error (NOPERM: an ACL "
                  "user without +scan +getrange"),
])
def test_a_census_that_cannot_walk_says_so_and_its_age_grows(missing, said, start_proxy,
                                                             upstream, redis):
    """An ACL user without +scan, or with +scan but without +getrange (its scripts' GETRANGE
    refused): the census logs why once, publishes nothing (never a count of 0 held), the
    gauges show nothing held and the census's age grows (the stale-census alert's input); the
    listing and a bulk change answer 503 naming NOPERM, never an empty 200. With the command
    granted it works again."""
    rules = ["on", ">pw", "resetkeys", "~idem:*", "resetchannels", "-@all"] + \
        ["+" + c for c in ACL_COMMANDS]
    redis.run_as("idem-proxy", "pw", [r for r in rules if r != missing])
    p = start_proxy(admin_config=REFRESH)
    assert p.post(key=new_key(), headers=[("X-Demo-Fault", "close")]).status == 502
    log_line(p, said)
    wait_until(lambda: metric(p, AGE) >= 3, what="the census's age past 3 s")
    assert held(p, "outcome_unknown") == 0
    assert census_result(redis) is None
    for r in (p.admin("GET", "/records?state=outcome-unknown"), p.admin("GET", "/records"),
              p.admin("POST", "/records/bulk", body=json.dumps(
                  {"action": "purge", "state": "outcome-unknown"}).encode()),
              p.admin("POST", "/records/bulk", body=json.dumps(
                  {"action": "purge", "state": "outcome-unknown", "dry_run": False,
                   "reason": "acl check"}).encode())):
        assert r.status == 503, r
        assert "NOPERM" in r.json()["error"] and "+scan +getrange" in r.json()["error"], r
    assert redis.keys("idem:{*}"), "nothing was purged"
    redis.run_as("idem-proxy", "pw", rules)
    log_line(p, "held census: works again")
    wait_held(p, "outcome_unknown", 1)
    assert p.stderr_text().count("held census: redis answered") == 1, "said once, not per pass"
    r = p.admin("GET", "/records?state=outcome-unknown")
    assert r.status == 200 and len(r.json()["records"]) == 1, r


def test_a_value_that_only_starts_like_a_held_record_is_not_counted(start_proxy, upstream,
                                                                     redis):
    """The census counts what the listing lists: values under record keys that start with
    `IR2U` but are no record (garbage, a record cut short, a head whose digits were changed)
    are not counted, nor is a hash; a whole copy of a held record is."""
    p = start_proxy(admin_config=REFRESH)
    assert p.post(key=new_key(), headers=[("X-Demo-Fault", "close")]).status == 502
    (key,) = redis.keys("idem:{*}")
    value = redis.cmd("GET", key)
    value = value.encode() if isinstance(value, str) else value
    # IR2 (proxy/idem/record.h): the key id and route lengths at 117 and 119, then a
    # plaintext answer (no keyring) whose head is status and field count (8 digits)
    head = 123 + int(value[117:119]) + int(value[119:123])
    assert value[:4] == b"IR2U" and value[116:117] == b"P" and head > 123, value[:130]
    assert len(value) >= head + 8, value
    others = {
        "garbage": b"IR2U" + b"z" * 196,
        "cut inside its route": value[:head - 1],
        "cut before its answer": value[:head],
        "a lease digit changed": value[:70] + b"x" + value[71:],
        "an owner not hex": value[:5] + b"Z" + value[6:],
        "a field count over 128": value[:head + 3] + b"00999" + value[head + 8:],
    }
    for i, v in enumerate(others.values()):
        redis.cmd("SET", "idem:{%032x}" % (i + 1), v)
    redis.cmd("SET", "idem:{%032x}" % 100, value)           # a copy: a held record
    redis.cmd("HSET", "idem:{%032x}" % 101, "not", "a record")
    started_ms = int(time.time() * 1000)
    result = wait_until(lambda: census_after(redis, started_ms),
                        what="a census that started after the values were written")
    assert result["keys"] == len(others) + 3
    assert result["held"]["outcome_unknown"]["records"] == 2, result
    listed = p.admin("GET", "/records?state=outcome-unknown&limit=1000")
    assert listed.status == 200, listed
    assert sorted(e["record_id"] for e in listed.json()["records"]) == sorted(
        [key[len("idem:{"):-1], "%032x" % 100]), listed.json()
    wait_held(p, "outcome_unknown", 2)


def test_held_refresh_applies_on_sighup(start_proxy, upstream, redis):
    p = start_proxy(admin_config={"held_refresh": "1h"})
    assert p.post(key=new_key(), headers=[("X-Demo-Fault", "close")]).status == 502
    # the first census is an hour away: nothing counted yet, nothing in Redis
    assert held(p, "outcome_unknown") == 0
    assert census_result(redis) is None
    rewrite(p, upstream, redis, admin=REFRESH)
    reload_and_wait(p, "reloaded")
    wait_held(p, "outcome_unknown", 1)


# --------------------------------------------------------------------------
# two proxies: one walks at a time, both export the same
# --------------------------------------------------------------------------

class Monitor:
    """Redis's MONITOR on a connection of its own: the commands every client sends, with the
    client's address, collected by a thread until stop()."""

    def __init__(self, redis):
        self.sock = socket.create_connection((redis.host, redis.port), timeout=5)
        self.sock.sendall(b"MONITOR\r\n")
        self.lines, self.buf = [], b""
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.sock.settimeout(0.2)
        while not self.done.is_set():
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not data:
                break
            self.buf += data
            *whole, self.buf = self.buf.split(b"\r\n")
            self.lines += [l.decode(errors="replace") for l in whole]

    def stop(self):
        self.done.set()
        self.thread.join(5)
        self.sock.close()
        return self.lines


SCAN_LINE = re.compile(r'^\+[\d.]+ \[\d+ ([^\]]+)\] "SCAN" "(\d+)" "MATCH" "idem:\{\?{32}\}"')
LOCK_LINE = re.compile(r'^\+[\d.]+ \[\d+ ([^\]]+)\] "SET" "idem:census:\{held\}:lock" "[0-9a-f]{32}" '
                       r'"NX" "PX" "1000"')


def census_scans(lines):
    """(client address, cursor) of every census SCAN MONITOR saw, in order."""
    return [(m.group(1), m.group(2)) for m in map(SCAN_LINE.match, lines) if m]


def lock_takers(lines):
    """The client addresses that sent the census lock's SET NX."""
    return {m.group(1) for m in map(LOCK_LINE.match, lines) if m}


def test_two_proxies_walk_one_at_a_time_and_export_the_same(start_proxy, upstream, redis):
    # 30,000 finished records: a pass takes seconds (at most 250 keys every 25 ms), so two
    # walkers without the lock would overlap
    n = redis.cmd("EVAL", "for i = 1, tonumber(ARGV[1]) do redis.call('SET', "
                  "string.format('idem:{%032x}', i), 'IR2D' .. string.rep('0', 120), 'PX', "
                  "600000) end return 1", 0, 30000)
    assert n == 1
    p1 = start_proxy(admin_config=REFRESH)
    p2 = start_proxy(admin_config=REFRESH)
    assert p1.post(key=new_key(), headers=[("X-Demo-Fault", "close")]).status == 502

    monitor = Monitor(redis)
    try:
        wait_held(p1, "outcome_unknown", 1)
        wait_held(p2, "outcome_unknown", 1)
        # three passes begun since (each starts with SCAN cursor 0), and both proxies asked
        # for the lock
        wait_until(lambda: sum(c == "0" for _, c in census_scans(monitor.lines)) >= 3 and
                   len(lock_takers(monitor.lines)) == 2,
                   what="three census passes, the lock asked for by both proxies")
    finally:
        lines = monitor.stop()
    scans = census_scans(lines)
    walker = None
    for client, cursor in scans:
        if cursor == "0":
            walker = client
        elif walker is not None:
            assert client == walker, "two census walks at once: %s went on while %s walked" \
                % (client, walker)
    for state in ("claimed_expired", "outcome_unknown", "resolved"):
        assert held(p1, state) == held(p2, state), state
    # SCAN may return a key twice while Redis rehashes, never leaves one out
    assert census_result(redis)["keys"] >= 30001
