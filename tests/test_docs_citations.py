"""Every document the repository cites is in the repository (issue 34 item 8).

The code and the docs once cited reference notes that lived outside the repository
(the wire contract, the design and style notes, research notes), so a clone could
not read what the code pointed to. This walks every source, doc and build file and
fails on:

- a citation of one of those outside notes, by any of the names it was cited by;
- a `*.md` path that names no file of the repository (tried from the repository
  root, from the citing file's directory and from `docs/`);
- a `docs/x.md §N` whose file has no numbered heading N, or a `docs/x.md "Heading"`
  whose file has no heading containing that text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = {".py", ".pyi", ".md", ".toml", ".cfg", ".ini", ".txt", ".yml", ".yaml", ".sh"}
NAMES = {"Makefile"}
SKIP_DIRS = {"__pycache__", "node_modules", "build", "dist"}

# The outside notes, split so this file does not cite them itself.
_UPPER = "PROTOCOL|DESIGN|STYLE"
_NOTES = "|".join(
    n + "_" + s
    for n, s in (
        ("KAFKA", "NOTES"),
        ("KAFKA", "SEMANTICS"),
        ("SPARK", "NOTES"),
        ("RELIABILITY", "NOTES"),
        ("ECOSYSTEM", "NOTES"),
        ("ROUND3", "NOTES"),
    )
)
OUTSIDE_NOTE = re.compile(
    rf"(?<![\w/.-])(?:{_UPPER})\.md"  # the upper-case notes by file name
    rf"|(?<![\w/-])(?:{_NOTES})\b"  # the research notes, with or without .md
    r"|(?<![\w/-])STYLE (?:item )?\d"  # the style note's items, with or without "item"
    r"|\bshared/[\w.-]+\.md"  # any path into the shared notes directory
)
MD_PATH = re.compile(r"(?<![\w./:-])((?:\.\./)*[\w-][\w./-]*\.md)\b")
SECTION = re.compile(r"`?\s*§(\d+)")
# After the path: blanks, or a line break (and a comment's `#`), then "Heading".
HEADING_REF = re.compile(r'`?(?:[ \t]+|[ \t]*\n[ \t]*(?:#[ \t]*)?)"([A-Za-z][^"\n]{0,79})"')


def _sources() -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [
            d
            for d in dirnames
            if not d.startswith(".") and d not in SKIP_DIRS and not d.endswith(".egg-info")
        ]
        for name in filenames:
            path = Path(dirpath) / name
            if (path.suffix in SUFFIXES or name in NAMES) and path != Path(__file__).resolve():
                yield path


def _resolve(ref: str, citing: Path) -> Path | None:
    for base in (ROOT, citing.parent, ROOT / "docs"):
        candidate = (base / ref).resolve()
        if candidate.is_relative_to(ROOT) and candidate.is_file():
            return candidate
    return None


@cache
def _headings(doc: Path) -> tuple[str, ...]:
    return tuple(
        line.lstrip("#").strip().lower()
        for line in doc.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    )


def _problems(path: Path, text: str) -> Iterator[str]:
    """What is wrong with the citations in `text`, the contents of `path`."""
    where = path.relative_to(ROOT)

    def line_of(pos: int) -> str:
        return f"{where}:{text.count(chr(10), 0, pos) + 1}"

    for match in OUTSIDE_NOTE.finditer(text):
        yield f"{line_of(match.start())}: {match.group(0)!r} is not in the repository"
    for match in MD_PATH.finditer(text):
        ref = match.group(1)
        doc = _resolve(ref, path)
        if doc is None:
            if not OUTSIDE_NOTE.search(ref):  # reported above
                yield f"{line_of(match.start())}: {ref} names no file of the repository"
            continue
        if doc.parent != ROOT / "docs":
            continue
        rest = text[match.end() : match.end() + 120]
        if section := SECTION.match(rest):
            number = section.group(1)
            if not any(h.startswith(f"{number}.") for h in _headings(doc)):
                yield f"{line_of(match.start())}: {ref} has no section §{number}"
        elif heading := HEADING_REF.match(rest):
            wanted = heading.group(1).lower()
            if not any(wanted in h for h in _headings(doc)):
                yield f'{line_of(match.start())}: {ref} has no heading "{heading.group(1)}"'


def test_every_cited_document_is_in_the_repository() -> None:
    problems = [
        problem
        for path in sorted(_sources())
        for problem in _problems(path, path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not problems, "citations of documents outside the repository:\n" + "\n".join(problems)


def test_the_checks_catch_each_kind_of_bad_citation() -> None:
    """The checks themselves: each kind of dangling citation is reported, good ones pass."""
    citing = ROOT / "docs" / "x.md"
    bad = {
        "see " + "PROTOCOL" + ".md §3": "is not in the repository",
        "(" + "KAFKA" + "_SEMANTICS" + " §7.4)": "is not in the repository",
        "(" + "STY" + "LE item 11)": "is not in the repository",
        "(" + "STY" + "LE 12)": "is not in the repository",
        "`../shared/notes.md`": "is not in the repository",
        "docs/no-such-page.md": "names no file",
        "docs/protocol.md §42": "has no section §42",
        'docs/storage.md "No such heading"': 'has no heading "No such heading"',
    }
    good = (
        "docs/protocol.md §3",
        "`docs/protocol.md` §5",
        'docs/storage.md "File layout"',
        'docs/design.md "hot paths"',
        "README.md",
        "storage.md",
    )
    for text, expected in bad.items():
        found = list(_problems(citing, text))
        assert any(expected in p for p in found), (text, found)
    for text in good:
        assert not list(_problems(citing, text)), text
