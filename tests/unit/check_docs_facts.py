#!/usr/bin/env python3
"""Facts that several pages state agree with the one place that decides them.

Usage: check_docs_facts.py SOURCE_DIR
       check_docs_facts.py --self-test

The pages are README.md, SECURITY.md, docs/*.md and the comments of
conf/idempotency-proxy.yaml. Checks:
- defaults: every default of proxy/config/config_schema.c's config_builtin_yaml
  (what the proxy applies) is the `default` column of its row in
  docs/configuration.md and the value conf/idempotency-proxy.yaml sets; and
  wherever a page restates the default of lease, retention, wait_timeout,
  in_flight, on_ambiguous, on_store_error, redis.timeout, redis.replica_timeout,
  redis.min_replicas or upstream.timeout (`retention` (default 24 h),
  `redis.min_replicas: 0`, the default, a default `retention` of 24 h,
  `wait_timeout` (10 s)) the value is that one;
- when `retention` starts: a sentence that says from what `retention` counts
  (after / from / counted from the answer, the claim, the request) says "last
  write" (docs/client-contract.md#how-long-a-record-lives is the rule), and no
  page calls retention the life of a "finished record";
- alert severities: each alert of docker/prometheus/alerts.yaml has a row in
  docs/operations.md's alert table with the same severity, and the table names
  no other alert; the policy sentence (what pages, what opens a ticket) reads
  the same in alerts.yaml's header and in docs/operations.md; an alert whose
  description says clients get 503 pages (critical), as the policy says;
- versions: no page but CHANGELOG.md says which version number a breaking
  release gets ("a major version"): they link to its versioning policy.
Prints `ok ...` / `FAIL ...` lines; exits 1 when anything disagrees.
--self-test plants one contradiction of each kind in a copy and fails unless
each is reported. Needs python3-yaml.
"""
import pathlib
import re
import shutil
import sys
import tempfile

import yaml

# the defaults pages restate; a restatement of another key is not looked for
RESTATED = ["lease", "retention", "wait_timeout", "in_flight", "on_ambiguous", "on_store_error",
            "redis.timeout", "redis.replica_timeout", "redis.min_replicas", "upstream.timeout"]
UNITS_MS = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000, "d": 86400000}
UNIT_WORDS = {"ms": "ms", "millisecond": "ms", "milliseconds": "ms", "s": "s", "second": "s",
              "seconds": "s", "min": "m", "minute": "m", "minutes": "m", "m": "m", "h": "h",
              "hour": "h", "hours": "h", "d": "d", "day": "d", "days": "d"}
DURATION_RE = re.compile(r"^\s*(\d+)\s*([a-z]+)\s*$")
POLICY_DOC_RE = re.compile(r"Each alert has a `severity` label\.\s*\*\*(.*?)\*\*", re.S)
POLICY_YAML_RE = re.compile(r"^# Severities[^:]*:(.*?served\.)", re.S | re.M)
ROW_SEVERITY_RE = re.compile(r"^\|\s*`(IdempotencyProxy\w+)`\s*\|\s*(\w+)\s*\|", re.M)
RETENTION_START_RE = re.compile(
    r"retention`?[^.;]{0,60}?\b(?:after|from|counted from|since)\s+(?:the\s+|its\s+|their\s+|a\s+)?"
    r"(?:request's\s+|first request's\s+|record's\s+)?(?:answer|claim|first request|request|response)\b",
    re.I)
FINISHED_RECORD_RE = re.compile(r"how long a finished record", re.I)
MAJOR_RE = re.compile(r"\bis a major (?:version|release)\b|\bgets? a new major\b", re.I)
# a description that says clients are refused now (not "before they get 503")
REFUSED_RE = re.compile(r"\b(?:get|gets|got) 503\b|\brefused with 503\b|\brefuses? requests with 503\b|"
                        r"\bhave been refused with 503\b", re.I)
FENCE_RE = re.compile(r"^\s*(```|~~~)")


def duration_ms(text):
    m = DURATION_RE.match(str(text))
    if not m or m.group(2) not in UNIT_WORDS:
        return None
    return int(m.group(1)) * UNITS_MS[UNIT_WORDS[m.group(2)]]


def same_value(a, b):
    """a and b (YAML scalars or page text) name the same value: durations by their ms."""
    da, db = duration_ms(a), duration_ms(b)
    if da is not None or db is not None:
        return da == db
    norm = lambda v: re.sub(r"\s+", "", str(v).strip("`").lower())
    return norm(a) == norm(b)


def flatten(tree, prefix=""):
    out = {}
    for k, v in (tree or {}).items():
        path = prefix + str(k)
        if isinstance(v, dict):
            out.update(flatten(v, path + "."))
        else:
            out[path] = v
    return out


def scalar_text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(scalar_text(x) for x in v) + "]"
    return str(v)


def builtin_defaults(src):
    """config_builtin_yaml of config_schema.c, route keys under their own names."""
    text = (src / "proxy/config/config_schema.c").read_text()
    m = re.search(r"config_builtin_yaml\[\]\s*=\s*((?:\s*\"(?:[^\"\\]|\\.)*\")+)\s*;", text)
    if not m:
        return None
    body = "".join(bytes(s, "utf-8").decode("unicode_escape")
                   for s in re.findall(r"\"((?:[^\"\\]|\\.)*)\"", m.group(1)))
    flat = flatten(yaml.safe_load(body))
    return {(k[len("defaults."):] if k.startswith("defaults.") else k): v for k, v in flat.items()}


def table_defaults(text):
    """docs/configuration.md: key -> default cell, from the tables with key and default columns."""
    rows, header = {}, None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if set(cells[0]) <= set("- :") or "key" not in header or "default" not in header:
            continue
        key = cells[0].strip("`")
        rows[key] = cells[header.index("default")]
    return rows


def prose(path):
    """A page's text outside code blocks, as paragraphs joined into single lines."""
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        lines = [re.sub(r"^\s*#\s?", "", l) for l in text.splitlines() if l.lstrip().startswith("#")]
    else:
        lines, fenced = [], False
        for l in text.splitlines():
            if FENCE_RE.match(l):
                fenced = not fenced
                lines.append("")
                continue
            lines.append("" if fenced else l)
    paras, cur = [], []
    for l in lines + [""]:
        if l.strip():
            cur.append(l.strip())
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    return paras


def sentences(para):
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`(*])|\s\|\s", para) if s]


def restatements(para, key):
    """(value text) of each default of key that para states."""
    name = re.escape(key)
    short = re.escape(key.split(".")[-1]) if key.startswith("redis.") else None
    names = "(?:%s%s)" % (name, "|" + short if short else "")
    pats = [
        r"`%s`[^.;|()]{0,25}\((?:[^()]{0,30}?,\s*)?default:?\s+`?([0-9][\w ]*?|[a-z]+)`?[,;)]" % names,
        r"`%s:\s*([^`]+)`,?\s*(?:\()?the default" % names,
        r"a default `%s` of ([0-9]+\s*[a-z]+)" % names,
        r"`%s`\s*\(([0-9]+\s*(?:ms|s|h|d|min|seconds?|hours?|days?))\)" % names,
    ]
    found = []
    for p in pats:
        found += [m.group(1).strip() for m in re.finditer(p, para)]
    return found


def check(src):
    failures, oks = [], []
    pages = [src / "README.md", src / "SECURITY.md"] + sorted((src / "docs").glob("*.md"))
    pages = [p for p in pages if p.exists()] + [src / "conf/idempotency-proxy.yaml"]

    # defaults: code -> configuration.md -> sample config -> every page
    builtin = builtin_defaults(src)
    if builtin is None:
        return ["proxy/config/config_schema.c: config_builtin_yaml not found"], oks
    table = table_defaults((src / "docs/configuration.md").read_text())
    sample = flatten(yaml.safe_load((src / "conf/idempotency-proxy.yaml").read_text()))
    sample = {(k[len("defaults."):] if k.startswith("defaults.") else k): v for k, v in sample.items()}
    for key, value in sorted(builtin.items()):
        want = scalar_text(value)
        cell = table.get(key)
        if cell is None:
            failures.append("docs/configuration.md: no row for `%s` (default %s)" % (key, want))
        else:
            m = re.match(r"`([^`]*)`", cell)
            if not m or not same_value(m.group(1), want):
                failures.append("docs/configuration.md: `%s` default is %s, the proxy's is %s"
                                % (key, cell, want))
        if key in sample and not same_value(scalar_text(sample[key]), want):
            failures.append("conf/idempotency-proxy.yaml: %s: %s, the default is %s"
                            % (key, scalar_text(sample[key]), want))
    restated = 0
    for page in pages:
        rel = page.relative_to(src)
        for para in prose(page):
            for key in RESTATED:
                for said in restatements(para, key):
                    restated += 1
                    if not same_value(said, scalar_text(builtin[key])):
                        failures.append("%s: says the default of `%s` is %s, the proxy's is %s "
                                        "(docs/configuration.md)"
                                        % (rel, key, said, scalar_text(builtin[key])))
    oks.append("%d defaults agree in code, docs/configuration.md and the sample config; "
               "%d restatements in the pages agree" % (len(builtin), restated))

    # when retention starts
    starts = 0
    for page in pages:
        rel = page.relative_to(src)
        for para in prose(page):
            for s in sentences(para):
                if FINISHED_RECORD_RE.search(s):
                    failures.append("%s: calls retention the life of a finished record: it runs from "
                                    "the request's last write (client-contract.md#how-long-a-record-lives): %s"
                                    % (rel, s[:160]))
                if "dead_retention" in s or not RETENTION_START_RE.search(s):
                    continue
                starts += 1
                if not re.search(r"\b(?:last|that) write", s):
                    failures.append("%s: says retention counts from something other than the "
                                    "request's last write (client-contract.md#how-long-a-record-lives): %s"
                                    % (rel, s[:200]))
    oks.append("%d statements of when retention starts say the last write" % starts)

    # severities and their policy
    rules = yaml.safe_load((src / "docker/prometheus/alerts.yaml").read_text())
    alerts = {r["alert"]: r for g in rules["groups"] for r in g.get("rules") or [] if "alert" in r}
    ops = (src / "docs/operations.md").read_text()
    rows = dict(ROW_SEVERITY_RE.findall(ops))
    for name, rule in alerts.items():
        sev = rule.get("labels", {}).get("severity")
        if name not in rows:
            failures.append("docs/operations.md: the alert table has no row for %s" % name)
        elif rows[name] != sev:
            failures.append("docs/operations.md: %s is %s in the alert table, %s in alerts.yaml"
                            % (name, rows[name], sev))
        desc = rule.get("annotations", {}).get("description", "")
        refused = [s for s in re.split(r"(?<=\.)\s+", desc)
                   if REFUSED_RE.search(s) and not re.search(r"\b(?:once|would|if)\b", s)]
        if refused and sev != "critical":
            failures.append("alerts.yaml: %s says clients get 503 but is %s: the policy pages "
                            "when clients are refused" % (name, sev))
    for name in sorted(set(rows) - set(alerts)):
        failures.append("docs/operations.md: the alert table names %s, which alerts.yaml does not have"
                        % name)
    norm = lambda t: re.sub(r"\s+", " ", re.sub(r"[`*#]", "", t)).strip()
    pd = POLICY_DOC_RE.search(ops)
    py = POLICY_YAML_RE.search((src / "docker/prometheus/alerts.yaml").read_text())
    if not pd or not py:
        failures.append("the severity policy sentence is missing from %s"
                        % ("docs/operations.md" if not pd else "alerts.yaml's header"))
    elif norm(pd.group(1)) != norm(py.group(1)):
        failures.append("the severity policy differs: docs/operations.md says %r, alerts.yaml %r"
                        % (norm(pd.group(1)), norm(py.group(1))))
    oks.append("%d alerts: severities in alerts.yaml and docs/operations.md agree with each other "
               "and with the policy" % len(alerts))

    # versioning: CHANGELOG.md's policy is the one statement
    for page in pages:
        for para in prose(page):
            for s in sentences(para):
                if MAJOR_RE.search(s) and "versioning-policy" not in s:
                    failures.append("%s: states the versioning rule; link to CHANGELOG.md's "
                                    "versioning policy instead: %s" % (page.relative_to(src), s[:160]))
    return failures, oks


def self_test():
    here = pathlib.Path(__file__).resolve().parents[2]
    plants = [
        ("README.md", lambda t: t + "\nRecords stay for `retention` (default 12 h) here.\n",
         "the default of `retention` is 12 h"),
        ("docs/failure-modes.md", lambda t: t + "\nA record lives for `retention` after its answer.\n",
         "counts from something other"),
        ("docs/redis.md", lambda t: t + "\nWith `redis.min_replicas: 1`, the default, nothing is lost.\n",
         "`redis.min_replicas` is 1"),
        ("docs/configuration.md", lambda t: t.replace("| `wait_timeout` | duration | `10s` |",
                                                      "| `wait_timeout` | duration | `30s` |"),
         "`wait_timeout` default is `30s`"),
        ("docker/prometheus/alerts.yaml",
         lambda t: re.sub(r"(- alert: IdempotencyProxyOverloaded\n(?:(?!- alert:).)*?severity: )critical",
                          r"\1warning", t, count=1, flags=re.S),
         "IdempotencyProxyOverloaded is critical in the alert table, warning in alerts.yaml"),
        ("docs/operations.md", lambda t: t.replace("`warning` opens a ticket:", "`warning` mails:"),
         "the severity policy differs"),
        ("docs/operations.md", lambda t: t + "\nA release that breaks records is a major version.\n",
         "states the versioning rule"),
    ]
    bad = 0
    for path, plant, expect in plants:
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            for part in ["README.md", "SECURITY.md", "docs", "conf", "docker/prometheus",
                         "proxy/config/config_schema.c"]:
                s, d = here / part, root / part
                d.parent.mkdir(parents=True, exist_ok=True)
                if s.is_dir():
                    shutil.copytree(s, d)
                elif s.exists():
                    shutil.copy(s, d)
            target = root / path
            before = target.read_text()
            target.write_text(plant(before))
            if target.read_text() == before:
                print("FAIL self-test: could not plant %r in %s" % (expect, path))
                bad += 1
                continue
            failures, _ = check(root)
            if any(expect in f for f in failures):
                print("ok self-test: a planted contradiction in %s is reported (%s)" % (path, expect))
            else:
                print("FAIL self-test: planted %r in %s, got %s" % (expect, path, failures))
                bad += 1
    return 1 if bad else 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) != 2:
        print("usage: check_docs_facts.py SOURCE_DIR | --self-test", file=sys.stderr)
        return 2
    failures, oks = check(pathlib.Path(argv[1]).resolve())
    for f in failures:
        print("FAIL " + f)
    if not failures:
        for o in oks:
            print("ok " + o)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
