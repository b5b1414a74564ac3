#!/usr/bin/env python3
"""The alert rules load in Prometheus and their unit tests pass, one firing and one quiet case per alert.

Usage: check_alert_rules.py SOURCE_DIR

Runs `promtool check rules docker/prometheus/alerts.yaml` and `promtool test
rules docker/prometheus/alerts.test.yaml` (promtool from Debian's prometheus
package: tests/install-deps.sh --tests installs it; without it this check
fails), and `promtool check rules` on the queries of
docker/grafana/dashboard.json as recording rules (Grafana's `$__rate_interval`
and other interval macros as 5m, every other variable as `.*`), so that each
is PromQL Prometheus parses. Also checks that the tests hold, for every alert of alerts.yaml, at
least one case that expects it to fire (exp_alerts not empty) and one that
expects it not to (exp_alerts empty), and that they name no alert the rules do
not have. Prints `ok ...` / `FAIL ...` lines; exits 1 when anything is wrong.
Needs python3-yaml.
"""
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

import yaml


def run(cmd, cwd):
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    return proc.returncode, proc.stdout


def dashboard_rules(dash):
    """The dashboard's panel and annotation queries as one group of recording rules."""
    exprs = []

    def walk(panels):
        for p in panels:
            exprs.extend(t["expr"] for t in p.get("targets", []) if t.get("expr"))
            walk(p.get("panels", []))
    walk(dash.get("panels", []))
    exprs += [a["expr"] for a in dash.get("annotations", {}).get("list", []) if a.get("expr")]
    rules = []
    for i, e in enumerate(exprs):
        e = re.sub(r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}", "5m", e)
        e = re.sub(r"\$\{\w+\}|\$\w+", ".*", e)
        rules.append({"record": "dashboard:query_%d" % i, "expr": e})
    return {"groups": [{"name": "dashboard", "rules": rules}]}


def main(argv):
    if len(argv) != 2:
        print("usage: check_alert_rules.py SOURCE_DIR", file=sys.stderr)
        return 2
    src = pathlib.Path(argv[1]).resolve()
    rules_dir = src / "docker" / "prometheus"
    failures = []

    alerts = [r["alert"] for g in yaml.safe_load((rules_dir / "alerts.yaml").read_text())["groups"]
              for r in g.get("rules") or [] if "alert" in r]
    firing, quiet = set(), set()
    for test in yaml.safe_load((rules_dir / "alerts.test.yaml").read_text()).get("tests") or []:
        for case in test.get("alert_rule_test") or []:
            (firing if case.get("exp_alerts") else quiet).add(case.get("alertname"))
    for name in alerts:
        if name not in firing:
            failures.append("alerts.test.yaml: no case in which %s fires" % name)
        if name not in quiet:
            failures.append("alerts.test.yaml: no case in which %s stays quiet" % name)
    for name in sorted((firing | quiet) - set(alerts)):
        failures.append("alerts.test.yaml: tests %s, which alerts.yaml does not have" % name)
    if not failures:
        print("ok alerts.test.yaml has a firing and a quiet case for each of the %d alerts" % len(alerts))

    promtool = shutil.which("promtool")
    if promtool is None:
        failures.append("promtool not found on PATH (Debian package prometheus: "
                        "tests/install-deps.sh --tests)")
    else:
        for args in (["check", "rules", "alerts.yaml"], ["test", "rules", "alerts.test.yaml"]):
            rc, out = run([promtool] + args, rules_dir)
            label = "promtool " + " ".join(args)
            if rc != 0:
                failures.append("%s exited %d:\n%s" % (label, rc, out.rstrip()))
            else:
                print("ok " + label)
        dash = json.loads((src / "docker" / "grafana" / "dashboard.json").read_text())
        with tempfile.TemporaryDirectory() as tmp:
            rules = pathlib.Path(tmp) / "dashboard-queries.yaml"
            doc = dashboard_rules(dash)
            rules.write_text(yaml.safe_dump(doc))
            rc, out = run([promtool, "check", "rules", str(rules)], tmp)
            if rc != 0:
                failures.append("promtool check rules on the dashboard's queries exited %d:\n%s"
                                % (rc, out.rstrip()))
            else:
                print("ok promtool parses the dashboard's %d queries" % len(doc["groups"][0]["rules"]))
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
