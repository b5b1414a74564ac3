#!/usr/bin/env python3
"""Every metric the alert rules and the dashboard name is one the proxy exports and documents.

Usage: check_metrics.py SOURCE_DIR

The metrics the proxy exports are the names `idempotency_proxy_*` in the string
literals of proxy/*.c (comments left out); a name passed to a function whose
name says `histogram` is a histogram, and only a histogram also has the
series NAME_bucket, NAME_sum and NAME_count. The documented ones are the
first column of the tables under docs/operations.md's "## Metrics" heading.

Reads the PromQL of
- docker/prometheus/alerts.yaml: every rule's `expr`;
- docker/prometheus/alerts.test.yaml: every input series of promtool's tests;
- docker/grafana/dashboard.json: every panel target's `expr` (rows' panels
  included), the annotation queries, and the query variables
  (`label_values(SELECTOR, label)`),
and checks that each metric name in them is exported and documented (the one
other name allowed is `up`, the series Prometheus itself makes for each
scrape). The PromQL tokenizer skips strings, label names inside `{...}` and in
`by/without/on/ignoring/group_left/group_right (...)` lists, range and
subquery brackets, numbers and durations, function and aggregation names (an
identifier followed by `(`), keywords (`and`, `or`, `unless`, `bool`,
`offset`, ...) and Grafana variables (`$job`, `${datasource}`,
`$__rate_interval`); a `{__name__="..."}` matcher names a metric.

Also checks that the dashboard is a Grafana dashboard with a Prometheus
datasource variable that every target uses, with unique panel ids, and that
every alert has a severity, a summary, a description and a `runbook_url`
that is a page of docs/ with an existing heading's anchor.

Before that it checks its own tokenizer on fixed expressions, and that a rule
naming a metric the proxy does not export is reported (so the check cannot
pass by reading nothing). Prints `ok ...` / `FAIL ...` lines; exits 1 when
anything is wrong. Needs python3-yaml.
"""
import json
import pathlib
import re
import sys

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import check_docs_links  # noqa: E402  (the headings' GitHub anchors)

PREFIX = "idempotency_proxy_"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# series Prometheus makes itself for every target it scrapes
PROMETHEUS_SERIES = {"up"}
SEVERITIES = {"critical", "warning"}

C_TOKEN_RE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'', re.S)
NAME_RE = re.compile(PREFIX + r"[a-z0-9_]+")
HISTOGRAM_CALL_RE = re.compile(r'\b\w*histogram\w*\s*\(\s*[^;"]*?"(' + PREFIX + r'[a-z0-9_]+)"')

PROMQL_TOKEN_RE = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<var>\$\{[^}]*\}|\$\w+|\[\[\w+\]\])
  | (?P<number>(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)[a-zA-Z0-9_]*)
  | (?P<ident>[a-zA-Z_][a-zA-Z0-9_:]*)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=,(){}\[\]@:])
""", re.X)
# PromQL's keywords (case-insensitive); `inf` and `nan` are numbers
KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan"}
# aggregation operators, which may have `by (...)` or `without (...)` before their "("
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
# keywords whose parenthesised list holds label names
LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}


class PromQLError(ValueError):
    pass


def promql_tokens(expr):
    """(kind, text) of every significant token; PromQLError on a character PromQL has not."""
    pos, out = 0, []
    while pos < len(expr):
        m = PROMQL_TOKEN_RE.match(expr, pos)
        if not m:
            raise PromQLError("cannot read %r at offset %d" % (expr[pos:pos + 20], pos))
        pos = m.end()
        if m.lastgroup not in ("ws", "comment"):
            out.append((m.lastgroup, m.group()))
    return out


def promql_metrics(expr):
    """The metric names an expression selects, in order of appearance, each once."""
    tokens = promql_tokens(expr)
    names = []
    # one entry per open bracket: "{" matchers, "[" range, "labels" a label list, "(" an expression
    stack = []
    for i, (kind, text) in enumerate(tokens):
        inside = stack[-1] if stack else "("
        nxt = tokens[i + 1] if i + 1 < len(tokens) else (None, None)
        if kind == "op" and text in "({[":
            prev = tokens[i - 1] if i > 0 else (None, None)
            if text == "(" and prev[0] == "ident" and prev[1].lower() in LABEL_LISTS:
                stack.append("labels")
            else:
                stack.append(text)
            continue
        if kind == "op" and text in ")}]":
            if not stack:
                raise PromQLError("unbalanced %r in %r" % (text, expr))
            stack.pop()
            continue
        if inside == "{":
            # a matcher's label name; {__name__="x"} selects the metric x
            if kind == "ident" and text == "__name__" and nxt == ("op", "=") and i + 2 < len(tokens):
                value = tokens[i + 2]
                if value[0] == "string":
                    names.append(value[1][1:-1])
            continue
        if inside in ("[", "labels") or kind != "ident":
            continue
        if text.lower() in KEYWORDS or nxt == ("op", "("):
            continue  # a keyword, or a function or aggregation name
        if text.lower() in AGGREGATIONS and nxt[0] == "ident" and nxt[1].lower() in ("by", "without"):
            continue  # sum by (...) (...)
        names.append(text)
    if stack:
        raise PromQLError("unclosed %r in %r" % (stack[-1], expr))
    return list(dict.fromkeys(names))


def grafana_variable_query(query):
    """The PromQL inside a Grafana Prometheus variable query, or None when it names no metric."""
    query = query.strip()
    m = re.fullmatch(r"label_values\((.*),\s*[a-zA-Z_]\w*\s*\)", query, re.S)
    if m:
        return m.group(1)
    m = re.fullmatch(r"query_result\((.*)\)", query, re.S)
    if m:
        return m.group(1)
    if re.fullmatch(r"label_values\(\s*[a-zA-Z_]\w*\s*\)|label_names\(.*\)|metrics\(.*\)", query, re.S):
        return None
    return query


def exported_metrics(src):
    """{name: "histogram" | "other"} of the names in proxy/*.c's string literals."""
    metrics = {}
    for path in sorted((src / "proxy").rglob("*.c")):
        text = path.read_text(encoding="utf-8")
        code = []
        for m in C_TOKEN_RE.finditer(text):
            tok = m.group()
            if tok.startswith('"'):
                for name in NAME_RE.findall(tok):
                    metrics.setdefault(name, "other")
        # the code without its comments, for the histogram calls
        code = C_TOKEN_RE.sub(lambda m: " " if m.group().startswith("/") else m.group(), text)
        for name in HISTOGRAM_CALL_RE.findall(code):
            metrics[name] = "histogram"
    return metrics


def documented_metrics(operations_md):
    """The backticked names in the first column of the tables of the "## Metrics" section."""
    names, in_section = set(), False
    for _, line in check_docs_links.prose_lines(operations_md.read_text(encoding="utf-8")):
        if line.startswith("## "):
            in_section = line.strip() == "## Metrics"
            continue
        m = re.match(r"\|\s*`(" + PREFIX + r"[a-z0-9_]+)`\s*\|", line)
        if in_section and m:
            names.add(m.group(1))
    return names


def name_problems(name, exported, documented):
    """What is wrong with a metric name a query uses: [] when the proxy exports and documents it."""
    if name in PROMETHEUS_SERIES:
        return []
    base = name
    if name not in exported:
        for suffix in HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and exported.get(name[:-len(suffix)]) == "histogram":
                base = name[:-len(suffix)]
                break
        else:
            hist = [s for s in HISTOGRAM_SUFFIXES if name.endswith(s) and name[:-len(s)] in exported]
            if hist:
                return ["%s: %s is not a histogram, so it has no %s series" % (
                    name, name[:-len(hist[0])], hist[0])]
            return ["%s: the proxy exports no such metric (proxy/*.c)" % name]
    if base not in documented:
        return ["%s: not in docs/operations.md's metrics list" % base]
    return []


def self_test():
    """The tokenizer on fixed expressions, and a wrong name reported; [] when all hold."""
    cases = [
        ('sum by (route) (rate(idempotency_proxy_requests_total{route=~"$route", outcome!="x"}[$__rate_interval]))',
         ["idempotency_proxy_requests_total"]),
        ("histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m])))", ["a_bucket"]),
        ("up == 0 and on (job, instance) max_over_time(b[6h]) == 1", ["up", "b"]),
        ("x / ignoring(code) group_left(le) y offset 5m > bool 1e3", ["x", "y"]),
        ("sum(z) without (instance) OR vector(0)", ["z"]),
        ('{__name__="w", job="a"} # a comment naming nothing', ["w"]),
        ("a unless a offset 15m", ["a"]),
        ("rate(c[5m:1m]) @ start() > Inf", ["c"]),
        ("max by (job, route) (k) == 1", ["k"]),
        ("sum(m) by (route) > 0", ["m"]),
    ]
    failures = []
    for expr, want in cases:
        got = promql_metrics(expr)
        if got != want:
            failures.append("tokenizer: %r gives %s, not %s" % (expr, got, want))
    q = grafana_variable_query('label_values(v{job=~"$job"}, instance)')
    if q is None or promql_metrics(q) != ["v"]:
        failures.append("label_values(v{...}, instance) does not give v")
    exported = {"p_total": "other", "p_seconds": "histogram"}
    documented = {"p_total", "p_seconds"}
    rule = "increase(p_total[5m]) > 0 or rate(no_such_metric_total[5m]) > 0 or p_total_bucket or p_seconds_count"
    problems = [p for n in promql_metrics(rule) for p in name_problems(n, exported, documented)]
    if len(problems) != 2 or not problems[0].startswith("no_such_metric_total") \
            or not problems[1].startswith("p_total_bucket"):
        failures.append("a rule naming missing metrics gives %s" % problems)
    return failures


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


def dashboard_queries(dash, failures):
    """(where, PromQL) of the dashboard's queries; structural problems appended to failures."""
    if not isinstance(dash.get("panels"), list) or "schemaVersion" not in dash or not dash.get("title"):
        failures.append("dashboard.json: not a Grafana dashboard (panels, schemaVersion, title)")
        return []
    variables = dash.get("templating", {}).get("list", [])
    ds = [v for v in variables if v.get("type") == "datasource" and v.get("query") == "prometheus"]
    if not ds:
        failures.append("dashboard.json: no datasource variable of type prometheus")
    ds_ref = "${%s}" % ds[0]["name"] if ds else None
    queries, ids = [], set()
    for p in walk_panels(dash["panels"]):
        if p.get("id") in ids:
            failures.append("dashboard.json: panel id %s used twice" % p.get("id"))
        ids.add(p.get("id"))
        if p.get("type") == "row":
            continue
        if not p.get("targets"):
            failures.append("dashboard.json: panel %r has no query" % p.get("title"))
        for t in p.get("targets", []):
            for obj in (p, t):
                if obj.get("datasource", {}).get("uid") != ds_ref:
                    failures.append("dashboard.json: panel %r does not use the datasource variable %s"
                                    % (p.get("title"), ds_ref))
            queries.append(("panel %r" % p.get("title"), t.get("expr", "")))
    for a in dash.get("annotations", {}).get("list", []):
        if a.get("expr"):
            queries.append(("annotation %r" % a.get("name"), a["expr"]))
    for v in variables:
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else q or v.get("definition", "")
        promql = grafana_variable_query(q)
        if promql is not None:
            queries.append(("variable $%s" % v.get("name"), promql))
    return queries


def rule_queries(rules_doc, src, failures):
    """(where, PromQL) of the rules; missing annotations and runbook anchors appended to failures."""
    queries, slugs = [], {}
    for group in rules_doc.get("groups") or []:
        for rule in group.get("rules") or []:
            name = rule.get("alert") or rule.get("record")
            queries.append(("rule %s" % name, str(rule.get("expr", ""))))
            if "alert" not in rule:
                continue
            labels, ann = rule.get("labels") or {}, rule.get("annotations") or {}
            if labels.get("severity") not in SEVERITIES:
                failures.append("alerts.yaml: %s: severity %r is not one of %s"
                                % (name, labels.get("severity"), sorted(SEVERITIES)))
            for key in ("summary", "description", "runbook_url"):
                if not str(ann.get(key, "")).strip():
                    failures.append("alerts.yaml: %s: no %s annotation" % (name, key))
            page, _, anchor = str(ann.get("runbook_url", "")).partition("#")
            if not page:
                continue
            path = (src / page).resolve()
            if not page.startswith("docs/") or not path.is_file():
                failures.append("alerts.yaml: %s: runbook_url %s: no such page in docs/" % (name, page))
                continue
            if path not in slugs:
                slugs[path] = check_docs_links.anchors(path.read_text(encoding="utf-8"))
            if not anchor or anchor not in slugs[path]:
                failures.append("alerts.yaml: %s: runbook_url %s: no heading with the anchor #%s"
                                % (name, page, anchor))
    if not queries:
        failures.append("alerts.yaml: no rules")
    return queries


def main(argv):
    if len(argv) != 2:
        print("usage: check_metrics.py SOURCE_DIR", file=sys.stderr)
        return 2
    src = pathlib.Path(argv[1]).resolve()
    failures = self_test()
    if not failures:
        print("ok the PromQL tokenizer reads its fixed expressions, and a missing metric is reported")
    exported = exported_metrics(src)
    documented = documented_metrics(src / "docs" / "operations.md")
    if not exported or not documented:
        failures.append("no metrics found: %d exported, %d documented" % (len(exported), len(documented)))
    rules_path = src / "docker" / "prometheus" / "alerts.yaml"
    tests_path = src / "docker" / "prometheus" / "alerts.test.yaml"
    dash_path = src / "docker" / "grafana" / "dashboard.json"
    queries = [("alerts.yaml: " + w, q) for w, q in
               rule_queries(yaml.safe_load(rules_path.read_text(encoding="utf-8")), src, failures)]
    for test in yaml.safe_load(tests_path.read_text(encoding="utf-8")).get("tests") or []:
        for s in test.get("input_series") or []:
            queries.append(("alerts.test.yaml: input series", s.get("series", "")))
    queries += [("dashboard.json: " + w, q) for w, q in
                dashboard_queries(json.loads(dash_path.read_text(encoding="utf-8")), failures)]
    used = {}
    for where, expr in queries:
        try:
            names = promql_metrics(expr)
        except PromQLError as e:
            failures.append("%s: %s" % (where, e))
            continue
        if not names:
            failures.append("%s: names no metric: %s" % (where, expr))
        for n in names:
            used.setdefault(n, where)
    for name, where in sorted(used.items()):
        for problem in name_problems(name, exported, documented):
            failures.append("%s: %s" % (where, problem))
    for f in failures:
        print("FAIL " + f)
    print("ok %d queries name %d metrics; the proxy exports %d (%d histograms), docs/operations.md "
          "lists %d" % (len(queries), len(used), len(exported),
                        sum(1 for k in exported.values() if k == "histogram"), len(documented)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
