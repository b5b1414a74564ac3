"""docs/openapi.yaml, the OpenAPI 3.1 fragment of the client contract, against real validators
and against the proxy itself.

- The fragment is a valid OpenAPI 3.1 document by @apidevtools/swagger-parser (the OpenAPI 3.1
  JSON Schema, every $ref resolved) and its Schema Objects compile under ajv's strict JSON
  Schema 2020-12 (tests/clients/validate_openapi.js; the packages pinned in
  tests/clients/package-lock.json, installed by proxy_helpers.node_packages); broken copies of
  it are refused, so the validator can fail.
- Every problem type the proxy can answer is described in it, in both formats, and no other:
  the set comes from the binary (`idempotency-proxy problems`, which prints problem.c's table),
  and each cause's statuses and listeners from the code that answers it (every call in proxy/
  that names a PROBLEM_ constant, read below), not from a list here.
- The proxy's real answers, in both error formats, match the responses that describe them.
"""

import json
import os
import re
import subprocess

import pytest
import yaml

from harness import REPO, wait_until
from proxy_helpers import (
    PROBLEM_PREFIX, bearer, in_background, new_key, new_token, node_packages, run_bin,
    token_file,
)

FRAGMENT = os.path.join(REPO, "docs", "openapi.yaml")
VALIDATOR = os.path.join(REPO, "tests", "clients", "validate_openapi.js")
PREFIX = "IdempotencyProxy"                    # of every name in the fragment's components
LISTENERS = "x-idempotency-proxy-listeners"    # on each cause's own response
PROBLEM_JSON, STRIPE_JSON = "application/problem+json", "application/json"


@pytest.fixture(scope="module")
def validate():
    """validate(path, answers=None, tmp=None) -> (exit code, output) of validate_openapi.js on
    path, with the answers (a list of dicts, see the script; written into the directory tmp)
    when given. Exit 2 (the script broke, or a package is missing) fails the test."""
    node, modules = node_packages()
    env = dict(os.environ, NODE_PATH=modules)

    def run(path, answers=None, tmp=None):
        args = [node, VALIDATOR, path]
        if answers is not None:
            args.append(str(tmp / "answers.json"))
            (tmp / "answers.json").write_text(json.dumps(answers))
        r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode in (0, 1), "validate_openapi.js broke (%d): %s%s" % (
            r.returncode, r.stdout, r.stderr)
        return r.returncode, r.stdout + r.stderr

    return run


def fragment():
    with open(FRAGMENT) as f:
        return yaml.safe_load(f)


# --------------------------------------------------------------------------
# what the fragment says
# --------------------------------------------------------------------------

def resolved(doc, node):
    """node with a local $ref followed (as often as it takes)."""
    while isinstance(node, dict) and "$ref" in node:
        ptr = node["$ref"]
        assert ptr.startswith("#/"), "a $ref outside the fragment: %s" % ptr
        node = doc
        for part in ptr[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def allowed(doc, schema, *path):
    """The values the schema allows at the property path (`const` or `enum`, through allOf and
    $ref): a set, or None when nothing there narrows it."""
    schema = resolved(doc, schema)
    out = None
    parts = [schema] + [resolved(doc, s) for s in schema.get("allOf", ())]
    for part in parts:
        node = part
        for name in path:
            node = resolved(doc, (node.get("properties") or {}).get(name) or {})
        these = ({node["const"]} if "const" in node
                 else set(node["enum"]) if "enum" in node else None)
        if these is not None:
            out = these if out is None else out & these
    return out


def described(doc):
    """Each cause's own response (the ones marked with their listeners):
    {name: {"types", "codes", "statuses", "titles", "stripe_types", "should_retry",
    "listeners"}}; types are the problem format's, codes the Stripe format's (None: no such
    content)."""
    out = {}
    for name, r in doc["components"]["responses"].items():
        if LISTENERS not in r:
            continue
        problem = r["content"][PROBLEM_JSON]["schema"]
        stripe = r["content"].get(STRIPE_JSON, {}).get("schema")
        retry = resolved(doc, (r.get("headers") or {}).get("Stripe-Should-Retry") or {})
        out[name] = {
            "types": allowed(doc, problem, "type"),
            "statuses": allowed(doc, problem, "status"),
            "titles": allowed(doc, problem, "title"),
            "codes": allowed(doc, stripe, "error", "code") if stripe else None,
            "stripe_types": allowed(doc, stripe, "error", "type") if stripe else None,
            "should_retry": (retry.get("schema") or {}).get("const"),
            "listeners": set(r[LISTENERS]),
        }
    return out


def groups(doc):
    """The per-status responses IdempotencyProxy<status>: {status: (types, codes)}."""
    out = {}
    for name, r in doc["components"]["responses"].items():
        m = re.fullmatch(PREFIX + r"(\d{3})", name)
        if m:
            r = resolved(doc, r)
            out[int(m.group(1))] = (
                allowed(doc, r["content"][PROBLEM_JSON]["schema"], "type"),
                allowed(doc, r["content"][STRIPE_JSON]["schema"], "error", "code"))
    return out


# --------------------------------------------------------------------------
# what the proxy says
# --------------------------------------------------------------------------

def proxy_problems():
    """`idempotency-proxy problems`: {type URI: {code, title, status, stripe_type,
    stripe_should_retry}}, problem.c's table as the binary has it."""
    rc, out, err = run_bin(["problems"])
    assert rc == 0, err
    kinds = [json.loads(line) for line in out.splitlines()]
    assert kinds, "the binary printed no problem type"
    return {k["type"]: k for k in kinds}


# The functions that answer a problem: those given its status after the cause, and those that
# answer with the table's status (problem_status). A call of another with a PROBLEM_ constant
# fails the check below until it is taught here.
STATUS_AFTER_CAUSE = {"classify_refuse", "classify_refuse_rule", "exchange_problem",
                      "exchange_refuse_now", "exchange_answer_problem"}
TABLE_STATUS = {"admin_reply_problem", "admin_auth_answer", "admin_resolve_refused",
                "admin_records_purge_refused"}
# where each listener's answers are made
LISTENER_DIRS = {"exchange": "client", "idem": "client", "admin": "admin"}
C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def mismatch_statuses():
    """The statuses `mismatch_status` takes, from its row in docs/configuration.md."""
    with open(os.path.join(REPO, "docs", "configuration.md")) as f:
        row = re.search(r"^\| `mismatch_status` \| ([^|]*) \|", f.read(), re.M)
    assert row, "docs/configuration.md has no row for mismatch_status"
    return {int(s) for s in re.findall(r"\d{3}", row.group(1))}


# a status the code passes as a variable: where it comes from
VARIABLE_STATUS = {"x->policy->mismatch_status": mismatch_statuses}


def call_of(text, at):
    """The function whose argument list holds position at, or None (not inside a call)."""
    depth = 0
    for i in range(at - 1, -1, -1):
        c = text[i]
        if c == ")":
            depth += 1
        elif c == "(":
            if depth == 0:
                m = re.search(r"(\w+)\s*$", text[:i])
                return m.group(1) if m else None
            depth -= 1
        elif c in ";{}" and depth == 0:
            return None
    return None


def next_argument(text, at):
    """The argument after position at (just past an argument), up to its , or )."""
    m = re.match(r"\s*,", text[at:])
    if not m:
        return None
    i, depth, start = at + m.end(), 0, at + m.end()
    while i < len(text):
        c = text[i]
        if c == '"':
            i = text.index('"', i + 1) if text[i - 1] != "\\" else i
        elif c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                break
            depth -= 1
        elif c == "," and depth == 0:
            break
        i += 1
    return " ".join(text[start:i].split())


def answered_causes(kinds):
    """{code: {"statuses": set, "listeners": set, "sites": [file:line]}} of every call in proxy/
    that answers with a problem (problem.c itself, the table, aside); a call the reading does
    not understand is an assertion naming it."""
    enum = {k["code"].upper().replace("-", "_"): k for k in kinds.values()}
    found = {}
    unread = []
    root = os.path.join(REPO, "proxy")
    for dirpath, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".c") or name == "problem.c":
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, REPO)
            with open(path) as f:
                text = C_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), f.read())
            for m in re.finditer(r"\bPROBLEM_([A-Z_]+)\b", text):
                if m.group(1) not in enum or re.search(r"(==|!=|case)\s*$", text[:m.start()]):
                    continue                  # another macro, a comparison, a switch
                where = "%s:%d" % (rel, text.count("\n", 0, m.start()) + 1)
                kind = enum[m.group(1)]
                fn = call_of(text, m.start())
                if fn in STATUS_AFTER_CAUSE:
                    arg = next_argument(text, m.end())
                    if arg is not None and re.fullmatch(r"\d{3}", arg):
                        statuses = {int(arg)}
                    elif arg in VARIABLE_STATUS:
                        statuses = VARIABLE_STATUS[arg]()
                    else:
                        unread.append("%s: %s(..., PROBLEM_%s, %s, ...): a status this check "
                                      "cannot read (add it to VARIABLE_STATUS)"
                                      % (where, fn, m.group(1), arg))
                        continue
                elif fn in TABLE_STATUS:
                    statuses = {kind["status"]}
                else:
                    unread.append("%s: PROBLEM_%s in %s(...), a function this check does not "
                                  "know (add it to STATUS_AFTER_CAUSE or TABLE_STATUS)"
                                  % (where, m.group(1), fn))
                    continue
                top = os.path.relpath(path, root).split(os.sep)[0]
                if top not in LISTENER_DIRS:
                    unread.append("%s: a problem answered outside %s: which listener answers "
                                  "it? (LISTENER_DIRS)" % (where, sorted(LISTENER_DIRS)))
                    continue
                entry = found.setdefault(kind["code"], {"statuses": set(), "listeners": set(),
                                                        "sites": []})
                entry["statuses"] |= statuses
                entry["listeners"].add(LISTENER_DIRS[top])
                entry["sites"].append(where)
    assert not unread, "\n".join(unread)
    return found


# --------------------------------------------------------------------------
# the fragment is valid, and the validator can say it is not
# --------------------------------------------------------------------------

def test_the_fragment_is_a_valid_openapi_3_1_document(validate):
    rc, out = validate(FRAGMENT)
    assert rc == 0, out
    assert "a valid OpenAPI 3.1.0 document" in out, out
    assert re.search(r"ok \d+ schemas compile", out), out


def test_the_fragment_names_the_release_it_describes():
    rc, out, err = run_bin(["-V"])
    assert rc == 0, err
    assert fragment()["info"]["version"] == out.split()[-1], (
        "docs/openapi.yaml's info.version is not the binary's version (%s): review the fragment "
        "for this release" % out.strip())


def test_the_client_contracts_example_validates_against_the_fragment(validate, tmp_path):
    """docs/client-contract.md's example operation, in a description of its own beside a copy
    of the fragment named as the page says, is valid: its references resolve."""
    with open(os.path.join(REPO, "docs", "client-contract.md")) as f:
        page = f.read()
    section = page[page.index("\n## OpenAPI description\n"):]
    example = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    (tmp_path / "idempotency-proxy.yaml").write_text(open(FRAGMENT).read())
    api = dict(openapi="3.1.0", info={"title": "payments", "version": "1"},
               **yaml.safe_load(example))
    (tmp_path / "api.yaml").write_text(yaml.safe_dump(api, sort_keys=False))
    rc, out = validate(str(tmp_path / "api.yaml"))
    assert rc == 0, out


def _drop_info(doc):
    del doc["info"]


def _dangling_ref(doc):
    doc["paths"]["/v1/payments"]["post"]["responses"]["409"] = {
        "$ref": "#/components/responses/%sNone" % PREFIX}


def _misspelt_keyword(doc):
    part = doc["components"]["responses"][PREFIX + "MissingKey"]["content"][PROBLEM_JSON]
    prop = part["schema"]["allOf"][1]["properties"]["type"]
    prop["cosnt"] = prop.pop("const")


def _response_without_description(doc):
    del doc["components"]["responses"][PREFIX + "MissingKey"]["description"]


def _example_that_is_no_key(doc):
    doc["components"]["parameters"][PREFIX + "Key"]["example"] = "t4, t5"


def _example_of_another_cause(doc):
    r = doc["components"]["responses"][PREFIX + "KeyReuseMismatch"]["content"][PROBLEM_JSON]
    r["example"]["type"] = PROBLEM_PREFIX + "request-in-progress"


@pytest.mark.parametrize("breaks, message", [
    pytest.param(breaks, message, id=breaks.__name__.strip("_")) for breaks, message in [
        (_drop_info, "must have required property 'info'"),
        (_dangling_ref, 'Missing $ref pointer "#/components/responses/%sNone"' % PREFIX),
        (_misspelt_keyword, 'unknown keyword: "cosnt"'),
        (_response_without_description, "must have required property 'description'"),
        (_example_that_is_no_key, 'the example "t4, t5" does not match the schema'),
        (_example_of_another_cause, "does not match the schema"),
    ]])
def test_the_validator_refuses_a_broken_copy(validate, tmp_path, breaks, message):
    doc = fragment()
    breaks(doc)
    broken = tmp_path / "openapi.yaml"
    broken.write_text(yaml.safe_dump(doc, sort_keys=False))
    rc, out = validate(str(broken))
    assert rc == 1 and message in out, out


# --------------------------------------------------------------------------
# the causes, their statuses and listeners, from the proxy
# --------------------------------------------------------------------------

def test_every_problem_type_the_proxy_answers_is_described_and_no_other():
    doc, kinds = fragment(), proxy_problems()
    causes = described(doc)
    clients = {code for code, a in answered_causes(kinds).items() if "client" in a["listeners"]}
    problem_types, stripe_codes, errors = set(), set(), []
    for name, c in causes.items():
        if c["types"] is None or len(c["types"]) != 1:
            errors.append("%s: not one problem type but %s" % (name, c["types"]))
            continue
        (uri,) = c["types"]
        if uri in problem_types:
            errors.append("%s: %s is described twice" % (name, uri))
        problem_types.add(uri)
        kind = kinds.get(uri)
        if c["codes"] is not None:
            stripe_codes |= {PROBLEM_PREFIX + code for code in c["codes"]}
            if c["codes"] != {uri[len(PROBLEM_PREFIX):]}:
                errors.append("%s: Stripe code %s for %s" % (name, c["codes"], uri))
        if kind is None:
            continue
        if c["titles"] != {kind["title"]}:
            errors.append("%s: title %s, the proxy's is %r" % (name, c["titles"], kind["title"]))
        if c["codes"] is not None and c["stripe_types"] != {kind["stripe_type"]}:
            errors.append("%s: Stripe type %s, the proxy's is %s"
                          % (name, c["stripe_types"], kind["stripe_type"]))
        if c["codes"] is not None and c["should_retry"] != kind["stripe_should_retry"]:
            errors.append("%s: Stripe-Should-Retry %s, the proxy's is %s"
                          % (name, c["should_retry"], kind["stripe_should_retry"]))
    # every type a schema of the fragment names (the per-status responses too) is a cause's
    for status, (types, codes) in groups(doc).items():
        for uri in (types or set()) - problem_types:
            errors.append("%s%d names %s, which no cause's response describes"
                          % (PREFIX, status, uri))
    cause = lambda uris: sorted(u[len(PROBLEM_PREFIX):] for u in uris)  # noqa: E731
    missing = cause(set(kinds) - problem_types)
    extra = cause(problem_types - set(kinds))
    stripe_missing = cause({PROBLEM_PREFIX + c for c in clients} - stripe_codes)
    stripe_extra = cause(stripe_codes - {PROBLEM_PREFIX + c for c in clients})
    if missing:
        errors.append("answered by the proxy, not described in docs/openapi.yaml: %s"
                      % ", ".join(missing))
    if extra:
        errors.append("described in docs/openapi.yaml, not answered by the proxy: %s"
                      % ", ".join(extra))
    if stripe_missing:
        errors.append("answered on the client listener, without its Stripe format in "
                      "docs/openapi.yaml: %s" % ", ".join(stripe_missing))
    if stripe_extra:
        errors.append("a Stripe format in docs/openapi.yaml for what the client listener never "
                      "answers: %s" % ", ".join(stripe_extra))
    assert not errors, "\n".join(errors)


def test_each_cause_has_the_statuses_and_listeners_the_code_answers_with():
    doc, kinds = fragment(), proxy_problems()
    answered = answered_causes(kinds)
    never = sorted(set(k["code"] for k in kinds.values()) - set(answered))
    assert not never, "in problem.c's table, answered nowhere: %s" % ", ".join(never)
    errors = []
    by_code = {}
    for name, c in described(doc).items():
        (uri,) = c["types"]
        code = uri[len(PROBLEM_PREFIX):]
        by_code[code] = c
        a = answered.get(code)
        if a is None:
            continue                          # the test above names it
        if c["statuses"] != a["statuses"]:
            errors.append("%s: statuses %s, the code answers %s (%s)"
                          % (name, sorted(c["statuses"] or ()), sorted(a["statuses"]),
                             ", ".join(a["sites"])))
        if c["listeners"] != a["listeners"]:
            errors.append("%s: %s %s, answered by the %s listener (%s)"
                          % (name, LISTENERS, sorted(c["listeners"]),
                             " and ".join(sorted(a["listeners"])), ", ".join(a["sites"])))
        if ("client" in a["listeners"]) != (c["codes"] is not None):
            errors.append("%s: a Stripe format %s, but the client listener %s it"
                          % (name, "described" if c["codes"] else "missing",
                             "answers" if "client" in a["listeners"] else "never answers"))
    # one response per status of the client listener, naming exactly the causes it answers with
    want = {}
    for code, a in answered.items():
        if "client" in a["listeners"] and code in by_code:
            for status in a["statuses"]:
                want.setdefault(status, set()).add(PROBLEM_PREFIX + code)
    # (a cause the binary does not know is the test above's to name)
    have = {status: ({t for t in types if t in kinds},
                     {c for c in codes if PROBLEM_PREFIX + c in kinds})
            for status, (types, codes) in groups(doc).items()}
    for status in sorted(set(want) | set(have)):
        types, codes = have.get(status, (None, None))
        if types != want.get(status):
            errors.append("%s%d: describes %s, the client listener answers %d with %s"
                          % (PREFIX, status, sorted(types or ()), status,
                             sorted(want.get(status, ()))))
        elif {PROBLEM_PREFIX + c for c in codes} != types:
            errors.append("%s%d: Stripe codes %s" % (PREFIX, status, sorted(codes)))
    assert not errors, "\n".join(errors)


# --------------------------------------------------------------------------
# the proxy's real answers
# --------------------------------------------------------------------------

HOOK = "/hooks/stripe"


def answer(r, response):
    return {"response": response, "status": r.status, "content_type": r.header("Content-Type"),
            "headers": dict(r.headers), "body": r.json()}


def provoke_answers(p, upstream, redis, fmt, token):
    """The proxy's own answers, each with the name of the cause's response: a missing, a bad and
    a reused key, a request in progress whose answer is then lost (its first answer and a
    retry's), an answer too large to replay, bodies, targets and methods refused, a webhook's
    bad signature and method, unprotected requests that timed out or lost their answer, the
    admin listener's 401, and Redis away. Each is also checked against its status's response."""
    got = []
    hang = [("X-Demo-Fault", "hang")]

    def keep(r, cause, status):
        assert r.status == status and r.header("Content-Type", "").startswith(
            PROBLEM_JSON if fmt == "problem" else STRIPE_JSON), (cause, r)
        assert r.has_header("Stripe-Should-Retry") == (fmt == "stripe"), (cause, r)
        got.append(answer(r, PREFIX + "".join(w.capitalize() for w in cause.split("-"))))
        got.append(answer(r, "%s%d" % (PREFIX, status)))

    keep(p.post(key=None), "missing-key", 400)
    keep(p.post(key='"unterminated'), "invalid-key", 400)
    key = new_key()
    assert p.post(key=key).status == 201
    keep(p.post(key=key, body=b'{"amount": 2}'), "key-reuse-mismatch", 409)
    key = new_key()
    first = in_background(p.post, path="/v1/reject", key=key, headers=hang)
    wait_until(lambda: upstream.executions(key) == 1, what="the first request at the upstream")
    keep(p.post(path="/v1/reject", key=key, headers=hang), "request-in-progress", 409)
    keep(first.result(timeout=30), "outcome-unknown", 502)
    keep(p.post(path="/v1/reject", key=key, headers=hang), "outcome-unknown", 502)
    key = new_key()
    assert p.post(key=key, headers=[("X-Demo-Size", "4096")]).status == 201
    keep(p.post(key=key, headers=[("X-Demo-Size", "4096")]), "response-not-replayable", 502)
    keep(p.post(key=new_key(), body=b"x" * 4096), "body-too-large", 413)
    keep(p.request("POST", "/v1/payments%2Fx", [("Idempotency-Key", new_key())], b"{}"),
         "invalid-target", 400)
    keep(p.request("POST", "/v1/payments", [("Transfer-Encoding", "chunked"),
                                             ("Content-Length", "3")], b"0\r\n\r\n"),
         "invalid-framing", 400)
    keep(p.request("TRACE", "/v1/payments"), "method-not-implemented", 501)
    keep(p.request("POST", HOOK, [("Content-Type", "application/json")], b'{"id": "evt_1"}'),
         "signature-invalid", 401)
    keep(p.request("PUT", HOOK, [("Content-Type", "application/json")], b'{"id": "evt_1"}'),
         "method-not-allowed", 405)
    keep(p.post(path="/open", headers=hang), "upstream-timeout", 504)
    keep(p.post(path="/open", headers=[("X-Demo-Fault", "close")]), "upstream-answer-lost", 502)
    if fmt == "problem":                    # the admin listener answers in this format only
        r = p.admin("GET", "/records?state=outcome-unknown")
        assert r.status == 401, r
        got.append(answer(r, PREFIX + "AdminUnauthorized"))
        assert p.admin("GET", "/records?state=outcome-unknown",
                       headers=bearer(token)).status == 200
    redis.stop()
    keep(p.post(key=new_key()), "store-unavailable", 503)
    return got


@pytest.mark.parametrize("fmt", ["problem", "stripe"])
def test_the_proxys_answers_match_the_fragment(start_proxy, upstream, redis, validate, tmp_path,
                                               fmt):
    token = new_token()
    p = start_proxy(routes=[{"path": "/v1/payments*", "require_key": True},
                            {"path": "/v1/reject*", "in_flight": "reject"},
                            {"path": HOOK, "key_from": "json:/id", "verify": "stripe",
                             "secret": "whsec_" + new_key()}],
                    errors={"format": fmt}, upstream={"timeout": "2s"},
                    limits={"max_request_body": "1KiB", "max_stored_response": "1KiB"},
                    admin_token_file=token_file(tmp_path, token))
    answers = provoke_answers(p, upstream, redis, fmt, token)
    rc, out = validate(FRAGMENT, answers, tmp_path)
    assert rc == 0, out
    assert "ok %d answers match" % len(answers) in out, out


def test_the_answer_check_refuses_answers_the_fragment_does_not_describe(validate, tmp_path):
    problem = {"type": PROBLEM_PREFIX + "missing-key", "title": "Idempotency key required",
               "status": 400, "detail": "this route requires an idempotency key header"}
    base = {"response": PREFIX + "MissingKey", "status": 400, "content_type": PROBLEM_JSON,
            "headers": {}, "body": problem}
    held = {"response": PREFIX + "OutcomeUnknown", "status": 502, "content_type": PROBLEM_JSON,
            "headers": {"Idempotency-Record-Id": "0" * 32},
            "body": dict(problem, type=PROBLEM_PREFIX + "outcome-unknown", status=502,
                         title="Outcome of the original request is unknown",
                         record_id="0" * 32)}
    broken = [
        dict(base, body=dict(problem, extra=1)),                  # a member it does not name
        dict(base, body=dict(problem, type=PROBLEM_PREFIX + "invalid-key")),
        dict(base, status=409, body=dict(problem, status=409)),   # another status
        dict(base, content_type=STRIPE_JSON,
             body={"error": {"type": "api_error", "code": "missing-key", "message": "m"}}),
        dict(base, content_type=STRIPE_JSON, headers={"Stripe-Should-Retry": "true"},
             body={"error": {"type": "invalid_request_error", "code": "missing-key",
                             "message": "m"}}),
        held,                                                     # no Retry-After
    ]
    rc, out = validate(FRAGMENT, broken, tmp_path)
    assert rc == 1, out
    for i, why in enumerate(["the member extra", "does not match its schema", "status 409",
                             "does not match its schema", "header Stripe-Should-Retry",
                             "the required header Retry-After is missing"]):
        assert re.search(r"FAIL answer %d \(.*%s" % (i, re.escape(why)), out), (i, why, out)
