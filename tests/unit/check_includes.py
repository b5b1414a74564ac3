#!/usr/bin/env python3
"""The folders of proxy/ form a one-way graph (docs/internals.md, "The map of proxy/").

A module is a folder of proxy/ (proxy/store/ is module `store`); a file at the top of
proxy/ is a module of its own by its stem (worker, listener, main). An edge A -> B means a
file of A has `#include "x.h"` and x.h lives in B. Rules:

1. No cycle: no module includes the header of a module that (directly or through others)
   includes its own. main is the root and may include anything; it has no header.
2. A private header (its name ends in `_int.h`) is included only by files of its own
   folder.
3. Every `#include "x.h"` names exactly one header of proxy/ (header names are unique
   across folders, so includes name a file, not a path).

Prints the modules by level (a module stands one above the highest it includes).
Usage: check_includes.py REPO_ROOT | check_includes.py --self-test
"""
import os
import re
import sys
import tempfile

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


def check(proxy_dir):
    """(problems, edges) of the tree under proxy_dir."""
    files = files_of(proxy_dir)
    problems, home = [], {}
    for module, path, name in files:
        if name.endswith(".h"):
            if name in home:
                problems.append("two headers named %s: %s and %s" % (name, home[name][1], path))
            home[name] = (module, path)
    edges = {}
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
    cycle = find_cycle(edges)
    if cycle:
        problems.append("include cycle: " + " -> ".join(cycle))
    return problems, edges


def find_cycle(edges):
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def levels(edges):
    """{module: level} of an acyclic graph: 0 includes nothing of proxy/."""
    memo = {}

    def level(node):
        if node not in memo:
            memo[node] = 1 + max((level(n) for n in edges.get(node, ())), default=-1)
        return memo[node]

    return {node: level(node) for node in edges}


def write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def self_test():
    """Each rule broken on purpose must fail; the good tree must pass."""
    good = {
        "core/log.h": "", "core/log.c": '#include "log.h"\n',
        "store/store.h": '#include "log.h"\n', "store/store_int.h": '#include "store.h"\n',
        "store/store.c": '#include "store_int.h"\n',
        "main.c": '#include "store.h"\n#include "log.h"\n',
    }
    broken = {
        "a back edge between folders": {"core/log.c": '#include "log.h"\n#include "store.h"\n'},
        "a private header from another folder": {"main.c": '#include "store_int.h"\n'},
        "two headers with one name": {"store/log.h": ""},
        "an include of no header": {"store/store.c": '#include "stor.h"\n'},
    }
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        write(os.path.join(tmp, "good"), good)
        problems, _ = check(os.path.join(tmp, "good"))
        if problems:
            print("self-test: the good tree fails: %s" % problems)
            failures += 1
        for i, (what, change) in enumerate(broken.items()):
            root = os.path.join(tmp, "bad%d" % i)
            write(root, dict(good, **change))
            problems, _ = check(root)
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
    by_level = levels(edges)
    for n in range(max(by_level.values()) + 1):
        print("level %d: %s" % (n, " ".join(sorted(m for m in by_level if by_level[m] == n))))
    print("include graph of %d modules is one-way" % len(edges))
    return 0


if __name__ == "__main__":
    sys.exit(main())
