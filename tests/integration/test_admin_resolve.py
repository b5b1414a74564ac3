"""Resolving and listing held records (docs/operations.md "Resolving a held record",
"Listing held records", the runbook "An outcome-unknown record"):

- `PUT /records/<id>` turns an outcome-unknown record (the upstream closed the connection
  mid-answer) or a claim whose lease ran out into a finished record with the operator's
  answer: the client's retry gets exactly that answer with `Idempotent-Replayed: true`, the
  upstream has executed once, and the record's TTL goes on (it is not reset);
- a live lease and a finished record get 409 and Redis is unchanged; of two resolves sent at
  once exactly one wins; a malformed body, a hop-by-hop field or an answer over
  `limits.max_stored_response` is a 400 problem `invalid-resolution`; no record is 404; every
  attempt writes its audit line; no token is 401;
- `GET /records?state=outcome-unknown` (and `state=claimed`) lists every held record among
  thousands of finished ones, page by page (a small `limit` too), on a single Redis and on a
  3-primary Redis Cluster; a record held for the whole walk is listed even when the records
  listed before it are resolved or purged between pages;
- a key of another type under a record id is "not a record" (409), never "redis unavailable";
- `idempotency_proxy_outcome_unknown_total{route}` counts the records written in that state,
  `idempotency_proxy_records_resolved_total` the resolutions;
- listing and resolving work through Redis Sentinel, and on a cluster each resolve goes to its
  record's primary.

Real processes only: redis-server (a cluster of them for the topology test, a sentinel and its
primary for the Sentinel test), the demo
upstream (`X-Demo-Fault: close` closes the connection without answering) and the proxy.
"""

import base64
import json
import socket
import subprocess
import threading
import time
import uuid

import pytest

from harness import HTTPError, read_response, wait_ready, wait_until
from proxy_helpers import (
    CLOSE, access_ids, access_record_id, audit_lines, bearer, change_lines, fingerprint,
    hold_outcome_unknown, metric_values, new_token, redis_contents, start_with_admin_token,
    token_file,
)
from redis_topology import ClusterGroup, SentinelGroup

# tests/run.sh runs this file under ThreadSanitizer with two worker threads a proxy
# (IDEM_TEST_WORKERS=2): its requests meet across workers (docs/internals.md).
pytestmark = pytest.mark.threads

ROUTE = "/v1/payments*"


def start(start_proxy, tmp_path, token, **kw):
    return start_with_admin_token(start_proxy, tmp_path, token, ROUTE, **kw)


hold = hold_outcome_unknown


def record(p, token, record_id):
    return p.admin("GET", "/records/" + record_id, headers=bearer(token))


def resolve(p, token, record_id, doc, raw=None):
    body = raw if raw is not None else json.dumps(doc).encode()
    return p.admin("PUT", "/records/" + record_id,
                   headers=bearer(token) + [("Content-Type", "application/json")], body=body)


def answer(status=201, headers=(("Content-Type", "application/json"),), body=b"",
           reason="INC-1: the upstream shows the payment"):
    doc = {"status": status, "headers": [list(h) for h in headers],
           "body_base64": base64.b64encode(body).decode()}
    if reason is not None:
        doc["reason"] = reason
    return doc


def resolve_lines(p):
    return [l for l in change_lines(p) if l["action"] == "resolve"]


def listing(p, token, state="outcome-unknown", limit=None, max_pages=200):
    """Every page of the listing (state None: every held state): (entries, pages)."""
    entries, pages, cursor = [], [], None
    for _ in range(max_pages):
        q = "&".join(part for part in (
            "state=" + state if state else "", "limit=%d" % limit if limit else "",
            "cursor=" + cursor if cursor else "") if part)
        r = p.admin("GET", "/records?" + q, headers=bearer(token), timeout=30)
        assert r.status == 200, r
        doc = r.json()
        pages.append(doc["records"])
        entries += doc["records"]
        cursor = doc["next_cursor"]
        if cursor is None:
            return entries, pages
    raise AssertionError("the listing did not end within %d pages" % max_pages)


def test_an_outcome_unknown_record_resolved_is_replayed_to_the_retry_and_executed_once(
        tmp_path, start_proxy, redis, upstream):
    token = new_token()
    p = start(start_proxy, tmp_path, token)
    # every route's series is there from the start, so that increase() sees the first record
    assert metric_values(p, "idempotency_proxy_outcome_unknown_total") == {
        'idempotency_proxy_outcome_unknown_total{route="/v1/payments"}': 0.0}
    key = "pay-" + uuid.uuid4().hex
    first = p.post(key=key, headers=CLOSE)
    assert first.status == 502, first
    record_id = access_record_id(p, "/v1/payments")
    assert record(p, token, record_id).json()["state"] == "outcome-unknown"
    unknown = metric_values(p, "idempotency_proxy_outcome_unknown_total")
    assert unknown == {'idempotency_proxy_outcome_unknown_total{route="/v1/payments"}': 1.0}, unknown
    before = p.post(key=key, headers=CLOSE)
    assert before.status == 502 and before.replayed, before
    assert before.problem()["type"].endswith(":outcome-unknown"), before
    redis_key = "idem:{%s}" % record_id
    ttl_before = redis.cmd("PTTL", redis_key)
    assert ttl_before > 0

    body = b'{"id": "ord_found_at_the_upstream", "status": "succeeded"}\n'
    r = resolve(p, token, record_id, answer(201, [("Content-Type", "application/json"),
                                                  ("X-Order", "ord_found")], body))
    assert r.status == 200, r
    etag = r.header("ETag")
    assert r.json() == {"record_id": record_id, "state": "resolved", "status": 201,
                        "stored_headers": 2, "body_bytes": len(body), "etag": etag}

    retry = p.post(key=key, headers=CLOSE)
    assert retry.status == 201 and retry.replayed, retry
    assert retry.body == body
    assert retry.header("Content-Type") == "application/json"
    assert retry.header("X-Order") == "ord_found"
    assert upstream.executions(key) == 1
    # the retention goes on from the first request: the key's TTL is kept, not reset
    ttl_after = redis.cmd("PTTL", redis_key)
    assert 0 < ttl_after <= ttl_before, (ttl_before, ttl_after)
    got = record(p, token, record_id)
    assert got.header("ETag") == etag and got.json()["etag"] == etag, got
    got = got.json()
    assert (got["state"], got["status"], got["body_bytes"]) == ("resolved", 201, len(body)), got

    (line,) = resolve_lines(p)
    assert line["record_id"] == record_id and line["result"] == "ok" and line["status"] == 200
    assert line["recorded_status"] == 201 and line["token"] == fingerprint(token)
    assert line["client"] == "127.0.0.1" and line["dead_letter_id"] is None
    assert line["route"] == "/v1/payments", line
    assert line["reason"] == "INC-1: the upstream shows the payment", line
    assert token not in p.stdout_text() + p.stderr_text()
    assert metric_values(p, "idempotency_proxy_records_resolved_total") == {
        "idempotency_proxy_records_resolved_total": 1.0}
    # resolved: not outcome-unknown any more, and a second resolve without If-Match (the
    # resolution's ETag) is refused: an operator's resolution is replaced only by name
    assert listing(p, token)[0] == []
    assert [e["record_id"] for e in listing(p, token, "resolved")[0]] == [record_id]
    value = redis.cmd("GET", redis_key)
    again = resolve(p, token, record_id, answer(200, body=b"other"))
    assert again.status == 428, again
    assert again.problem()["type"] == "urn:idempotency-proxy:problem:precondition-required"
    assert redis.cmd("GET", redis_key) == value
    assert resolve_lines(p)[-1]["result"] == "refused"


def test_resolve_on_a_live_lease_or_a_finished_record_is_409_and_changes_nothing(
        tmp_path, start_proxy, redis, upstream):
    token = new_token()
    p = start(start_proxy, tmp_path, token)
    key = "pay-" + uuid.uuid4().hex
    out = {}
    # 8 s at the upstream: the checks below take well under that on a loaded machine
    t = threading.Thread(target=lambda: out.update(r=p.post(
        key=key, headers=[("X-Demo-Delay-Ms", "8000")], timeout=30)))
    t.start()
    try:
        wait_until(lambda: upstream.executions(key) == 1, 15, what="the request at the upstream")
        (redis_key,) = redis.keys("idem:{*}")
        record_id = redis_key[len("idem:{"):-1]
        assert record(p, token, record_id).json()["state"] == "claimed"
        before = redis_contents(redis)
        live = resolve(p, token, record_id, answer(201, body=b"{}"))
        assert live.status == 409 and "lease is live" in live.json()["error"], live
        assert redis_contents(redis) == before
        # nor does a claim show as held while its lease is live
        assert listing(p, token, "claimed")[0] == []
    finally:
        t.join(30)
    assert out["r"].status == 201, out
    before = redis_contents(redis)
    done = resolve(p, token, record_id, answer(202, body=b"{}"))
    assert done.status == 409 and "never replaced" in done.json()["error"], done
    assert redis_contents(redis) == before
    retry = p.post(key=key, headers=[("X-Demo-Delay-Ms", "8000")])
    assert retry.status == 201 and retry.replayed and retry.body == out["r"].body
    assert upstream.executions(key) == 1
    lines = resolve_lines(p)
    assert [(l["result"], l["status"], l["recorded_status"]) for l in lines] == [
        ("conflict", 409, None), ("conflict", 409, None)], lines
    assert metric_values(p, "idempotency_proxy_records_resolved_total") == {
        "idempotency_proxy_records_resolved_total": 0.0}


def test_two_resolves_sent_at_once_one_wins(tmp_path, start_proxy, redis, upstream):
    token = new_token()
    p = start(start_proxy, tmp_path, token)
    key = "pay-" + uuid.uuid4().hex
    assert p.post(key=key, headers=CLOSE).status == 502
    record_id = access_record_id(p, "/v1/payments")
    bodies = [b'{"answer": "first"}', b'{"answer": "second"}']
    socks = []
    for i, body in enumerate(bodies):
        doc = json.dumps(answer(201 + i, body=body)).encode()
        s = socket.create_connection(("127.0.0.1", p.admin_port), timeout=15)
        s.sendall(b"PUT /records/%s HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer %s\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                  % (record_id.encode(), token.encode(), len(doc), doc))
        socks.append(s)
    # both are read by the admin loop before either answer is looked at
    statuses = []
    for s in socks:
        with s:
            statuses.append(read_response(s, "PUT", timeout=15).status)
    # the loser read the record before the winner wrote (409: it changed) or after (428: it
    # holds a resolution, replaced only with If-Match): either way nothing of it was written
    winner = statuses.index(200)
    loser = statuses[1 - winner]
    assert sorted(statuses) in ([200, 409], [200, 428]), statuses
    retry = p.post(key=key, headers=CLOSE)
    assert retry.status == 201 + winner and retry.replayed and retry.body == bodies[winner]
    assert upstream.executions(key) == 1
    lines = resolve_lines(p)
    assert sorted((l["result"], l["recorded_status"]) for l in lines) == sorted(
        [("ok", 201 + winner), ("conflict" if loser == 409 else "refused", None)]), lines


def test_an_answer_that_cannot_be_recorded_is_400_no_record_404_no_token_401(
        tmp_path, start_proxy, redis, upstream):
    token = new_token()
    p = start(start_proxy, tmp_path, token, limits={"max_stored_response": "1KiB"})
    key = "pay-" + uuid.uuid4().hex
    assert p.post(key=key, headers=CLOSE).status == 502
    record_id = access_record_id(p, "/v1/payments")
    before = redis_contents(redis)
    bad = [
        (None, b"{not json"),
        (None, b""),
        ({"status": 201, "headers": [], "body_base64": "", "extra": 1}, None),
        (answer(99), None),
        (answer(600), None),
        ({"status": "201", "headers": [], "body_base64": ""}, None),
        (answer(201, [("Connection", "close")]), None),
        (answer(201, [("Transfer-Encoding", "chunked")]), None),
        (answer(201, [("Set-Cookie", "a=b")]), None),
        (answer(201, [("Bad Name", "x")]), None),
        (answer(201, [("X-Ok", "line\r\nInjected: 1")]), None),
        ({"status": 201, "headers": [["X-Only-A-Name"]], "body_base64": ""}, None),
        ({"status": 201, "headers": [], "body_base64": "*not base64*"}, None),
        ({"status": 201, "headers": [], "body_base64": "QUJD-RUZH"}, None),  # OpenSSL stops at -
        ({"status": 201, "headers": [], "body_base64": "QUJDRA"}, None),  # unpadded
        ({"status": 201, "headers": []}, None),
        (answer(201, body=b"x" * 1025), None),
        # the operator's reason: required, one line of text, bounded
        (answer(201, reason=None), None),
        (answer(201, reason=""), None),
        (answer(201, reason="x" * 513), None),
        (answer(201, reason="two\nlines"), None),
        (answer(201, reason="\u0085 a C1 control"), None),
        (answer(201, reason="a line\u2028separator"), None),
        (answer(201, reason="INC-1 \u202edesrever"), None),
        ({"status": 201, "headers": [], "body_base64": "", "reason": 7}, None),
    ]
    for doc, raw in bad:
        r = resolve(p, token, record_id, doc, raw)
        assert r.status == 400 and r.content_type == "application/problem+json", (doc, raw, r)
        problem = r.json()
        assert problem["type"] == "urn:idempotency-proxy:problem:invalid-resolution", problem
        assert problem["status"] == 400 and problem["detail"], problem
    assert redis_contents(redis) == before
    assert "max_stored_response" in resolve(p, token, record_id,
                                            answer(201, body=b"x" * 1025)).json()["detail"]
    assert "Connection" in resolve(p, token, record_id,
                                   answer(201, [("Connection", "close")])).json()["detail"]
    assert "reason" in resolve(p, token, record_id, answer(201, reason=None)).json()["detail"]
    # exactly the limit is recorded
    assert resolve(p, token, record_id, answer(201, body=b"y" * 1024)).status == 200

    absent = uuid.uuid4().hex
    r = resolve(p, token, absent, answer(201))
    assert r.status == 404, r
    assert redis.keys("idem:{%s}" % absent) == []
    for headers in ([], bearer(new_token())):
        r = p.admin("PUT", "/records/" + absent, headers=headers,
                    body=json.dumps(answer(201)).encode())
        assert r.status == 401 and r.header("WWW-Authenticate", "").startswith("Bearer"), r
        assert p.admin("GET", "/records?state=outcome-unknown", headers=headers).status == 401
    lines = resolve_lines(p)
    n_bad = len(bad) + 3
    assert [l["result"] for l in lines] == ["refused"] * n_bad + ["ok", "not-found"], lines
    assert all(l["record_id"] == record_id for l in lines[:-1]) and lines[-1]["record_id"] == absent
    assert all(l["token"] == fingerprint(token) for l in lines)


def finished_copies(redis, value, n, ttl_ms=3600000):
    """n more finished records: copies of a real one under fresh record ids (one script)."""
    redis.cmd("EVAL", "for i = 1, tonumber(ARGV[2]) do "
              "redis.call('SET', string.format('idem:{%032x}', i), ARGV[1], 'PX', ARGV[3]) end",
              0, value, n, ttl_ms)


def assert_listing_finds(p, token, held, total_keys):
    entries, pages = listing(p, token)
    assert sorted(e["record_id"] for e in entries) == sorted(held), (entries, held, access_ids(p))
    for e in entries:
        assert e["state"] == "outcome-unknown" and e["route"] == "/v1/payments", e
        assert e["created_ms"] > 0 and e["ttl_ms"] > 0, e
    small, small_pages = listing(p, token, limit=1, max_pages=total_keys)
    assert sorted(e["record_id"] for e in small) == sorted(held), small
    assert all(len(page) <= 1 for page in small_pages), small_pages
    return pages, small_pages


def test_the_listing_finds_3_held_records_among_2000_finished_ones(tmp_path, start_proxy,
                                                                    redis, upstream):
    token = new_token()
    p = start(start_proxy, tmp_path, token)
    assert p.post(key="pay-" + uuid.uuid4().hex).status == 201
    access_record_id(p, "/v1/payments")  # its line is out: hold() counts the lines after it
    (done_key,) = redis.keys("idem:{*}")
    finished_copies(redis, redis.cmd("GET", done_key), 2000)
    held = [hold(p, "pay-" + uuid.uuid4().hex) for _ in range(3)]
    assert len(redis.keys("idem:{*}")) == 2004
    # a key of another type under the records' pattern is passed over
    redis.cmd("HSET", "idem:{%s}" % ("f" * 32), "not", "a record")
    started = time.monotonic()
    pages, small_pages = assert_listing_finds(p, token, held, 2005)
    elapsed = time.monotonic() - started
    # bounded pages: each SCANs a bounded number of keys, so 2004 keys take a few pages
    assert 2 <= len(pages) <= 40, len(pages)
    print("listing 2005 keys: %d pages (limit 100), %d pages (limit 1), %.2f s" % (
        len(pages), len(small_pages), elapsed))
    assert listing(p, token, "claimed")[0] == []
    # without state=: every held state (here the outcome-unknown ones)
    assert sorted(e["record_id"] for e in listing(p, token, None)[0]) == sorted(held)
    for bad in ("state=done", "state=claimed&state=claimed", "state=claimed&limit=0",
                "state=claimed&limit=1001", "state=claimed&cursor=x"):
        r = p.admin("GET", "/records?" + bad, headers=bearer(token))
        assert r.status == 400, (bad, r)


def page(p, token, query):
    r = p.admin("GET", "/records?" + query, headers=bearer(token))
    assert r.status == 200, r
    return r.json()


def test_a_record_held_for_the_whole_walk_is_listed_whatever_happens_to_the_others(
        tmp_path, start_proxy, redis, upstream):
    """Three outcome-unknown records in one SCAN batch, listed one a page: resolving the
    record a page listed, then purging the next one, moves none of the others out of the
    walk (the cursor names a record id, not a count of records)."""
    token = new_token()
    p = start(start_proxy, tmp_path, token)
    held = sorted(hold(p, "pay-" + uuid.uuid4().hex) for _ in range(3))
    first = page(p, token, "state=outcome-unknown&limit=1")
    assert [e["record_id"] for e in first["records"]] == held[:1], first
    # the batch goes on after the record listed: its id, and where the batch's SCAN ended
    node, scan, after, end = first["next_cursor"].split("-")
    assert (node, after) == ("0", held[0]), first
    assert resolve(p, token, held[0], answer()).status == 200
    second = page(p, token, "state=outcome-unknown&limit=1&cursor=" + first["next_cursor"])
    assert [e["record_id"] for e in second["records"]] == held[1:2], second
    r = p.admin("DELETE", "/records/%s?reason=INC-2%%3A+never+sent" % held[1],
                headers=bearer(token))
    assert r.status == 200, r
    rest, cursor = [], second["next_cursor"]
    while cursor is not None:
        doc = page(p, token, "state=outcome-unknown&limit=1&cursor=" + cursor)
        rest += [e["record_id"] for e in doc["records"]]
        cursor = doc["next_cursor"]
    assert rest == held[2:], rest
    # a cursor of an earlier release (NODE-SCAN-COUNT) lists its batch again: nothing is lost
    again = page(p, token, "state=outcome-unknown&limit=10&cursor=0-0-2")
    assert [e["record_id"] for e in again["records"]] == held[2:], again
    for bad in ("0-0-%s-0" % held[0].upper(), "0-0-%s" % held[0], "0-0-%s-" % held[0],
                "0-0-%s-0-1" % held[0]):
        r = p.admin("GET", "/records?cursor=" + bad, headers=bearer(token))
        assert r.status == 400, (bad, r)


def test_a_key_of_another_type_under_a_record_id_is_not_a_record(tmp_path, start_proxy, redis,
                                                                  upstream):
    """A hash under a record's key: GET, DELETE, PUT and extend answer 409 "not a record" and
    leave it alone (not 503 "redis unavailable"); the purge's audit line says 409."""
    token = new_token()
    p = start(start_proxy, tmp_path, token)
    record_id = "e" * 32
    redis.cmd("HSET", "idem:{%s}" % record_id, "not", "a record")
    for method, path, body in (
            ("GET", "/records/" + record_id, None),
            ("DELETE", "/records/%s?reason=x&confirm=re-execute" % record_id, None),
            ("PUT", "/records/" + record_id, json.dumps(answer()).encode()),
            ("POST", "/records/%s/extend" % record_id,
             json.dumps({"seconds": 60, "reason": "x"}).encode())):
        r = p.admin(method, path, headers=bearer(token), body=body)
        assert r.status == 409, (method, r)
        assert r.json()["error"].startswith("not a record"), (method, r)
    assert redis.cmd("HGET", "idem:{%s}" % record_id, "not") == "a record"
    purges = [l for l in audit_lines(p) if l["action"] == "purge"]
    assert [(l["record_id"], l["status"]) for l in purges] == [(record_id, 409)], purges
    look = p.admin("GET", "/records/lookup?path=/v1/payments&key=k", headers=bearer(token))
    assert look.status == 200, look


def test_a_claim_whose_lease_ran_out_is_listed_as_claimed_and_can_be_resolved(
        tmp_path, start_proxy, redis, upstream):
    token = new_token()
    tf = token_file(tmp_path, token)
    first = start_proxy(routes=[{"path": ROUTE}], lease="2s", admin_host="0.0.0.0",
                        admin_token_file=tf, name="dies")
    key = "pay-" + uuid.uuid4().hex
    def doomed():
        try:
            first.post(key=key, headers=[("X-Demo-Delay-Ms", "30000")], timeout=40)
        except HTTPError:
            pass  # the proxy is killed under it
    t = threading.Thread(target=doomed, daemon=True)
    t.start()
    wait_until(lambda: upstream.executions(key) == 1, 15, what="the request at the upstream")
    first.kill()  # the proxy dies mid-flight: its claim's lease is never renewed
    p = start_proxy(routes=[{"path": ROUTE}], lease="2s", admin_host="0.0.0.0",
                    admin_token_file=tf, name="survivor")
    (redis_key,) = redis.keys("idem:{*}")
    record_id = redis_key[len("idem:{"):-1]
    entries = wait_until(lambda: listing(p, token, "claimed")[0], 20, interval=0.5,
                         what="the claim listed once its lease ran out")
    assert [(e["record_id"], e["state"]) for e in entries] == [(record_id, "claimed")]
    assert entries[0]["lease_deadline_ms"] < time.time() * 1000
    held = p.post(key=key, headers=[("X-Demo-Delay-Ms", "30000")])
    assert held.status == 502 and held.problem()["type"].endswith(":outcome-unknown"), held
    r = resolve(p, token, record_id, answer(201, body=b'{"id": "ord_1"}'))
    assert r.status == 200, r
    retry = p.post(key=key, headers=[("X-Demo-Delay-Ms", "30000")])
    assert retry.status == 201 and retry.replayed and retry.body == b'{"id": "ord_1"}'
    assert upstream.executions(key) == 1
    assert listing(p, token, "claimed")[0] == []


@pytest.mark.topology
def test_the_listing_walks_every_primary_of_a_3_primary_cluster_and_resolves_on_each(tmp_path, start_proxy, redis,
                                                                 upstream):
    token = new_token()
    c = ClusterGroup(str(tmp_path / "cluster"), n_primaries=3, replicas_per=0)
    c.start()
    try:
        # 2000 finished records, copied into the cluster key by key (they spread by slot)
        single = start(start_proxy, tmp_path, token, name="single")
        assert single.post(key="pay-" + uuid.uuid4().hex).status == 201
        (done_key,) = redis.keys("idem:{*}")
        finished_copies(redis, redis.cmd("GET", done_key), 1999)
        single.stop()
        subprocess.run(["redis-cli", "--cluster", "import", c.addresses()[0], "--cluster-from",
                        "127.0.0.1:%d" % redis.port, "--cluster-copy", "--cluster-replace"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120)
        p = start(start_proxy, tmp_path, token, name="clustered", workers=1,
                  redis={"url": None, "cluster": {"addresses": c.addresses()[:2]},
                         "timeout": "2s"})
        wait_ready(p, timeout=20)
        # held records on every primary: keys picked by the node their record lands on
        by_node = {}
        for _ in range(300):
            key = "pay-" + uuid.uuid4().hex
            look = p.admin("GET", "/records/lookup?path=/v1/payments&key=" + key +
                           "&header=Authorization:%20x", headers=bearer(token)).json()
            slot = c.primaries()[0].cmd("CLUSTER", "KEYSLOT", look["redis_key"])
            node = next(n.port for n in c.primaries()
                        if any(a <= slot <= b for a, b in slots_of(n)))
            by_node.setdefault(node, key)
            if len(by_node) == 3:
                break
        assert len(by_node) == 3, by_node
        held = [hold(p, key, [("Authorization", "x")]) for key in by_node.values()]
        counts = [len(scan_all(n)) for n in c.primaries()]
        assert sum(counts) == 2003 and all(n > 600 for n in counts), counts
        pages, small_pages = assert_listing_finds(p, token, held, 2003)
        print("cluster listing 2003 keys: %d pages (limit 100), %d pages (limit 1)" % (
            len(pages), len(small_pages)))
        # each resolve goes to its record's primary; the retries replay what was recorded
        for i, (key, record_id) in enumerate(zip(by_node.values(), held)):
            body = b'{"resolved": %d}' % i
            assert resolve(p, token, record_id, answer(201, body=body)).status == 200
            retry = p.post(key=key, headers=CLOSE + [("Authorization", "x")])
            assert retry.status == 201 and retry.replayed and retry.body == body, retry
            assert upstream.executions(key) == 1
        assert listing(p, token)[0] == []
    finally:
        c.stop()


def slots_of(node):
    """The slot ranges node owns, from CLUSTER SHARDS' view of itself (CLUSTER MYSHARDID's
    shard) - read as CLUSTER SLOTS entries naming its port."""
    out = []
    for entry in node.cmd("CLUSTER", "SLOTS"):
        if entry[2][1] == node.port:
            out.append((entry[0], entry[1]))
    return out


def scan_all(node):
    keys, cursor = [], "0"
    while True:
        cursor, batch = node.cmd("SCAN", cursor, "MATCH", "idem:{*", "COUNT", 1000)
        keys += batch
        if cursor in ("0", b"0"):
            return keys


def test_listing_and_resolving_through_sentinel(tmp_path, start_proxy, upstream):
    token = new_token()
    g = SentinelGroup(str(tmp_path / "sentinel"), name="payments", n_replicas=0, n_sentinels=1)
    g.start()
    try:
        p = start(start_proxy, tmp_path, token, redis={
            "url": None, "sentinel": {"master": "payments", "addresses": g.sentinel_addresses}})
        wait_ready(p, timeout=20)
        key = "pay-" + uuid.uuid4().hex
        record_id = hold(p, key)
        entries, _ = listing(p, token)
        assert [e["record_id"] for e in entries] == [record_id], entries
        assert resolve(p, token, record_id, answer(201, body=b'{"id": "ord_s"}')).status == 200
        retry = p.post(key=key, headers=CLOSE)
        assert retry.status == 201 and retry.replayed and retry.body == b'{"id": "ord_s"}'
        assert upstream.executions(key) == 1
        assert listing(p, token)[0] == []
    finally:
        g.stop()


def test_a_release_status_is_refused_and_a_purge_names_the_records_route(tmp_path, start_proxy,
                                                                         redis, upstream):
    """An answer whose status the route releases (release_statuses: an upstream's 503 is never
    recorded) is not recorded by a resolve either: 400, Redis unchanged; a purge's audit line
    names the route the record was written under."""
    token = new_token()
    p = start(start_proxy, tmp_path, token)
    key = "pay-" + uuid.uuid4().hex
    record_id = hold(p, key)
    redis_key = "idem:{%s}" % record_id
    value = redis.cmd("GET", redis_key)
    r = resolve(p, token, record_id, answer(503, [("Retry-After", "1")]))
    assert r.status == 400 and r.problem()["type"].endswith(":invalid-resolution"), r
    assert "release_statuses" in r.problem()["detail"], r.body
    assert redis.cmd("GET", redis_key) == value, "nothing was written"
    assert resolve_lines(p)[-1]["result"] == "refused"
    assert p.admin("DELETE", "/records/" + record_id, headers=bearer(token)).status == 200
    (purge,) = [l for l in audit_lines(p) if l["action"] == "purge"]
    assert purge["record_id"] == record_id and purge["route"] == "/v1/payments", purge
    assert upstream.executions(key) == 1
