#!/usr/bin/env python3
"""Every configuration key that proxy/config.c accepts is documented.

Usage: check_config_keys.py SOURCE_DIR

Reads the key tables of proxy/config.c (the `static const struct config_key
config_*_keys[]` arrays, one `{ "name", ...` entry per key) and checks that
each key appears in conf/idempotency-proxy.yaml (as `name:`, commented out
or not) and in README.md (in backticks). Prints `ok ...` / `FAIL ...` lines;
exits 1 when anything is missing. Python 3 standard library only.
"""
import pathlib
import re
import sys

TABLE_RE = re.compile(
    r"static\s+const\s+struct\s+config_key\s+(config_\w+_keys)\s*\[\s*\]\s*=\s*\{(.*?)\n\};",
    re.S)
ENTRY_RE = re.compile(r'\{\s*"([A-Za-z_][A-Za-z0-9_]*)"')


def config_keys(config_c):
    """Key names in table order, each once, with the tables they sit in."""
    keys = {}
    tables = TABLE_RE.findall(config_c.read_text())
    for table, body in tables:
        for name in ENTRY_RE.findall(body):
            keys.setdefault(name, []).append(table)
    return tables, keys


def in_yaml(text, key):
    # `key:` at the start of a line, maybe commented out or a list item
    return re.search(r"^[ \t]*(?:#[ \t]*)?(?:-[ \t]+)?" + re.escape(key) + r"[ \t]*:",
                     text, re.M) is not None


def in_readme(text, key):
    # `key`, `key:` or `key: value` inside backticks
    return re.search(r"`" + re.escape(key) + r"(?:`|:[^`\n]*`)", text) is not None


def main(argv):
    if len(argv) != 2:
        print("usage: check_config_keys.py SOURCE_DIR", file=sys.stderr)
        return 2
    src = pathlib.Path(argv[1])
    config_c = src / "proxy" / "config.c"
    sample = src / "conf" / "idempotency-proxy.yaml"
    readme = src / "README.md"
    failed = 0

    if not config_c.is_file():
        print(f"FAIL {config_c} not found")
        return 1
    tables, keys = config_keys(config_c)
    if not tables or not keys:
        print(f"FAIL no config_*_keys tables found in {config_c}")
        return 1
    print(f"ok {len(keys)} keys in {len(tables)} tables of {config_c}")

    documents = [("conf/idempotency-proxy.yaml", sample, in_yaml),
                 ("README.md", readme, in_readme)]
    for label, path, present in documents:
        if not path.is_file():
            print(f"FAIL {label} does not exist")
            failed += 1
            continue
        text = path.read_text()
        for key, where in keys.items():
            if present(text, key):
                print(f"ok {label} documents {key}")
            else:
                print(f"FAIL {label} does not document `{key}` ({', '.join(where)})")
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
