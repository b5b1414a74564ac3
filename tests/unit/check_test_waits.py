#!/usr/bin/env python3
"""check_test_waits.py ROOT | --self-test

An integration test waits for the state it needs (harness.py's wait_until / wait_for,
wait_ready, log_line; proxy_helpers.py's wait_metric, wait_waiting), with one generous bound
that only catches a hang; it never sleeps and hopes. So no test module (tests/integration/
test_*.py) calls time.sleep: where time itself is what a test is about (a lease that must run
out, a span in which nothing may happen) it calls harness.hold(seconds, why), and a load loop's
think time is harness.pace(seconds). The helper modules beside them (harness.py,
proxy_helpers.py, inbox_helpers.py, redis_topology.py, redis_gate.py) are not checked: they may
sleep inside their own polling loops.
--self-test runs the check on small modules and fails unless it flags exactly the bad ones.
"""

import ast
import glob
import os
import sys


def sleeps(source, path):
    """One line for each time.sleep (or a bare sleep imported from time) in the source."""
    tree = ast.parse(source, path)
    bare = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "time":
            bare |= {a.asname or a.name for a in node.names if a.name == "sleep"}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr == "sleep" and isinstance(f.value, ast.Name)
                and f.value.id == "time") or (isinstance(f, ast.Name) and f.id in bare):
            out.append("%s:%d: a test sleeps: wait for the state it needs (wait_until, "
                       "wait_metric, log_line), or hold(seconds, why) where the time itself is "
                       "the point" % (path, node.lineno))
    return out


SELF_TEST = [
    ("import time\ndef test_a():\n    time.sleep(1)\n", 1),
    ("from time import sleep\ndef test_a():\n    sleep(0.5)\n", 1),
    ("from time import sleep as nap\ndef test_a():\n    nap(0.5)\n", 1),
    ("from harness import hold\ndef test_a():\n    hold(1.5, 'the lease runs out')\n", 0),
    ("import time\ndef test_a():\n    t = time.monotonic()\n", 0),
]


def self_test():
    bad = 0
    for i, (source, want) in enumerate(SELF_TEST):
        got = sleeps(source, "<case %d>" % i)
        if len(got) != want:
            print("self-test case %d: %d found, want %d:\n%s" % (i, len(got), want, source))
            bad += 1
    print("self-test: %d of %d cases right" % (len(SELF_TEST) - bad, len(SELF_TEST)))
    return 1 if bad else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1]
    paths = sorted(glob.glob(os.path.join(root, "tests", "integration", "test_*.py")))
    problems = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            problems += sleeps(f.read(), os.path.relpath(path, root))
    for p in problems:
        print(p)
    print("%d test modules, %d sleeps" % (len(paths), len(problems)))
    return 1 if problems or not paths else 0


if __name__ == "__main__":
    sys.exit(main())
