"""Reading ``§`` citations in source files against the reference documents in docs/reference/.

The rules are those of docs/reference/README.md. Used by tests/core/test_docs.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = {
    "runtime-semantics": REPO / "docs" / "reference" / "runtime-semantics.md",
    "http-contract": REPO / "docs" / "reference" / "shopsimulator-http-contract.md",
}
PACKAGES = ("shopsimrl_core", "shopsimrl_dagster", "shopsim_sandbox")

_DOC_NAME = re.compile(r"\b(runtime-semantics|http-contract)\b")
_CITE = re.compile(r"§\s?([0-9]+(?:\.[0-9]+)*)")
_EXTERNAL = re.compile(r"\bRFC\s?\d+\s*$")
_HEADING = re.compile(r"^#{1,6}\s+(?:Appendix\s+)?([0-9A-Z]+(?:\.[0-9]+)*)\.?\s")


def headings(document: Path) -> set[str]:
    """The section numbers of a Markdown document's numbered headings (``## 12.`` → ``12``)."""
    out = set()
    for line in document.read_text(encoding="utf-8").splitlines():
        match = _HEADING.match(line)
        if match:
            out.add(match.group(1))
    return out


def resolves(number: str, sections: set[str]) -> bool:
    """Whether a cited number is a heading, or an item (third level and below) of a heading."""
    if number in sections:
        return True
    parts = number.split(".")
    return len(parts) >= 3 and ".".join(parts[:2]) in sections


@dataclass(frozen=True)
class Citation:
    """One ``§`` citation: where it is, which document it belongs to (None: no document) and its number."""

    path: Path
    line: int
    document: str | None
    number: str
    text: str


def citations(path: Path) -> list[Citation]:
    """Every citation of one source file, each assigned its document by the README's rules."""
    text = path.read_text(encoding="utf-8")
    first = _DOC_NAME.search(text)
    default = first.group(1) if first else None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in _CITE.finditer(line):
            before = line[: match.start()]
            if _EXTERNAL.search(before):
                continue
            named = _DOC_NAME.findall(before)
            out.append(Citation(path, number, named[-1] if named else default, match.group(1), line.strip()))
    return out


def source_files() -> list[Path]:
    """The Python files of the three packages."""
    return sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py"))


def unresolved() -> list[str]:
    """One line per citation that names no document or a section the document does not have."""
    sections = {name: headings(path) for name, path in DOCUMENTS.items()}
    problems = []
    for path in source_files():
        for c in citations(path):
            where = f"{path.relative_to(REPO)}:{c.line}"
            if c.document is None:
                problems.append(f"{where}: §{c.number} names no document ({c.text[:80]})")
            elif not resolves(c.number, sections[c.document]):
                problems.append(f"{where}: {c.document} has no §{c.number} ({c.text[:80]})")
    return problems
