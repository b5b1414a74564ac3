"""Decisions on held records that can be corrected until they are safe (docs/operations.md
"Resolving a held record", "Purging a record", "Extending a hold", "Bulk changes", "The audit
trail"):

- a resolution is a record of its own state (`resolved`) that replays like the upstream's
  answer; it is replaced only by a `PUT` whose `If-Match` is its `ETag` (`GET /records/<id>`):
  without one `428 precondition-required`, with a stale one `412 precondition-failed`; an
  answer the upstream gave is never replaced (`409`);
- a purge of a record that holds an answer (the upstream's or an operator's) is refused
  (`409 re-execute-not-confirmed`) unless it says `confirm=re-execute` and gives a reason;
  then the next retry executes again, once;
- `POST /records/<id>/extend` sets a held record's time to live, never shorter than it is;
- `POST /records/bulk` lists (dry run, the default) or changes every held record that
  matches, each by its own compare-and-set and audit line, a bounded number per call;
  following next_cursor reaches every match (1,200 records purged, none left), and a resolve
  with a 1 MiB answer changes every record with a bounded number of changes and bytes out
  at a time (the proxy's peak memory, its probes answered meanwhile); each record resolved
  counts in `idempotency_proxy_records_resolved_total`;
- every change writes one audit line with the operator's `reason`.

Real processes only: redis-server, the demo upstream (`X-Demo-Fault: close` closes the
connection after reading the request: the record is held as outcome unknown) and the proxy.
"""

import base64
import contextlib
import json
import signal
import uuid

import pytest

from harness import http_request, log_line, wait_until
from proxy_helpers import (
    CLOSE, access_ids, audit_lines, bearer, change_lines, hold_outcome_unknown, in_background,
    metric, new_token, proc_status, record_id_cli, redis_contents, sanitized,
    start_with_admin_token, token_file,
)

# tests/run.sh runs this file under ThreadSanitizer with two worker threads a proxy
# (IDEM_TEST_WORKERS=2): the admin thread and the workers meet on the same records.
pytestmark = pytest.mark.threads

ROUTE = "/v1/payments*"
PRECONDITION_REQUIRED = "urn:idempotency-proxy:problem:precondition-required"
PRECONDITION_FAILED = "urn:idempotency-proxy:problem:precondition-failed"
NOT_CONFIRMED = "urn:idempotency-proxy:problem:re-execute-not-confirmed"


def start(start_proxy, tmp_path, token, **kw):
    return start_with_admin_token(start_proxy, tmp_path, token, ROUTE, **kw)


hold = hold_outcome_unknown


def answer(status=201, body=b"", reason=None):
    doc = {"status": status, "headers": [["Content-Type", "application/json"]],
           "body_base64": base64.b64encode(body).decode()}
    if reason is not None:
        doc["reason"] = reason
    return doc


def admin(p, token, method, path, doc=None, headers=()):
    return p.admin(method, path, headers=bearer(token) + list(headers),
                   body=json.dumps(doc).encode() if doc is not None else None)


def record_lines(p):
    return [(l["action"], l["result"], l["status"], l["reason"]) for l in change_lines(p)]


def test_a_resolve_is_corrected_by_its_etag_and_a_purge_that_would_execute_again_needs_confirm(
        tmp_path, start_proxy, redis, upstream):
    token = new_token()
    p = start(start_proxy, tmp_path, token)
    key = "pay-" + uuid.uuid4().hex
    record_id = hold(p, key)
    path = "/records/" + record_id
    redis_key = "idem:{%s}" % record_id

    # the operator resolves, mistyping the status
    r = admin(p, token, "PUT", path, answer(500, reason="INC-7: the upstream shows pay_1"))
    assert r.status == 200 and r.json()["state"] == "resolved", r
    got = admin(p, token, "GET", path)
    first_etag = got.header("ETag")
    assert got.json()["state"] == "resolved" and got.json()["etag"] == first_etag, got
    assert first_etag == r.header("ETag") and len(first_etag) == 34, first_etag
    assert first_etag[0] == first_etag[-1] == '"', first_etag
    mistyped = p.post(key=key, headers=CLOSE)
    assert mistyped.status == 500 and mistyped.replayed, mistyped
    # the lookup names the state too
    look = admin(p, token, "GET", "/records/lookup?path=/v1/payments&key=" + key).json()
    assert (look["record_id"], look["exists"], look["state"]) == (record_id, True, "resolved")

    # the correction: refused without If-Match, and with a stale or malformed one
    fixed = b'{"id": "pay_1", "status": "succeeded"}'
    why = "INC-7: status mistyped, the upstream answered 201"
    value = redis.cmd("GET", redis_key)
    r = admin(p, token, "PUT", path, answer(201, fixed, why))
    assert r.status == 428 and r.problem()["type"] == PRECONDITION_REQUIRED, r
    r = admin(p, token, "PUT", path, answer(201, fixed, why), [("If-Match", '"%s"' % ("0" * 32))])
    assert r.status == 412 and r.problem()["type"] == PRECONDITION_FAILED, r
    r = admin(p, token, "PUT", path, answer(201, fixed, why), [("If-Match", "W/" + first_etag)])
    assert r.status == 412, r  # a weak tag never matches: the comparison is strong
    r = admin(p, token, "PUT", path, answer(201, fixed, why), [("If-Match", "*")])
    assert r.status == 428, r  # "*" does not name the resolution replaced
    r = admin(p, token, "PUT", path, answer(201, fixed, why), [("If-Match", "not-a-tag")])
    assert r.status == 400, r
    assert redis.cmd("GET", redis_key) == value, "nothing was written"
    r = admin(p, token, "PUT", path, answer(201, fixed, why),
              [("If-Match", '"%s", %s' % ("1" * 32, first_etag))])
    assert r.status == 200 and r.json()["status"] == 201, r
    second_etag = r.header("ETag")
    assert second_etag != first_etag and admin(p, token, "GET", path).header("ETag") == second_etag
    # the first tag is stale now: a second correction made from it is refused
    r = admin(p, token, "PUT", path, answer(202, reason="a late second correction"),
              [("If-Match", first_etag)])
    assert r.status == 412, r

    # the correction replays to the retry; nothing executed again
    retry = p.post(key=key, headers=CLOSE)
    assert retry.status == 201 and retry.replayed and retry.body == fixed, retry
    assert upstream.executions(key) == 1

    # a purge would let the next retry execute again: refused unless confirmed with a reason
    value = redis.cmd("GET", redis_key)
    r = admin(p, token, "DELETE", path)
    assert r.status == 409 and r.problem()["type"] == NOT_CONFIRMED, r
    assert "execut" in r.problem()["detail"] and "confirm=re-execute" in r.problem()["detail"]
    assert admin(p, token, "DELETE", path + "?confirm=re-execute").status == 400
    assert admin(p, token, "DELETE", path + "?confirm=yes&reason=x").status == 400
    assert admin(p, token, "DELETE", path + "?reason=two%0Alines").status == 400
    assert admin(p, token, "DELETE", path + "?confirmed=re-execute&reason=x").status == 400
    purge = path + "?confirm=re-execute&reason=INC-7%3A+customer+asked+to+pay+again"
    r = admin(p, token, "DELETE", purge, headers=[("If-Match", first_etag)])
    assert r.status == 412 and r.problem()["type"] == PRECONDITION_FAILED, r
    assert redis.cmd("GET", redis_key) == value, "nothing was deleted"
    assert p.post(key=key, headers=CLOSE).body == fixed
    r = admin(p, token, "DELETE", purge, headers=[("If-Match", second_etag)])
    assert r.status == 200 and r.json() == {"record_id": record_id, "deleted": True,
                                            "state": "resolved"}, r
    assert redis.cmd("EXISTS", redis_key) == 0

    # the retry executes once more, and its answer is the upstream's: never replaced
    again = p.post(key=key)
    assert again.status == 201 and not again.replayed, again
    assert upstream.executions(key) == 2
    done_etag = wait_until(lambda: (lambda g: g.json()["state"] == "done" and g.header("ETag"))(
        admin(p, token, "GET", path)), what="the upstream's answer recorded")
    r = admin(p, token, "PUT", path, answer(201, reason="overwrite the upstream's"),
              [("If-Match", done_etag)])
    assert r.status == 409 and "never replaced" in r.json()["error"], r
    r = admin(p, token, "DELETE", path)
    assert r.status == 409 and r.problem()["type"] == NOT_CONFIRMED, r
    assert p.post(key=key).replayed
    assert upstream.executions(key) == 2

    assert record_lines(p) == [
        ("resolve", "ok", 200, "INC-7: the upstream shows pay_1"),
        ("resolve", "refused", 428, why),
        ("resolve", "conflict", 412, why),
        ("resolve", "conflict", 412, why),
        ("resolve", "refused", 428, why),
        ("resolve", "refused", 400, why),
        ("resolve", "ok", 200, why),
        ("resolve", "conflict", 412, "a late second correction"),
        ("purge", "conflict", 409, None),
        ("purge", "refused", 400, None),
        ("purge", "refused", 400, None),
        ("purge", "refused", 400, None),
        ("purge", "refused", 400, None),
        ("purge", "conflict", 412, "INC-7: customer asked to pay again"),
        ("purge", "ok", 200, "INC-7: customer asked to pay again"),
        ("resolve", "conflict", 409, "overwrite the upstream's"),
        ("purge", "conflict", 409, None),
    ], audit_lines(p)
    assert all(l["record_id"] == record_id for l in change_lines(p))
    assert [l["recorded_status"] for l in change_lines(p) if l["result"] == "ok"] == [
        500, 201, None]


def test_an_extension_lengthens_a_hold_and_never_shortens_it(tmp_path, start_proxy, redis,
                                                             upstream):
    token = new_token()
    p = start(start_proxy, tmp_path, token, retention="120s")
    key = "pay-" + uuid.uuid4().hex
    record_id = hold(p, key)
    path = "/records/" + record_id
    redis_key = "idem:{%s}" % record_id
    before = redis.cmd("PTTL", redis_key)
    assert 0 < before <= 120000, before
    etag = admin(p, token, "GET", path).header("ETag")

    r = admin(p, token, "POST", path + "/extend", {"seconds": 3600, "reason": "INC-9: "
                                                   "waiting for the bank"})
    assert r.status == 200, r
    assert r.json() == {"record_id": record_id, "state": "outcome-unknown", "ttl_ms": 3600000,
                        "changed": True}, r
    grown = redis.cmd("PTTL", redis_key)
    assert 3500000 < grown <= 3600000, grown
    # the record itself is unchanged: its entity tag stays, and it is still held
    assert admin(p, token, "GET", path).header("ETag") == etag
    held = p.post(key=key, headers=CLOSE)
    assert held.status == 502 and held.problem()["type"].endswith(":outcome-unknown"), held

    # shorter than it is: nothing changes
    r = admin(p, token, "POST", path + "/extend", {"seconds": 600, "reason": "by mistake"})
    assert r.status == 200 and r.json()["changed"] is False, r
    assert 3500000 < r.json()["ttl_ms"] <= grown, r
    assert 3500000 < redis.cmd("PTTL", redis_key) <= grown

    # refused before Redis: a malformed body; 412 on a stale If-Match; 404; 405
    for bad in ({"seconds": 0, "reason": "x"}, {"seconds": 2592001, "reason": "x"},
                {"seconds": "60", "reason": "x"}, {"seconds": 60}, {"seconds": 60, "reason": ""},
                {"seconds": 60, "reason": "x", "extra": 1}):
        r = admin(p, token, "POST", path + "/extend", bad)
        assert r.status == 400, (bad, r)
    r = admin(p, token, "POST", path + "/extend", {"seconds": 7200, "reason": "x"},
              [("If-Match", '"%s"' % ("0" * 32))])
    assert r.status == 412 and r.problem()["type"] == PRECONDITION_FAILED, r
    assert admin(p, token, "POST", "/records/%s/extend" % ("0" * 32),
                 {"seconds": 60, "reason": "x"}).status == 404
    assert admin(p, token, "GET", path + "/extend").status == 405
    assert 3500000 < redis.cmd("PTTL", redis_key) <= grown

    # a resolution is held too: it can be extended
    assert admin(p, token, "PUT", path, answer(201, b"{}", "INC-9: paid")).status == 200
    r = admin(p, token, "POST", path + "/extend", {"seconds": 7200, "reason": "INC-9: audit"},
              [("If-Match", admin(p, token, "GET", path).header("ETag"))])
    assert r.status == 200 and r.json()["state"] == "resolved" and r.json()["changed"], r
    assert 7100000 < redis.cmd("PTTL", redis_key) <= 7200000

    # an answer the upstream gave is not held: 409
    done = "pay-" + uuid.uuid4().hex
    assert p.post(key=done).status == 201
    look = admin(p, token, "GET", "/records/lookup?path=/v1/payments&key=" + done).json()
    assert look["state"] == "done", look
    done_id = look["record_id"]
    r = admin(p, token, "POST", "/records/%s/extend" % done_id, {"seconds": 60, "reason": "x"})
    assert r.status == 409 and r.json()["state"] == "done", r
    assert upstream.executions(key) == 1

    extends = [(l["result"], l["status"], l["reason"]) for l in audit_lines(p)
               if l["action"] == "extend"]
    # a refused body's line carries the reason when it was read before the refusal
    assert extends == [("ok", 200, "INC-9: waiting for the bank"), ("ok", 200, "by mistake")] + \
        [("refused", 400, "x")] * 3 + [("refused", 400, None)] * 3 + \
        [("conflict", 412, "x"), ("not-found", 404, "x"), ("ok", 200, "INC-9: audit"),
         ("conflict", 409, "x")], extends


def bulk(p, token, doc):
    return admin(p, token, "POST", "/records/bulk", doc)


def test_bulk_dry_run_then_bulk_resolve_of_100_held_records(tmp_path, start_proxy, redis,
                                                           upstream):
    token = new_token()
    p = start(start_proxy, tmp_path, token)
    keys = ["pay-" + uuid.uuid4().hex for _ in range(100)]
    ids = {hold(p, k): k for k in keys}
    assert len(ids) == 100
    finished = "pay-" + uuid.uuid4().hex
    assert p.post(key=finished).status == 201
    body = b'{"status": "succeeded", "found": "at the upstream"}'
    resolve = dict(answer(201, body), action="resolve", state="outcome-unknown",
                   route="/v1/payments")

    # the dry run (the default) lists what would change, and changes nothing
    before = redis_contents(redis)
    r = bulk(p, token, resolve)
    assert r.status == 200, r
    doc = r.json()
    assert (doc["action"], doc["dry_run"], doc["matched"], doc["changed"], doc["next_cursor"]) \
        == ("resolve", True, 100, 0, None), doc
    assert sorted(e["record_id"] for e in doc["records"]) == sorted(ids)
    assert all(e == {"record_id": e["record_id"], "route": "/v1/payments",
                     "state": "outcome-unknown", "result": "would-resolve"}
               for e in doc["records"]), doc["records"][:3]
    # bounded calls: limit= records a call, the walk goes on from next_cursor
    seen, cursor, calls = [], None, 0
    while True:
        page = bulk(p, token, dict(resolve, limit=30, **({"cursor": cursor} if cursor else {})))
        assert page.status == 200 and page.json()["matched"] <= 30, page
        seen += [e["record_id"] for e in page.json()["records"]]
        cursor, calls = page.json()["next_cursor"], calls + 1
        if cursor is None:
            break
        assert calls < 20, "the walk does not end"
    assert sorted(seen) == sorted(ids) and calls >= 4, (calls, len(seen))
    # filters that match nothing
    assert bulk(p, token, dict(resolve, route="/v1/other")).json()["matched"] == 0
    assert bulk(p, token, dict(resolve, older_than_seconds=3600)).json()["matched"] == 0
    assert bulk(p, token, dict(resolve, state="claimed")).json()["matched"] == 0
    assert redis_contents(redis) == before
    assert change_lines(p) == [], "a dry run is a read"
    assert {(l["action"], l["right"]) for l in audit_lines(p)} == {
        ("bulk-resolve-dry-run", "read")}, audit_lines(p)

    # refused whole: no reason for a change, a malformed request
    for bad in (dict(resolve, dry_run=False), dict(resolve, state="done"),
                dict(resolve, action="delete"), dict(resolve, state="resolved", reason="x"),
                dict(resolve, limit=1001), dict(resolve, dry_run="no"),
                dict(resolve, confirm="re-execute", reason="x"), dict(resolve, status=99)):
        r = bulk(p, token, bad)
        assert r.status == 400, (bad, r)
    assert redis_contents(redis) == before

    # the change: each record by its own compare-and-set and audit line
    why = "INC-11: the upstream settled the batch of 12:03"
    r = bulk(p, token, dict(resolve, dry_run=False, reason=why))
    assert r.status == 200, r
    doc = r.json()
    assert (doc["dry_run"], doc["matched"], doc["changed"], doc["next_cursor"]) == \
        (False, 100, 100, None), doc
    assert sorted(e["record_id"] for e in doc["records"]) == sorted(ids)
    assert {e["result"] for e in doc["records"]} == {"resolved"}, doc["records"]
    lines = [l for l in audit_lines(p) if l["record_id"] is not None]
    assert sorted(l["record_id"] for l in lines) == sorted(ids)
    assert {(l["action"], l["result"], l["status"], l["recorded_status"], l["reason"])
            for l in lines} == {("bulk-resolve", "ok", 200, 201, why)}, lines[:3]
    assert metric(p, "idempotency_proxy_records_resolved_total", required=True) == 100

    # every retry replays the resolution; nothing executes again
    for k in keys:
        retry = p.post(key=k, headers=CLOSE)
        assert retry.status == 201 and retry.replayed and retry.body == body, retry
        assert upstream.executions(k) == 1
    assert bulk(p, token, resolve).json()["matched"] == 0

    # the listing shows them resolved, with or without state=
    for q in ("?state=resolved&limit=1000", "?limit=1000"):
        listed = admin(p, token, "GET", "/records" + q).json()
        assert sorted(e["record_id"] for e in listed["records"]) == sorted(ids), q
        assert {e["state"] for e in listed["records"]} == {"resolved"}, q

    # a bulk purge of resolutions would let each retry execute again: confirm, or 409
    purge = {"action": "purge", "state": "resolved", "dry_run": False, "reason": "INC-11: undo",
             "limit": 10}
    before = redis_contents(redis)
    r = bulk(p, token, purge)
    assert r.status == 409 and r.problem()["type"] == NOT_CONFIRMED, r
    assert redis_contents(redis) == before
    r = bulk(p, token, dict(purge, confirm="re-execute"))
    assert r.status == 200 and (r.json()["matched"], r.json()["changed"]) == (10, 10), r
    purged = [e["record_id"] for e in r.json()["records"]]
    assert {e["result"] for e in r.json()["records"]} == {"purged"}
    for rid in purged:
        assert redis.cmd("EXISTS", "idem:{%s}" % rid) == 0
        assert p.post(key=ids[rid]).status == 201
        assert upstream.executions(ids[rid]) == 2
    purges = [l for l in audit_lines(p) if l["action"] == "bulk-purge"]
    assert (purges[0]["result"], purges[0]["record_id"]) == ("conflict", None), purges[0]
    # a line per record purged, then the bulk request's own
    assert sorted((l["result"], l["record_id"]) for l in purges[1:-1]) == sorted(
        ("ok", rid) for rid in purged), purges
    assert (purges[-1]["result"], purges[-1]["record_id"], purges[-1]["right"]) == (
        "ok", None, "purge"), purges[-1]
    assert {l["reason"] for l in purges} == {"INC-11: undo"}


def test_a_resolve_never_records_an_answer_the_route_would_release_or_replay_differently(
        tmp_path, start_proxy, redis, upstream):
    """On a webhook route every non-2xx releases the claim (the provider's retry must be
    delivered), so it is never a resolution either; a 204 or 304 has no body (RFC 9110), and a
    replay would drop one unseen: both 400 invalid-resolution, nothing written."""
    token = new_token()
    hook = "/webhooks/gh"
    p = start_proxy(routes=[{"path": ROUTE},
                            {"path": hook, "key_from": "header:X-GitHub-Delivery",
                             "verify": "none"}],
                    admin_host="0.0.0.0", admin_token_file=token_file(tmp_path, token))
    delivery = "d-" + uuid.uuid4().hex
    seen = len(access_ids(p, hook))
    r = p.post(path=hook, headers=[("X-GitHub-Delivery", delivery)] + CLOSE)
    assert r.status == 502, r
    executed = upstream.total()
    hook_id = wait_until(lambda: access_ids(p, hook)[seen:] and access_ids(p, hook)[seen], 5,
                         what="the access-log line of the held delivery")
    before = redis_contents(redis)
    r = admin(p, token, "PUT", "/records/" + hook_id, answer(500, b"{}", reason="INC-13"))
    assert r.status == 400 and r.problem()["type"].endswith(":invalid-resolution"), r
    assert "webhook" in r.problem()["detail"], r
    assert redis_contents(redis) == before
    assert admin(p, token, "PUT", "/records/" + hook_id,
                 answer(200, b"{}", reason="INC-13: delivered")).status == 200
    retry = p.post(path=hook, headers=[("X-GitHub-Delivery", delivery)])
    assert retry.status == 200 and retry.replayed, retry
    assert upstream.total() == executed

    key = "pay-" + uuid.uuid4().hex
    record_id = hold(p, key)
    for status in (204, 304):
        r = admin(p, token, "PUT", "/records/" + record_id,
                  answer(status, b'{"id": "pay_1"}', reason="INC-14"))
        assert r.status == 400 and "no body" in r.problem()["detail"], r
    assert admin(p, token, "PUT", "/records/" + record_id,
                 answer(204, b"", reason="INC-14: no content")).status == 200
    retry = p.post(key=key)
    assert retry.status == 204 and retry.replayed and retry.body == b"", retry


def test_a_purge_reason_with_a_nul_is_refused_whole(tmp_path, start_proxy, redis, upstream):
    """reason=abc%00def would reach the audit line as "abc": refused, nothing deleted."""
    token = new_token()
    p = start(start_proxy, tmp_path, token)
    record_id = hold(p, "pay-" + uuid.uuid4().hex)
    before = redis_contents(redis)
    for query in ("reason=abc%00%0Adef", "reason=ok&confirm=re-execute%00"):
        r = admin(p, token, "DELETE", "/records/%s?%s" % (record_id, query))
        assert r.status == 400 and "NUL" in r.json()["error"], r
    assert redis_contents(redis) == before
    assert admin(p, token, "DELETE", "/records/%s?reason=abc" % record_id).status == 200


@contextlib.contextmanager
def stalled_owner(p1, p2, token, upstream, headers):
    """A keyed request sent through p1 with headers, at the upstream; p1 stopped (SIGSTOP)
    until the block ends, and the request's lease run out as p2's admin listener shows.
    Yields (key, record_id, the request's future)."""
    key = "pay-" + uuid.uuid4().hex
    first = in_background(p1.post, key=key, headers=headers, timeout=30)
    wait_until(lambda: upstream.total() == 1, what="the request at the upstream")
    record_id = record_id_cli(p1, "/v1/payments", key)[0]["record_id"]
    p1.signal(signal.SIGSTOP)
    try:
        wait_until(lambda: admin(p2, token, "GET", "/records/" + record_id).json()
                   .get("lease_expired") is True, what="the stalled request's lease run out")
        yield key, record_id, first
    finally:
        p1.signal(signal.SIGCONT)


def test_a_resolution_made_while_a_stalled_proxys_request_was_at_the_upstream_is_an_error_line(
        tmp_path, start_proxy, redis, upstream):
    """The request's proxy stops (SIGSTOP) while its request is at the upstream; its lease
    runs out; an operator resolves the record through another proxy; the stalled one resumes
    and gets the upstream's 201. Retries replay the operator's answer (the record is no longer
    the stalled proxy's); its log says so at error level, so someone compares the two."""
    token = new_token()
    p1 = start(start_proxy, tmp_path, token, lease="1s")
    p2 = start(start_proxy, tmp_path, token, lease="1s")
    with stalled_owner(p1, p2, token, upstream, [("X-Demo-Delay-Ms", "3000")]) as (
            key, record_id, first):
        r = admin(p2, token, "PUT", "/records/" + record_id,
                  answer(402, b'{"declined": true}', reason="INC-15: the bank said declined"))
        assert r.status == 200, r
    assert first.result().status == 201
    log_line(p1, "an operator resolved the record while the request was at the upstream")
    retry = p2.post(key=key)
    assert retry.status == 402 and retry.replayed, retry
    assert upstream.total() == 1


def held_copies(redis, record_id, n, ttl_ms=3600000):
    """n more outcome-unknown records: copies of a held one under fresh record ids (one
    script); returns their ids."""
    redis.cmd("EVAL", "local v = redis.call('GET', KEYS[1]) for i = 1, tonumber(ARGV[1]) do "
              "redis.call('SET', string.format('idem:{%032x}', i), v, 'PX', ARGV[2]) end",
              1, "idem:{%s}" % record_id, n, ttl_ms)
    return ["%032x" % i for i in range(1, n + 1)]


def bulk_walk(p, token, doc, max_calls=50):
    """Every call of a bulk change, following next_cursor: the answers' documents."""
    docs, cursor = [], None
    for _ in range(max_calls):
        r = bulk(p, token, dict(doc, **({"cursor": cursor} if cursor else {})))
        assert r.status == 200, r
        docs.append(r.json())
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return docs
    raise AssertionError("the walk did not end within %d calls" % max_calls)


def test_a_bulk_purge_reaches_every_match_across_pages_and_calls(tmp_path, start_proxy, redis,
                                                                 upstream):
    """1,200 held records, more than a page (250) and a call (1,000) hold: purged page after
    page, each page's purges moving the keys SCAN finds, the walk still reaches every one."""
    token = new_token()
    p = start(start_proxy, tmp_path, token)
    first = hold(p, "pay-" + uuid.uuid4().hex)
    ids = [first] + held_copies(redis, first, 1199)
    assert len(redis.keys("idem:{*}")) == 1200
    docs = bulk_walk(p, token, {"action": "purge", "state": "outcome-unknown", "dry_run": False,
                                "reason": "INC-12: the upstream never got them"})
    assert len(docs) >= 2, [d["matched"] for d in docs]
    purged = [e["record_id"] for d in docs for e in d["records"]]
    assert sorted(purged) == sorted(ids), (len(purged), len(set(purged)))
    assert {e["result"] for d in docs for e in d["records"]} == {"purged"}
    assert sum(d["changed"] for d in docs) == 1200
    assert redis.keys("idem:{*}") == [], "records left held"


def test_a_bulk_resolve_of_a_1_mib_answer_changes_every_record_with_bounded_memory(
        tmp_path, start_proxy, redis, upstream):
    """A 1 MiB answer (under max_stored_response) recorded into 50 held records: every one is
    resolved (over as many calls as next_cursor asks), the proxy's peak memory grows by far
    less than 50 copies of the answer, and /healthz answers while the calls run."""
    token = new_token()
    p = start(start_proxy, tmp_path, token, limits={"max_stored_response": "2MiB"})
    first = hold(p, "pay-" + uuid.uuid4().hex)
    ids = [first] + held_copies(redis, first, 49)
    body = bytes(range(256)) * 4096
    assert len(body) == 1 << 20
    idle_peak = proc_status(p.pid())["VmHWM"]
    probes, stop = [], []

    def probe():
        # a hang bound, not a timing: each probe must be answered while the bulk runs
        while not stop:
            probes.append(http_request(p.admin_port, "GET", "/healthz", timeout=10).status)
    prober = in_background(probe)
    try:
        docs = bulk_walk(p, token, dict(answer(201, body), action="resolve",
                                        state="outcome-unknown", dry_run=False,
                                        reason="INC-13: settled; the receipt is the answer"))
    finally:
        stop.append(True)
        prober.result()
    assert probes and set(probes) == {200}, probes
    resolved = [e["record_id"] for d in docs for e in d["records"]]
    assert sorted(resolved) == sorted(ids), [(d["matched"], d["changed"]) for d in docs]
    assert {e["result"] for d in docs for e in d["records"]} == {"resolved"}
    assert sum(d["changed"] for d in docs) == 50
    for rid in ids:
        assert redis.cmd("GETRANGE", "idem:{%s}" % rid, 3, 3) == "R", rid
    assert metric(p, "idempotency_proxy_records_resolved_total", required=True) == 50
    grown = proc_status(p.pid())["VmHWM"] - idle_peak
    print("bulk resolve of 50 x 1 MiB: %d calls, peak RSS grew %.1f MiB" % (
        len(docs), grown / (1 << 20)))
    # 50 answers all in flight at once held 2-3 copies of each (over 100 MiB)
    assert grown <= 64 * (1 << 20) or sanitized(p.pid()), grown


def test_bulk_record_ids_bound_a_change_to_the_records_named(tmp_path, start_proxy, redis,
                                                           upstream):
    """record_ids: only the records a dry run listed (and that still match) change; a malformed
    list is refused whole."""
    token = new_token()
    p = start(start_proxy, tmp_path, token)
    a, b = hold(p, "pay-" + uuid.uuid4().hex), hold(p, "pay-" + uuid.uuid4().hex)
    base = {"action": "purge", "state": "outcome-unknown", "reason": "INC-18"}
    before = redis_contents(redis)
    for ids in ([], ["A" * 32], [a[:31]], "x", [a] * 1001):
        r = bulk(p, token, dict(base, dry_run=False, record_ids=ids))
        assert r.status == 400, (ids if len(ids) < 5 else len(ids), r)
    for when in ("x", 0, -5):
        r = bulk(p, token, dict(base, dry_run=False, created_before_ms=when))
        assert r.status == 400, (when, r)
    # a dry run says when it looked; records created since are left out of a change bound to it
    as_of = bulk(p, token, base).json()["as_of_ms"]
    r = bulk(p, token, dict(base, created_before_ms=as_of - 60000))
    assert r.status == 200 and r.json()["matched"] == 0, r
    assert redis_contents(redis) == before
    r = bulk(p, token, dict(base, dry_run=False, record_ids=[a, "0" * 32]))
    assert r.status == 200 and [e["record_id"] for e in r.json()["records"]] == [a], r
    assert r.json()["changed"] == 1
    assert admin(p, token, "GET", "/records/" + a).status == 404
    assert admin(p, token, "GET", "/records/" + b).json()["state"] == "outcome-unknown"


def test_a_route_name_longer_than_255_bytes_still_refuses_its_release_statuses(
        tmp_path, start_proxy, redis, upstream):
    """The record's route was cut to 255 bytes on its way to the check, matched no route, and
    a 503 (a release status) was recorded as a resolution."""
    token = new_token()
    long_route = "/v1/payments/" + "a" * 300
    p = start_proxy(routes=[{"path": long_route + "*"}], admin_host="0.0.0.0",
                    admin_token_file=token_file(tmp_path, token))
    seen = len(access_ids(p, long_route))
    r = p.post(path=long_route, key="pay-" + uuid.uuid4().hex, headers=CLOSE)
    assert r.status == 502, r
    record_id = wait_until(lambda: access_ids(p, long_route)[seen:] and
                           access_ids(p, long_route)[seen], 5, what="the held request's line")
    r = admin(p, token, "PUT", "/records/" + record_id, answer(503, b"", reason="INC-20"))
    assert r.status == 400 and "never records status 503" in r.problem()["detail"], r
    r = bulk(p, token, dict(answer(503, b""), action="resolve", state="outcome-unknown",
                            dry_run=False, reason="INC-20"))
    assert r.status == 200 and [e["result"] for e in r.json()["records"]] == ["refused"], r
    assert admin(p, token, "GET", "/records/" + record_id).json()["state"] == "outcome-unknown"


def test_an_extension_stands_when_the_stalled_owner_comes_back(tmp_path, start_proxy, redis,
                                                               upstream):
    """The owner's final write set the key's TTL back to retention (1 h) over an operator's
    7-day extension of its expired claim: after an hour a retry would have executed."""
    token = new_token()
    p1 = start(start_proxy, tmp_path, token, lease="1s", retention="1h",
               upstream={"timeout": "3s"})
    p2 = start(start_proxy, tmp_path, token, lease="1s", retention="1h")
    with stalled_owner(p1, p2, token, upstream, [("X-Demo-Fault", "hang")]) as (
            _, record_id, first):
        r = admin(p2, token, "POST", "/records/%s/extend" % record_id,
                  {"seconds": 7 * 86400, "reason": "INC-21: the bank answers on Monday"})
        assert r.status == 200 and r.json()["changed"] is True, r
    assert first.result().status == 502
    rec = admin(p2, token, "GET", "/records/" + record_id).json()
    assert rec["state"] == "outcome-unknown", rec
    assert rec["ttl_ms"] > 6 * 86400 * 1000, rec
