"""Named operators with rights, and the audit trail they leave (docs/operations.md "Admin
access", "The audit trail"; docs/configuration.md `admin.operators_file`, `log.audit`):

- three operators from one operators file: `read` lists and shows but gets 403 on a resolve
  and a purge; `resolve` resolves but cannot purge; `purge` purges; a 403 changes nothing;
- every admin request, reads and refusals included, gives one audit line with the operator's
  name, the right, the reason and the result, in the `log.audit` file and never on stdout
  (the access log);
- a SIGHUP that removes an operator locks their token out at the next request; a malformed
  operators file is a `-t` error naming FILE:LINE, and a reload of it is refused;
- failed authentications are audited, counted and, past ten a minute from one address,
  answered 429 with Retry-After without a token check;
- `admin.token_file` keeps working as the operator `token` with every right, beside the file.

Real processes only: redis-server, the proxy binary and the demo upstream.
"""

import base64
import hashlib
import json
import os
import subprocess
import uuid

import pytest

from harness import proxy_binary, wait_until
from proxy_helpers import (
    CLOSE, bearer, check_file, hold_outcome_unknown, metric, new_token, reload_and_wait, run_bin,
    stdout_json, token_file,
)

pytestmark = pytest.mark.threads

ROUTE = "/v1/payments*"
FORBIDDEN = "urn:idempotency-proxy:problem:admin-forbidden"
THROTTLED = "urn:idempotency-proxy:problem:admin-throttled"
UNAUTHORIZED = "urn:idempotency-proxy:problem:admin-unauthorized"


def sha256(token):
    return hashlib.sha256(token.encode()).hexdigest()


def operators_text(*ops):
    lines = ["operators:"]
    for name, token, rights in ops:
        lines += ["  - name: %s" % name, "    token_sha256: %s" % sha256(token),
                  "    rights: [%s]" % ", ".join(rights)]
    return "\n".join(lines) + "\n"


def audit_file_lines(path):
    if not path.exists():
        return []
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


hold = hold_outcome_unknown


def answer(status, body, reason):
    return {"status": status, "headers": [["Content-Type", "application/json"]],
            "body_base64": base64.b64encode(body).decode(), "reason": reason}


def call(p, token, method, path, doc=None, headers=()):
    return p.admin(method, path, headers=bearer(token) + list(headers),
                   body=json.dumps(doc).encode() if doc is not None else None)


class Crew:
    """A proxy whose admin listener knows three operators, its audit lines in a file."""

    def __init__(self, tmp_path, start_proxy, admin_host="0.0.0.0", **kw):
        self.reader, self.resolver, self.purger = new_token(), new_token(), new_token()
        self.ops_file = tmp_path / "operators.yaml"
        self.ops_file.write_text(operators_text(
            ("rita.reader", self.reader, ["read"]),
            ("olga@payments", self.resolver, ["read", "resolve"]),
            ("pete", self.purger, ["purge"])))
        self.audit = tmp_path / "audit" / "admin-audit.log"
        self.audit.parent.mkdir()
        self.p = start_proxy(routes=[{"path": ROUTE}], admin_host=admin_host,
                             admin_config={"operators_file": str(self.ops_file)},
                             log={"audit": str(self.audit)}, **kw)

    def lines(self, n):
        """The audit file's lines once it holds n of them (each written at its answer)."""
        return wait_until(lambda: (lambda ls: ls if len(ls) >= n else None)(
            audit_file_lines(self.audit)), what="%d audit lines" % n)


def test_three_operators_each_do_what_their_rights_allow_and_every_request_is_audited(
        tmp_path, start_proxy, redis, upstream):
    crew = Crew(tmp_path, start_proxy)
    p = crew.p
    key = "pay-" + uuid.uuid4().hex
    record_id = hold(p, key)
    path = "/records/" + record_id
    redis_key = "idem:{%s}" % record_id

    # read: the listing and the record, nothing more
    listed = call(p, crew.reader, "GET", "/records?state=outcome-unknown")
    assert listed.status == 200 and record_id in [r["record_id"] for r in listed.json()["records"]]
    shown = call(p, crew.reader, "GET", path)
    assert shown.status == 200 and shown.json()["state"] == "outcome-unknown", shown
    before = redis.cmd("GET", redis_key)
    fixed = b'{"id": "pay_1", "status": "succeeded"}'
    r = call(p, crew.reader, "PUT", path, answer(201, fixed, "INC-1: the upstream has pay_1"))
    assert r.status == 403 and r.problem()["type"] == FORBIDDEN, r
    assert "resolve" in r.problem()["detail"] and "rita.reader" in r.problem()["detail"], r
    r = call(p, crew.reader, "DELETE", path + "?reason=INC-1")
    assert r.status == 403 and r.problem()["type"] == FORBIDDEN, r
    r = call(p, crew.reader, "POST", "/records/bulk",
             {"action": "purge", "state": "outcome-unknown", "dry_run": False,
              "reason": "INC-1: a bulk purge", "record_ids": [record_id],
              "created_before_ms": 4102444800000})
    assert r.status == 403 and r.problem()["type"] == FORBIDDEN, r
    dry = call(p, crew.reader, "POST", "/records/bulk",
               {"action": "purge", "state": "outcome-unknown"})
    assert dry.status == 200 and dry.json()["dry_run"] is True, dry
    assert redis.cmd("GET", redis_key) == before, "a refused change wrote nothing"

    # resolve: resolves, cannot purge
    r = call(p, crew.resolver, "DELETE", path + "?reason=INC-1&confirm=re-execute")
    assert r.status == 403 and r.problem()["type"] == FORBIDDEN, r
    r = call(p, crew.resolver, "PUT", path, answer(201, fixed, "INC-1: the upstream has pay_1"))
    assert r.status == 200 and r.json()["state"] == "resolved", r
    retry = p.post(key=key, headers=CLOSE)
    assert retry.status == 201 and retry.replayed and retry.body == fixed, retry

    # purge: purges (a resolution: only when told it executes again)
    r = call(p, crew.purger, "DELETE",
             path + "?reason=INC-1%3A+wrong+record&confirm=re-execute")
    assert r.status == 200, r
    assert redis.cmd("EXISTS", redis_key) == 0
    assert metric(p, "idempotency_proxy_admin_forbidden_total") == 4

    lines = crew.lines(9)
    got = [(l["operator"], l["right"], l["action"], l["result"], l["status"]) for l in lines]
    assert got == [
        ("rita.reader", "read", "list", "ok", 200),
        ("rita.reader", "read", "show", "ok", 200),
        ("rita.reader", "resolve", "resolve", "forbidden", 403),
        ("rita.reader", "purge", "purge", "forbidden", 403),
        ("rita.reader", "purge", "bulk-purge", "forbidden", 403),
        ("rita.reader", "read", "bulk-purge-dry-run", "ok", 200),
        ("olga@payments", "purge", "purge", "forbidden", 403),
        ("olga@payments", "resolve", "resolve", "ok", 200),
        ("pete", "purge", "purge", "ok", 200),
    ], got
    assert [l["record_id"] for l in lines] == [None] + [record_id] * 3 + [None] * 2 + \
        [record_id] * 3, lines
    assert lines[7]["reason"] == "INC-1: the upstream has pay_1", lines[7]
    assert lines[7]["recorded_status"] == 201 and lines[7]["record_id"] == record_id
    assert lines[8]["reason"] == "INC-1: wrong record", lines[8]
    tokens = [crew.reader] * 6 + [crew.resolver] * 2 + [crew.purger]
    assert [l["token"] for l in lines] == [sha256(t)[:12] for t in tokens], lines
    for l in lines:
        assert l["client"] == "127.0.0.1" and l["audit"] is True and l["time"].endswith("Z"), l
    # the audit went to its file only: stdout holds the access log, no audit line
    assert not [l for l in stdout_json(p) if l.get("audit")], "audit lines on stdout"
    text = crew.audit.read_text() + p.stdout_text() + p.stderr_text()
    for t in (crew.reader, crew.resolver, crew.purger):
        assert t not in text, "a token in a log"
    assert key not in text, "a raw key in a log"


def test_a_sighup_that_removes_an_operator_locks_the_token_out_and_a_bad_file_is_refused(
        tmp_path, start_proxy, redis, upstream):
    # on loopback, where no token at all would be allowed at startup
    crew = Crew(tmp_path, start_proxy, admin_host="127.0.0.1")
    p = crew.p
    assert call(p, crew.resolver, "GET", "/records").status == 200

    crew.ops_file.write_text(operators_text(("rita.reader", crew.reader, ["read"]),
                                            ("pete", crew.purger, ["purge"])))
    reload_and_wait(p, "reloaded")
    r = call(p, crew.resolver, "GET", "/records")
    assert r.status == 401 and r.problem()["type"] == UNAUTHORIZED, r
    assert call(p, crew.reader, "GET", "/records").status == 200

    # a malformed file: -t names its line, and a reload keeps the operators in force
    crew.ops_file.write_text(operators_text(("rita.reader", crew.reader, ["read"])) +
                             "  - name: pete\n    token_sha256: 1234\n    rights: [purge]\n")
    c = check_file(p.config_path)
    assert c.returncode != 0 and "%s:6:" % crew.ops_file in c.stderr, c.stderr
    assert "64 hex digits" in c.stderr, c.stderr
    crew.ops_file.write_text(operators_text(("rita.reader", crew.reader, ["read"])) +
                             "  - name: pete\n    token_sha256: %s\n    rights: [sudo]\n"
                             % sha256(crew.purger))
    c = check_file(p.config_path)
    assert c.returncode != 0 and "%s:7:" % crew.ops_file in c.stderr, c.stderr
    assert "unknown right 'sudo'" in c.stderr, c.stderr
    # logrotate moved the audit file away: the refused SIGHUP still starts a new one
    crew.audit.rename(crew.audit.with_suffix(".1"))
    reload_and_wait(p, "reload refused")
    assert call(p, crew.purger, "GET", "/records").status == 200, "the operators before stay"
    assert call(p, crew.resolver, "GET", "/records").status == 401
    assert [(l["operator"], l["result"]) for l in crew.lines(2)] == [
        ("pete", "ok"), (None, "unauthorized")]

    # an edit that drops every token does not open the admin API: a restart is asked for
    text = open(p.config_path).read()
    assert "operators_file" in text
    with open(p.config_path, "w") as f:
        f.write("\n".join(l for l in text.splitlines()
                          if "operators_file" not in l and l.strip() != "admin:") + "\n")
    reload_and_wait(p, "reload refused")
    assert "would open the admin API" in p.stderr_text()
    r = p.admin("GET", "/records")
    assert r.status == 401, r


def test_failed_authentications_are_audited_counted_and_throttled_per_address(
        tmp_path, start_proxy, redis, upstream):
    crew = Crew(tmp_path, start_proxy)
    p = crew.p
    wrong = new_token()
    for i in range(20):  # no token: not a guess, not counted
        r = p.admin("GET", "/records")
        assert r.status == 401 and r.problem()["type"] == UNAUTHORIZED, (i, r)
    for i in range(50):
        r = call(p, wrong, "GET", "/records")
        assert r.status == 401 and r.problem()["type"] == UNAUTHORIZED, (i, r)
    # the next, even with a good token, is refused before any token check
    r = call(p, crew.reader, "GET", "/records")
    assert r.status == 429 and r.problem()["type"] == THROTTLED, r
    assert 1 <= int(r.header("Retry-After")) <= 60, r
    r = p.admin("GET", "/records")
    assert r.status == 429, r
    assert metric(p, "idempotency_proxy_admin_unauthorized_total", {"reason": "invalid"}) == 50
    assert metric(p, "idempotency_proxy_admin_unauthorized_total", {"reason": "missing"}) == 20
    assert metric(p, "idempotency_proxy_admin_throttled_total") == 2
    lines = crew.lines(72)
    assert [(l["operator"], l["result"], l["status"]) for l in lines] == \
        [(None, "unauthorized", 401)] * 70 + [(None, "throttled", 429)] * 2, lines
    # a wrong token is named by its fingerprint, a missing one by "-"
    # (a throttled request is refused before its token is read)
    assert [l["token"] for l in lines] == ["-"] * 20 + [sha256(wrong)[:12]] * 50 + ["-"] * 2, \
        lines
    assert all(l["action"] == "list" and l["right"] == "read" for l in lines), lines
    # the probes stay open meanwhile
    assert p.admin("GET", "/healthz").status == 200


def test_the_token_file_is_one_more_operator_with_every_right(tmp_path, start_proxy, redis,
                                                               upstream):
    shared = new_token()
    crew = Crew(tmp_path, start_proxy, admin_token_file=token_file(tmp_path, shared))
    p = crew.p
    record_id = hold(p, "pay-" + uuid.uuid4().hex)
    r = call(p, shared, "DELETE", "/records/%s?reason=INC-2%%3A+reproduced" % record_id)
    assert r.status == 200, r
    assert call(p, crew.reader, "GET", "/records").status == 200
    lines = crew.lines(2)
    assert [(l["operator"], l["right"], l["action"], l["result"]) for l in lines] == [
        ("token", "purge", "purge", "ok"), ("rita.reader", "read", "list", "ok")], lines

    # the file may not name the token's operator again, nor reuse its token
    crew.ops_file.write_text(operators_text(("token", new_token(), ["read"])))
    c = check_file(p.config_path)
    assert c.returncode != 0 and "%s:2:" % crew.ops_file in c.stderr, c.stderr
    assert "the name 'token' is kept" in c.stderr, c.stderr
    crew.ops_file.write_text(operators_text(("sam", shared, ["read"])))
    c = check_file(p.config_path)
    assert c.returncode != 0 and "gives its token to 'sam'" in c.stderr, c.stderr


def test_the_cli_needs_its_operators_token_with_an_operators_file(tmp_path, start_proxy, redis,
                                                                  upstream):
    crew = Crew(tmp_path, start_proxy)
    p = crew.p
    key = "pay-" + uuid.uuid4().hex
    record_id = hold(p, key)
    rc, out, err = run_bin(["admin", "-c", str(p.config_path), "show", record_id])
    assert rc == 2 and "--token-file" in err, (rc, out, err)
    mine = token_file(tmp_path, crew.reader, name="rita-token")
    rc, out, err = run_bin(["admin", "-c", str(p.config_path), "--token-file", str(mine),
                            "show", record_id])
    assert rc == 0 and record_id in out, (rc, out, err)
    rc, out, err = run_bin(["admin", "-c", str(p.config_path), "--token-file", str(mine),
                            "purge", record_id, "--reason", "INC-3: not mine to purge"])
    assert rc == 1 and "purge" in err, (rc, out, err)
    # the token on stdin, as `kubectl exec -i ... --token-file - < ~/token` hands it over
    via_stdin = subprocess.run(
        [proxy_binary(), "admin", "-c", str(p.config_path), "--token-file", "-", "show",
         record_id], input=crew.resolver + "\n", capture_output=True, text=True, timeout=60)
    assert via_stdin.returncode == 0 and record_id in via_stdin.stdout, via_stdin

    def resolve_from_stdin(stdin):
        return subprocess.run(
            [proxy_binary(), "admin", "-c", str(p.config_path), "--token-file", "-", "resolve",
             record_id, "--status", "201", "--header", "Content-Type: application/json",
             "--body-file", "-", "--reason", "INC-3: the upstream has pay_3"],
            input=stdin, capture_output=True, timeout=60)
    # the token's line and nothing after it: no empty answer is recorded unasked
    r = resolve_from_stdin(crew.resolver.encode() + b"\n")
    assert r.returncode == 2 and b"empty" in r.stderr, r
    assert call(p, crew.reader, "GET", "/records/" + record_id).json()["state"] == \
        "outcome-unknown"
    # the token's line, then the body, byte for byte
    body = b'{"id": "pay_3",\n "status": "succeeded"}'
    r = resolve_from_stdin(crew.resolver.encode() + b"\r\n" + body)
    assert r.returncode == 0, r
    retry = p.post(key=key, headers=CLOSE)
    assert retry.status == 201 and retry.replayed and retry.body == body, retry
    assert redis.cmd("EXISTS", "idem:{%s}" % record_id) == 1
    lines = crew.lines(5)
    assert [(l["operator"], l["action"], l["record_id"], l["result"]) for l in lines] == [
        ("rita.reader", "show", record_id, "ok"),
        ("rita.reader", "purge", record_id, "forbidden"),
        ("olga@payments", "show", record_id, "ok"),
        ("rita.reader", "show", record_id, "ok"),
        ("olga@payments", "resolve", record_id, "ok")], lines[:5]
    assert len(lines) == 5, lines


def test_a_body_over_the_bound_is_refused_after_the_token_and_the_right_and_audited(
        tmp_path, start_proxy, redis, upstream):
    crew = Crew(tmp_path, start_proxy)
    p = crew.p
    record_id = hold(p, "pay-" + uuid.uuid4().hex)
    # announced, never sent: the answer comes from the head
    big = [("Content-Length", str(5 * 1024 * 1024))]
    # a reader's oversized resolve: 403 before the size is anyone's business
    r = call(p, crew.reader, "PUT", "/records/" + record_id, headers=big)
    assert r.status == 403, r
    r = call(p, crew.resolver, "PUT", "/records/" + record_id, headers=big)
    assert r.status == 413, r
    r = call(p, crew.purger, "DELETE", "/records/%s?reason=x" % record_id,
             headers=[("Content-Length", "8192")])
    assert r.status == 413, r
    lines = crew.lines(3)
    assert [(l["operator"], l["action"], l["record_id"], l["result"], l["status"])
            for l in lines] == [
        ("rita.reader", "resolve", record_id, "forbidden", 403),
        ("olga@payments", "resolve", record_id, "refused", 413),
        ("pete", "purge", record_id, "refused", 413)], lines


def test_a_fifo_where_a_file_is_named_is_refused_without_a_wait(tmp_path, start_proxy, redis,
                                                                upstream):
    """A reload runs on a worker that carries payments: a FIFO without a writer in place of
    the operators file or the audit file must be refused at once, never waited on."""
    crew = Crew(tmp_path, start_proxy)
    p = crew.p
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    crew.ops_file.unlink()
    crew.ops_file.symlink_to(fifo)
    reload_and_wait(p, "reload refused")
    assert "not a regular file (a FIFO" in p.stderr_text()
    r = p.post(key="pay-" + uuid.uuid4().hex)
    assert r.status == 201, r
    assert call(p, crew.reader, "GET", "/records").status == 200, "the operators before stay"

    crew.ops_file.unlink()
    crew.ops_file.write_text(operators_text(("rita.reader", crew.reader, ["read"])))
    text = open(p.config_path).read()
    with open(p.config_path, "w") as f:
        f.write(text.replace(str(crew.audit), str(fifo)))
    c = check_file(p.config_path)
    assert c.returncode == 1 and "is not a regular file" in c.stderr, c.stderr
    reload_and_wait(p, "reload refused")
    r = p.post(key="pay-" + uuid.uuid4().hex)
    assert r.status == 201, r


def test_a_token_shorter_than_32_characters_is_refused_whatever_the_file_holds(
        tmp_path, start_proxy, redis, upstream):
    crew = Crew(tmp_path, start_proxy)
    p = crew.p
    crew.ops_file.write_text(operators_text(("rita.reader", crew.reader, ["read"]),
                                            ("weak", "hunter2", ["read", "purge"])))
    reload_and_wait(p, "reloaded")
    r = call(p, "hunter2", "GET", "/records")
    assert r.status == 401 and 'error="invalid_token"' in r.header("WWW-Authenticate"), r
    assert call(p, crew.reader, "GET", "/records").status == 200
    lines = crew.lines(2)
    assert [(l["operator"], l["result"], l["token"]) for l in lines] == [
        (None, "unauthorized", "-"), ("rita.reader", "ok", sha256(crew.reader)[:12])], lines
