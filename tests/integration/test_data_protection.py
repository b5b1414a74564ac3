"""Data protection: what the proxy keeps in Redis under `encryption.keyring`, as the real binary
writes it to a real redis-server (`rdbcompression no`, `appendonly yes`).

- With a keyring, none of the unique markers of request bodies, answers and header fields of
  payments on a protected route, and of deliveries (one of them dead-lettered) on a queued
  webhook route, is in the RDB file after SAVE or in the AOF; replays and deliveries are byte
  for byte what the upstream and the provider sent.
- Rotation in three SIGHUP steps under traffic: records of the old key replay (retries with the
  same body too, never 409), new records carry the new key id, once the old key is removed its
  records answer 503 record-key-unavailable with Retry-After; every key executed once.
- One changed byte of a stored value: 502 record-unreadable, nothing forwarded, the record kept,
  counted in idempotency_proxy_decrypt_failures_total{reason="unreadable"}.
- The same request under two keyrings has two fingerprints, under one keyring the same.
- Records written without a keyring (IR1 as older releases wrote them, and plaintext IR2) replay
  and compare after the keyring is turned on, within encryption.accept_plaintext_until, and new
  records are sealed.
- A queued delivery whose key was removed is retried, and dead-lettered with that reason at
  max_attempts, never delivered.
- Dead letters are deleted after delivery.dead_retention; one shorter than max_age is refused.
"""
import base64
import glob
import os
import re
import time
import uuid

import pytest

from harness import RedisServer, wait_until
from inbox_helpers import (
    ENCODED, Receiver, deliver, inbox, new_secret as new_webhook_secret, queued_route, stripe_body,
)
from proxy_helpers import (
    Traffic, head, metric, new_key, new_keyring_secret as new_secret, pay, raw, records,
    reload_and_wait, run_check, write_keyring,
)

# tests/run.sh runs this file under ThreadSanitizer with two worker threads a proxy
# (IDEM_TEST_WORKERS=2): its requests meet across workers (docs/internals.md).
pytestmark = pytest.mark.threads


def to_ir1(value):
    """A plaintext IR2 record as 0.3 wrote it (IR1): the same head fields, status in the head."""
    assert value[:3] == b"IR2" and value[116:117] == b"P", value[:130]
    id_len, route_len = int(value[117:119]), int(value[119:123])
    answer = value[123 + id_len + route_len:]
    return b"IR1" + value[3:116] + answer


def pay_fresh(p, n, prefix="M"):
    """n payments under fresh keys, each marked prefix + key and answered 201: {key: answer}."""
    made = {}
    for _ in range(n):
        k = new_key()
        made[k] = pay(p, k, prefix + k)
        assert made[k].status == 201, made[k]
    return made


def assert_same_answer(retry, first):
    assert retry.status == first.status, retry
    assert retry.header("Idempotent-Replayed") == "true", retry
    assert retry.body == first.body
    assert retry.header("X-Marker") == first.header("X-Marker")


@pytest.fixture
def persistent_redis(tmp_path):
    srv = RedisServer(str(tmp_path / "redis-aof"),
                      extra_args=["--appendonly", "yes", "--appendfsync", "always",
                                  "--rdbcompression", "no"])
    srv.start()
    yield srv
    srv.kill()


@pytest.fixture
def keyring_path(tmp_path):
    return str(tmp_path / "keyring.yaml")


def start_keyed(start_proxy, redis, keyring, **kw):
    return start_proxy(redis_url=redis.url, encryption={"keyring": keyring}, **kw)


# --------------------------------------------------------------------------
# (1) nothing of an answer or a delivery in the RDB or the AOF
# --------------------------------------------------------------------------

def test_markers_absent_from_rdb_and_aof_replays_and_deliveries_byte_for_byte(
        tmp_path, start_proxy, persistent_redis, keyring_path):
    redis = persistent_redis
    write_keyring(keyring_path, ("2026-12", new_secret()))
    p = start_keyed(start_proxy, redis, keyring_path)
    markers = []
    for _ in range(4):
        marker, k = "MARKPAY" + uuid.uuid4().hex, new_key()
        markers.append(marker)
        first = pay(p, k, marker)
        assert first.status == 201 and marker.encode() in first.body, first
        assert first.header("X-Marker") == marker + "-h"
        assert_same_answer(pay(p, k, marker), first)

    receiver = Receiver(str(tmp_path)).start()
    try:
        secret = new_webhook_secret()
        w = start_keyed(start_proxy, redis, keyring_path, name="webhooks",
                        routes=[queued_route(secret, max_attempts=2,
                                             backoff={"initial": "100ms", "max": "200ms"})],
                        upstream_url=receiver.url, env={"STRIPE_SECRET": secret})
        sent = {}
        for _ in range(3):
            evt, marker = "evt_" + uuid.uuid4().hex, "MARKHOOK" + uuid.uuid4().hex
            markers.append(marker)
            sent[evt] = stripe_body(evt, note=marker)
            assert deliver(w, secret, sent[evt]).status == 202
        wait_until(lambda: {a["event"] for a in receiver.attempts()
                            if a["status"] == 200} == set(sent), 20, what="3 delivered")
        for a in receiver.attempts():
            assert a["body"].encode() == sent[a["event"]], a
        # one more to the dead letters: the receiver fails both attempts
        receiver.control(status=500)
        dead_evt, marker = "evt_" + uuid.uuid4().hex, "MARKDEAD" + uuid.uuid4().hex
        markers.append(marker)
        dead_body = stripe_body(dead_evt, note=marker)
        assert deliver(w, secret, dead_body).status == 202
        wait_until(lambda: inbox(w)["dead"] == 1, 20, interval=0.2, what="a dead letter")
        got = [a for a in receiver.attempts() if a["event"] == dead_evt]
        assert len(got) == 2 and all(a["body"].encode() == dead_body for a in got), got
    finally:
        receiver.stop()

    assert len(records(redis)) == 4 + 4  # the payments and the webhook events' records
    assert all(head(v)[3] == "S" and head(v)[4] == "2026-12" for v in records(redis).values())
    assert redis.cmd("SAVE") == "OK"
    files = [os.path.join(redis.workdir, "dump.rdb")] + glob.glob(
        os.path.join(redis.workdir, "appendonlydir", "*")) + glob.glob(
        os.path.join(redis.workdir, "*.aof"))
    blobs = {}
    for f in files:
        with open(f, "rb") as fh:
            blobs[f] = fh.read()
    assert any(f.endswith("dump.rdb") for f in blobs) and len(blobs) >= 2, list(blobs)
    # the files are readable as written: the event ids (the records' keys) are in them
    assert all(any(evt.encode() in b for b in blobs.values()) for evt in sent)
    for marker in markers:
        for f, b in blobs.items():
            assert marker.encode() not in b, "%s found in %s" % (marker, f)


# --------------------------------------------------------------------------
# (2) rotation in three reloads, under traffic
# --------------------------------------------------------------------------


def test_rotation_in_three_reloads_under_traffic(start_proxy, redis, upstream, keyring_path):
    old, new = ("2026-09", new_secret()), ("2026-12", new_secret())
    write_keyring(keyring_path, old)
    p = start_keyed(start_proxy, redis, keyring_path)
    made = pay_fresh(p, 3)
    old_records = records(redis)
    assert {head(v)[4] for v in old_records.values()} == {"2026-09"}

    def all_replay(keys):
        for k in keys:
            assert_same_answer(pay(p, k, "M" + k), made[k])

    with Traffic(p, threads=1, then="twice", timeout=None, tag="k",
                 body=lambda k: b'{"traffic": "%s"}' % k.encode()) as traffic:
        # 1. the new key second: everything as before
        write_keyring(keyring_path, old, new)
        reload_and_wait(p, "reloaded")
        all_replay(list(made))
        # 2. the new key first: new records carry its id, old ones still replay (not 409)
        write_keyring(keyring_path, new, old)
        reload_and_wait(p, "reloaded")
        all_replay(list(made))
        fresh = pay_fresh(p, 2)
        made.update(fresh)
        all_replay(list(made))
    assert not traffic.bad, traffic.bad[:2]
    assert len(traffic.keys) > 0
    now = records(redis)
    new_ids = {head(v)[4] for k, v in now.items() if k not in old_records}
    assert new_ids >= {"2026-12"}
    for k, v in old_records.items():
        assert head(now[k])[4] == "2026-09"

    # 3. the old key removed: its records answer 503, the new key's still replay
    write_keyring(keyring_path, new)
    reload_and_wait(p, "reloaded")
    before = upstream.total()
    for k in made:
        r = pay(p, k, "M" + k)
        if k in fresh:
            assert_same_answer(r, made[k])
        else:
            assert r.status == 503, r
            assert r.problem()["type"].endswith("record-key-unavailable"), r.body
            assert r.header("Retry-After") is not None
    assert upstream.total() == before, "a record that cannot be read was forwarded"
    for k in list(made) + traffic.keys:
        assert upstream.executions(k) == 1, k
    assert metric(p, "idempotency_proxy_decrypt_failures_total",
                       'reason="key_unavailable"') == 3
    assert (metric(p, "idempotency_proxy_encrypted_total", 'key_id="2026-12"') or 0) >= 2
    assert (metric(p, "idempotency_proxy_decrypted_total", 'key_id="2026-09"') or 0) >= 6
    stderr = p.stderr_text()
    assert re.search(r'exchange [0-9a-f]{32}: the record\'s key id "2026-09" is not in the '
                     r'keyring', stderr), stderr[-2000:]
    assert old[1] not in stderr and new[1] not in stderr


# --------------------------------------------------------------------------
# (3) a changed byte: 502, nothing forwarded
# --------------------------------------------------------------------------

def test_one_changed_byte_is_502_record_unreadable_and_nothing_forwarded(
        start_proxy, redis, upstream, keyring_path):
    write_keyring(keyring_path, ("k1", new_secret()))
    p = start_keyed(start_proxy, redis, keyring_path)
    k = new_key()
    first = pay(p, k, "MARK" + k)
    assert first.status == 201
    (rkey, value), = records(redis).items()
    changed = value[:-1] + bytes([value[-1] ^ 0x01])
    assert redis.cmd("SET", rkey, changed, "KEEPTTL") == "OK"
    before = upstream.total()
    for _ in range(2):
        r = pay(p, k, "MARK" + k)
        assert r.status == 502, r
        assert r.problem()["type"].endswith("record-unreadable"), r.body
        assert b"MARK" not in r.body
    assert upstream.total() == before and upstream.executions(k) == 1
    assert raw(redis, rkey) == changed, "the record is kept as it is"
    assert metric(p, "idempotency_proxy_decrypt_failures_total", 'reason="unreadable"') == 2
    assert re.search(r'exchange [0-9a-f]{32}: the record \(key id "k1"\) fails authentication',
                     p.stderr_text())


@pytest.mark.parametrize("mangle", ["later-format", "cut"])
def test_a_record_this_release_cannot_read_is_502_never_forwarded_even_under_pass(
        start_proxy, redis, upstream, mangle):
    """A value at a record key that does not decode (written by a later record format, or cut
    short) means the key was or may have been forwarded: 502 record-unreadable, the record
    kept, nothing forwarded, also under on_store_error: pass (which forwards only when Redis
    itself fails)."""
    p = start_proxy(on_store_error="pass")
    k = new_key()
    first = pay(p, k, "MARK" + k)
    assert first.status == 201
    (rkey, value), = records(redis).items()
    changed = b"IR9" + value[3:] if mangle == "later-format" else value[:40]
    assert redis.cmd("SET", rkey, changed, "KEEPTTL") == "OK"
    r = pay(p, k, "MARK" + k)
    assert r.status == 502, r
    assert r.problem()["type"].endswith("record-unreadable"), r.body
    assert upstream.executions(k) == 1
    assert raw(redis, rkey) == changed, "the record is kept as it is"
    assert "the stored record is malformed" in p.stderr_text()


def test_a_resolve_under_a_keyring_is_sealed_and_replayed(start_proxy, redis, upstream,
                                                          keyring_path, tmp_path):
    """PUT /records/<id> writes the operator's answer through the record codec: sealed under
    the keyring like the proxy's own answers, and the retry (compared under the claim's key
    id) replays it."""
    write_keyring(keyring_path, ("k1", new_secret()))
    token = "t" * 40
    token_file = tmp_path / "admin-token"
    token_file.write_text(token + "\n")
    p = start_keyed(start_proxy, redis, keyring_path, admin_token_file=str(token_file))
    k = new_key()
    body = b'{"amount": 100, "note": "MARK%s"}' % k.encode()
    r = p.post(key=k, body=body, headers=[("X-Demo-Fault", "close")])
    assert r.status == 502, r
    (rkey, value), = records(redis).items()
    assert head(value)[1] == "U", head(value)
    rid = rkey.split("{", 1)[1].rstrip("}")
    answer = b'{"id": "ord_MARK%s"}' % k.encode()
    put = p.admin("PUT", "/records/" + rid, body=(
        '{"status": 201, "headers": [["Content-Type", "application/json"]], "body_base64": "%s", '
        '"reason": "found at the upstream"}' % base64.b64encode(answer).decode()).encode(),
        headers=[("Authorization", "Bearer " + token), ("Content-Type", "application/json")])
    assert put.status == 200, put
    value = raw(redis, rkey)
    # an operator's resolution: state R, replayed like the upstream's answer
    assert head(value)[:2] == (2, "R") and head(value)[3] != "P", head(value)
    assert head(value)[4] == "k1", head(value)
    assert b"ord_MARK" not in value, "the resolved answer is sealed"
    retry = p.post(key=k, body=body)
    assert retry.status == 201 and retry.body == answer, retry
    assert retry.header("Idempotent-Replayed") == "true", retry
    assert upstream.executions(k) == 1


# --------------------------------------------------------------------------
# (4) keyed fingerprints
# --------------------------------------------------------------------------

def test_same_request_two_keyrings_two_fingerprints_one_keyring_the_same(
        start_proxy, redis, keyring_path):
    one, two = ("one", new_secret()), ("two", new_secret())
    body = b'{"amount": 4242, "card": "424242******4242"}'

    def fingerprint_of(p, k):
        assert p.post(key=k, body=body).status == 201
        before = set(seen)
        now = records(redis)
        (rkey,) = set(now) - before
        seen.update(now)
        return head(now[rkey])[2], head(now[rkey])[4]

    seen = {}
    write_keyring(keyring_path, one)
    p = start_keyed(start_proxy, redis, keyring_path)
    fp1, id1 = fingerprint_of(p, new_key())
    fp1b, _ = fingerprint_of(p, new_key())
    write_keyring(keyring_path, two)
    reload_and_wait(p, "reloaded")
    fp2, id2 = fingerprint_of(p, new_key())
    write_keyring(keyring_path, one)
    reload_and_wait(p, "reloaded")
    fp3, _ = fingerprint_of(p, new_key())
    assert (id1, id2) == ("one", "two")
    assert fp1 == fp1b == fp3, "one keyring, one fingerprint"
    assert fp1 != fp2, "two keyrings, two fingerprints"


# --------------------------------------------------------------------------
# (5) migration: records from before the keyring
# --------------------------------------------------------------------------

def test_plaintext_records_replay_after_the_keyring_is_turned_on(
        start_proxy, redis, upstream, keyring_path):
    p = start_proxy(redis_url=redis.url)
    made = pay_fresh(p, 2, "MARK")
    plain = records(redis)
    assert all(head(v)[3] == "P" and head(v)[4] == "" for v in plain.values())
    # the first as a 0.3 proxy wrote it
    ir1_key = sorted(plain)[0]
    assert redis.cmd("SET", ir1_key, to_ir1(plain[ir1_key]), "KEEPTTL") == "OK"

    write_keyring(keyring_path, ("2026-12", new_secret()))
    # the migration window: without it a record that is not sealed is refused (test_integrity)
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    with open(p.config_path, "a") as f:
        f.write("encryption:\n  keyring: %s\n  accept_plaintext_until: %s\n"
                % (keyring_path, until))
    reload_and_wait(p, "reloaded")
    for k, first in made.items():
        assert_same_answer(pay(p, k, "MARK" + k), first)
        mismatch = pay(p, k, "MARK" + k, body=b'{"amount": 1}')
        assert mismatch.status == 409, mismatch
        assert upstream.executions(k) == 1
    assert head(raw(redis, ir1_key))[0] == 1, "a replay does not rewrite the record"
    k = new_key()
    first = pay(p, k, "MARKNEW" + k)
    assert first.status == 201
    (new_value,) = [v for rk, v in records(redis).items() if rk not in plain]
    assert head(new_value)[3:5] == ("S", "2026-12") and b"MARKNEW" not in new_value
    assert_same_answer(pay(p, k, "MARKNEW" + k), first)


# --------------------------------------------------------------------------
# (6) a queued delivery whose key is gone: retried, dead-lettered at max_attempts, never
#     delivered (test_integrity: delivered once the key is back)
# --------------------------------------------------------------------------

def test_queued_delivery_whose_key_is_gone_is_dead_lettered_at_max_attempts(
        tmp_path, start_proxy, redis, keyring_path):
    old, new = ("old", new_secret()), ("new", new_secret())
    write_keyring(keyring_path, old)
    receiver = Receiver(str(tmp_path), status=500).start()
    try:
        secret = new_webhook_secret()
        w = start_keyed(start_proxy, redis, keyring_path,
                        routes=[queued_route(secret, max_attempts=4,
                                             backoff={"initial": "1s", "max": "1s"})],
                        upstream_url=receiver.url, env={"STRIPE_SECRET": secret})
        evt = "evt_" + uuid.uuid4().hex
        body = stripe_body(evt, note="MARK" + evt)
        assert deliver(w, secret, body).status == 202
        wait_until(lambda: len(receiver.attempts()) >= 1, 20, what="a first attempt")
        write_keyring(keyring_path, new)
        reload_and_wait(w, "reloaded")
        wait_until(lambda: inbox(w)["dead"] == 1, 30, interval=0.2, what="a dead letter")
        letters = w.admin("GET", "/inbox/%s/dead" % ENCODED).json()["dead"]
        assert len(letters) == 1 and letters[0]["event"] == evt
        reason = letters[0]["reason"]
        assert "max_attempts after 4 attempts" in reason and "not in the keyring" in reason, reason
        assert all(a["body"].encode() == body for a in receiver.attempts())
        attempts = len(receiver.attempts())
        assert attempts < 4
        assert metric(w, "idempotency_proxy_decrypt_failures_total",
                           'reason="key_unavailable"') == 4 - attempts
    finally:
        receiver.stop()


# --------------------------------------------------------------------------
# (7) delivery.dead_retention: dead letters are deleted
# --------------------------------------------------------------------------

def test_dead_letters_are_deleted_after_dead_retention(tmp_path, start_proxy, redis):
    receiver = Receiver(str(tmp_path), status=500).start()
    try:
        secret = new_webhook_secret()
        w = start_proxy(routes=[queued_route(secret, max_attempts=1, max_age="1s",
                                             dead_retention="3s")],
                        upstream_url=receiver.url, env={"STRIPE_SECRET": secret})
        evt = "evt_" + uuid.uuid4().hex
        assert deliver(w, secret, stripe_body(evt)).status == 202
        wait_until(lambda: inbox(w)["dead"] == 1, 20, interval=0.2, what="a dead letter")
        # deleted within dead_retention and a poll or two of the retries
        wait_until(lambda: inbox(w)["dead"] == 0, 30, interval=0.5, what="the dead letter deleted")
        assert w.admin("GET", "/inbox/%s/dead" % ENCODED).json()["dead"] == []
    finally:
        receiver.stop()


def test_dead_retention_shorter_than_max_age_is_refused_naming_its_line(tmp_path):
    rc, out, _ = run_check(tmp_path, "routes:\n  - path: /webhooks/x\n    key_from: json:/id\n"
                           "    verify: none\n    delivery:\n      mode: queued\n"
                           "      max_age: 2h\n      dead_retention: 1h\n")
    assert rc == 1, out
    assert "check.yaml:8: delivery.dead_retention (1h) must be at least delivery.max_age (2h)" \
        in out, out
