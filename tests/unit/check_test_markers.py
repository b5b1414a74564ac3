#!/usr/bin/env python3
"""check_test_markers.py ROOT | --self-test

tests/run.sh runs the integration tests under ThreadSanitizer by a marker: `threads`, on every
test whose proxy runs more than one worker thread. A test that starts a proxy with `workers: 2`
(or more) without that marker would never be seen by TSan, so this check fails it.

What counts as "sets workers >= 2", read from each test module's syntax tree:
  - a keyword `workers=N`, a dict entry `"workers": N` or a YAML line `workers: N` with N >= 2
    (N a literal, or a name assigned a literal in the function or the module, tuple unpacking
    included);
  - a `parametrize` over `workers` with a value >= 2;
  - a call of a module-level function, or a fixture parameter, that does one of these itself.
A test has the marker from `@pytest.mark.threads` on it or its class, or the module's
`pytestmark`. --self-test runs the check on small modules and fails unless it flags exactly the
ones that break the rule.
"""

import ast
import glob
import os
import re
import sys

YAML_WORKERS = re.compile(r"(?:^|\n)\s*workers:\s*(\d+)")


def literal_int(node, names):
    if isinstance(node, ast.Constant) and isinstance(node.value, int) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    return None


def assigned_ints(body_nodes):
    """{name: int} of the plain assignments among these nodes (a = 2; a, b = 2, 3)."""
    out = {}
    for node in body_nodes:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = []
            if isinstance(target, ast.Name):
                pairs = [(target, node.value)]
            elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(target.elts, node.value.elts))
            for t, v in pairs:
                if isinstance(t, ast.Name):
                    n = literal_int(v, {})
                    if n is not None:
                        out[t.id] = n
    return out


def decorator_markers(decorators):
    """The pytest.mark names among decorators (pytest.mark.x and pytest.mark.x(...))."""
    out = set()
    for d in decorators:
        node = d.func if isinstance(d, ast.Call) else d
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "mark":
            out.add(node.attr)
    return out


def parametrized_workers(decorators, names):
    for d in decorators:
        if not (isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
                and d.func.attr == "parametrize" and len(d.args) >= 2):
            continue
        argnames = d.args[0]
        if not (isinstance(argnames, ast.Constant) and isinstance(argnames.value, str)):
            continue
        cols = [c.strip() for c in argnames.value.split(",")]
        if "workers" not in cols:
            continue
        col = cols.index("workers")
        values = d.args[1]
        if not isinstance(values, (ast.List, ast.Tuple)):
            continue
        for v in values.elts:
            if isinstance(v, ast.Call) and getattr(v.func, "attr", "") == "param":
                v = ast.Tuple(elts=v.args) if len(cols) > 1 else (v.args[0] if v.args else v)
            item = v.elts[col] if len(cols) > 1 and isinstance(v, ast.Tuple) else v
            n = literal_int(item, names)
            if n is not None and n >= 2:
                return True
    return False


def sets_workers(fn, module_names):
    """Whether the function's own body sets workers >= 2 (see the module's docstring)."""
    names = dict(module_names)
    names.update(assigned_ints(list(ast.walk(fn))))
    for node in ast.walk(fn):
        if isinstance(node, ast.keyword) and node.arg == "workers":
            n = literal_int(node.value, names)
            if n is not None and n >= 2:
                return True
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == "workers":
                    n = literal_int(v, names)
                    if n is not None and n >= 2:
                        return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if any(int(m) >= 2 for m in YAML_WORKERS.findall(node.value)):
                return True
    return parametrized_workers(fn.decorator_list, names)


def called_names(fn):
    out = {a.arg for a in fn.args.args}
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            out.add(node.func.id)
    return out


def check_module(source, path):
    """The problems of one module's source: one line for each test that breaks the rule."""
    tree = ast.parse(source, path)
    module_names = assigned_ints(tree.body)
    module_marks = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets):
            vals = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) \
                else [node.value]
            module_marks |= decorator_markers(vals)
    funcs = {}     # name -> (node, the markers of its class and itself)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            funcs[node.name] = (node, decorator_markers(node.decorator_list))
        elif isinstance(node, ast.ClassDef):
            cls_marks = decorator_markers(node.decorator_list)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name.startswith("test_"):
                    funcs["%s.%s" % (node.name, item.name)] = (
                        item, cls_marks | decorator_markers(item.decorator_list))
    threaded = {name for name, (fn, _) in funcs.items() if sets_workers(fn, module_names)}
    changed = True
    while changed:  # a helper or fixture that calls one that sets workers >= 2
        changed = False
        for name, (fn, _) in funcs.items():
            if name not in threaded and called_names(fn) & threaded:
                threaded.add(name)
                changed = True
    problems = []
    for name, (fn, marks) in sorted(funcs.items()):
        if not name.split(".")[-1].startswith("test_") or name not in threaded:
            continue
        if "threads" not in marks | module_marks:
            problems.append("%s:%d: %s runs a proxy with workers >= 2 but is not marked "
                            "@pytest.mark.threads (tests/run.sh would never run it under TSan)"
                            % (path, fn.lineno, name))
    return problems


SELF_TEST = [
    # (source, how many problems the check must find)
    ("def test_a(start_proxy):\n    start_proxy(workers=2)\n", 1),
    ("import pytest\n@pytest.mark.threads\ndef test_a(start_proxy):\n    start_proxy(workers=2)\n", 0),
    ("def test_a(start_proxy):\n    start_proxy(workers=1)\n", 0),
    ("W = 3\ndef test_a(start_proxy):\n    start_proxy(**{'workers': W})\n", 1),
    ("def test_a(start_proxy):\n    w, t = 2, 0.5\n    start_proxy(workers=w)\n", 1),
    ("def test_a(start_proxy):\n    start_proxy(config_text='listen: x\\nworkers: 4\\n')\n", 1),
    ("def helper(sp):\n    return sp(workers=2)\ndef test_a(start_proxy):\n    helper(start_proxy)\n",
     1),
    ("import pytest\n@pytest.fixture\ndef two(start_proxy):\n    return start_proxy(workers=2)\n"
     "def test_a(two):\n    pass\n", 1),
    ("import pytest\n@pytest.mark.parametrize('workers', [1, 2])\ndef test_a(workers):\n    pass\n",
     1),
    ("import pytest\npytestmark = [pytest.mark.threads]\n"
     "def test_a(start_proxy):\n    start_proxy(workers=2)\n", 0),
    ("import pytest\n@pytest.mark.threads\nclass TestX:\n    def test_a(self, sp):\n"
     "        sp(workers=2)\n", 0),
]


def self_test():
    bad = 0
    for i, (source, want) in enumerate(SELF_TEST):
        got = check_module(source, "<case %d>" % i)
        if len(got) != want:
            print("self-test case %d: %d problems, want %d:\n%s\n%s"
                  % (i, len(got), want, source, "\n".join(got)))
            bad += 1
    print("self-test: %d of %d cases right" % (len(SELF_TEST) - bad, len(SELF_TEST)))
    return 1 if bad else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1]
    problems = []
    paths = sorted(glob.glob(os.path.join(root, "tests", "integration", "test_*.py")))
    for path in paths:
        with open(path, encoding="utf-8") as f:
            problems += check_module(f.read(), os.path.relpath(path, root))
    for p in problems:
        print(p)
    print("%d test modules, %d problems" % (len(paths), len(problems)))
    return 1 if problems or not paths else 0


if __name__ == "__main__":
    sys.exit(main())
