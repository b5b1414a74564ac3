"""The admin listener's access, audit trail and record lookup (docs/operations.md "Admin
access", "The audit trail", "Finding a record from a key"):

- with `admin.token_file`, every admin endpoint but `/healthz`, `/readyz` and `/metrics`
  answers 401 + `WWW-Authenticate: Bearer` without the token or with another one, and Redis
  is left as it was; with it the endpoints work, and each change writes its audit line;
- without a token file, an `admin_listen` that is not a loopback address is refused by `-t`
  and at startup;
- a SIGHUP rereads the token file: the old token gets 401, the new one works;
- `record-id` and `GET /records/lookup` give the record id the access log printed, for keys
  scoped by `X-Account-Id` and by `Authorization`, and for webhook event ids (`key_from:
  header:` and `json:/id`).

Real processes only: redis-server, the proxy binary, the demo upstream and the inbox receiver
of inbox_helpers.py. The admin listener binds 0.0.0.0 (not a loopback address) and is reached on
127.0.0.1.
"""

import datetime
import json
import signal
import urllib.parse
import uuid

import pytest

from harness import Proxy, build_config, free_port, hold, to_yaml, wait_until
from inbox_helpers import ENCODED, ROUTE, Receiver, deliver, new_secret, queued_route, stripe_body
from proxy_helpers import (
    access_record_id, audit_lines, bearer, check_file, fingerprint, metric_values, new_token,
    record_id_cli, redis_contents, run_bin, token_file,
)

# tests/run.sh runs this file under ThreadSanitizer with two worker threads a proxy
# (IDEM_TEST_WORKERS=2): its requests meet across workers (docs/internals.md).
pytestmark = pytest.mark.threads

AUDIT_FIELDS = ["audit", "time", "operator", "right", "action", "record_id", "dead_letter_id",
                "route", "client", "token", "result", "status", "recorded_status", "reason"]
# a finished record is purged only when the operator says its key will execute again, and why
CONFIRMED = "?confirm=re-execute&reason=" + "rehearsal%3A+purge+a+finished+record"


def assert_unauthorized(r, invalid):
    assert r.status == 401, r
    challenge = r.header("WWW-Authenticate")
    assert challenge is not None and challenge.startswith('Bearer realm="'), r
    assert ('error="invalid_token"' in challenge) == invalid, challenge
    assert r.content_type == "application/problem+json", r
    doc = r.json()
    assert doc["type"] == "urn:idempotency-proxy:problem:admin-unauthorized" and doc["status"] == 401


def test_every_admin_endpoint_but_the_probes_needs_the_token_and_each_change_is_audited(
        tmp_path, start_proxy, redis):
    token = new_token()
    secret = new_secret()
    receiver = Receiver(str(tmp_path), status=500).start()
    try:
        p = start_proxy(routes=[{"path": "/v1/payments*"},
                                queued_route(secret, max_attempts=1,
                                             backoff={"initial": "100ms", "max": "200ms"})],
                        upstream_url=receiver.url, admin_host="0.0.0.0",
                        admin_token_file=token_file(tmp_path, token))
        auth = bearer(token)

        def inbox():
            r = p.admin("GET", "/inbox", headers=auth)
            assert r.status == 200, r
            return r.json()["routes"][0]

        events = ["evt_" + uuid.uuid4().hex for _ in range(2)]
        for evt in events:
            assert deliver(p, secret, stripe_body(evt)).status == 202
        wait_until(lambda: (lambda s: (s["dead"], s["depth"], s["scheduled"], s["pending"]))(
            inbox()) == (2, 0, 0, 0), interval=0.2, what="two dead letters, nothing else")
        receiver.control(status=200)
        assert p.post(key="pay-" + uuid.uuid4().hex).status == 200
        record_id = access_record_id(p, "/v1/payments")
        letters = p.admin("GET", "/inbox/%s/dead" % ENCODED, headers=auth).json()["dead"]
        letters.sort(key=lambda l: l["id"])
        (first, first_event), (second, _) = [(l["id"], l["event"]) for l in letters]

        endpoints = [
            ("GET", "/records/%s" % record_id),
            ("DELETE", "/records/%s" % record_id),
            ("GET", "/records/lookup?path=/v1/payments&key=k"),
            ("GET", "/inbox"),
            ("GET", "/inbox/%s/dead" % ENCODED),
            ("POST", "/inbox/%s/dead/%s/redeliver" % (ENCODED, first)),
            ("DELETE", "/inbox/%s/dead/%s" % (ENCODED, second)),
            ("GET", "/no-such-endpoint"),
        ]
        wrong = [bearer(new_token()), [("Authorization", "Bearer " + token[:-1])],
                 [("Authorization", "bearer")], bearer(token) + bearer(token)]
        missing = [[], [("Authorization", "Basic " + token)]]
        before = redis_contents(redis)
        assert any(v for k, v in before.items() if k.endswith(":dead")), before
        attempts = len(receiver.attempts())
        for method, path in endpoints:
            for headers in missing:
                assert_unauthorized(p.admin(method, path, headers=headers), invalid=False)
            for headers in wrong:
                assert_unauthorized(p.admin(method, path, headers=headers), invalid=True)
        for path in ("/healthz", "/readyz", "/metrics"):
            assert p.admin("GET", path).status == 200, path
        # a refused redeliver would reach the receiver asynchronously (the inbox's consumer):
        # a span in which nothing may arrive
        hold(0.3, "nothing a refused request might have set going reaches Redis or the receiver")
        assert redis_contents(redis) == before
        assert len(receiver.attempts()) == attempts, "a refused redeliver reached the receiver"
        counts = metric_values(p, "idempotency_proxy_admin_unauthorized_total")
        assert counts == {
            'idempotency_proxy_admin_unauthorized_total{reason="missing"}':
                len(endpoints) * len(missing),
            'idempotency_proxy_admin_unauthorized_total{reason="invalid"}':
                len(endpoints) * len(wrong)}, counts
        warnings = [l for l in p.stderr_text().splitlines() if "admin: 401 from 127.0.0.1" in l]
        assert len(warnings) == len(endpoints) * (len(missing) + len(wrong)), warnings
        # each refusal is on record too, naming no operator: who it was is what failed
        refused = [l for l in audit_lines(p) if l["result"] == "unauthorized"]
        assert len(refused) == len(endpoints) * (len(missing) + len(wrong)), refused
        assert all((l["operator"], l["result"], l["status"]) == (None, "unauthorized", 401)
                   for l in refused), refused
        # a token sent is named by its fingerprint (a wrong one: a guess, or one rotated out)
        assert {l["token"] for l in refused} == {"-", fingerprint(wrong[0][0][1][7:]),
                                                 fingerprint(token[:-1])}, refused
        assert [l["right"] for l in refused[::len(missing) + len(wrong)]] == [
            "read", "purge", "read", "read", "read", "resolve", "purge", "read"], refused

        # with the token: the endpoints work as before, and every change is on record
        got = p.admin("GET", "/records/%s" % record_id, headers=auth)
        assert got.status == 200 and got.json()["state"] == "done", got
        assert p.admin("POST", "/inbox/%s/dead/%s/redeliver" % (ENCODED, first),
                       headers=auth).status == 200
        assert p.admin("DELETE", "/inbox/%s/dead/%s" % (ENCODED, second),
                       headers=auth).status == 200
        assert p.admin("DELETE", "/inbox/%s/dead/%s" % (ENCODED, second),
                       headers=auth).status == 404
        assert p.admin("DELETE", "/records/%s%s" % (record_id, CONFIRMED),
                       headers=auth).status == 200
        assert p.admin("DELETE", "/records/%s%s" % (record_id, CONFIRMED),
                       headers=auth).status == 404
        assert p.admin("DELETE", "/records/not-an-id", headers=auth).status == 400
        wait_until(lambda: any(a["status"] == 200 and a.get("event") == first_event
                               for a in receiver.attempts()),
                   what="the redelivered letter reached the receiver")
        assert not redis.cmd("EXISTS", "idem:{%s}" % record_id)
        assert [l["id"] for l in p.admin("GET", "/inbox/%s/dead" % ENCODED,
                                         headers=auth).json()["dead"]] == []

        why = "rehearsal: purge a finished record"
        want = [("show", record_id, None, None, "ok", 200, None),
                ("redeliver", None, first, ROUTE, "ok", 200, None),
                ("dead-letter-delete", None, second, ROUTE, "ok", 200, None),
                ("dead-letter-delete", None, second, ROUTE, "not-found", 404, None),
                ("purge", record_id, None, "/v1/payments", "ok", 200, why),
                ("purge", record_id, None, None, "not-found", 404, why),
                ("purge", None, None, None, "refused", 400, None),
                ("inbox", None, None, ROUTE, "ok", 200, None)]
        def since_refusals():
            lines = audit_lines(p)
            last = max(i for i, l in enumerate(lines) if l["result"] == "unauthorized")
            return lines[last + 1:]
        lines = wait_until(lambda: (lambda a: a if len(a) == len(want) else None)(
            since_refusals()), what="eight audit lines")
        for line, (action, rid, dlid, route, result, status, reason) in zip(lines, want):
            assert list(line) == AUDIT_FIELDS, line
            assert line["operator"] == "token", line
            assert line["right"] == {"show": "read", "inbox": "read", "redeliver": "resolve"}.get(
                action, "purge"), line
            assert (line["action"], line["record_id"], line["dead_letter_id"], line["route"],
                    line["result"], line["status"], line["reason"]) == (
                        action, rid, dlid, route, result, status, reason), line
            assert line["client"] == "127.0.0.1" and line["token"] == fingerprint(token), line
            assert line["recorded_status"] is None, line
            when = datetime.datetime.strptime(line["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
            assert abs(when - datetime.datetime.utcnow()).total_seconds() < 60, line
        for text in (p.stdout_text(), p.stderr_text()):
            assert token not in text and token[:-1] not in text
    finally:
        receiver.stop()


def test_a_non_loopback_admin_listen_without_a_token_file_is_refused_by_t_and_at_startup(
        tmp_path, redis, upstream):
    for host in ("0.0.0.0", "localhost"):
        admin_port = free_port()
        port = free_port()
        cfg = build_config(port, admin_port, upstream.url, redis.url, admin_host=host)
        text = to_yaml(cfg) + "\n"
        line = text.splitlines().index("admin_listen: %s:%d" % (host, admin_port)) + 1
        p = Proxy(str(tmp_path), "open-" + host, text, port, admin_port)
        want = "%s:%d: admin_listen %s:%d is not a loopback address and neither " \
               "admin.operators_file nor admin.token_file is set" % (
                   p.config_path, line, host, admin_port)
        t = check_file(p.config_path)
        assert t.returncode == 1 and want in t.stderr, t.stderr
        assert t.stdout == ""
        p.start(wait_port=False)
        assert p.wait(15) == 1
        assert want in p.stderr_text(), p.stderr_text()
    # the same file on a loopback address, or with a token file, is fine
    for host, extra in (("127.0.0.1", {}), ("0.0.0.0",
                                          {"admin": {"token_file": str(token_file(
                                              tmp_path, new_token()))}})):
        cfg = build_config(free_port(), free_port(), upstream.url, redis.url, admin_host=host,
                           **extra)
        path = tmp_path / ("ok-%s.yaml" % host)
        path.write_text(to_yaml(cfg) + "\n")
        t = check_file(path)
        assert (t.returncode, t.stdout.strip()) == (0, "configuration OK"), t.stderr


def test_sighup_rereads_the_token_file_old_token_refused_new_one_taken(tmp_path, start_proxy):
    old, new = new_token(), new_token()
    path = token_file(tmp_path, old)
    # a token applies on a loopback listener too
    p = start_proxy(admin_token_file=path)
    assert p.admin("GET", "/inbox", headers=bearer(old)).status == 200
    assert p.admin("GET", "/inbox").status == 401
    assert "fingerprint %s" % fingerprint(old) in p.stderr_text()

    path.write_text(new + "\n")
    p.signal(signal.SIGHUP)
    wait_until(lambda: "admin token changed: fingerprint %s, was %s" % (
        fingerprint(new), fingerprint(old)) in p.stderr_text(), what="the reload")
    assert_unauthorized(p.admin("GET", "/inbox", headers=bearer(old)), invalid=True)
    assert p.admin("GET", "/inbox", headers=bearer(new)).status == 200
    missing = "/records/%s" % ("0" * 32)
    assert p.admin("DELETE", missing, headers=bearer(new)).status == 404
    line = wait_until(lambda: audit_lines(p), what="the purge's audit line")[-1]
    assert (line["token"], line["result"]) == (fingerprint(new), "not-found"), line

    # a token file that does not load refuses the reload; the token in force stays
    path.write_text("\n")
    p.signal(signal.SIGHUP)
    wait_until(lambda: "reload refused" in p.stderr_text() and "the file is empty" in
               p.stderr_text(), what="the refused reload")
    assert p.admin("GET", "/inbox", headers=bearer(new)).status == 200
    assert p.admin("GET", "/inbox", headers=bearer(old)).status == 401
    for text in (p.stdout_text(), p.stderr_text()):
        assert old not in text and new not in text


def lookup(p, token, path, key, params=(), headers=()):
    query = urllib.parse.urlencode([("path", path), ("key", key)] + list(params))
    r = p.admin("GET", "/records/lookup?" + query, headers=bearer(token) + list(headers))
    assert r.status == 200, r
    return r.json()


def test_record_id_and_lookup_give_the_id_the_access_log_printed(tmp_path, start_proxy):
    token = new_token()
    p = start_proxy(routes=[{"path": "/v1/accounts*", "scope_headers": ["X-Account-Id"]},
                            {"path": "/v1/payments*"},
                            {"path": "/hooks/gh", "key_from": "header:X-GitHub-Delivery",
                             "verify": "none"},
                            {"path": "/hooks/stripe", "key_from": "json:/id", "verify": "none"}],
                    admin_host="0.0.0.0", admin_token_file=token_file(tmp_path, token))
    key, customer = "k-" + uuid.uuid4().hex, "Bearer cust_" + uuid.uuid4().hex
    delivery, event = "d-" + uuid.uuid4().hex, "evt_" + uuid.uuid4().hex
    assert p.post("/v1/accounts/1", key=key, headers=[("X-Account-Id", "acct_1")]).status == 201
    assert p.post("/v1/payments", key=key, headers=[("Authorization", customer)]).status == 201
    assert p.request("POST", "/hooks/gh", [("X-GitHub-Delivery", delivery),
                                           ("Content-Type", "application/json")],
                     b"{}").status == 201
    assert p.request("POST", "/hooks/stripe", [("Content-Type", "application/json")],
                     json.dumps({"id": event}).encode()).status == 201
    logged = {path: access_record_id(p, path)
              for path in ("/v1/accounts/1", "/v1/payments", "/hooks/gh", "/hooks/stripe")}
    assert len(set(logged.values())) == 4, logged

    cases = [  # path, key, scope as --header / header=, the route
        ("/v1/accounts/1", key, ["X-Account-Id: acct_1"], "/v1/accounts"),
        ("/v1/payments", key, ["Authorization: " + customer], "/v1/payments"),
        ("/hooks/gh", delivery, [], "/hooks/gh"),
        ("/hooks/stripe", event, [], "/hooks/stripe"),
    ]
    for path, k, scope, route in cases:
        doc, _ = record_id_cli(p, path, k, scope, method="POST")
        assert (doc["record_id"], doc["route"]) == (logged[path], route), (path, doc)
        assert doc["redis_key"] == "idem:{%s}" % logged[path]
        got = lookup(p, token, path, k, [("header", h) for h in scope], [("X-Other", "x")])
        assert (got["record_id"], got["redis_key"], got["route"], got["exists"]) == (
            logged[path], "idem:{%s}" % logged[path], route, True), (path, got)

    # the lookup's own fields carry a scope too; its Authorization is the admin token's, not one
    own = lookup(p, token, "/v1/accounts/1", key, headers=[("X-Account-Id", "acct_1")])
    assert own["record_id"] == logged["/v1/accounts/1"], own
    bare = lookup(p, token, "/v1/payments", key)
    assert (bare["exists"], bare["absent_scope_headers"]) == (False, ["Authorization"]), bare
    assert bare["record_id"] != logged["/v1/payments"]
    # a header= parameter wins over the request's own field
    wins = lookup(p, token, "/v1/accounts/1", key, [("header", "X-Account-Id: acct_1")],
                  [("X-Account-Id", "acct_2")])
    assert wins["record_id"] == logged["/v1/accounts/1"], wins
    doc, stderr = record_id_cli(p, "/v1/payments", key)
    assert doc["record_id"] == bare["record_id"] and doc["absent_scope_headers"] == [
        "Authorization"]
    assert "scopes keys by Authorization, and no --header gave it" in stderr, stderr

    # no record would be kept: exit 1 / 400 with the reason
    refusals = [(["--path", "/v2/other", "--key", key], "no route matches"),
                (["--path", "/v1/payments", "--key", key, "--method", "GET"],
                 "does not protect GET"),
                (["--path", "/v1/payments", "--key", "a, b"], "comma outside quotes")]
    for args, reason in refusals:
        rc, out, err = run_bin(["record-id", "-c", p.config_path] + args, timeout=30)
        assert rc == 1 and reason in err and out == "", (args, err)
    query = urllib.parse.urlencode([("path", "/v2/other"), ("key", key)])
    r = p.admin("GET", "/records/lookup?" + query, headers=bearer(token))
    assert r.status == 400 and "no route matches" in r.json()["error"], r
