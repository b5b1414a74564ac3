#!/usr/bin/env python3
"""Two rules about proxy/ that keep each file one room with one door.

1. No pair of proxy/ files whose functions call each other: from the object
   files (`nm`: the T symbols each object defines, the U symbols it uses),
   file A uses something B defines and B uses something A defines -> fail.
2. No .c file in proxy/ is over MAX_LINES lines.

Usage: check_calls.py SOURCE_ROOT BUILD_ROOT
"""
import glob
import os
import subprocess
import sys

MAX_LINES = 800


def symbols(obj):
    out = subprocess.run(["nm", obj], check=True, capture_output=True,
                         text=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in ("T", "D", "B", "R"):
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
    return defined, used


def source_name(obj):
    return os.path.basename(obj)[:-len(".o")]  # "store.c.o" -> "store.c"


def main():
    src, build = sys.argv[1], sys.argv[2]
    objects = sorted(glob.glob(os.path.join(build, "proxy", "*.p", "*.c.o")))
    if not objects:
        print("no object files under %s/proxy" % build)
        return 1
    table = {source_name(o): symbols(o) for o in objects}
    owner = {}
    for name, (defined, _) in table.items():
        for sym in defined:
            owner[sym] = name
    calls = {}
    for name, (_, used) in table.items():
        for sym in used:
            target = owner.get(sym)
            if target and target != name:
                calls.setdefault((name, target), set()).add(sym)
    failures = []
    for (a, b), syms in sorted(calls.items()):
        if a < b and (b, a) in calls:
            failures.append("%s and %s call each other: %s -> %s; %s -> %s" % (
                a, b, a, ", ".join(sorted(syms)), b,
                ", ".join(sorted(calls[(b, a)]))))
    for path in sorted(glob.glob(os.path.join(src, "proxy", "*.c"))):
        with open(path, encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            failures.append("%s has %d lines (limit %d)" % (
                os.path.relpath(path, src), n, MAX_LINES))
    for f in failures:
        print(f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
