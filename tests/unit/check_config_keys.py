#!/usr/bin/env python3
"""Every configuration key that proxy/config/config_schema.c accepts is documented, with its reload class.

Usage: check_config_keys.py SOURCE_DIR

Reads the key tables of proxy/config/config_schema.c (the `const struct config_key
config_*_keys[]` arrays, one `{ "name", .reload = CLASS, ...` entry per key)
and checks that
- every key has a reload class (LIVE, RESTART, IDENTITY, or BY_KEYS for a
  section and the routes, whose keys have their own);
- each key appears in conf/idempotency-proxy.yaml (as `name:`, commented out
  or not) and in docs/configuration.md (in backticks, alone or as a part of a
  dotted path such as `redis.tls.ca_file`);
- when docs/configuration.md exists: each key has a row in its tables (those
  whose header has `key` and `reload` columns), the key as its full dotted
  path in backticks (`redis.tls.ca_file`; a route's keys as under `routes:`,
  `lease`, `delivery.backoff.initial`, `path`), and the row's reload column
  says the class the table says (live, restart, identity); a row names no key
  the schema does not have.
Prints `ok ...` / `FAIL ...` lines; exits 1 when anything is missing or
differs. Python 3 standard library only.
"""
import pathlib
import re
import sys

TABLE_RE = re.compile(
    r"(?:static\s+)?const\s+struct\s+config_key\s+(config_\w+_keys)\s*\[\s*\]\s*=\s*\{(.*?)\n\};",
    re.S)
ENTRY_RE = re.compile(r'\{\s*"([A-Za-z_][A-Za-z0-9_]*)"')
ROW_RE = re.compile(r'^\s*\{\s*"([A-Za-z_][A-Za-z0-9_]*)"(.*)\},\s*$', re.M)
RELOAD_RE = re.compile(r"\.reload\s*=\s*(?:CONFIG_RELOAD_)?([A-Z_]+)")
SECTION_RE = re.compile(r"\.section\s*=\s*&(config_\w+_section)")
KIND_RE = re.compile(r"\.kind\s*=\s*(CONFIG_\w+)")
SECTION_DEF_RE = re.compile(
    r"const\s+struct\s+config_section\s+(config_\w+_section)\s*=\s*\{\s*\"[^\"]*\",\s*"
    r"\{\s*(config_\w+_keys)\s*,\s*(config_\w+_keys|NULL)\s*\}")
CLASSES = {"LIVE": "live", "RESTART": "restart", "IDENTITY": "identity", "BY_KEYS": None}


def config_keys(schema_c):
    """Key names in table order, each once, with the tables they sit in."""
    keys = {}
    tables = TABLE_RE.findall(schema_c.read_text())
    for table, body in tables:
        for name in ENTRY_RE.findall(body):
            keys.setdefault(name, []).append(table)
    return tables, keys


def schema_rows(text):
    """{table: [(name, reload or None, section or None, kind)]} in table order."""
    rows = {}
    for table, body in TABLE_RE.findall(text):
        for name, rest in ROW_RE.findall(body):
            reload = RELOAD_RE.search(rest)
            section = SECTION_RE.search(rest)
            kind = KIND_RE.search(rest)
            rows.setdefault(table, []).append(
                (name, reload.group(1) if reload else None, section.group(1) if section else None,
                 kind.group(1) if kind else "CONFIG_SCALAR"))
    return rows


def key_paths(text):
    """[(dotted path, class)] of every key but the sections, as the documents write them.

    A route's keys (path, delivery..., and the policy keys) are written as under
    `routes:`; `defaults:` takes the same policy keys and adds no paths.
    """
    rows = schema_rows(text)
    sections = {name: [t for t in tables if t != "NULL"]
                for name, *tables in SECTION_DEF_RE.findall(text)}
    paths = []

    def walk(table, prefix):
        for name, reload, section, kind in rows.get(table, []):
            path = prefix + name
            if kind == "CONFIG_ROUTES":
                for t in sections.get(section, []):
                    walk(t, "")
            elif kind == "CONFIG_SECTION":
                if name != "defaults" or prefix:
                    for t in sections.get(section, []):
                        walk(t, path + ".")
            else:
                paths.append((path, reload))

    walk("config_root_keys", "")
    return paths


def in_yaml(text, key):
    # `key:` at the start of a line, maybe commented out or a list item
    return re.search(r"^[ \t]*(?:#[ \t]*)?(?:-[ \t]+)?" + re.escape(key) + r"[ \t]*:",
                     text, re.M) is not None


def in_readme(text, key):
    # `key`, `key:` or `key: value` inside backticks; key may be a part of a dotted path
    return re.search(r"`(?:[A-Za-z_][A-Za-z0-9_]*\.)*" + re.escape(key) +
                     r"(?:[.`]|:[^`\n]*`)", text) is not None


def doc_reload_rows(text):
    """{key: [reload words]} from every table whose header has `key` and `reload` columns."""
    found = {}
    cols = None
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            cols = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cols is None:
            names = [c.lower() for c in cells]
            cols = (names.index("key"), names.index("reload")) \
                if "key" in names and "reload" in names else False
            continue
        if not cols or all(set(c) <= set("-: ") for c in cells):
            continue
        k, r = cols
        if max(k, r) >= len(cells):
            continue
        m = re.search(r"`([^`]+)`", cells[k])
        if m:
            found.setdefault(m.group(1), []).append(cells[r].strip("` *").lower())
    return found


def check_reload_classes(text, label):
    """FAIL lines for rows without a class; returns (failures, {path: class})."""
    failed = 0
    for table, rows in schema_rows(text).items():
        for name, reload, _, _ in rows:
            if reload not in CLASSES:
                print(f"FAIL {label}: {table} key `{name}` has no reload class "
                      f"(.reload = LIVE, RESTART or IDENTITY)")
                failed += 1
    paths = dict(key_paths(text))
    print(f"ok {len(paths)} keys with a reload class")
    return failed, paths


def check_docs(docs_text, label, paths):
    failed = 0
    rows = doc_reload_rows(docs_text)
    for path, reload in paths.items():
        want = CLASSES.get(reload)
        got = rows.get(path)
        if not got:
            print(f"FAIL {label} has no row for `{path}` (reload: {want})")
            failed += 1
        elif any(g != want for g in got):
            print(f"FAIL {label} says `{path}` is {', '.join(got)}; the schema says {want}")
            failed += 1
        else:
            print(f"ok {label} `{path}` is {want}")
    for path in sorted(set(rows) - set(paths)):
        if not re.fullmatch(r"[a-z_]+(\.[a-z_]+)*", path):
            continue
        if not any(p.startswith(path + ".") for p in paths) and path not in ("routes", "defaults"):
            print(f"FAIL {label} has a row for `{path}`, which the schema does not have")
            failed += 1
    return failed


def main(argv):
    if len(argv) != 2:
        print("usage: check_config_keys.py SOURCE_DIR", file=sys.stderr)
        return 2
    src = pathlib.Path(argv[1])
    schema_c = src / "proxy" / "config" / "config_schema.c"
    sample = src / "conf" / "idempotency-proxy.yaml"
    readme = src / "docs" / "configuration.md"
    reference = src / "docs" / "configuration.md"
    failed = 0

    if not schema_c.is_file():
        print(f"FAIL {schema_c} not found")
        return 1
    tables, keys = config_keys(schema_c)
    if not tables or not keys:
        print(f"FAIL no config_*_keys tables found in {schema_c}")
        return 1
    print(f"ok {len(keys)} keys in {len(tables)} tables of {schema_c}")
    bad, paths = check_reload_classes(schema_c.read_text(), "proxy/config/config_schema.c")
    failed += bad

    documents = [("conf/idempotency-proxy.yaml", sample, in_yaml),
                 ("docs/configuration.md", readme, in_readme)]
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
    if reference.is_file():
        failed += check_docs(reference.read_text(), "docs/configuration.md", paths)
    else:
        print("ok docs/configuration.md does not exist yet: no reload column to check")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
