"""Integrity under `encryption.keyring` against someone who can write to Redis
(docs/data-protection.md, "Someone with write access to Redis"):

- Queued deliveries that the proxy did not seal as they are (a plaintext entry, a sealed value
  copied to another target, method, record or from an exact to a prefix route, plaintext `h:`
  fields or a body beside a sealed value) go to the dead letters with their reason; a real
  Standard Webhooks receiver (tests/receivers/verify_receiver.js, the `standardwebhooks` npm
  package) gets none of them, while a genuine delivery still arrives and verifies.
- A sealed record downgraded to a plaintext answer, or rewritten as IR1, is `502
  record-unreadable`, never replayed or forwarded.
- `encryption.accept_plaintext_until`: records and deliveries written before the keyring are
  read until then, refused after; `-t` checks and warns.
- A delivery whose key is not in the keyring is retried, not dead-lettered at once, and is
  delivered once the key is back.
"""
import re
import subprocess
import time
import urllib.parse
import uuid

import pytest

from harness import build_config, free_port, proxy_binary, to_yaml, wait_until
from inbox_helpers import (
    Receiver, VerifyingReceiver, deliver, new_secret as new_provider_secret, sign_secret,
    stripe_body,
)
from proxy_helpers import (
    assert_problem, head, metric, new_key, new_keyring_secret as new_secret, pay, raw, records,
    reload_and_wait, write_keyring,
)


def rfc3339(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def enc(name):
    return urllib.parse.quote(name, safe="")


def queued(path, provider_secret, **delivery):
    d = {"mode": "queued", "max_attempts": 10, "max_age": "72h",
         "backoff": {"initial": "1s", "max": "1s"}, "visibility_timeout": "30s",
         "concurrency": 4, "ack_status": 202}
    d.update(delivery)
    return {"path": path, "key_from": "json:/id", "verify": "stripe",
            "secret": provider_secret, "delivery": d}


def admin_ok(p, method, path):
    r = p.admin(method, path)
    assert r.status == 200, r
    return r.json()


def dead(p, name):
    return admin_ok(p, "GET", "/inbox/%s/dead" % enc(name))["dead"]


def streams(redis):
    return [k for k in redis.keys("*:inbox:*:stream")]


def entries(redis, stream):
    """[(id, [(field, value bytes), ...])] of a stream."""
    out = []
    for eid, flat in redis.cmd("XRANGE", stream, "-", "+"):
        flat = [f.encode() if isinstance(f, str) else f for f in flat]
        out.append((eid, [(flat[i].decode(), flat[i + 1]) for i in range(0, len(flat), 2)]))
    return out


def xadd(redis, stream, fields):
    args = []
    for k, v in fields:
        args += [k, v]
    return redis.cmd("XADD", stream, "*", *args)


def replaced(fields, **new):
    return [(k, new[k].encode() if k in new else v) for k, v in fields]


# --------------------------------------------------------------------------
# items 1, 3, 10: forged queued deliveries
# --------------------------------------------------------------------------

def test_forged_deliveries_are_dead_lettered_and_the_receiver_verifies_only_genuine_ones(
        tmp_path, start_proxy, redis):
    keyring = write_keyring(tmp_path / "keyring.yaml", ("2026-12", new_secret()))
    provider, signing = new_provider_secret(), sign_secret()
    receiver = VerifyingReceiver(str(tmp_path), signing).start()
    try:
        sign = {"secret": "${SIGNING}"}
        p = start_proxy(redis_url=redis.url, encryption={"keyring": keyring},
                        routes=[queued("/wh/", provider, sign=sign),
                                queued("/wh/*", provider, sign=sign)],
                        upstream_url=receiver.url, env={"SIGNING": signing})
        genuine = "evt_" + uuid.uuid4().hex
        assert deliver(p, provider, stripe_body(genuine), "/wh/").status == 202
        wait_until(lambda: receiver.attempts(), what="the genuine delivery")
        wait_until(lambda: not any(entries(redis, s) for s in streams(redis)),
                   what="the genuine delivery settled (its entry deleted)")
        # a second genuine delivery held in the stream, to copy its sealed value
        admin_ok(p, "POST", "/inbox/%s/pause" % enc("/wh/"))
        held = "evt_" + uuid.uuid4().hex
        assert deliver(p, provider, stripe_body(held), "/wh/").status == 202
        exact = wait_until(lambda: [s for s in streams(redis) if entries(redis, s)],
                           what="the held entry")[0]
        (prefix,) = [s for s in streams(redis) if s != exact]
        ((_, sealed),) = entries(redis, exact)
        names = [k for k, _ in sealed]
        assert "sealed" in names and "body" not in names, names
        now = str(int(time.time() * 1000)).encode()
        plain = [("event", b"evt_forged_" + uuid.uuid4().hex.encode()), ("record", b"f" * 32),
                 ("method", b"POST"), ("target", b"/wh/"), ("received", now),
                 ("attempts", b"0"), ("h:Content-Type", b"application/json"),
                 ("h:X-Forged", b"1"),
                 ("body", b'{"id": "evt_forged", "type": "payment_intent.succeeded"}')]
        forged = {
            "not sealed": plain,
            "another target": replaced(sealed, target="/wh/other"),
            "another method": replaced(sealed, method="PUT"),
            "another record": replaced(sealed, record="0" * 32),
            "h: beside sealed": sealed + [("h:X-Forged", b"1")],
            "body beside sealed": sealed + [("body", b'{"type": "payment_intent.succeeded"}')],
        }
        for fields in forged.values():
            xadd(redis, exact, fields)
        xadd(redis, prefix, sealed)  # from the exact route /wh/ to the prefix route /wh/*
        admin_ok(p, "POST", "/inbox/%s/resume" % enc("/wh/"))

        wait_until(lambda: len(dead(p, "/wh/")) == len(forged) and len(dead(p, "/wh/*")) == 1,
                   30, interval=0.2, what="every forgery in the dead letters")
        wait_until(lambda: any(a["event"] == held for a in receiver.attempts()),
                   what="the held genuine delivery")
        reasons = [d["reason"] for d in dead(p, "/wh/") + dead(p, "/wh/*")]
        assert sum("not sealed" in r for r in reasons) == 1, reasons
        assert sum("tampered" in r for r in reasons) == 2, reasons
        assert sum(r.startswith("fails authentication") for r in reasons) == 4, reasons
        # at once, with no attempt made: never "max_attempts after ..."
        assert all(d["attempts"] == "0" for d in dead(p, "/wh/") + dead(p, "/wh/*")), reasons
        attempts = receiver.attempts()
        assert sorted(a["event"] for a in attempts) == sorted([genuine, held]), attempts
        assert all(a["verified"] and a["status"] == 204 for a in attempts), attempts
        assert all("x-forged" not in a["headers"] for a in attempts)
        assert metric(p, "idempotency_proxy_decrypt_failures_total",
                           'reason="unreadable"') == len(forged) + 1
    finally:
        receiver.stop()


# --------------------------------------------------------------------------
# item 2: records downgraded to plaintext
# --------------------------------------------------------------------------

def downgraded(value, answer):
    """value (a sealed IR2 record) with its answer flag set to plaintext and answer appended."""
    v, _, _, flag, key_id, route = head(value)
    assert v == 2 and flag == "S", value[:130]
    h = 123 + len(key_id) + len(route.encode())
    return value[:116] + b"P" + value[117:h] + answer


FORGED_ANSWER = b"200" + b"00000" + b'{"status":"FORGED-approved"}'


def test_a_downgraded_or_ir1_record_is_502_record_unreadable_never_replayed(
        tmp_path, start_proxy, redis, upstream):
    keyring = write_keyring(tmp_path / "keyring.yaml", ("2026-12", new_secret()))
    p = start_proxy(redis_url=redis.url, encryption={"keyring": keyring})
    made = {}
    for _ in range(2):
        k = new_key()
        made[k] = pay(p, k, "M" + k)
        assert made[k].status == 201
    (down_key, ir1_key) = sorted(records(redis))
    value = raw(redis, down_key)
    assert redis.cmd("SET", down_key, downgraded(value, FORGED_ANSWER), "KEEPTTL") == "OK"
    value = raw(redis, ir1_key)
    assert redis.cmd("SET", ir1_key, b"IR1" + value[3:116] + FORGED_ANSWER, "KEEPTTL") == "OK"
    for k in made:
        r = pay(p, k, "M" + k)
        assert_problem(r, 502, "record-unreadable")
        assert b"FORGED" not in r.body
        assert upstream.executions(k) == 1
    assert metric(p, "idempotency_proxy_decrypt_failures_total",
                       'reason="unreadable"') == 2


# --------------------------------------------------------------------------
# encryption.accept_plaintext_until: the migration window, records and deliveries
# --------------------------------------------------------------------------

def set_window(p, keyring, until):
    """Rewrite p's encryption section with keyring and accept_plaintext_until, and reload."""
    text = open(p.config_path).read().split("encryption:")[0]
    with open(p.config_path, "w") as f:
        f.write(text + "encryption:\n  keyring: %s\n  accept_plaintext_until: %s\n"
                % (keyring, until))
    reload_and_wait(p, "reloaded")
    assert "reload refused" not in p.stderr_text()


def test_records_written_before_the_keyring_replay_until_accept_plaintext_until(
        tmp_path, start_proxy, redis, upstream):
    p = start_proxy(redis_url=redis.url)
    k = new_key()
    first = pay(p, k, "M" + k)
    assert first.status == 201
    keyring = write_keyring(tmp_path / "keyring.yaml", ("2026-12", new_secret()))
    set_window(p, keyring, rfc3339(time.time() + 3600))
    retry = pay(p, k, "M" + k)
    assert retry.status == 201 and retry.header("Idempotent-Replayed") == "true", retry
    assert retry.body == first.body
    # the window is over (a reload to a past time): the same record is refused
    set_window(p, keyring, "2020-01-01T00:00:00Z")
    assert re.search(r":\d+: warning: encryption.accept_plaintext_until is in the past",
                     p.stderr_text()), p.stderr_text()
    r = pay(p, k, "M" + k)
    assert_problem(r, 502, "record-unreadable")
    assert upstream.executions(k) == 1


def test_deliveries_queued_before_the_keyring_are_delivered_until_accept_plaintext_until(
        tmp_path, start_proxy, redis):
    provider = new_provider_secret()
    receiver = Receiver(str(tmp_path), status=200).start()
    try:
        p = start_proxy(redis_url=redis.url, upstream_url=receiver.url,
                        routes=[queued("/webhooks/stripe", provider)])
        admin_ok(p, "POST", "/inbox/%s/pause" % enc("/webhooks/stripe"))
        inside, outside = "evt_" + uuid.uuid4().hex, "evt_" + uuid.uuid4().hex
        assert deliver(p, provider, stripe_body(inside)).status == 202
        keyring = write_keyring(tmp_path / "keyring.yaml", ("2026-12", new_secret()))
        set_window(p, keyring, rfc3339(time.time() + 3600))
        admin_ok(p, "POST", "/inbox/%s/resume" % enc("/webhooks/stripe"))
        got = wait_until(lambda: receiver.attempts(), what="the plaintext delivery")
        assert [a["event"] for a in got] == [inside]
        # a plaintext entry after the window: the dead letters, never sent
        set_window(p, keyring, "2020-01-01T00:00:00Z")
        (stream,) = streams(redis)
        xadd(redis, stream, [("event", outside.encode()), ("record", b"a" * 32),
                             ("method", b"POST"), ("target", b"/webhooks/stripe"),
                             ("received", str(int(time.time() * 1000)).encode()),
                             ("attempts", b"0"), ("body", stripe_body(outside))])
        letters = wait_until(lambda: dead(p, "/webhooks/stripe"), 30, what="a dead letter")
        assert letters[0]["event"] == outside and "not sealed" in letters[0]["reason"]
        assert [a["event"] for a in receiver.attempts()] == [inside]
    finally:
        receiver.stop()


def check(text):
    return subprocess.run([proxy_binary(), "-t", "-c", "/dev/stdin"], input=text.encode(),
                          capture_output=True)


def config_text(tmp_path, until, keyring=True, retention="24h"):
    enc_section = {"accept_plaintext_until": until}
    if keyring:
        enc_section["keyring"] = write_keyring(tmp_path / "keyring.yaml",
                                               ("2026-12", new_secret()))
    cfg = build_config(free_port(), 0, "http://127.0.0.1:1", "redis://127.0.0.1:1",
                       routes=[{"path": "/v1/*", "retention": retention}],
                       encryption=enc_section)
    return to_yaml(cfg)


@pytest.mark.parametrize("bad", ["2026-12-31", "2026-12-31T00:00:00+00:00",
                                 "2026-02-30T00:00:00Z", "2026-12-31T24:00:00Z",
                                 "2026-12-31T00:00:00.5Z", "tomorrow"])
def test_t_refuses_an_accept_plaintext_until_that_is_not_rfc3339_utc_naming_its_line(
        tmp_path, bad):
    text = config_text(tmp_path, bad)
    res = check(text)
    assert res.returncode != 0, res.stderr
    line = [i for i, l in enumerate(text.splitlines(), 1) if "accept_plaintext_until" in l][0]
    assert b"/dev/stdin:%d:" % line in res.stderr, res.stderr
    assert b"accept_plaintext_until" in res.stderr and b"RFC 3339" in res.stderr


@pytest.mark.parametrize("ahead_s, keyring, words", [
    (2 * 86400, True, None),
    (-3600, True, b"is in the past"),
    # retention 24h plus dead_retention 7d (the default): 40 days is further
    (40 * 86400, True, b"lies further ahead than the longest retention"),
    (2 * 86400, False, b"is set without encryption.keyring"),
])
def test_t_warns_about_accept_plaintext_until(tmp_path, ahead_s, keyring, words):
    text = config_text(tmp_path, rfc3339(time.time() + ahead_s), keyring=keyring)
    res = check(text)
    assert res.returncode == 0, res.stderr
    if words is None:
        assert b"accept_plaintext_until" not in res.stderr, res.stderr
    else:
        line = [i for i, l in enumerate(text.splitlines(), 1) if "accept_plaintext_until" in l][0]
        assert b":%d: warning: encryption.accept_plaintext_until " % line + words in res.stderr, \
            res.stderr


# --------------------------------------------------------------------------
# item 6: a delivery whose key is not in the keyring is retried
# --------------------------------------------------------------------------

def test_a_delivery_whose_key_is_missing_is_retried_and_delivered_once_the_key_is_back(
        tmp_path, start_proxy, redis):
    old, new = ("old", new_secret()), ("new", new_secret())
    keyring = write_keyring(tmp_path / "keyring.yaml", old)
    provider = new_provider_secret()
    receiver = Receiver(str(tmp_path), status=200).start()
    try:
        p = start_proxy(redis_url=redis.url, encryption={"keyring": keyring},
                        routes=[queued("/webhooks/stripe", provider)],
                        upstream_url=receiver.url)
        admin_ok(p, "POST", "/inbox/%s/pause" % enc("/webhooks/stripe"))
        evt = "evt_" + uuid.uuid4().hex
        body = stripe_body(evt, note="MARK" + evt)
        assert deliver(p, provider, body).status == 202
        # a rotation step applied out of order: this instance lost the key first
        write_keyring(keyring, new)
        reload_and_wait(p, "reloaded")
        admin_ok(p, "POST", "/inbox/%s/resume" % enc("/webhooks/stripe"))
        wait_until(lambda: (metric(p, "idempotency_proxy_decrypt_failures_total",
                                        'reason="key_unavailable"') or 0) >= 2,
                   30, interval=0.2, what="two attempts that found no key")
        assert dead(p, "/webhooks/stripe") == [], "not dead-lettered at once"
        assert receiver.attempts() == []
        write_keyring(keyring, new, old)
        reload_and_wait(p, "reloaded")
        got = wait_until(lambda: receiver.attempts(), 30, what="delivered once the key is back")
        assert got[0]["body"].encode() == body
        assert dead(p, "/webhooks/stripe") == []
    finally:
        receiver.stop()
