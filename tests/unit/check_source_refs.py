#!/usr/bin/env python3
"""Comments in proxy/ point at documents that exist.

Usage: check_source_refs.py SOURCE_DIR

Every `docs/PAGE.md#anchor` or `README.md#anchor` named in proxy/*.c and
proxy/*.h must be a page of the repository, and its #anchor the GitHub slug
of one of that page's headings (check_docs_links.py's rule). A citation of a
README section by its title (`README "Title"`) is refused: the README is a
short map whose headings move; a comment names the page and anchor instead.
Prints `ok ...` / `FAIL ...` lines; exits 1 when anything is wrong.
"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from check_docs_links import anchors  # noqa: E402

REF_RE = re.compile(r"\b((?:docs/[a-z0-9-]+|README)\.md)(?:#([a-z0-9_-]+))?")
README_TITLE_RE = re.compile(r"README\s+\"")


def main(argv):
    src = pathlib.Path(argv[1])
    failed = 0
    refs = 0
    cache = {}
    for path in sorted(list((src / "proxy").rglob("*.c")) + list((src / "proxy").rglob("*.h"))):
        text = path.read_text(encoding="utf-8")
        for m in README_TITLE_RE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            print("FAIL %s:%d: cites a README section by its title; name docs/PAGE.md#anchor"
                  % (path.relative_to(src), line))
            failed += 1
        for m in REF_RE.finditer(text):
            refs += 1
            page, anchor = m.group(1), m.group(2)
            line = text.count("\n", 0, m.start()) + 1
            target = src / page
            if not target.is_file():
                print("FAIL %s:%d: %s does not exist" % (path.relative_to(src), line, page))
                failed += 1
                continue
            if anchor is None:
                continue
            if page not in cache:
                cache[page] = anchors(target.read_text(encoding="utf-8"))
            if anchor not in cache[page]:
                print("FAIL %s:%d: %s has no heading #%s" % (path.relative_to(src), line, page,
                                                            anchor))
                failed += 1
    if not failed:
        print("ok %d document references in proxy/ resolve" % refs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
