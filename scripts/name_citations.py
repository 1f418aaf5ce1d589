#!/usr/bin/env python3
"""Make every ``§`` citation in the three packages name the reference document it cites.

Rules: docs/reference/README.md (checked by tests/core/test_docs.py). Rewrites ``runtime spec §``
to ``runtime-semantics §``, ``(HTTP) contract §`` to ``http-contract §``, a bare ``spec §`` to the
folder's document (``shopsim_sandbox`` cites the HTTP contract, the rest the runtime semantics),
and prefixes a bare ``§N`` whose section exists only in the other document. Only comments and
docstrings carry citations, so the rewrite changes no behaviour. ``--apply`` writes; without it the
files that would change are listed. Exit 1 when a citation still does not resolve.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the rules live with the test that checks them

from testkit import citations as C  # noqa: E402

SECTIONS = {name: C.headings(path) for name, path in C.DOCUMENTS.items()}
OTHER = {"runtime-semantics": "http-contract", "http-contract": "runtime-semantics"}
EXPLICIT = [
    (re.compile(r"\bruntime[ -]spec(?:'s)? (?=§)"), "runtime-semantics"),
    (re.compile(r"\b(?:the )?(?:ShopSimulator )?HTTP contract(?:'s)? (?=§)"), "http-contract"),
    (re.compile(r"(?<!-)\b(?:the )?contract(?:'s)? (?=§)"), "http-contract"),
]
SPEC = re.compile(r"\b(?:the )?spec(?:'s)? (?=§\s?([0-9]+(?:\.[0-9]+)*))")
# workstream tags of the first implementation round, left in comments
TAGS = (("(SKILLS, spec §", "(spec §"), (" (CORE-RUN)", ""), (" (SKILLS helper)", ""))


def folder_document(path: Path) -> str:
    """The document a bare ``spec §`` means in this file's folder."""
    parts = path.relative_to(REPO).parts
    return "http-contract" if parts[0] == "shopsim_sandbox" and "policy" not in parts else "runtime-semantics"


def pick(number: str, preferred: str) -> str:
    """*preferred* when it has the section, else the other document when that one has it."""
    if C.resolves(number, SECTIONS[preferred]) or not C.resolves(number, SECTIONS[OTHER[preferred]]):
        return preferred
    return OTHER[preferred]


def rewrite(path: Path, text: str) -> str:
    """The text of *path* with every citation naming its document."""
    for old, new in TAGS:
        text = text.replace(old, new)
    for pattern, name in EXPLICIT:
        text = pattern.sub(name + " ", text)
    text = SPEC.sub(lambda m: pick(m.group(1), folder_document(path)) + " ", text)
    first = C._DOC_NAME.search(text)
    default = first.group(1) if first else None
    lines = text.split("\n")
    for i, line in enumerate(lines):
        out, pos = [], 0
        for match in C._CITE.finditer(line):
            before = line[: match.start()]
            if C._EXTERNAL.search(before):
                continue
            named = C._DOC_NAME.findall(before)
            current = named[-1] if named else default
            want = pick(match.group(1), current or folder_document(path))
            if current != want:
                out.append(line[pos : match.start()] + want + " ")
                pos = match.start()
                default = default or want
        if out:
            lines[i] = "".join(out) + line[pos:]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Rewrite (``--apply``) or list the files whose citations do not name their document."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--apply", action="store_true", help="write the changes")
    args = parser.parse_args(argv)
    changed = []
    for path in C.source_files():
        text = path.read_text(encoding="utf-8")
        new = rewrite(path, text)
        if new != text:
            changed.append(path.relative_to(REPO))
            if args.apply:
                path.write_text(new, encoding="utf-8")
    for name in changed:
        print(f"{'rewrote' if args.apply else 'would rewrite'} {name}")
    problems = C.unresolved() if args.apply else []
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
