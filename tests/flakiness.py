#!/usr/bin/python3
"""tests/flakiness.py - how often each test passes on a busy machine.

Runs a chosen set of integration tests RUNS times in a row beside `stress-ng --cpu STRESS`
(CI shares busy 2-core machines) and prints each test's pass rate, slowest time and the first
line of each distinct failure. Exits 1 when any test failed at least once. A test that fails
here is fixed, in its wait when the test raced the state it needs, in the proxy when the proxy
did wrong; never by loosening what it asserts, and never by re-running it.

    tests/flakiness.py --runs 10 tests/integration/test_leases.py
    tests/flakiness.py --runs 10 --build asan -- -m "not topology" tests/integration/test_inbox.py
    tests/flakiness.py --runs 5 --stress 1 --jobs 2 -- -m topology tests/integration

--build picks build-test-BUILD/proxy/idempotency-proxy (tests/run.sh's build folders; `tests/run.sh
quick` makes the plain one), --bin any binary. tsan runs every proxy with two workers, as
tests/run.sh does. Everything after the options (or after --) goes to pytest; files and folders
may be named from the current directory.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="how many runs (default 10)")
    ap.add_argument("--stress", type=int, default=2,
                    help="stress-ng --cpu workers beside the runs; 0: none (default 2)")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("IDEM_TEST_JOBS", "6")),
                    help="pytest-xdist processes (default 6, as tests/run.sh; 0: no xdist)")
    ap.add_argument("--build", choices=("plain", "asan", "tsan"), default="plain")
    ap.add_argument("--bin", help="the proxy binary (default build-test-BUILD/proxy/...)")
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    if a.pytest_args and a.pytest_args[0] == "--":
        a.pytest_args = a.pytest_args[1:]
    if not a.pytest_args:
        ap.error("name the tests: files, -k or -m, as for pytest")
    a.pytest_args = [from_here(x) for x in a.pytest_args]
    return a


def from_here(arg):
    """arg, a file or folder named from the current directory (with or without ::test), as
    the path pytest needs from the repository's root, where the runs start; anything else
    (an option, a -k or -m expression) as it is."""
    path, sep, rest = arg.partition("::")
    if arg.startswith("-") or not os.path.exists(path):
        return arg
    return os.path.relpath(os.path.abspath(path), ROOT) + sep + rest


def environment(a):
    env = dict(os.environ)
    binary = a.bin or os.path.join(ROOT, "build-test-%s" % a.build, "proxy", "idempotency-proxy")
    if not os.access(binary, os.X_OK):
        sys.exit("no proxy binary at %s: run `tests/run.sh quick` (plain) or `tests/run.sh %s` "
                 "first, or give --bin" % (binary, a.build))
    env["IDEM_PROXY_BIN"] = binary
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=0")
    env.setdefault("TSAN_OPTIONS", "halt_on_error=0:report_signal_unsafe=0:suppressions=%s"
                   % os.path.join(ROOT, "tests", "tsan.supp"))
    if a.build == "tsan":
        env.setdefault("IDEM_TEST_WORKERS", "2")
    return env


def outcomes(junit):
    """{test id: (passed, seconds, failure text)} of one junit file."""
    out = {}
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return out
    for case in root.iter("testcase"):
        name = "%s::%s" % (case.get("classname", ""), case.get("name", ""))
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if case.find("skipped") is not None:
            continue
        text = "" if bad is None else (bad.get("message") or bad.text or "").strip()
        out[name] = (bad is None, float(case.get("time") or 0), text)
    return out


def main():
    a = parse_args()
    env = environment(a)
    stress = None
    if a.stress > 0:
        if shutil.which("stress-ng") is None:
            sys.exit("stress-ng is not installed (tests/install-deps.sh --tests)")
        stress = subprocess.Popen(["stress-ng", "--cpu", str(a.stress), "--quiet"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
    work = tempfile.mkdtemp(prefix="idem-flakiness.")
    seen = {}   # test id -> [(passed, seconds, text)]
    started = time.monotonic()
    try:
        for i in range(a.runs):
            junit = os.path.join(work, "run-%d.xml" % i)
            cmd = [sys.executable if os.path.exists(sys.executable) else "/usr/bin/python3",
                   "-m", "pytest", "-q", "-p", "no:cacheprovider"]
            if a.jobs > 0:
                cmd += ["-n", str(a.jobs)]
            cmd += ["--junitxml", junit] + a.pytest_args
            t0 = time.monotonic()
            r = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            res = outcomes(junit)
            for name, o in res.items():
                seen.setdefault(name, []).append(o)
            failed = sum(1 for o in res.values() if not o[0])
            print("run %d/%d: %d tests, %d failed, %.0f s (pytest exit %d)"
                  % (i + 1, a.runs, len(res), failed, time.monotonic() - t0, r.returncode),
                  flush=True)
            if not res:
                print(r.stdout[-3000:])
    finally:
        if stress is not None:
            os.killpg(stress.pid, signal.SIGTERM)
            stress.wait(10)
        shutil.rmtree(work, ignore_errors=True)
    flaky = {n: o for n, o in seen.items() if not all(p for p, _, _ in o)}
    print("\n%d tests, %d runs, %.0f s in all, %s; %s"
          % (len(seen), a.runs, time.monotonic() - started,
             "beside stress-ng --cpu %d" % a.stress if a.stress > 0 else "without stress-ng",
             "binary %s" % env["IDEM_PROXY_BIN"] if a.bin else "build %s" % a.build))
    # every test, the least reliable first, then the slowest
    width = max((len(n) for n in seen), default=10)
    for name in sorted(seen, key=lambda n: (sum(p for p, _, _ in seen[n]) / len(seen[n]),
                                            -max(s for _, s, _ in seen[n]), n)):
        o = seen[name]
        passed = sum(1 for p, _, _ in o if p)
        print("%-*s  %d/%d passed (%.0f%%), slowest %.1f s"
              % (width, name, passed, len(o), 100.0 * passed / len(o), max(s for _, s, _ in o)))
        for text in sorted({t.splitlines()[0][:300] for p, _, t in o if not p and t}):
            print("    " + text)
    steady = len(seen) - len(flaky)
    if not seen:
        print("no test ran: see pytest's output above (paths are read from the current "
              "directory or the repository's root)")
    print("%d tests passed every run; %d failed at least once" % (steady, len(flaky)))
    return 1 if flaky or not seen else 0


if __name__ == "__main__":
    sys.exit(main())
