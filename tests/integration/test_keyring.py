"""The keyring of `encryption.keyring`, as the real binary reads it.

`-t` refuses each kind of bad keyring naming KEYRING:LINE (or the config's line when the file
cannot be read) and exits 1; it warns about a keyring every user may read and about keys that
cannot be locked in memory (CAP_IPC_LOCK dropped, memlock limit 0), and accepts both. The
startup log says once that there is no keyring, or names the key ids and which one encrypts;
SIGHUP rereads the keyring: a bad one is refused with its KEYRING:LINE, counted as a failed
reload, and the running one is kept; a good one is applied and the reload line names its ids.
No secret ever reaches the output.
"""
import base64
import os
import subprocess

import pytest

from harness import proxy_binary, wait_until
from proxy_helpers import (
    assert_still_protects, keyring_text, metric, new_keyring_secret as new_secret, reload_and_wait,
    rewrite, run_check, write_keyring,
)

# tests/run.sh runs this file under ThreadSanitizer with two worker threads a proxy
# (IDEM_TEST_WORKERS=2): its requests meet across workers (docs/internals.md).
pytestmark = pytest.mark.threads


def check_with_keyring(tmp_path, keyring, wrapper=()):
    """`-t` on a config whose line 2 names keyring, and one route: (returncode, output)."""
    rc, out, _ = run_check(tmp_path, "encryption:\n  keyring: %s\nroutes:\n  - path: /v1/payments*\n"
                           % keyring, wrapper=wrapper)
    return rc, out


def no_mlock_wrapper():
    """A command prefix under which mlock fails: memlock limit 0, and for root no CAP_IPC_LOCK.

    Skips the test for a sanitizer build: ASan and TSan intercept mlock with a no-op that
    succeeds, so nothing can make it fail there (the unit test test_keyring skips it too)."""
    libs = subprocess.run(["ldd", proxy_binary()], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL).stdout.decode()
    if "libasan" in libs or "libtsan" in libs:
        pytest.skip("a sanitizer build: its mlock does nothing and cannot fail")
    wrapper = ["prlimit", "--memlock=0:0"]
    if os.geteuid() == 0:
        wrapper = ["setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock"] + wrapper
    return wrapper


A, B = ("2026-09", new_secret()), ("2026-12", new_secret())


# --------------------------------------------------------------------------
# -t: every bad keyring names its line
# --------------------------------------------------------------------------

SHORT = base64.b64encode(b"\0" * 31).decode()

BAD_KEYRINGS = [
    ("an empty list", "keys: []\n", 1, "keys is empty"),
    ("nothing in the file", "", 1, "the keyring is empty"),
    ("a secret of 31 bytes", keyring_text(A, ("2026-10", SHORT)), 5,
     "the secret of key '2026-10' is not base64 of 32 bytes (it decodes to 31 bytes)"),
    ("a secret that is not base64", keyring_text(("k", "not*base64*at*all")), 3,
     "not base64 of 32 bytes"),
    ("a ${VAR} secret", keyring_text(("k", "${KEYRING_SECRET}")), 3, "takes no ${VAR}"),
    ("a duplicate id", keyring_text(A, B, A), 6, "duplicate id '2026-09' (first at line 2)"),
    ("a malformed id", keyring_text(("2026/09", A[1])), 2, "id '2026/09' must be 1..32"),
    ("an id of 33 characters", keyring_text(("k" * 33, A[1])), 2, "must be 1..32"),
    ("an unknown key in a key", keyring_text(A) + "    created: 2026-09-01\n", 4,
     "unknown key 'created' in a key (allowed: id, secret)"),
    ("an unknown top-level key", keyring_text(A) + "primary: 2026-09\n", 4,
     "unknown key 'primary' in the keyring (allowed: keys)"),
]


@pytest.mark.parametrize("name, text, line, words", BAD_KEYRINGS, ids=[b[0] for b in BAD_KEYRINGS])
def test_t_refuses_a_bad_keyring_naming_its_line(tmp_path, name, text, line, words):
    keyring = write_keyring(tmp_path / "keyring.yaml", text=text)
    rc, out = check_with_keyring(tmp_path, keyring)
    assert rc == 1 and "configuration OK" not in out, out
    assert "%s:%d: " % (keyring, line) in out, out
    assert words in out, out
    for _, secret in (A, B):
        assert secret not in out, "a secret in the output: %s" % out


def test_t_refuses_a_missing_keyring_naming_the_config_line(tmp_path):
    rc, out = check_with_keyring(tmp_path, tmp_path / "nowhere.yaml")
    assert rc == 1, out
    assert "check.yaml:2: encryption.keyring: cannot open %s: No such file" % (
        tmp_path / "nowhere.yaml") in out, out


def test_t_refuses_an_unreadable_keyring_naming_the_config_line(tmp_path):
    (tmp_path / "a-directory").mkdir()
    rc, out = check_with_keyring(tmp_path, tmp_path / "a-directory")
    assert rc == 1, out
    assert "check.yaml:2: encryption.keyring: cannot read %s: not a regular file" % (
        tmp_path / "a-directory") in out, out


def test_t_warns_about_a_world_readable_keyring_and_accepts_it(tmp_path):
    keyring = write_keyring(tmp_path / "keyring.yaml", B, A, mode=0o644)
    rc, out = check_with_keyring(tmp_path, keyring)
    assert rc == 0 and "configuration OK" in out, out
    assert "%s: warning: every user of this machine may read the keyring" % keyring in out, out
    # a Kubernetes Secret volume with defaultMode: 0440 and an fsGroup is not world-readable
    os.chmod(keyring, 0o440)
    rc, out = check_with_keyring(tmp_path, keyring)
    assert rc == 0 and "configuration OK" in out and "warning" not in out, out


def test_t_warns_when_the_keys_cannot_be_locked_in_memory(tmp_path):
    keyring = write_keyring(tmp_path / "keyring.yaml", B)
    rc, out = check_with_keyring(tmp_path, keyring, wrapper=no_mlock_wrapper())
    assert rc == 0 and "configuration OK" in out, out
    assert "%s: warning: the keyring's keys are not locked in memory (mlock: " % keyring in out, out
    rc, out = check_with_keyring(tmp_path, keyring)
    assert rc == 0 and "warning" not in out, out


# --------------------------------------------------------------------------
# startup and SIGHUP
# --------------------------------------------------------------------------

def lines_with(p, words):
    return [l for l in p.stderr_text().splitlines() if words in l]


def assert_no_secret_logged(p, *keys):
    text = p.stderr_text() + p.stdout_text()
    for _, secret in keys:
        assert secret not in text, "a secret in the log"


def test_startup_says_once_that_there_is_no_keyring(start_proxy, upstream):
    p = start_proxy()
    wait_until(lambda: lines_with(p, "listening on"), what="the startup line")
    assert len(lines_with(p, "no keyring (encryption.keyring): what is stored stays "
                             "plaintext")) == 1, p.stderr_text()
    assert_still_protects(p, upstream)
    assert len(lines_with(p, "no keyring")) == 1, p.stderr_text()


def test_startup_names_the_key_ids_and_warns_about_a_world_readable_keyring(start_proxy, upstream,
                                                                           tmp_path):
    keyring = write_keyring(tmp_path / "keyring.yaml", B, A, mode=0o644)
    p = start_proxy(encryption={"keyring": keyring})
    wait_until(lambda: lines_with(p, "listening on"), what="the startup line")
    assert len(lines_with(p, "keyring %s: 2 keys: 2026-12 (encrypts), 2026-09" % keyring)) == 1, \
        p.stderr_text()
    assert len(lines_with(p, "warn %s: warning: every user of this machine may read the keyring"
                          % keyring)) == 1, p.stderr_text()
    assert_still_protects(p, upstream)
    assert_no_secret_logged(p, A, B)


def test_keys_that_cannot_be_locked_are_warned_about_and_the_proxy_serves(start_proxy, upstream,
                                                                        tmp_path):
    keyring = write_keyring(tmp_path / "keyring.yaml", B)
    p = start_proxy(encryption={"keyring": keyring}, wrapper=no_mlock_wrapper())
    wait_until(lambda: lines_with(p, "listening on"), what="the startup line")
    assert len(lines_with(p, "the keyring's keys are not locked in memory (mlock: ")) == 1, \
        p.stderr_text()
    assert_still_protects(p, upstream)


def core_limit(pid):
    """(soft, hard) of /proc/PID/limits' "Max core file size", as written there."""
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max core file size"):
                return tuple(line[len("Max core file size"):].split()[:2])
    raise AssertionError("no core size in /proc/%d/limits" % pid)


def core_wrapper():
    """A command prefix that lets the proxy dump core (so that turning it off shows): its hard
    limit as its soft one, unlimited for root; skips when no core dump is allowed at all."""
    hard = core_limit(os.getpid())[1]
    if os.geteuid() == 0:
        hard = "unlimited"
    if hard == "0":
        pytest.skip("core dumps are off for this test run already (hard limit 0)")
    return ["prlimit", "--core=%s:%s" % (hard, hard)]


def test_core_dumps_are_off_while_a_keyring_is_loaded(start_proxy, upstream, tmp_path):
    """OpenSSL's contexts keyed from the keys are in its ordinary heap: with a keyring the
    process dumps no core (docs/data-protection.md#key-material); without one its limit is
    as it was started with."""
    wrapper = core_wrapper()
    allowed = (wrapper[-1].split("=")[1].split(":")[0],) * 2
    plain = start_proxy(wrapper=wrapper, name="plain")
    # the hard limit: a sanitizer's runtime (the ASan and TSan runs) lowers the soft one itself
    assert core_limit(plain.pid())[1] == allowed[1]
    assert not lines_with(plain, "core dumps")
    keyring = write_keyring(tmp_path / "keyring.yaml", A)
    p = start_proxy(encryption={"keyring": keyring}, wrapper=wrapper)
    wait_until(lambda: lines_with(p, "listening on"), what="the startup line")
    assert core_limit(p.pid()) == ("0", "0")
    assert len(lines_with(p, "a keyring is loaded: core dumps are off")) == 1, p.stderr_text()
    assert_still_protects(p, upstream)


def test_sighup_rereads_the_keyring_refuses_a_bad_one_and_applies_a_good_one(start_proxy,
                                                                            upstream, tmp_path):
    path = tmp_path / "keyring.yaml"
    keyring = write_keyring(path, A)
    p = start_proxy(encryption={"keyring": keyring})
    wait_until(lambda: lines_with(p, "keyring %s: 1 key: 2026-09 (encrypts)" % keyring),
               what="the startup line")
    failures = metric(p, "idempotency_proxy_config_reload_failures_total", required=True)

    # the config is unchanged: a SIGHUP rereads the keyring all the same; a bad one is refused
    write_keyring(path, A, ("2026-12", SHORT))
    reload_and_wait(p, "reload refused")
    refusal = lines_with(p, "reload refused")[-1]
    assert "reload refused, running configuration kept: %s:5: the secret of key '2026-12' is " \
           "not base64 of 32 bytes" % keyring in refusal, refusal
    assert metric(p, "idempotency_proxy_config_reload_failures_total",
                  required=True) == failures + 1
    assert_still_protects(p, upstream)
    assert not lines_with(p, "reloaded")

    # a keyring that cannot be read: refused, naming the config's line
    os.unlink(path)
    reload_and_wait(p, "reload refused")
    refusal = lines_with(p, "reload refused")[-1]
    assert "encryption.keyring: cannot open %s" % keyring in refusal, refusal
    assert metric(p, "idempotency_proxy_config_reload_failures_total",
                  required=True) == failures + 2

    # rotation step 1: the new key second; step 2: moved first; step 4: the old one removed
    for keys, said in (((A, B), "2 keys: 2026-09 (encrypts), 2026-12"),
                       ((B, A), "2 keys: 2026-12 (encrypts), 2026-09"),
                       ((B,), "1 key: 2026-12 (encrypts)")):
        write_keyring(path, *keys)
        reload_and_wait(p, "reloaded")
        line = lines_with(p, "reloaded")[-1]
        assert line.endswith("; keyring %s: %s" % (keyring, said)), line
        assert_still_protects(p, upstream)
    assert metric(p, "idempotency_proxy_config_reload_failures_total",
                  required=True) == failures + 2
    assert metric(p, "idempotency_proxy_config_reloads_total", required=True) == 3

    # a keyring made world-readable is warned about at the reload that reads it
    write_keyring(path, B, mode=0o644)
    reload_and_wait(p, "reloaded")
    wait_until(lambda: lines_with(p, "warning: every user of this machine may read the keyring"),
               what="the reload's warning")
    assert_no_secret_logged(p, A, B)


def test_sighup_turns_the_keyring_off_and_on(start_proxy, upstream, redis, tmp_path):
    keyring = write_keyring(tmp_path / "keyring.yaml", B)
    p = start_proxy(encryption={"keyring": keyring})
    # encryption.keyring is a live key: dropping it, and adding it back, are applied
    rewrite(p, upstream, redis)
    reload_and_wait(p, "reloaded")
    assert lines_with(p, "reloaded")[-1].endswith(
        "; no keyring (encryption.keyring): what is stored stays plaintext"), p.stderr_text()
    rewrite(p, upstream, redis, encryption={"keyring": keyring})
    reload_and_wait(p, "reloaded")
    assert lines_with(p, "reloaded")[-1].endswith("; keyring %s: 1 key: 2026-12 (encrypts)"
                                                  % keyring), p.stderr_text()
    assert not lines_with(p, "reload refused")
    assert_still_protects(p, upstream)
