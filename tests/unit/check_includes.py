#!/usr/bin/env python3
"""The modules of proxy/ form a one-way graph: no file includes the header of a
module that (directly or through others) includes its own header.

A module is a stem up to its first '_': proxy/exchange.c, exchange.h,
exchange_claim.c and exchange_int.h are all module `exchange` (the files of one
module may call each other).
An edge A -> B means a file of A has `#include "B.h"`. main.c is the root and
may include anything; nothing may include main. Any cycle fails the test and
is printed. Usage: check_includes.py REPO_ROOT
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)\.h"', re.M)


def graph(proxy_dir):
    edges = {}
    for name in sorted(os.listdir(proxy_dir)):
        stem, ext = os.path.splitext(name)
        if ext not in (".c", ".h"):
            continue
        stem = stem.split("_")[0]
        with open(os.path.join(proxy_dir, name)) as f:
            targets = set(t.split("_")[0] for t in INCLUDE.findall(f.read()))
        edges.setdefault(stem, set()).update(t for t in targets if t != stem)
    return edges


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


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    edges = graph(os.path.join(root, "proxy"))
    cycle = find_cycle(edges)
    if cycle:
        print("include cycle: " + " -> ".join(cycle))
        return 1
    print("include graph of %d modules has no cycle" % len(edges))
    return 0


if __name__ == "__main__":
    sys.exit(main())
