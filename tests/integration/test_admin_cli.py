"""The operator CLI, `idempotency-proxy admin -c FILE VERB ...` (docs/operations.md "The operator
CLI"): it loads the proxy's configuration and token file, talks to that configuration's admin
listener and prints what it answered.

- list (a table, every page, --limit, --route; every held state without --state), show (the
  record's fields and its ETag), lookup, resolve (the retry replays the answer, the upstream ran
  once), purge, extend, bulk (a dry run, then --apply), and the inbox's list, dead, pause,
  resume, redeliver and delete;
- --json prints the endpoint's JSON document as it came; without it a table or `name: value`
  lines;
- exit 0 done, 1 refused or not found (the problem's title and detail on stderr) or a walk that
  does not end (a next_cursor given twice, --max-calls), 2 usage error (nothing sent; an option
  given twice too), 3 no admin listener there (or no answer to a read), 4 a change whose outcome
  the proxy could not tell (a 503, or no answer once sent);
- no answer makes it crash or loop, and the listener's text reaches the terminal with its
  control characters escaped (a stand-in listener gives the answers the real one never does);
- the token is never in the CLI's argv, its output or the proxy's logs, and never goes to an
  HTTP proxy of the environment; the CLI runs with HOME=/nonexistent in a read-only working
  directory and, where the tests run as root, with every mount of its namespace read-only: it
  writes no file.

Real processes: redis-server, the demo upstream (`X-Demo-Fault: close` makes an
outcome-unknown record), the inbox receiver and the proxy binary, which is also the CLI; for
answers the admin listener never gives, a stand-in listener (FakeListener) on a real socket.
"""

import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import uuid

import pytest

from harness import build_config, free_port, proxy_binary, to_yaml, wait_until
from inbox_helpers import ENCODED, ROUTE as INBOX_ROUTE, deliver, new_secret, queued_route, \
    stripe_body
from proxy_helpers import audit_lines, bearer, hold_outcome_unknown, new_key, new_token, token_file

PAYMENTS = "/v1/payments*"
ID = re.compile(r"\b[0-9a-f]{32}\b")

# Run in a mount namespace of its own whose every mount is read-only (as root), so that any
# file the CLI tried to write would fail it; "$@" is the CLI's command line.
READ_ONLY_SH = r"""
awk '{print $2}' /proc/self/mounts | sort -u | while read -r m; do
  mount -o remount,bind,ro "$(printf '%b' "$m")" 2>/dev/null
done
for d in / /tmp "$PWD" "$IDEM_CLI_TMP"; do
  if [ -w "$d" ]; then echo "test setup: $d is still writable" >&2; exit 99; fi
done
exec "$@"
"""


class CLI:
    """The binary's `admin` subcommand against one proxy's configuration: HOME=/nonexistent,
    a read-only working directory, every mount read-only where the test runs as root. Each
    run asserts the token is in none of its arguments and none of its output."""

    def __init__(self, tmp_path, proxy, token=None):
        self.proxy, self.token = proxy, token
        self.tmp = str(tmp_path)
        self.cwd = os.path.join(self.tmp, "ro-cwd")
        os.makedirs(self.cwd, exist_ok=True)
        os.chmod(self.cwd, 0o555)
        self.isolated = os.geteuid() == 0 and shutil.which("unshare") is not None

    def __call__(self, *args, config=None, env=None, stdin=None, check=None):
        argv = [proxy_binary(), "admin", "-c", config or self.proxy.config_path] + list(args)
        if self.token:
            assert not any(self.token in a for a in argv), "the token is on the command line"
        e = {k: v for k, v in os.environ.items() if k.startswith(("ASAN", "UBSAN", "LSAN",
                                                                  "TSAN", "PATH"))}
        e.update({"HOME": "/nonexistent", "IDEM_CLI_TMP": self.tmp})
        e.update(env or {})
        if self.isolated:
            argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                    READ_ONLY_SH, "sh"] + argv
        p = subprocess.run(argv, cwd=self.cwd, env=e, input=stdin, capture_output=True,
                           timeout=60)
        out, err = p.stdout.decode(), p.stderr.decode()
        assert p.returncode != 99, err
        if self.token:
            assert self.token not in out and self.token not in err, "the token was printed"
        if check is not None:
            assert p.returncode == check, (p.returncode, out, err)
        return p.returncode, out, err

    def json(self, *args, **kw):
        rc, out, err = self(*args, "--json", **kw)
        assert rc == 0, (rc, out, err)
        assert out.endswith("\n") and out.count("\n") == 1, "one document, one line: %r" % out
        return json.loads(out)


def start(start_proxy, tmp_path, **kw):
    """A proxy whose admin listener binds 0.0.0.0 (reached on loopback) and asks for a token."""
    token = new_token()
    p = start_proxy(routes=[{"path": PAYMENTS}], admin_host="0.0.0.0",
                    admin_token_file=token_file(tmp_path, token), **kw)
    return p, token, CLI(tmp_path, p, token)


def hold(p, key=None):
    """A payment whose upstream closes the connection after reading it: the record is kept as
    outcome-unknown. Returns (key, record id)."""
    key = key or new_key("pay")
    return key, hold_outcome_unknown(p, key)


def record(p, token, rid):
    r = p.admin("GET", "/records/" + rid, headers=bearer(token))
    return r


def assert_no_token_anywhere(p, token):
    assert token not in p.stdout_text() and token not in p.stderr_text()


# ---- the verbs of today's endpoints ------------------------------------------------------

def test_list_prints_the_held_records_as_a_table_and_as_json(tmp_path, start_proxy, redis,
                                                               upstream):
    p, token, cli = start(start_proxy, tmp_path)
    held = sorted(hold(p)[1] for _ in range(3))
    done = p.post(key=new_key("done"))
    assert done.status == 201, done
    rc, out, err = cli("list", "--state", "outcome-unknown", check=0)
    lines = out.splitlines()
    assert lines[0].split() == ["RECORD", "ID", "STATE", "ROUTE", "AGE", "EXPIRES", "IN"], out
    rows = [l.split() for l in lines[1:-1]]
    assert sorted(r[0] for r in rows) == held, out
    assert all(r[1] == "outcome-unknown" and r[2] == "/v1/payments" for r in rows), out
    assert lines[-1] == "3 held records", out
    doc = cli.json("list", "--state", "outcome-unknown")
    assert sorted(e["record_id"] for e in doc["records"]) == held
    assert doc["state"] == "outcome-unknown" and doc["next_cursor"] is None
    assert all(e["ttl_ms"] > 0 and e["route"] == "/v1/payments" for e in doc["records"])
    # --limit stops early; --route keeps the entries of that route
    assert len(cli.json("list", "--state", "outcome-unknown", "--limit", "2")["records"]) == 2
    assert cli.json("list", "--state", "outcome-unknown", "--route", "/v1/other")["records"] == []
    rc, out, _ = cli("list", "--state", "claimed", check=0)
    assert out == "0 held records\n"
    assert_no_token_anywhere(p, token)


def test_list_follows_next_cursor_through_every_page(tmp_path, start_proxy, redis, upstream):
    p, token, cli = start(start_proxy, tmp_path)
    held = sorted(hold(p)[1] for _ in range(5))
    for _ in range(200):  # finished records the walk passes over
        redis.cmd("SET", "idem:{%s}" % uuid.uuid4().hex, "not a held record")
    doc = cli.json("list", "--state", "outcome-unknown")
    assert sorted(e["record_id"] for e in doc["records"]) == held
    assert doc["next_cursor"] is None


def test_show_prints_the_records_fields_and_json_as_the_endpoint_gives_it(tmp_path, start_proxy,
                                                                         redis, upstream):
    p, token, cli = start(start_proxy, tmp_path)
    _, rid = hold(p)
    rc, out, err = cli("show", rid, check=0)
    fields = dict(l.split(": ", 1) for l in out.splitlines())
    assert fields["record_id"] == rid and fields["state"] == "outcome-unknown"
    assert fields["redis_key"] == "idem:{%s}" % rid and fields["route"] == "/v1/payments"
    assert re.fullmatch(r"\d+ \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\)", fields["created_ms"])
    assert re.fullmatch(r"\d+ \(\d+h\d\dm\)", fields["ttl_ms"]), fields["ttl_ms"]
    doc = cli.json("show", rid)
    direct = record(p, token, rid).json()
    doc.pop("ttl_ms"), direct.pop("ttl_ms")
    assert doc == direct


def test_lookup_gives_the_record_id_a_key_maps_to_and_prints_no_key(tmp_path, start_proxy,
                                                                     redis, upstream):
    p, token, cli = start(start_proxy, tmp_path)
    key, rid = hold(p)
    doc = cli.json("lookup", "--path", "/v1/payments", "--key", key, "--method", "POST")
    assert doc["record_id"] == rid and doc["exists"] is True
    rc, out, err = cli("lookup", "--path", "/v1/payments", "--key", key, check=0)
    assert "record_id: %s" % rid in out.splitlines() and "exists: true" in out.splitlines()
    assert key not in out and key not in err
    # a scope header given changes the record: another id, not held
    other = cli.json("lookup", "--path", "/v1/payments", "--key", key,
                     "--header", "Authorization: Bearer sk_test_other")
    assert other["record_id"] != rid and other["exists"] is False


def test_purge_deletes_an_outcome_unknown_record_and_the_retry_executes_once_more(
        tmp_path, start_proxy, redis, upstream):
    p, token, cli = start(start_proxy, tmp_path)
    key, rid = hold(p)
    assert upstream.executions(key) == 1
    doc = cli.json("purge", rid, "--reason", "INC-7: the upstream has no such payment")
    assert doc["record_id"] == rid and doc["deleted"] is True, doc
    assert record(p, token, rid).status == 404
    retry = p.post(key=key)
    assert retry.status == 201 and not retry.replayed, retry
    assert upstream.executions(key) == 2
    purges = [l for l in audit_lines(p) if l["action"] == "purge"]
    assert [(l["record_id"], l["result"]) for l in purges] == [(rid, "ok")], purges
    # nothing left to purge: not found, exit 1, the reason on stderr
    rc, out, err = cli("purge", "0" * 32, "--reason", "again", check=1)
    assert out == "" and "refused (404): no such record" in err


def test_refusals_exit_1_with_the_reason_and_json_still_prints_the_document(
        tmp_path, start_proxy, redis, upstream):
    p, token, cli = start(start_proxy, tmp_path)
    rc, out, err = cli("show", "f" * 32, check=1)
    assert out == "" and err.strip() == "idempotency-proxy: admin: refused (404): no such record"
    rc, out, err = cli("show", "f" * 32, "--json", check=1)
    assert json.loads(out) == {"error": "no such record"}
    # another token: 401, the problem's title and detail
    other = token_file(tmp_path, new_token(), name="other-token")
    rc, out, err = cli("list", "--state", "claimed", "--token-file", str(other), check=1)
    assert "refused (401): " in err and "token" in err.lower(), err
    lines = [l for l in audit_lines(p) if l.get("result") not in (None, "ok")]
    assert token not in json.dumps(lines)


def test_usage_errors_exit_2_and_send_nothing(tmp_path, start_proxy, redis, upstream):
    p, token, cli = start(start_proxy, tmp_path)
    _, rid = hold(p)
    bad = [
        (),                                                  # no verb
        ("frobnicate",),                                     # no such verb
        ("show",), ("show", "XYZ"), ("show", rid.upper()),   # not a record id
        ("show", rid, "--status", "201"),                    # an option of another verb
        ("resolve", rid, "--status", "201", "--body", ""),  # no --reason
        ("resolve", rid, "--status", "201", "--body", "", "--body-file", "/dev/null",
         "--reason", "r"),                                   # two bodies
        ("resolve", rid, "--body", "", "--reason", "r"),    # no --status
        ("resolve", rid, "--status", "201", "--body", "", "--reason", "r",
         "--header", "No Colon"),                            # not 'Name: value'
        ("purge", rid),                                      # no --reason
        ("purge", rid, "--reason", "r", "--confirm", "yes"),  # confirm is re-execute only
        ("extend", rid, "--reason", "r"),                   # no --seconds
        ("extend", rid, "--seconds", "ten", "--reason", "r"),
        ("bulk", "--state", "claimed", "--reason", "r"),     # no --action
        ("bulk", "--action", "purge", "--reason", "r"),      # no --state
        ("bulk", "--action", "purge", "--state", "claimed", "--apply"),  # no --reason
        ("bulk", "--action", "purge", "--state", "claimed", "--dry-run", "--apply",
         "--reason", "r"),
        ("bulk", "--action", "purge", "--state", "claimed", "--status", "201"),
        ("lookup", "--path", "/v1/payments"),                # no --key
        ("inbox", "pause"),                                  # no ROUTE
        ("inbox", "redeliver", INBOX_ROUTE),                 # neither ID nor --all
        ("inbox", "redeliver", INBOX_ROUTE, "1-0", "--all"),
        ("inbox", "flush", INBOX_ROUTE),
        ("list", "--bogus"),
    ]
    audits = len(audit_lines(p))
    for args in bad:
        rc, out, err = cli(*args)
        assert rc == 2, (args, rc, out, err)
        assert out == "" and err.startswith("idempotency-proxy: admin: "), (args, err)
    rc, out, err = cli("list", config=str(tmp_path / "missing.yaml"), check=2)
    assert "missing.yaml" in err
    rc, out, err = cli("list", "--token-file", str(tmp_path / "no-token"), check=2)
    assert "no-token: cannot open" in err
    short = tmp_path / "short-token"
    short.write_text("tooshort\n")
    rc, out, err = cli("list", "--token-file", str(short), check=2)
    assert "shorter than 32" in err and "tooshort" not in err
    rc, out, err = cli("--help", check=0)
    for verb in ("list", "show", "lookup", "resolve", "purge", "extend", "bulk", "inbox pause",
                 "inbox resume", "inbox redeliver"):
        assert "\n  %s" % verb in out, verb
    assert "exit status: 0 done; 1 refused" in out
    # nothing reached the admin listener: no audit line, the record untouched
    assert len(audit_lines(p)) == audits
    assert record(p, token, rid).json()["state"] == "outcome-unknown"


def test_no_admin_listener_there_exits_3(tmp_path, start_proxy, redis, upstream):
    p, token, cli = start(start_proxy, tmp_path)
    nobody = "http://127.0.0.1:%d" % free_port()
    rc, out, err = cli("list", "--admin", nobody, check=3)
    assert out == "" and "no answer" in err and nobody in err
    _, rid = hold(p)
    rc, out, err = cli("purge", rid, "--reason", "r", "--admin", nobody, check=3)
    assert "may or may not" not in err, "a refused connection sent nothing"
    # the configuration's own listener, once the proxy is gone
    assert p.stop() == 0
    rc, out, err = cli("show", rid, check=3)
    assert "no answer" in err


def test_a_loopback_listener_without_a_token_file_takes_the_cli_without_a_token(
        tmp_path, start_proxy, redis, upstream):
    p = start_proxy(routes=[{"path": PAYMENTS}])
    cli = CLI(tmp_path, p)
    _, rid = hold(p)
    assert cli.json("show", rid)["state"] == "outcome-unknown"


def test_the_token_never_goes_to_a_proxy_of_the_environment(tmp_path, start_proxy, redis,
                                                            upstream):
    p, token, cli = start(start_proxy, tmp_path)
    trap = socket.socket()
    trap.bind(("127.0.0.1", 0))
    trap.listen(8)
    trap.setblocking(False)
    url = "http://127.0.0.1:%d" % trap.getsockname()[1]
    env = {"http_proxy": url, "HTTP_PROXY": url, "all_proxy": url, "ALL_PROXY": url,
           "no_proxy": "", "NO_PROXY": ""}
    rc, out, err = cli("list", "--state", "claimed", env=env, check=0)
    with pytest.raises(BlockingIOError):
        trap.accept()
    trap.close()


# ---- resolve ---------------------------------------------------------------------------------

def test_resolve_an_outcome_unknown_record_and_the_retry_replays_it(tmp_path, start_proxy,
                                                                    redis, upstream):
    p, token, cli = start(start_proxy, tmp_path)
    key, rid = hold(p)
    body = b'{"id": "pay_123", "status": "succeeded"}'
    body_file = tmp_path / "answer.json"
    body_file.write_bytes(body)
    rc, out, err = cli("resolve", rid, "--status", "201",
                       "--header", "Content-Type: application/json",
                       "--header", "X-Request-Ref: INC-7", "--body-file", str(body_file),
                       "--reason", "INC-7: the upstream shows pay_123 succeeded", check=0)
    fields = dict(l.split(": ", 1) for l in out.splitlines())
    assert fields["record_id"] == rid and fields["status"] == "201", out
    assert fields["body_bytes"] == str(len(body)) and fields["stored_headers"] == "2"
    retry = p.post(key=key)
    assert retry.status == 201 and retry.replayed and retry.body == body, retry
    assert retry.header("X-Request-Ref") == "INC-7"
    assert retry.header("Content-Type") == "application/json"
    assert upstream.executions(key) == 1
    resolves = [l for l in audit_lines(p) if l["action"] == "resolve"]
    assert [(l["record_id"], l["result"]) for l in resolves] == [(rid, "ok")], resolves


def test_resolve_reads_the_body_from_stdin_and_sends_bytes_as_they_are(tmp_path, start_proxy,
                                                                        redis, upstream):
    p, token, cli = start(start_proxy, tmp_path)
    key, rid = hold(p)
    body = bytes(range(256)) * 3
    cli("resolve", rid, "--status", "200", "--body-file", "-", "--reason", "binary answer",
        stdin=body, check=0)
    retry = p.post(key=key)
    assert retry.status == 200 and retry.replayed and retry.body == body
    # an answer the upstream gave is never replaced: 409, exit 1, the reason on stderr
    answered = new_key("answered")
    assert p.post(key=answered).status == 201
    done = cli.json("lookup", "--path", "/v1/payments", "--key", answered)["record_id"]
    rc, out, err = cli("resolve", done, "--status", "201", "--body", "", "--reason", "again")
    assert rc == 1 and out == "" and "refused (409)" in err, (rc, err)


def test_resolve_refused_by_the_proxy_prints_the_problems_title_and_detail(
        tmp_path, start_proxy, redis, upstream):
    p, token, cli = start(start_proxy, tmp_path)
    key, rid = hold(p)
    rc, out, err = cli("resolve", rid, "--status", "201", "--header", "Connection: close",
                       "--body", "", "--reason", "a hop-by-hop field", check=1)
    assert "refused (400): " in err and "Connection" in err, err
    doc = json.loads(cli("resolve", rid, "--status", "201", "--header", "Connection: close",
                         "--body", "", "--reason", "again", "--json", check=1)[1])
    assert doc["type"].endswith(":invalid-resolution") and doc["status"] == 400
    assert record(p, token, rid).json()["state"] == "outcome-unknown"


# ---- the decisions of CONTRACT 15: correct, confirm, extend, bulk, every held state --------

def test_a_resolution_is_corrected_with_the_etag_show_prints(tmp_path, start_proxy, redis,
                                                            upstream):
    p, token, cli = start(start_proxy, tmp_path)
    key, rid = hold(p)
    cli("resolve", rid, "--status", "200", "--body", "", "--reason", "INC-8: mistyped",
        check=0)
    assert p.post(key=key).status == 200
    rc, out, err = cli("show", rid, check=0)
    fields = dict(l.split(": ", 1) for l in out.splitlines())
    etag = fields["etag"]
    assert etag, out
    # without If-Match: 428, and the hint says where the etag is
    rc, out, err = cli("resolve", rid, "--status", "201", "--body", '{"id": "pay_9"}',
                       "--reason", "INC-8: corrected", check=1)
    assert "refused (428)" in err and "--if-match" in err, err
    # a stale one: 412
    rc, out, err = cli("resolve", rid, "--status", "201", "--body", '{"id": "pay_9"}',
                       "--reason", "INC-8: corrected", "--if-match", '"stale"', check=1)
    assert "refused (412)" in err, err
    # the tag as show prints it, or pasted without its quotes: the same tag
    assert etag.startswith('"') and etag.endswith('"'), etag
    cli("resolve", rid, "--status", "201", "--header", "Content-Type: application/json",
        "--body", '{"id": "pay_9"}', "--reason", "INC-8: corrected", "--if-match",
        etag.strip('"'), check=0)
    retry = p.post(key=key)
    assert retry.status == 201 and retry.replayed and retry.body == b'{"id": "pay_9"}'
    assert upstream.executions(key) == 1
    reasons = [l.get("reason") for l in audit_lines(p) if l["action"] == "resolve"]
    assert "INC-8: mistyped" in reasons and "INC-8: corrected" in reasons, reasons


def test_purging_a_resolved_record_needs_confirm_re_execute(tmp_path, start_proxy, redis,
                                                           upstream):
    p, token, cli = start(start_proxy, tmp_path)
    key, rid = hold(p)
    cli("resolve", rid, "--status", "201", "--body", "{}", "--reason", "INC-9", check=0)
    rc, out, err = cli("purge", rid, "--reason", "INC-9: undo", check=1)
    assert "refused (409)" in err, err
    assert p.post(key=key).replayed
    cli("purge", rid, "--reason", "INC-9: undo", "--confirm", "re-execute", check=0)
    retry = p.post(key=key)
    assert retry.status == 201 and not retry.replayed
    assert upstream.executions(key) == 2


def test_extend_sets_a_held_records_remaining_lifetime(tmp_path, start_proxy, redis, upstream):
    p, token, cli = start(start_proxy, tmp_path, retention="1h")
    key, rid = hold(p)
    assert record(p, token, rid).json()["ttl_ms"] <= 3600 * 1000
    cli("extend", rid, "--seconds", str(3 * 86400), "--reason", "INC-10: upstream team asleep",
        check=0)
    assert record(p, token, rid).json()["ttl_ms"] > 2 * 86400 * 1000
    assert int(redis.cmd("PTTL", "idem:{%s}" % rid)) > 2 * 86400 * 1000
    extends = [l for l in audit_lines(p) if l["action"] == "extend"]
    assert [(l["record_id"], l.get("reason")) for l in extends] == [(rid, "INC-10: upstream team asleep")]


def test_bulk_is_a_dry_run_until_apply_then_resolves_every_match(tmp_path, start_proxy, redis,
                                                                 upstream):
    p, token, cli = start(start_proxy, tmp_path)
    held = dict(hold(p) for _ in range(5))
    ids = sorted(held.values())
    answer = ("--status", "201", "--header", "Content-Type: application/json",
              "--body", '{"settled": true}')
    # the dry run needs no answer (and takes one); the route as the file writes it, "*" and all
    for extra in ((), answer):
        rc, out, err = cli("bulk", "--action", "resolve", "--state", "outcome-unknown",
                           "--route", PAYMENTS, *extra, check=0)
        assert sorted(ID.findall(out)) == ids, out
        assert out.splitlines()[-1] == "dry run: 5 records match; nothing was changed " \
                                       "(--apply --only-from FILE, FILE this output, changes " \
                                       "exactly these)", out
        assert err == "", err
    # a route no route of the file is named: 0, and a note that says so, with the names
    rc, out, err = cli("bulk", "--action", "resolve", "--state", "outcome-unknown",
                       "--route", "/v2/payments", check=0)
    assert out.splitlines()[-1].startswith("dry run: 0 records match"), out
    assert 'no route of' in err and '"/v2/payments"' in err and '"/v1/payments"' in err, err
    # --apply needs the answer
    cli("bulk", "--action", "resolve", "--state", "outcome-unknown", "--apply", "--reason",
        "INC-11", check=2)
    assert all(record(p, token, rid).json()["state"] == "outcome-unknown" for rid in ids)
    doc = cli.json("bulk", "--action", "resolve", "--state", "outcome-unknown", "--reason",
                   "INC-11: the upstream settled every one", "--apply", *answer)
    assert doc["matched"] == 5 and doc["changed"] == 5, doc
    assert sorted(r["record_id"] for r in doc["records"]) == ids
    for key in held:
        retry = p.post(key=key)
        assert retry.status == 201 and retry.replayed and retry.body == b'{"settled": true}'
        assert upstream.executions(key) == 1


def test_list_without_state_lists_every_held_state(tmp_path, start_proxy, redis, upstream):
    p, token, cli = start(start_proxy, tmp_path)
    _, unknown = hold(p)
    _, resolved = hold(p)
    cli("resolve", resolved, "--status", "201", "--body", "", "--reason", "INC-12", check=0)
    done = p.post(key=new_key("done"))
    assert done.status == 201
    doc = cli.json("list")
    got = {e["record_id"]: e["state"] for e in doc["records"]}
    assert got.get(unknown) == "outcome-unknown", got
    assert resolved in got and got[resolved] != "outcome-unknown", got
    assert len(got) == 2, got
    rc, out, err = cli("list", check=0)
    assert out.splitlines()[-1] == "2 held records"


# ---- the inbox ---------------------------------------------------------------------------

def test_inbox_verbs_list_pause_resume_redeliver_and_delete(tmp_path, start_proxy,
                                                             receiver_factory):
    receiver = receiver_factory(status=500)
    secret = new_secret()
    token = new_token()
    p = start_proxy(routes=[queued_route(secret, max_attempts=1)], upstream_url=receiver.url,
                    upstream={"timeout": "30s"}, admin_host="0.0.0.0",
                    admin_token_file=token_file(tmp_path, token))
    cli = CLI(tmp_path, p, token)
    events = ["evt_" + uuid.uuid4().hex for _ in range(3)]
    for evt in events:
        assert deliver(p, secret, stripe_body(evt)).status == 202
    wait_until(lambda: p.admin("GET", "/inbox", headers=bearer(token)).json()["routes"][0]
               ["dead"] == 3, what="3 dead letters")
    rc, out, err = cli("inbox", check=0)
    head, row = out.splitlines()
    assert head.split() == ["ROUTE", "DEPTH", "PENDING", "SCHEDULED", "OLDEST", "DEAD", "PAUSED"]
    assert row.split()[0] == INBOX_ROUTE and row.split()[5:] == ["3", "false"], out
    assert cli.json("inbox", "list")["routes"][0]["admin"] == ENCODED
    dead = cli.json("inbox", "dead", INBOX_ROUTE)["dead"]
    assert sorted(d["event"] for d in dead) == sorted(events)
    rc, out, err = cli("inbox", "dead", ENCODED, check=0)
    assert all(d["id"] in out and d["event"] in out for d in dead), out
    # pause: nothing is delivered; the audit line names the route
    assert cli.json("inbox", "pause", INBOX_ROUTE) == {"route": INBOX_ROUTE, "paused": True}
    receiver.control(status=200)
    by_id = {d["event"]: d["id"] for d in dead}
    rc, out, err = cli("inbox", "redeliver", INBOX_ROUTE, by_id[events[0]], check=0)
    assert "redelivered: %s" % by_id[events[0]] in out.splitlines(), out
    assert receiver.attempts() and all(a["status"] == 500 for a in receiver.attempts())
    rc, out, err = cli("inbox", "resume", INBOX_ROUTE, check=0)
    assert out.splitlines() == ["route: %s" % INBOX_ROUTE, "paused: false"], out
    wait_until(lambda: [a for a in receiver.attempts() if a["status"] == 200],
               what="the redelivered letter delivered")
    # one dropped, the rest redelivered at once
    cli("inbox", "delete", INBOX_ROUTE, by_id[events[1]], check=0)
    doc = cli.json("inbox", "redeliver", INBOX_ROUTE, "--all", "--match-reason", "max_attempts")
    assert doc == {"route": INBOX_ROUTE, "redelivered": 1}, doc
    wait_until(lambda: sorted(a["event"] for a in receiver.attempts() if a["status"] == 200)
               == sorted([events[0], events[2]]), what="two delivered, the dropped one not")
    actions = [(l["action"], l.get("route")) for l in audit_lines(p)]
    for action in ("inbox-pause", "inbox-resume", "redeliver", "dead-letter-delete",
                   "bulk-redeliver"):
        assert (action, INBOX_ROUTE) in actions, (action, actions)
    rc, out, err = cli("inbox", "pause", "/webhooks/none", check=1)
    assert "refused (404)" in err
    assert_no_token_anywhere(p, token)


# ---- what no listener's answer can make the CLI do ---------------------------------------------

class FakeListener:
    """A stand-in admin listener on a loopback port (for answers the real one never gives):
    answer(method, path, body) returns (status, content type, body[, fields]) or None to close
    the connection without an answer once the request is read; every request is kept."""

    def __init__(self, answer):
        fake = self
        self.answer, self.requests = answer, []

        class Handler(http.server.BaseHTTPRequestHandler):
            def handle_one(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fake.requests.append((self.command, self.path, body))
                got = fake.answer(self.command, self.path, body)
                if got is None:
                    self.close_connection = True
                    return
                status, ctype, data = got[:3]
                data = data if isinstance(data, bytes) else json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for name, value in (got[3] if len(got) > 3 else []):
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            do_GET = do_PUT = do_POST = do_DELETE = handle_one

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake(tmp_path):
    """(make, cli): make(answer) starts a FakeListener; cli(listener, *args) runs the CLI with a
    configuration of its own (no proxy, no Redis needed) against it."""
    token = new_token()
    config = tmp_path / "fake.yaml"
    config.write_text(to_yaml(build_config(
        free_port(), free_port(), "http://127.0.0.1:3000", "redis://127.0.0.1:6379",
        routes=[{"path": PAYMENTS}],
        admin={"token_file": str(token_file(tmp_path, token))})) + "\n")
    runner = CLI(tmp_path, type("NoProxy", (), {"config_path": str(config)})(), token)
    started = []

    def make(answer):
        started.append(FakeListener(answer))
        return started[-1]

    def cli(listener, *args, **kw):
        return runner(*args, "--admin", listener.url, **kw)
    yield make, cli
    for listener in started:
        listener.close()


RID = "ab" * 16
LISTING = {"state": None, "records": [{"record_id": RID, "route": "/v1/payments",
                                       "state": "outcome-unknown", "created_ms": 1,
                                       "ttl_ms": 1000}], "next_cursor": None}
BULK = {"action": "purge", "dry_run": True, "matched": 1, "changed": 0,
        "records": [{"record_id": RID, "route": "/v1/payments", "state": "outcome-unknown",
                     "result": "would-purge"}], "next_cursor": None}


@pytest.mark.parametrize("status", [201, 202, 206])
def test_a_2xx_other_than_200_to_list_or_bulk_is_no_answer_of_theirs_and_no_crash(
        fake, status):
    make, cli = fake
    listener = make(lambda m, path, b: (status, "application/json",
                                        LISTING if path.startswith("/records?") else BULK))
    rc, out, err = cli(listener, "list")
    assert rc == 3 and "GET /records answered %d" % status in err, (rc, out, err)
    rc, out, err = cli(listener, "bulk", "--action", "purge", "--state", "outcome-unknown")
    assert rc == 3 and "POST /records/bulk answered %d" % status in err, (rc, out, err)
    # the same answer to a change: the CLI cannot tell what was done
    rc, out, err = cli(listener, "bulk", "--action", "purge", "--state", "outcome-unknown",
                       "--apply", "--reason", "r")
    assert rc == 4 and "may or may not" in err, (rc, out, err)


# answers a listener should never give, to each reading verb: none may crash the CLI
ODD_ANSWERS = [
    (200, "application/json", []),
    (200, "application/json", {"records": [1, None, "x", [RID]], "next_cursor": None,
                               "routes": [1, {"oldest_age_s": 1e308}], "dead": [None,
                               {"died": "-9223372036854775808"}]}),
    (200, "application/json", {"records": [{"record_id": 7, "created_ms": -2 ** 63,
                                            "ttl_ms": 2 ** 63 - 1, "route": {"a": [1]}}],
                               "next_cursor": None, "matched": 2 ** 63 - 1,
                               "changed": 2 ** 63 - 1, "absent_scope_headers": [1, None]}),
    (200, "application/json", {"records": [], "next_cursor": 12}),
    (200, "application/json", {"records": {}, "next_cursor": None}),
    (299, "application/problem+json", {"title": None}),
    (204, "application/json", b""),
    (500, "text/plain", b"\xff\xfe" * 1000),
]


@pytest.mark.parametrize("answer", ODD_ANSWERS, ids=range(len(ODD_ANSWERS)))
def test_no_answer_of_a_listener_crashes_the_cli(fake, answer):
    make, cli = fake
    listener = make(lambda m, p, b: answer)
    for args in (("list",), ("show", RID), ("lookup", "--path", "/v1/payments", "--key", "k"),
                 ("bulk", "--action", "purge", "--state", "claimed"), ("inbox",),
                 ("inbox", "dead", "/webhooks/x"), ("list", "--json")):
        rc, out, err = cli(listener, *args)
        assert rc in (0, 1, 3), (args, rc, out, err)
        if rc != 0:
            assert err.startswith("idempotency-proxy: admin: "), (args, rc, err)


def paged(cursors):
    """A listing (GET /records) or a bulk change (POST) whose n-th call answers cursors(n)."""
    calls = [0]

    def answer(method, path, body):
        calls[0] += 1
        doc = dict(LISTING if method == "GET" else BULK, next_cursor=cursors(calls[0]))
        return 200, "application/json", doc
    return answer


@pytest.mark.parametrize("cursors,calls", [
    (lambda n: "same", 2),                       # never moves on
    (lambda n: "ab"[n % 2], 3),                  # a, b, a: round and round
])
def test_a_next_cursor_that_repeats_stops_the_walk_with_exit_1(fake, cursors, calls):
    make, cli = fake
    for verb in (("list",), ("bulk", "--action", "purge", "--state", "claimed")):
        listener = make(paged(cursors))
        rc, out, err = cli(listener, *verb)
        assert rc == 1, (verb, rc, out, err)
        assert "next_cursor it gave before" in err, err
        assert len(listener.requests) == calls, listener.requests
        assert out.count(RID) == calls, out  # what the calls gave is printed
        rc, out, err = cli(listener, *verb, "--json")
        assert rc == 1 and json.loads(out)["next_cursor"] is not None, (rc, out, err)


def test_max_calls_bounds_the_walk_of_list_and_bulk(fake):
    make, cli = fake
    for verb in (("list",), ("bulk", "--action", "purge", "--state", "claimed")):
        listener = make(paged(lambda n: "c%d" % n))
        rc, out, err = cli(listener, *verb, "--max-calls", "5")
        assert rc == 1 and "stopped after 5 calls" in err and "--max-calls" in err, (rc, err)
        assert len(listener.requests) == 5
    rc, out, err = cli(listener, "show", RID, "--max-calls", "5", check=2)
    assert "show does not take --max-calls" in err


CONTROLS = "\x1b]0;owned\x07\x1b[2J\x00\x08\t\r\n\x7f\u0085\u009b"


def assert_no_controls(text, allowed="\n"):
    bad = [c for c in text if (ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f) and c not in allowed]
    assert not bad, (bad, text)


def test_server_text_is_printed_with_its_control_characters_escaped(fake):
    make, cli = fake
    problem = {"title": "T" + CONTROLS, "detail": "D" + CONTROLS}
    listener = make(lambda m, p, b: (409, "application/problem+json", problem))
    rc, out, err = cli(listener, "show", RID, check=1)
    assert_no_controls(err)
    assert "T\\x1b]0;owned\\x07\\x1b[2J\\x00\\x08\\x09\\x0d\\x0a\\x7f\\x85\\x9b: D" in err, err
    # --json: the document as JSON, its control characters escaped there too
    rc, out, err = cli(listener, "show", RID, "--json", check=1)
    assert_no_controls(out + err)
    assert json.loads(out) == problem
    for doc in ({"error": "E" + CONTROLS}, b"text \x1b[2J\x9b\xc2\x9b answer"):
        listener = make(lambda m, p, b, doc=doc: (
            503, "application/json" if isinstance(doc, dict) else "text/plain", doc))
        rc, out, err = cli(listener, "show", RID, check=1)
        assert_no_controls(err)
        assert "\\x1b" in err, err
    # the fields and tables of an answer, and its ETag (no JSON parser takes \u0000 in a name)
    record = {"record_id" + CONTROLS.replace("\x00", ""): RID, "route": "/v1/" + CONTROLS, "state": CONTROLS}
    listing = dict(LISTING, records=[dict(LISTING["records"][0], record_id=CONTROLS,
                                          route="/r" + CONTROLS)])
    listener = make(lambda m, p, b: (200, "application/json",
                                     listing if p.startswith("/records?") else record,
                                     [("ETag", '"e\x1bx"')]))
    for args in (("show", RID), ("list",), ("show", RID, "--json"), ("list", "--json")):
        rc, out, err = cli(listener, *args, check=0)
        assert_no_controls(out + err)
        assert "\\x1b" in out or "\\u001b" in out.lower(), (args, out)
        if "--json" in args:
            json.loads(out)


def test_an_option_given_twice_is_refused_naming_it(tmp_path, fake):
    make, cli = fake
    listener = make(lambda m, p, b: (200, "application/json", {"record_id": RID}))
    other = tmp_path / "other.yaml"
    other.write_text("listen: 127.0.0.1:1\n")
    for args, name in [
        (("-c", str(other), "show", RID), "--config"),
        (("--config", str(other), "show", RID), "--config"),
        (("purge", RID, "--reason", "a", "--reason", "b"), "--reason"),
        (("list", "--state", "claimed", "--state", "resolved"), "--state"),
        (("show", RID, "--timeout", "5", "--timeout", "6"), "--timeout"),
        (("show", RID, "--admin", listener.url), "--admin"),
    ]:
        rc, out, err = cli(listener, *args)
        assert rc == 2 and "%s is given twice" % name in err, (args, rc, err)
    assert listener.requests == []
    # --header is one field a time, given as often as needed
    cli(listener, "lookup", "--path", "/v1/payments", "--key", "k", "--header", "A: 1",
        "--header", "B: 2", "--json", "--json", check=0)
    assert len(listener.requests) == 1 and "header=A" in listener.requests[0][1]


# ---- a change whose outcome the proxy cannot tell --------------------------------------------

CHANGES = [
    ("resolve", RID, "--status", "201", "--body", "", "--reason", "r"),
    ("purge", RID, "--reason", "r"),
    ("extend", RID, "--seconds", "60", "--reason", "r"),
    ("bulk", "--action", "purge", "--state", "claimed", "--apply", "--reason", "r"),
    ("inbox", "pause", "/webhooks/x"),
    ("inbox", "redeliver", "/webhooks/x", "1-0"),
    ("inbox", "delete", "/webhooks/x", "1-0"),
]
READS = [("show", RID), ("list",), ("bulk", "--action", "purge", "--state", "claimed"),
         ("inbox", "dead", "/webhooks/x")]


def test_a_503_or_a_lost_answer_to_a_change_exits_4_and_to_a_read_1_or_3(fake):
    make, cli = fake
    unknown = {"error": "redis did not answer; the answer may or may not be recorded: look at "
                        "the record (GET /records/<id>) before trying again"}
    answering = make(lambda m, p, b: (503, "application/json", unknown))
    silent = make(lambda m, p, b: None)
    for args in CHANGES:
        rc, out, err = cli(answering, *args)
        assert rc == 4 and "refused (503)" in err and "look" in err, (args, rc, err)
        rc, out, err = cli(silent, *args)
        assert rc == 4 and "may or may not have been made" in err, (args, rc, err)
    for args in READS:
        rc, out, err = cli(answering, *args)
        assert rc == 1 and "refused (503)" in err, (args, rc, err)
        rc, out, err = cli(silent, *args)
        assert rc == 3 and "no answer" in err and "may or may not" not in err, (args, err)
    # a bulk change whose record says Redis failed on it: that record is not known either
    errors = make(lambda m, p, b: (200, "application/json", dict(
        BULK, dry_run=False, records=[dict(BULK["records"][0], result="error")])))
    rc, out, err = cli(errors, *CHANGES[3])
    assert rc == 4 and "1 record has the result error" in err and RID in out, (rc, out, err)
    # nothing listening: nothing was sent, 3 for a change too
    rc, out, err = cli(type("Nobody", (), {"url": "http://127.0.0.1:%d" % free_port()})(),
                       *CHANGES[0])
    assert rc == 3 and "may or may not" not in err, (rc, err)


def test_a_resolve_the_proxy_could_not_carry_out_for_want_of_redis_exits_4(
        tmp_path, start_proxy, redis, upstream):
    p, token, cli = start(start_proxy, tmp_path)
    _, rid = hold(p)
    redis.pause()
    try:
        rc, out, err = cli("resolve", rid, "--status", "201", "--body", "", "--reason", "INC-13")
    finally:
        redis.resume()
    assert rc == 4 and "refused (503)" in err and "look" in err, (rc, out, err)
    assert wait_until(lambda: record(p, token, rid).status == 200 and record(p, token, rid),
                      what="the record readable again").json()["state"] == "outcome-unknown"


def test_bulk_apply_only_from_a_dry_run_changes_only_what_was_reviewed(tmp_path, start_proxy,
                                                                      redis, upstream):
    """The dry run is reviewed; a record held after it (another incident) must not be
    purged unseen by the apply: --only-from the dry run's output bounds the change to its
    ids, so the later record stays held and its retry executes nothing."""
    p, token, cli = start(start_proxy, tmp_path)
    reviewed = dict(hold(p) for _ in range(3))
    rc, out, err = cli("bulk", "--action", "purge", "--state", "outcome-unknown", check=0)
    dry = tmp_path / "dry-run.txt"
    dry.write_text(out)
    assert sorted(ID.findall(out)) == sorted(reviewed.values()), out
    later_key, later = hold(p)
    # a reviewed id held again by a new attempt since (purged, retried, lost again): its
    # record was not the one reviewed
    again_key, again = next(iter(reviewed.items()))
    cli("purge", again, "--reason", "INC-16: another operator", check=0)
    assert hold(p, again_key) == (again_key, again)
    assert upstream.executions(again_key) == 2
    # without --only-from the apply would purge both: its dry run says so
    rc, out, err = cli("bulk", "--action", "purge", "--state", "outcome-unknown", check=0)
    assert later in out and again in out, out
    # the reviewed id held again is left alone, and said so: exit 1, its id on stderr
    rc, out, err = cli("bulk", "--action", "purge", "--state", "outcome-unknown", "--apply",
                       "--reason", "INC-16: none reached the upstream", "--only-from", str(dry),
                       "--json", check=1)
    doc = json.loads(out)
    assert sorted(r["record_id"] for r in doc["records"]) == \
        sorted(v for v in reviewed.values() if v != again), doc
    assert doc["changed"] == 2, doc
    assert "not changed: %s" % again in err and "1 reviewed record was not changed" in err, err
    assert record(p, token, again).json()["state"] == "outcome-unknown"
    assert record(p, token, later).json()["state"] == "outcome-unknown"
    retry = p.post(key=later_key)
    assert retry.status == 502 and retry.replayed, retry
    assert upstream.executions(later_key) == 1
    # from stdin too; a file with no id in it is a usage error, nothing sent
    empty = tmp_path / "empty.txt"
    empty.write_text("nothing here\n")
    cli("bulk", "--action", "purge", "--state", "outcome-unknown", "--apply", "--reason", "r",
        "--only-from", str(empty), check=2)
    assert record(p, token, later).json()["state"] == "outcome-unknown"
    rc, out, err = cli("bulk", "--action", "purge", "--state", "outcome-unknown", "--apply",
                       "--reason", "INC-17", "--only-from", "-", stdin=(later + "\n").encode(),
                       check=0)
    assert record(p, token, later).status == 404

