"""The latest-record-wins view of ``traces.jsonl`` that ``RunStore.index()`` hands out (runtime-semantics §6.5).

Promise: ``TraceIndex`` answers, per episode id, how many counted lines it has and whether its
latest record is complete, backed by the columnar run index sidecar (``runs/storage/_index.py``) so it
holds no record and no per-episode Python object until one is asked for (``EpisodeEntry``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["TraceIndex", "EpisodeEntry"]


@dataclass
class EpisodeEntry:
    """What the index knows about one episode id, without holding its records."""

    offset: int
    length: int
    attempts: int = 1
    completed_lines: int = 0
    complete: bool = False
    status: str | None = None
    reward: float | None = None
    """``final.reward`` of the latest record when it is complete and a number."""


class TraceIndex:
    """Latest-record-wins index over ``traces.jsonl`` (§6.5), read from the run index sidecar.

    ``run_index`` is the :class:`~shopsimrl_core.runs.storage._index.RunIndex` it wraps (columnar: the
    latest row per episode); ``entries`` maps episode ids to :class:`EpisodeEntry` values built on access, so a
    run of a million episodes costs no million Python objects.
    """

    def __init__(self, run_index: Any) -> None:
        from shopsimrl_core.runs.storage._index_rows import EntryView

        self.run_index = run_index
        self.entries: Mapping[str, EpisodeEntry] = EntryView(run_index, _entry_from_row)
        self.lines: int = run_index.line_count
        self.skipped_lines: int = run_index.skipped_lines
        self._cache: tuple[dict[str, int], list[int], list[bool]] | None = None

    def _lookup(self) -> tuple[dict[str, int], list[int], list[bool]]:
        # Per-job loops over a million planned episodes call these two methods: one dict and two
        # lists, built once, keep each call a dict lookup.
        if self._cache is None:
            run_index = self.run_index
            run_index.position("")
            self._cache = (
                run_index._positions or {},
                run_index.entry_column("attempts"),
                run_index.entry_column("complete"),
            )
        return self._cache

    def attempts(self, episode_id: str) -> int:
        """Counted lines of *episode_id* (its lifetime ``attempt_count``)."""
        positions, attempts, _ = self._cache or self._lookup()
        at = positions.get(episode_id)
        return 0 if at is None else attempts[at]

    def is_complete(self, episode_id: str) -> bool:
        """Whether the episode's latest record satisfies the completion predicate."""
        positions, _, complete = self._cache or self._lookup()
        at = positions.get(episode_id)
        return at is not None and complete[at]

    def planned(self, episode_ids: Sequence[str]) -> tuple[list[int], list[bool], list[float | None]]:
        """Per id of *episode_ids*, in their order: counted lines, completeness, and the reward when complete.

        The same answers as :meth:`attempts`, :meth:`is_complete` and ``entries[id].reward`` for each id
        (0, False, None for an id without lines), in one pass over cached columns: resuming a run of a
        million planned episodes asks this once instead of three lookups and an entry per episode.
        """
        positions, attempts, complete = self._cache or self._lookup()
        rewards = self.run_index.entry_column("reward")
        at = list(map(positions.get, episode_ids))
        if None not in at:  # every planned episode has lines: C-level gathers
            found: list[int] = at  # type: ignore[assignment]
            done = list(map(complete.__getitem__, found))
            return (
                list(map(attempts.__getitem__, found)),
                done,
                [rewards[k] if ok else None for k, ok in zip(found, done)],
            )
        lines = [0 if k is None else attempts[k] for k in at]
        done = [k is not None and bool(complete[k]) for k in at]
        return lines, done, [rewards[k] if ok and k is not None else None for k, ok in zip(at, done)]

    @property
    def duplicate_completed(self) -> int:
        """Episodes with more than one completed line (two writers, or a legacy accident; §22.4)."""
        import polars as pl

        return int(self.run_index.episodes.filter(pl.col("completed_lines") > 1).height)


def _entry_from_row(row: dict[str, Any]) -> EpisodeEntry:
    complete = bool(row["complete"])
    return EpisodeEntry(
        offset=int(row["offset"]),
        length=int(row["length"]),
        attempts=int(row["attempts"]),
        completed_lines=int(row["completed_lines"]),
        complete=complete,
        status=row["status"],
        reward=row["reward"] if complete else None,
    )
