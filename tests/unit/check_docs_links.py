#!/usr/bin/env python3
"""The user documents hold together: every relative link and #anchor resolves.

Usage: check_docs_links.py SOURCE_DIR

Reads README.md, CHANGELOG.md, SECURITY.md and docs/*.md. For every inline
link or image outside code (`[text](target)`, `![alt](target)`) whose target
is not a URL: the file must exist, relative to the linking page, and a
`#anchor` must be the GitHub slug of a heading of the target page (or of the
page itself for `#anchor` alone). Also checks that README.md stays a short
door (at most 300 lines) and that no page tells project history or points at
files a user does not have (an issue number, a "fresh user", CONTRACT.md,
../shared). Prints `ok ...` / `FAIL ...` lines; exits 1 when anything is
wrong. Python 3 standard library only.
"""
import pathlib
import re
import sys

README_MAX_LINES = 300
FENCE_RE = re.compile(r"^\s*(```|~~~)")
HEADING_RE = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN_RE = re.compile(r"(`+)(.+?)\1")
LINK_RE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
URL_RE = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)
# what a user document must not say: history and files outside the repository
FORBIDDEN = [
    (re.compile(r"\bissues?\s+#?\d+", re.I), "an issue number"),
    (re.compile(r"fresh user", re.I), "project history (a fresh user)"),
    (re.compile(r"CONTRACT\.md"), "CONTRACT.md"),
    (re.compile(r"\.\./shared|\bshared/"), "../shared"),
]


def documents(src):
    docs = [src / "README.md", src / "CHANGELOG.md", src / "SECURITY.md"]
    docs += sorted((src / "docs").glob("*.md"))
    return docs


def prose_lines(text):
    """(line number, line) outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE_RE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif m.group(1) == fence:
                fence = None
            continue
        if fence is None:
            yield n, line


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = CODE_SPAN_RE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(text):
    """Every heading's slug, with GitHub's -1, -2 ... for repeated headings."""
    seen, out = {}, set()
    for _, line in prose_lines(text):
        m = HEADING_RE.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else "%s-%d" % (base, n))
    return out


def links(text):
    """(line number, target) of every inline link outside code."""
    for n, line in prose_lines(text):
        line = CODE_SPAN_RE.sub(lambda m: "code", line)
        for m in LINK_RE.finditer(line):
            yield n, m.group(1)


def main(argv):
    if len(argv) != 2:
        print("usage: check_docs_links.py SOURCE_DIR", file=sys.stderr)
        return 2
    src = pathlib.Path(argv[1]).resolve()
    failed = 0
    pages = [p for p in documents(src) if p.is_file()]
    missing = [p for p in documents(src)[:3] if not p.is_file()]
    for p in missing:
        print("FAIL %s does not exist" % p.relative_to(src))
        failed += 1
    if not (src / "docs").is_dir() or len(pages) <= 3:
        print("FAIL no docs/*.md pages")
        return 1
    texts = {p: p.read_text(encoding="utf-8") for p in pages}
    slugs = {p: anchors(t) for p, t in texts.items()}
    checked = 0
    for page, text in texts.items():
        rel = page.relative_to(src)
        for n, target in links(text):
            if URL_RE.match(target):
                continue
            checked += 1
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                print("FAIL %s:%d: %s: no such file" % (rel, n, target))
                failed += 1
                continue
            if not anchor:
                continue
            if dest.suffix != ".md" or dest not in slugs:
                print("FAIL %s:%d: %s: an anchor into a page that is not checked" % (rel, n, target))
                failed += 1
            elif anchor not in slugs[dest]:
                print("FAIL %s:%d: %s: no heading with that anchor in %s" % (
                    rel, n, target, dest.relative_to(src)))
                failed += 1
        for n, line in enumerate(text.splitlines(), 1):
            for pattern, what in FORBIDDEN:
                if pattern.search(line):
                    print("FAIL %s:%d: mentions %s: %s" % (rel, n, what, line.strip()))
                    failed += 1
    print("ok %d relative links in %d pages checked" % (checked, len(pages)))
    readme_lines = len(texts[src / "README.md"].splitlines()) if src / "README.md" in texts else 0
    if readme_lines > README_MAX_LINES:
        print("FAIL README.md has %d lines; the door holds at most %d (move the rest to docs/)" % (
            readme_lines, README_MAX_LINES))
        failed += 1
    else:
        print("ok README.md has %d lines (at most %d)" % (readme_lines, README_MAX_LINES))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
