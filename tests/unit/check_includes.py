#!/usr/bin/env python3
"""The folders of proxy/ stand on levels, and include only downwards (docs/internals.md,
"The map of proxy/").

A module is a folder of proxy/ (proxy/store/ is module `store`); a file at the top of
proxy/ is a module of its own by its stem (worker, listener, main). Each has its level in
LEVELS below, the table the map in docs/internals.md shows. An edge A -> B means a file of
A has `#include "x.h"` and x.h lives in B. Rules:

1. Downwards only: B's level is below A's (two modules of one level do not include each
   other), so no include runs back up and none makes a cycle. A module not in LEVELS fails:
   a new folder gets its level here and in the map. main, the top, has no header.
2. A private header (its name ends in `_int.h`) is included only by files of its own
   folder.
3. Every `#include "x.h"` names exactly one header of proxy/ (header names are unique
   across folders, so includes name a file, not a path).

Prints the modules by level.
Usage: check_includes.py REPO_ROOT | check_includes.py --self-test
"""
import os
import re
import sys
import tempfile

# The levels of docs/internals.md's map: a module includes (and calls, check_calls.py) only
# modules of a lower level.
LEVELS = {
    "core": 0,
    "crypto": 1, "http": 1,
    "config": 2,
    "idem": 3, "upstream": 3, "listener": 3,
    "store": 4, "cli": 4,
    "census": 5, "inbox": 5,
    "exchange": 6,
    "admin": 7,
    "worker": 8,
    "main": 9,
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def files_of(proxy_dir):
    """[(module, folder-relative path, name)] of every .c and .h under proxy_dir."""
    out = []
    for dirpath, _, names in os.walk(proxy_dir):
        rel = os.path.relpath(dirpath, proxy_dir)
        for name in sorted(names):
            stem, ext = os.path.splitext(name)
            if ext not in (".c", ".h"):
                continue
            module = stem if rel == "." else rel.split(os.sep)[0]
            out.append((module, os.path.join(dirpath, name), name))
    return sorted(out)


def check(proxy_dir, levels_of=LEVELS):
    """(problems, edges) of the tree under proxy_dir."""
    files = files_of(proxy_dir)
    problems, home = [], {}
    for module, path, name in files:
        if name.endswith(".h"):
            if name in home:
                problems.append("two headers named %s: %s and %s" % (name, home[name][1], path))
            home[name] = (module, path)
    edges, how = {}, {}
    for module, path, name in files:
        edges.setdefault(module, set())
        with open(path, encoding="utf-8") as f:
            targets = INCLUDE.findall(f.read())
        rel = os.path.relpath(path, proxy_dir)
        for target in targets:
            if target not in home:
                problems.append("%s includes \"%s\", which is no header of proxy/" % (rel, target))
                continue
            owner, owner_path = home[target]
            if target.endswith("_int.h") and owner != module:
                problems.append("%s includes %s, the private header of %s/" % (
                    rel, os.path.relpath(owner_path, proxy_dir), owner))
            if owner == "main":
                problems.append("%s includes main" % rel)
            if owner != module:
                edges[module].add(owner)
                how.setdefault((module, owner), []).append("%s includes %s" % (rel, target))
    for module, target, problem in level_problems(edges, levels_of, "includes"):
        problems.append(problem)
        problems.extend("  " + line for line in how.get((module, target), [])[:3])
    return problems, edges


def level_problems(edges, levels_of, verb):
    """[(module, target or None, message)] of what breaks rule 1 in edges
    {module: {module, ...}}; verb is "includes" or "calls"."""
    problems = []
    for module in sorted(edges):
        if module not in levels_of:
            problems.append((module, None, "module %s has no level: give it one in "
                             "check_includes.py LEVELS and in docs/internals.md's map" % module))
            continue
        for target in sorted(edges[module]):
            if target in levels_of and levels_of[target] >= levels_of[module]:
                problems.append((module, target, "%s (level %d) %s %s (level %d): only lower "
                                 "levels" % (module, levels_of[module], verb, target,
                                             levels_of[target])))
    return problems


def write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def self_test():
    """Each rule broken on purpose must fail; the good tree must pass."""
    levels_of = {"core": 0, "crypto": 1, "store": 4, "main": 9}
    good = {
        "core/log.h": "", "core/log.c": '#include "log.h"\n',
        "crypto/seal.h": '#include "log.h"\n', "crypto/seal.c": '#include "seal.h"\n',
        "store/store.h": '#include "log.h"\n', "store/store_int.h": '#include "store.h"\n',
        "store/store.c": '#include "store_int.h"\n',
        "main.c": '#include "store.h"\n#include "log.h"\n',
    }
    broken = {
        "a back edge between folders": {"core/log.c": '#include "log.h"\n#include "store.h"\n'},
        "an include of a higher level, no cycle": {"core/log.c": '#include "seal.h"\n'},
        "a folder without a level": {"cache/cache.c": '#include "log.h"\n'},
        "a private header from another folder": {"main.c": '#include "store_int.h"\n'},
        "two headers with one name": {"store/log.h": ""},
        "an include of no header": {"store/store.c": '#include "stor.h"\n'},
    }
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        write(os.path.join(tmp, "good"), good)
        problems, _ = check(os.path.join(tmp, "good"), levels_of)
        if problems:
            print("self-test: the good tree fails: %s" % problems)
            failures += 1
        for i, (what, change) in enumerate(broken.items()):
            root = os.path.join(tmp, "bad%d" % i)
            write(root, dict(good, **change))
            problems, _ = check(root, levels_of)
            print("self-test: %s -> %s" % (what, problems or "NOT CAUGHT"))
            failures += 0 if problems else 1
    return 1 if failures else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems, edges = check(os.path.join(root, "proxy"))
    for p in problems:
        print(p)
    if problems:
        return 1
    for n in range(max(LEVELS.values()) + 1):
        print("level %d: %s" % (n, " ".join(sorted(m for m in edges if LEVELS[m] == n))))
    print("the includes of %d modules run downwards" % len(edges))
    return 0


if __name__ == "__main__":
    sys.exit(main())
