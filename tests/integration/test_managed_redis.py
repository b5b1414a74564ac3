"""Managed Redis as payments teams run it (docs/managed-redis.md): one primary and one or two
replicas without persistence, TLS by a DNS name that moves on failover, the proxy's ACL user,
CONFIG renamed away, replication that lags (managed_topology.ManagedRedis), and two proxies
under fresh-key load through a failover, a node replacement and a replica loss, each as the
services do them.

The load tests measure, per scenario, what a team chooses between (the decision table of
docs/managed-redis.md): keys executed twice, seconds of 503, seconds unready, keys left
outcome-unknown. Each prints its report and, with IDEM_MANAGED_TABLE=FILE, appends it to FILE
as a markdown table row. CI runs one scenario (one replica, min_replicas 0, the failover);
IDEM_MANAGED_MATRIX=1 runs them all (tests/integration/README.md).

Re-assertion (redis.reassert, docs/redis.md: after following a new primary, live proxies put
back what they wrote in the window before it) is on in CI's scenario and in the five runs of
the primary kill; its control runs the same kill with it off and must see keys twice.

Real processes only, in a network namespace of the test's own (root): redis-server (or
$IDEM_REDIS_SERVER), the resolver, the demo upstream and two proxies, all inside it.
"""

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness import HTTPError, log_line, readyz, stopped_after, wait_ready, wait_until
from managed_topology import NAME, ManagedRedis
from proxy_helpers import Traffic, assert_replayed, metric, new_key, record_keys
from redis_topology import NetNs

NO_NETNS = NetNs.available()
MATRIX = os.environ.get("IDEM_MANAGED_MATRIX") == "1"
TABLE = os.environ.get("IDEM_MANAGED_TABLE")

LEASE_S = 4      # lease: a claim whose record was lost reads as in flight this long
HANG_S = 10      # every answer within this: a bound that catches a hang, not a latency target
KEYS_AROUND = 100  # keys acknowledged before the event, and again after it
SLOT_S = 0.1     # "seconds of 503": the slots of this length in which a request was out that
                 # got 503 (sent, waited for, answered)
REASSERT_ON = {"window": "10s", "grace": "2s"}  # the defaults
REASSERT_OFF = {"window": "0s"}

pytestmark = pytest.mark.skipif(NO_NETNS is not None, reason=str(NO_NETNS))


@pytest.fixture
def netns():
    """The test's thread, and what it starts, in a network namespace whose resolver is the
    topology's AnsweringResolver (127.0.0.1:53)."""
    with NetNs("nameserver 127.0.0.1\n") as ns:
        yield ns


@pytest.fixture
def upstream(netns, upstream_factory):
    """The demo upstream, started inside the namespace (where the proxies reach it)."""
    return upstream_factory()


@pytest.fixture
def managed(netns, tmp_path):
    """managed(**ManagedRedis kwargs) -> a started ManagedRedis in the namespace, stopped
    after the test (after its proxies)."""
    yield from stopped_after(lambda n, **kw: ManagedRedis(str(tmp_path / ("managed%d" % n)),
                                                          **kw))


def reassert_config(mode):
    """(redis.reassert for mode "on" or "off", whether it is on)."""
    assert mode in ("on", "off"), mode
    return (REASSERT_ON, True) if mode == "on" else (REASSERT_OFF, False)


def start_proxies(start_proxy, netns, m, min_replicas, reassert):
    """Two proxies in the namespace, both to the service by its name, TLS, as its ACL user;
    each with two workers and a short lease (LEASE_S)."""
    redis = m.redis_section(timeout="1s", min_replicas=min_replicas)
    if min_replicas:
        redis["replica_timeout"] = "400ms"  # WAIT takes the replication lag and then some
    if reassert is not None:
        redis["reassert"] = reassert
    proxies = [start_proxy(redis=redis, workers=2, lease="%ds" % LEASE_S,
                           wrapper=netns.wrapper) for _ in range(2)]
    for p in proxies:
        wait_ready(p)
    return proxies


class ReadyWatch:
    """Each proxy's /readyz every 50 ms in a thread: samples (time, status), -1 when the
    admin listener did not answer."""

    def __init__(self, proxies):
        self.proxies = proxies
        self.samples = [[] for _ in proxies]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            for p, samples in zip(self.proxies, self.samples):
                try:
                    status = readyz(p)
                except (OSError, HTTPError):
                    status = -1
                samples.append((time.monotonic(), status))
            self.stop.wait(0.05)  # the next look, or the end

    def finish(self):
        self.stop.set()
        self.thread.join(5)

    def unready_s(self):
        """The longest time one proxy was unready: per proxy, the sum of the spans from a
        sample that was not 200 to the next sample."""
        out = 0.0
        for samples in self.samples:
            out = max(out, sum(b[0] - a[0] for a, b in zip(samples, samples[1:])
                               if a[1] != 200))
        return out


EVENTS = {
    "failover": lambda m: m.failover(),
    "replacement": lambda m: m.replace_replica(),
    "replica-loss": lambda m: m.lose_replica(3.0),
}


def outcome_unknown(status, body):
    return status == 502 and b"outcome-unknown" in body


def settle(p, key):
    """The key sent again until it no longer reads as in flight (409: a claim whose record
    is missing, until its lease ends): the answer."""
    def past_in_flight():
        r = p.post(key=key, timeout=HANG_S)
        return r if r.status not in (409, 503) else None
    return wait_until(past_in_flight, interval=0.2, what="key %s past in flight" % key)


def run_scenario(m, proxies, upstream, event, capsys, tmp_path, label):
    """Fresh-key load from both proxies (Traffic, clients that retry 503 and 409) from
    before `event` until keys are acknowledged after it; then every key acknowledged or
    given up is sent once more and settles (replay, executed again, or outcome-unknown).
    Returns the report (printed, and a table row in IDEM_MANAGED_TABLE)."""
    watch = ReadyWatch(proxies)
    traffic = Traffic(proxies, threads=6, then="retry", body=None, timeout=HANG_S * 2,
                      tag="m", pause_s=0.02, join_s=40).start()
    report = dict(label, lag_ms=m.lag_ms, detect_s=m.detect_s, replace_s=m.replace_s)
    try:
        wait_until(lambda: len(traffic.acked) >= KEYS_AROUND, what="keyed traffic under way")
        t_event = time.monotonic()
        at = EVENTS[event](m)
        report["event_s"] = {k: round(v - t_event, 2) for k, v in at.items()}
        back = time.monotonic()
        wait_until(lambda: traffic.acked_since(back) >= KEYS_AROUND,
                   what="keys acknowledged after the %s" % event)
    finally:
        traffic.finish()
        watch.finish()
    t_end = time.monotonic()
    answers = traffic.answers
    statuses = {}
    for a in answers:
        statuses[a.status] = statuses.get(a.status, 0) + 1
    # a slot counts when a request that got 503 was out in it (sent, waited on, answered)
    slots_503 = {slot for a in answers if a.status == 503
                 for slot in range(int(a.sent / SLOT_S), int((a.sent + a.seconds) / SLOT_S) + 1)}
    report.update(
        keys=len(traffic.keys), acked=len(traffic.acked), requests=len(answers),
        statuses=statuses, load_s=round(t_end - traffic.started, 1),
        slowest_s=round(max(a.seconds for a in answers), 2),
        s_503=round(len(slots_503) * SLOT_S, 1), s_unready=round(watch.unready_s(), 1),
        longest_without_2xx_s=round(traffic.longest_gap(t_event, t_end), 2))

    # every key acknowledged or given up, once more, on the topology as it ended
    m.wait_replicas()
    for p in proxies:
        wait_ready(p)
    again = list(traffic.acked) + [k for k, _ in traffic.gave_up]

    def once_more(i_key):
        i, key = i_key
        r = settle(proxies[i % 2], key)
        return key, r.status, r.replayed, r.body

    with ThreadPoolExecutor(8) as ex:
        settled = list(ex.map(once_more, enumerate(again)))
    counts = upstream.stats()["by_key"]
    twice = sorted(k for k in traffic.keys if counts.get(k, 0) > 1)
    unknown = {k for k, st, _, body in settled if outcome_unknown(st, body)}
    # what re-assertion put back, over both proxies (absent without it)
    report["put_back"] = {
        result: sum(metric(p, "idempotency_proxy_redis_reasserted_total",
                           {"result": result}) or 0 for p in proxies)
        for result in ("restored", "present", "superseded", "failed")}
    report.update(
        twice=len(twice),
        outcome_unknown=len(unknown),
        gave_up={},
        settled={})
    for _, st in traffic.gave_up:
        report["gave_up"][st] = report["gave_up"].get(st, 0) + 1
    for k, st, replayed, body in settled:
        kind = "outcome-unknown" if k in unknown else "replayed" if replayed else \
            "executed again" if counts.get(k, 0) > 1 else str(st)
        report["settled"][kind] = report["settled"].get(kind, 0) + 1
    if twice:  # when were they first acknowledged, around the event (s after it began)
        at = sorted(traffic.acked[k] - t_event for k in twice if k in traffic.acked)
        if at:
            report["twice_acked_s"] = (round(at[0], 2), round(at[-1], 2))
    report["seconds"] = round(time.monotonic() - traffic.started, 1)
    publish(report, capsys, tmp_path)
    return report, traffic, settled, counts


TABLE_HEAD = ("| replicas | min_replicas | event | re-assertion | keys twice | s of 503 | "
              "s unready | outcome-unknown | keys | lag ms |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")


def publish(report, capsys, tmp_path):
    row = "| %(replicas)d | %(min_replicas)d | %(event)s | %(reassert)s | %(twice)d | " \
          "%(s_503).1f | %(s_unready).1f | %(outcome_unknown)d | %(keys)d | %(lag_ms)d |\n" \
          % report
    with capsys.disabled():
        print("\nmanaged redis report: %r\n%s" % (report, row), end="")
    with open(os.path.join(str(tmp_path), "report.txt"), "w") as f:
        f.write(repr(report) + "\n" + row)
    if TABLE:
        new = not os.path.exists(TABLE) or os.path.getsize(TABLE) == 0
        with open(TABLE, "a") as f:
            f.write((TABLE_HEAD if new else "") + row)


def check_bounded_and_kept(report, traffic, settled, counts, strict):
    """Every answer came within HANG_S; every acknowledged key was executed; once more it
    replays, or (its record lost) is outcome-unknown once its lease ended; a client gave a key
    up only on outcome-unknown or on 409 past its deadline. strict: no key executed twice;
    otherwise a key sent once more may execute again (counted in report["twice"])."""
    slow = [a for a in traffic.answers if a.seconds > HANG_S or a.status == -1]
    assert not slow, (slow[:5], report)
    assert not [k for k in traffic.acked if counts.get(k, 0) == 0], report
    assert all(st in (409, 502) for _, st in traffic.gave_up), report
    for key, status, replayed, body in settled:
        assert replayed or outcome_unknown(status, body) or \
            (not strict and status == 201 and counts.get(key, 0) > 1), \
            (key, status, body[:200], report)
    if strict:
        assert report["twice"] == 0, report
        # every proxy put back its writes before the other claimed afresh (the grace held)
        assert report["put_back"]["superseded"] == 0, report
        if report["event"] == "failover":  # the new primary had lost the last writes
            assert report["put_back"]["restored"] > 0, report


# --------------------------------------------------------------------------
# the topology itself
# --------------------------------------------------------------------------

def test_the_proxy_uses_the_service_by_name_over_tls_as_its_user(managed, start_proxy,
                                                                   upstream, netns):
    """The proxy reaches the primary by NAME (resolved in the namespace), over TLS with the
    service's CA, as the ACL user; CONFIG is renamed away, so the eviction check reads INFO
    (noeviction: the gauge says 1); a keyed payment is recorded on the primary, reaches the
    replica, and its retry replays."""
    m = managed(replicas=1, lag_ms=20)
    p = start_proxy(redis=m.redis_section(), wrapper=netns.wrapper)
    wait_ready(p)
    log_line(p, "%s:%d: connected to %s" % (NAME, m.tls_port, m.primary.host))
    log_line(p, "ready (primary, TLS)")
    # the policy is read after the connection is ready (-1 until its answer is in)
    wait_until(lambda: metric(p, "idempotency_proxy_redis_eviction_policy_ok",
                              required=True) != -1, what="the eviction policy read")
    assert metric(p, "idempotency_proxy_redis_eviction_policy_ok", required=True) == 1
    key = new_key()
    first = p.post(key=key)
    assert first.status == 201, first
    assert_replayed(p.post(key=key), first)
    assert upstream.executions(key) == 1
    assert len(record_keys(m.primary)) == 1
    replica = m.replicas()[0]
    wait_until(lambda: record_keys(replica) == record_keys(m.primary),
               what="the record on the replica")
    assert m.resolver.queries > 0
    assert m.config("GET", "maxmemory-policy") == ["maxmemory-policy", "noeviction"]


# --------------------------------------------------------------------------
# measured: fresh-key load from two proxies through each event
# --------------------------------------------------------------------------

MATRIX_ONLY = pytest.mark.skipif(not MATRIX, reason="the full matrix: IDEM_MANAGED_MATRIX=1")


def scenarios():
    """(replicas, min_replicas, event, re-assertion): CI's one scenario with re-assertion on
    (the default), and, with IDEM_MANAGED_MATRIX=1, every combination with it off and on."""
    out = [pytest.param(1, 0, "failover", "on", id="1-replica-min0-failover")]
    for replicas in (1, 2):
        for min_replicas in (0, 1):
            for event in EVENTS:
                for reassert in ("off", "on"):
                    out.append(pytest.param(
                        replicas, min_replicas, event, reassert, marks=MATRIX_ONLY,
                        id="%d-replica-min%d-%s-reassert-%s" % (replicas, min_replicas, event,
                                                                reassert)))
    return out


# 3 to 13 s a scenario (measured on 2 cores): the load before the event, the event (a 1 s
# detection delay and the old primary back 1 s later, a replica replaced in 1 s, or lost for
# 3 s, each with its resync), the load after it, and every key sent once more; min_replicas 1
# takes longest (each claim's WAIT waits for the 100 ms replication lag).
@pytest.mark.threads
@pytest.mark.slow
@pytest.mark.topology
@pytest.mark.parametrize("replicas,min_replicas,event,reassert", scenarios())
def test_fresh_key_load_through_a_managed_event(replicas, min_replicas, event, reassert,
                                                managed, start_proxy, upstream, netns,
                                                tmp_path, capsys):
    """Two proxies under fresh-key load (clients retry 503 and 409) through the event: every
    answer is bounded, every acknowledged key was executed and, sent once more, replays or is
    outcome-unknown (its record lost); with re-assertion no key executed twice, without it the
    keys that did are reported. The report gives keys twice, seconds of 503, seconds unready
    and keys left outcome-unknown."""
    config, on = reassert_config(reassert)
    m = managed(replicas=replicas, lag_ms=100, detect_s=1.0)
    proxies = start_proxies(start_proxy, netns, m, min_replicas, config)
    label = {"replicas": replicas, "min_replicas": min_replicas, "event": event,
             "reassert": "on" if on else "off"}
    report, traffic, settled, counts = run_scenario(m, proxies, upstream, event, capsys,
                                                    tmp_path, label)
    check_bounded_and_kept(report, traffic, settled, counts, strict=on)


# --------------------------------------------------------------------------
# re-assertion (docs/redis.md): a primary SIGKILLed under load loses no claim a live proxy made
# --------------------------------------------------------------------------

# 200 ms of replication lag: a SIGKILL loses every claim and record of its last 200 ms, tens
# of keys under this load, so that without re-assertion keys reliably execute twice
KILL_LAG_MS = 200


@pytest.mark.threads
@pytest.mark.slow
@pytest.mark.topology
@pytest.mark.parametrize("run", range(1, 6), ids=lambda r: "run%d" % r)
def test_reassertion_loses_no_claim_through_a_primary_kill(run, managed, start_proxy, upstream,
                                                           netns, tmp_path, capsys):
    """One replica, min_replicas 0, the primary SIGKILLed under load from two proxies that
    both outlive it, five runs: with re-assertion no key executes twice; the report gives
    the 503 window it adds."""
    config, on = reassert_config("on")
    m = managed(replicas=1, lag_ms=KILL_LAG_MS, detect_s=1.0)
    proxies = start_proxies(start_proxy, netns, m, 0, config)
    label = {"replicas": 1, "min_replicas": 0, "event": "failover", "reassert": "on",
             "run": run}
    report, traffic, settled, counts = run_scenario(m, proxies, upstream, "failover", capsys,
                                                    tmp_path, label)
    check_bounded_and_kept(report, traffic, settled, counts, strict=True)


@pytest.mark.threads
@pytest.mark.slow
@pytest.mark.topology
def test_without_reassertion_a_primary_kill_executes_keys_twice(managed, start_proxy, upstream,
                                                                netns, tmp_path, capsys):
    """The control of the test above, the same scenario with re-assertion off (window 0, or
    a build without it): keys DO execute twice (what the primary acknowledged in its last
    moments is not on the replica it promotes), so that test can fail."""
    config, _ = reassert_config("off")
    m = managed(replicas=1, lag_ms=KILL_LAG_MS, detect_s=1.0)
    proxies = start_proxies(start_proxy, netns, m, 0, config)
    label = {"replicas": 1, "min_replicas": 0, "event": "failover", "reassert": "off"}
    report, traffic, settled, counts = run_scenario(m, proxies, upstream, "failover", capsys,
                                                    tmp_path, label)
    check_bounded_and_kept(report, traffic, settled, counts, strict=False)
    assert report["twice"] > 0, report
