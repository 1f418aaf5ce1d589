"""Which directories the viewer may serve: run directories (and SkillBank files) under its roots only.

A ``<rel>`` from a URL is untrusted. It must be a relative POSIX path of plain segments (no ``..``,
no ``.``, no empty segment, no backslash or NUL, not absolute); the joined path is resolved with
symlinks followed and must still lie inside the root's own resolved path. Anything else is refused
with :class:`PathRefused` before the file system is touched beyond ``resolve``.

The files inside a run directory are held to the same rule: a run folder with an entry that is a
symlink pointing out of its root (``traces.jsonl``, ``summary.json`` or any other) is neither listed
nor served, so a link planted next to the traces cannot show what lies outside the roots.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PathRefused", "ViewerRoots", "RunRef", "escaping_link", "is_run_dir"]

_SKIP_DIRS = {"superseded", "__pycache__", "node_modules"}
_MAX_DEPTH = 5
_MARKERS = ("traces.jsonl", "manifest.json")


class PathRefused(Exception):
    """A requested path is not a run directory (or file) under the viewer's roots."""


def is_run_dir(path: Path) -> bool:
    """A run directory holds ``traces.jsonl`` or ``manifest.json``."""
    return any((path / name).is_file() for name in _MARKERS)


def escaping_link(run_dir: Path, boundary: Path, entries: Sequence[os.DirEntry[str]] | None = None) -> str | None:
    """The name of the first entry of *run_dir* that is a symlink resolving outside *boundary*, else None.

    *entries* is the folder's listing when the caller already has it (only symlinks are resolved, so
    a folder without any costs no more than that listing). A link that cannot be resolved counts as
    escaping: where it leads is unknown.
    """
    if entries is None:
        try:
            with os.scandir(run_dir) as listing:
                entries = list(listing)
        except OSError:
            return None
    for entry in entries:
        if not entry.is_symlink():
            continue
        try:
            real = Path(entry.path).resolve(strict=True)
        except (OSError, RuntimeError):
            return entry.name
        if real != boundary and boundary not in real.parents:
            return entry.name
    return None


@dataclass(frozen=True)
class RunRef:
    """A run directory the viewer serves: its root, its path relative to that root, its real path.

    ``boundary`` is what a symlink inside it may point into: the root, or for a run directory given
    itself as a root, that directory.
    """

    root: Path
    rel: str
    path: Path
    boundary: Path | None = None

    def escaping_link(self) -> str | None:
        """The name of an entry of this run directory that is a symlink out of its boundary, else None."""
        return escaping_link(self.path, self.boundary or self.root)


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
        self._lock = threading.Lock()
        self._listing: _Listing | None = None

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
        """The run directory *rel*; raises :class:`PathRefused` for anything else.

        A run directory holding a symlink that points out of its root is refused as well (see
        :func:`escaping_link`), naming the link.
        """
        for root, real in self._resolve(rel):
            if real.is_dir() and is_run_dir(real):
                ref = RunRef(root, "/".join(self._clean(rel)), real, self._boundary(root, real))
                link = ref.escaping_link()
                if link is not None:
                    raise PathRefused(f"{rel!r}: {link} is a symlink pointing out of the viewer roots; not served")
                return ref
        raise PathRefused(f"{rel!r} is not a run directory under the viewer roots")

    def _boundary(self, root: Path, path: Path) -> Path:
        """What a link under *path* (found under *root*) may point into: the root, or its one served run directory."""
        for known, only in self._roots:
            if known == root and only is not None and path.name == only and path.parent == known:
                return (known / only).resolve()
        return root

    def inside(self, path: Path) -> bool:
        """Whether *path*, with symlinks followed, lies inside one of the roots (False when it does not exist)."""
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError):
            return False
        return any(real == root or root in real.parents for root in self.roots)

    def file(self, rel: str, suffix: str = ".json") -> Path:
        """A regular file *rel* (ending in *suffix*) under a root; raises :class:`PathRefused`."""
        for _, real in self._resolve(rel):
            if real.is_file() and real.name.endswith(suffix):
                return real
        raise PathRefused(f"{rel!r} is not a {suffix} file under the viewer roots")

    def runs(self) -> list[RunRef]:
        """Every run directory under the roots (depth ≤ 5, ``superseded/`` skipped), sorted by rel.

        The listing is kept between calls and rescanned only when a folder that holds runs changed
        (see :class:`_Listing`), so a page that needs it costs one ``stat`` per such folder.
        """
        with self._lock:
            if self._listing is None or not self._listing.current():
                self._listing = _Listing.scan(self._roots)
            return list(self._listing.runs)

    def known_runs(self) -> list[RunRef]:
        """The run directories as last listed, without checking for changes (scanned if never listed).

        For what may be a little stale — the "same task in" links of an episode page — so that such a
        page never waits for a rescan (only, once, for the viewer's first scan).
        """
        listing = self._listing
        if listing is None:
            with self._lock:  # the first listing, maybe scanned meanwhile by the request holding the lock
                if self._listing is None:
                    self._listing = _Listing.scan(self._roots)
                listing = self._listing
        return list(listing.runs)


class _Listing:
    """One scan of the roots: the run directories found and the folders that lead to them.

    Why the stamps suffice: a folder's mtime changes whenever an entry is created, removed or
    renamed in it, so a new run folder (or a folder that just got its ``manifest.json``) changes the
    mtime of a folder scanned here. Run folders themselves are not stamped (their files change all
    the time while a run writes); one that loses both marker files in place stays listed until its
    parent changes, and its pages refuse it. A stamp taken within the file system's timestamp
    granularity of the scan could miss a change made in the same tick, so such a listing is scanned
    again on the next call (git's "racy clean" rule).
    """

    _RACY_NS = 2_000_000_000  # coarse file systems keep mtimes to 1-2 s

    def __init__(self, runs: list[RunRef], stamps: dict[str, int], racy: bool) -> None:
        self.runs = runs
        self._stamps = stamps
        self._racy = racy

    def current(self) -> bool:
        if self._racy:
            return False
        for path, stamp in self._stamps.items():
            try:
                if os.stat(path).st_mtime_ns != stamp:
                    return False
            except OSError:
                return False
        return True

    @classmethod
    def scan(cls, roots: list[tuple[Path, str | None]]) -> _Listing:
        started = time.time_ns()
        found: dict[str, RunRef] = {}
        stamps: dict[str, int] = {}
        for root, only in roots:
            if only is not None:
                ref = RunRef(root, only, (root / only).resolve(), (root / only).resolve())
                if ref.escaping_link() is None:
                    found.setdefault(only, ref)
                continue
            # Plain strings, not Paths, while walking: ten thousand run folders are a pathlib hot spot.
            stack: list[tuple[str, str, int]] = [(str(root), "", 0)]
            while stack:
                here, rel, depth = stack.pop()
                try:
                    stamp = os.stat(here).st_mtime_ns  # before listing: a later change moves it past this
                    with os.scandir(here) as listing:
                        entries = list(listing)
                except OSError:
                    continue
                # The marker test of is_run_dir, from the listing already read (is_file follows links).
                if rel and any(e.name in _MARKERS and e.is_file() for e in entries):
                    if escaping_link(Path(here), root, entries) is None:  # a link out: not listed (nor served)
                        found.setdefault(rel, RunRef(root, rel, Path(here), root))
                    continue
                stamps[here] = stamp
                if depth >= _MAX_DEPTH:
                    continue
                for entry in entries:
                    name = entry.name
                    if name in _SKIP_DIRS or name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                        continue  # a symlinked folder is never walked into (it may point out of the root)
                    stack.append((entry.path, f"{rel}/{name}" if rel else name, depth + 1))
        racy = any(stamp >= started - cls._RACY_NS for stamp in stamps.values())
        return cls([found[k] for k in sorted(found)], stamps, racy)
