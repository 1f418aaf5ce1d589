"""Leases orphaned by a killed run of another checkpoint, released by the next run on the same environment.

ShopSimulator never expires a lease, and a run's own start only heals its own journal. Before this, a
SIGKILLed run's slots stayed taken until that same run was resumed: every other checkpoint's run on the
environment waited ("0 of 16 slots free … another client holds them"; issue 33). Like orphaned inference
servers (``serving/_processes.py``), a start now looks at the run directories beside its own (the same
``experiment.output_dir``; in the pipeline, every checkpoint of the suite): a journal naming leases on this
environment whose run's ``run.lock`` is free belongs to a dead run. While holding that lock (so the owner
cannot start meanwhile) the start releases those leases, journals each release in the owner's journal and
compacts it — exactly what the owner's own next start would have done.

A lock held by a live process is never touched, a folder without a ``run.lock`` is no run directory, and
nothing of another run directory is changed but its ``leases.jsonl``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from shopsimrl_core.runs.leases._leases import JOURNAL_NAME, LeaseJournal


class _Releaser(Protocol):
    """What this module uses of a ``JournaledEnvironment``.

    A protocol, not the class: ``_journaled_env.py`` imports this module, and importing it back would be
    an import cycle (tests/core/test_import_cycles.py).
    """

    journal: LeaseJournal

    @property
    def base_url(self) -> str:
        """The server's base URL."""

    async def release_into(self, journal: LeaseJournal, entries: list[dict[str, Any]]) -> tuple[int, int]:
        """Release another run's journaled *entries* on this server: ``(released, kept)``."""

__all__ = ["OrphanedLeases", "release_orphaned_leases"]

_LOCK_NAME = "run.lock"  # runs/storage/_store.py: the run directory's exclusive flock


@dataclass(frozen=True)
class OrphanedLeases:
    """What one start did about one dead run's journal."""

    run_dir: Path
    released: int
    kept: int


@contextlib.contextmanager
def _free_lock(run_dir: Path) -> Iterator[bool]:
    """Hold *run_dir*'s run lock for the block when nobody holds it (yields False when a live run does)."""
    try:
        # never created here: a folder without one is no run directory (a run takes its lock before
        # its first lease), and its journal is not ours to judge
        fd = os.open(run_dir / _LOCK_NAME, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        yield False  # missing, symlinked or unreadable
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held by a live run (BlockingIOError), or no flock on this file system
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _subfolders(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if not p.is_symlink() and p.is_dir())
    except OSError:
        return []


def _neighbours(own: Path, root: Path | None) -> list[Path]:
    """Run directories that may share the environment: beside *own*, and under *root* one or two levels down."""
    found = _subfolders(own.parent)
    if root is not None:
        for child in _subfolders(root):
            found += [child, *_subfolders(child)]
    unique = {p.resolve(): p for p in found}
    return [p for key, p in sorted(unique.items()) if key != own and (p / JOURNAL_NAME).is_file()]


async def release_orphaned_leases(
    env: _Releaser, invocation_id: str, shared_runs_root: Path | None = None
) -> list[OrphanedLeases]:
    """Release the leases on *env*'s server that dead runs journaled; one entry per such run.

    The runs looked at are those beside this one, or under *shared_runs_root* (``environment.shared_runs_root``)
    one or two levels down. Promise: only journals whose run lock is free are touched, under that lock; a
    lease whose release fails stays in its journal (its owner's next start, or the next run here, tries again).
    """
    own = env.journal.path.parent.resolve()
    done: list[OrphanedLeases] = []
    here = env.base_url.rstrip("/")
    for run_dir in _neighbours(own, shared_runs_root):
        # the lock first: a live run holds it, and its journal (two lines per episode so far) is not read
        with _free_lock(run_dir) as free:
            if not free:
                continue
            journal = LeaseJournal(run_dir, invocation_id)
            mine = [e for e in journal.outstanding() if str(e.get("base_url", "")).rstrip("/") == here]
            if not mine:
                continue
            # the dead run's own journal records each release, as its own start would
            released, _ = await env.release_into(journal, mine)
            journal.compact(keep_unanswered=lambda entry: True)
            journal.close()
        done.append(OrphanedLeases(run_dir, released, len(mine) - released))
    return done
