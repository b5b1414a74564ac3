#!/usr/bin/env python3
"""Three rules about proxy/ that keep each folder one floor and each file one room.

From the object files (`nm`: the T symbols each object defines, the U symbols it uses;
compile_commands.json names each object's source):
1. Calls between modules (the folders of docs/internals.md, "The map of proxy/"; a file at
   the top of proxy/ is a module of its own) run downwards only, like their includes: a
   module calls only modules of a lower level (check_includes.py LEVELS).
2. No pair of proxy/ files whose functions call each other.
3. No .c file in proxy/ is over MAX_LINES lines.

Usage: check_calls.py SOURCE_ROOT BUILD_ROOT | check_calls.py --self-test
"""
import json
import os
import subprocess
import sys
import tempfile

from check_includes import LEVELS, level_problems

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


def module_of(rel):
    """proxy/store/store_cmd.c -> store; proxy/worker.c -> worker."""
    parts = rel.split(os.sep)
    return parts[1] if len(parts) > 2 else os.path.splitext(parts[1])[0]


def objects_of(src, build):
    """{source path relative to src: object path} of the proxy/ sources in the build."""
    with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
        entries = json.load(f)
    out = {}
    for e in entries:
        source = os.path.relpath(os.path.join(e["directory"], e["file"]), src)
        if source.startswith("proxy" + os.sep):
            out[source] = os.path.join(e["directory"], e["output"])
    return out


def call_failures(objects, levels_of=LEVELS):
    """The failures of rules 1 and 2 over {source: object}."""
    table = {name: symbols(obj) for name, obj in objects.items()}
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
    failures, modules = [], {}
    for (a, b), syms in sorted(calls.items()):
        if a < b and (b, a) in calls:
            failures.append("%s and %s call each other: %s -> %s; %s -> %s" % (
                a, b, a, ", ".join(sorted(syms)), b,
                ", ".join(sorted(calls[(b, a)]))))
        ma, mb = module_of(a), module_of(b)
        if ma != mb:
            modules.setdefault(ma, {}).setdefault(mb, []).append(
                "%s -> %s (%s)" % (a, b, ", ".join(sorted(syms))))
    for module, target, problem in level_problems({m: set(t) for m, t in modules.items()},
                                                  levels_of, "calls"):
        failures.append(problem)
        failures.extend("  " + how for how in modules[module].get(target, [])[:3])
    return failures


def length_failures(src):
    failures = []
    for dirpath, _, names in os.walk(os.path.join(src, "proxy")):
        for name in sorted(names):
            if not name.endswith(".c"):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8") as f:
                n = sum(1 for _ in f)
            if n > MAX_LINES:
                failures.append("%s has %d lines (limit %d)" % (
                    os.path.relpath(path, src), n, MAX_LINES))
    return failures


def self_test():
    """A back call between folders and a pair of files calling each other must fail."""
    cases = {
        "one way": ({"proxy/core/a.c": "int a(void) { return 1; }\n",
                     "proxy/store/b.c": "int a(void); int b(void) { return a(); }\n"}, False),
        "a call up to a higher level, no cycle": (
            {"proxy/core/a.c": "int c(void); int a(void) { return c(); }\n",
             "proxy/store/c.c": "int c(void) { return 3; }\n"}, True),
        "a call back up between folders": (
            {"proxy/core/a.c": "int c(void); int a(void) { return c(); }\n",
             "proxy/store/b.c": "int a(void); int b(void) { return a(); }\n",
             "proxy/store/c.c": "int c(void) { return 3; }\n"}, True),
        "two files calling each other": (
            {"proxy/store/a.c": "int b(void); int a(void) { return b(); }\n",
             "proxy/store/b.c": "int a(void); int b(void) { return a(); }\n"}, True),
    }
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, (what, (files, should_fail)) in enumerate(cases.items()):
            objects = {}
            for rel, text in files.items():
                path = os.path.join(tmp, str(i), rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                subprocess.run(["cc", "-c", path, "-o", path + ".o"], check=True)
                objects[rel] = path + ".o"
            failures = call_failures(objects, {"core": 0, "store": 4})
            print("self-test: %s -> %s" % (what, failures or "passes"))
            bad += 0 if bool(failures) == should_fail else 1
    return 1 if bad else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    src, build = sys.argv[1], sys.argv[2]
    objects = {s: o for s, o in objects_of(src, build).items() if os.path.exists(o)}
    if not objects:
        print("no object files of proxy/ in %s/compile_commands.json" % build)
        return 1
    failures = call_failures(objects) + length_failures(src)
    for f in failures:
        print(f)
    if not failures:
        print("calls among %d files of proxy/ run downwards and one way" % len(objects))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
