"""Which directories the viewer may serve: run directories (and SkillBank files) under its roots only.

A ``<rel>`` from a URL is untrusted. It must be a relative POSIX path of plain segments (no ``..``,
no ``.``, no empty segment, no backslash or NUL, not absolute); the joined path is resolved with
symlinks followed and must still lie inside the root's own resolved path. Anything else is refused
with :class:`PathRefused` before the file system is touched beyond ``resolve``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PathRefused", "ViewerRoots", "RunRef", "is_run_dir"]

_SKIP_DIRS = {"superseded", "__pycache__", "node_modules"}
_MAX_DEPTH = 5


class PathRefused(Exception):
    """A requested path is not a run directory (or file) under the viewer's roots."""


def is_run_dir(path: Path) -> bool:
    """A run directory holds ``traces.jsonl`` or ``manifest.json``."""
    return (path / "traces.jsonl").is_file() or (path / "manifest.json").is_file()


@dataclass(frozen=True)
class RunRef:
    """A run directory the viewer serves: its root, its path relative to that root, its real path."""

    root: Path
    rel: str
    path: Path


class ViewerRoots:
    """The roots given on the command line; each is a runs root or a single run directory.

    A single run directory given as a root is served as ``<its name>`` under its parent, and
    nothing else of that parent is served.
    """

    def __init__(self, roots: Sequence[str | os.PathLike[str]]) -> None:
        self._roots: list[tuple[Path, str | None]] = []
        for raw in roots:
            path = Path(raw).resolve()
            if not path.is_dir():
                raise FileNotFoundError(f"{raw}: not a directory; pass a runs root (e.g. runs/) or a run directory")
            if is_run_dir(path):
                self._roots.append((path.parent, path.name))
            else:
                self._roots.append((path, None))

    @property
    def roots(self) -> list[Path]:
        return [root for root, _ in self._roots]

    @staticmethod
    def _clean(rel: str) -> list[str]:
        if not isinstance(rel, str) or not rel or "\x00" in rel or "\\" in rel:
            raise PathRefused("empty or malformed path")
        if rel.startswith("/") or os.path.isabs(rel) or (len(rel) > 1 and rel[1] == ":"):
            raise PathRefused("absolute paths are not served")
        parts = rel.strip("/").split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise PathRefused("path segments '.', '..' and empty ones are not served")
        return parts

    def _resolve(self, rel: str) -> Iterator[tuple[Path, Path]]:
        parts = self._clean(rel)
        for root, only in self._roots:
            if only is not None and parts[0] != only:
                continue
            candidate = root.joinpath(*parts)
            try:
                real = candidate.resolve(strict=True)
            except (FileNotFoundError, RuntimeError, OSError):
                continue
            # Symlinks are followed, then the result must still be inside this root.
            if real != root and root not in real.parents:
                continue
            if only is not None and (root / only).resolve() not in (real, *real.parents):
                continue
            yield root, real

    def run(self, rel: str) -> RunRef:
        """The run directory *rel*; raises :class:`PathRefused` for anything else."""
        for root, real in self._resolve(rel):
            if real.is_dir() and is_run_dir(real):
                return RunRef(root, "/".join(self._clean(rel)), real)
        raise PathRefused(f"{rel!r} is not a run directory under the viewer roots")

    def file(self, rel: str, suffix: str = ".json") -> Path:
        """A regular file *rel* (ending in *suffix*) under a root; raises :class:`PathRefused`."""
        for _, real in self._resolve(rel):
            if real.is_file() and real.name.endswith(suffix):
                return real
        raise PathRefused(f"{rel!r} is not a {suffix} file under the viewer roots")

    def runs(self) -> list[RunRef]:
        """Every run directory under the roots (depth ≤ 5, ``superseded/`` skipped), sorted by rel."""
        found: dict[str, RunRef] = {}
        for root, only in self._roots:
            if only is not None:
                path = (root / only).resolve()
                found.setdefault(only, RunRef(root, only, path))
                continue
            for dirpath, dirnames, _ in os.walk(root, followlinks=False):
                here = Path(dirpath)
                depth = len(here.relative_to(root).parts)
                dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
                if here != root and is_run_dir(here):
                    rel = here.relative_to(root).as_posix()
                    found.setdefault(rel, RunRef(root, rel, here))
                    dirnames[:] = []
                elif depth >= _MAX_DEPTH:
                    dirnames[:] = []
        return [found[k] for k in sorted(found)]
