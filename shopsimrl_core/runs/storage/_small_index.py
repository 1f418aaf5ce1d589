"""The run index of a small run, read from its log alone, without polars (issue 33: a one-episode run's start-up).

``open_run_index`` (``_index.py``) answers in polars frames, and importing polars costs about as much CPU
as the rest of a one-episode ``shopsimrl run``. A small run's index is its log (``traces.index.jsonl``):
one row per trace line, written as each line is appended. When that log alone describes the traces —
no snapshot, a log of the current schema whose rows follow each other from byte 0 to the end of
``traces.jsonl``, the last of them still where it was, at most :data:`SMALL_LINES` of them, every one a
counted line — :func:`open_small_index` returns the same latest-row-per-episode view as a list of dicts.
In exactly those cases ``open_run_index`` would read the same rows and write nothing; in every other
case this returns None and the caller opens the full index.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shopsimrl_core.runs.storage._index_log import read_log

__all__ = ["SMALL_LINES", "SmallIndex", "open_small_index"]

SMALL_LINES = 2_000
"""Runs with more trace lines are read by ``open_run_index``."""
_ENDPOINT_FAULT_TYPE = "ModelEndpointFault"  # as _index.ENDPOINT_FAULT_TYPE (not imported: that module is heavier)
_SNAPSHOT = "traces.index.parquet"  # as _index.INDEX_SNAPSHOT_NAME


class SmallIndex:
    """Latest row per episode id (sorted by id) with ``attempts``, ``completed_lines`` and ``endpoint_faults``."""

    def __init__(self, rows: list[dict[str, Any]], lines: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.lines = lines
        """Every line's row, in file order."""
        self._at = {row["episode_id"]: at for at, row in enumerate(rows)}

    def planned(self, episode_ids: Sequence[str]) -> tuple[list[int], list[bool], list[float | None]]:
        """As ``TraceIndex.planned``: counted lines, completeness and the reward when complete, per id."""
        found = [self.rows[at] if (at := self._at.get(eid)) is not None else None for eid in episode_ids]
        done = [row is not None and bool(row["complete"]) for row in found]
        return (
            [0 if row is None else row["attempts"] for row in found],
            done,
            [row.get("reward") if ok and row is not None else None for row, ok in zip(found, done)],
        )

    @property
    def duplicate_completed(self) -> int:
        """As ``TraceIndex.duplicate_completed``: episodes with more than one completed line."""
        return sum(1 for row in self.rows if row["completed_lines"] > 1)

    def endpoint_faults(self, planned: set[str] | None) -> int:
        """Failed ``ModelEndpointFault`` attempts of the (planned) episodes, over every line."""
        return sum(row["endpoint_faults"] for row in self.rows if planned is None or row["episode_id"] in planned)

    @property
    def first_exported(self) -> tuple[int, int, int] | None:
        """As ``RunIndex.first_exported``: ``(line, offset, length)`` of the first exported record."""
        for row in self.lines:
            if row.get("exported"):
                return row["line"], row["offset"], row["length"]
        return None


def open_small_index(run_dir: Path, *, upto: int | None = None) -> SmallIndex | None:
    """The index of *run_dir* from its log alone, or None when the log alone does not describe the traces.

    *upto*: the traces end there for the log's purpose (an appender asking about the lines before the one
    it has just written at *upto*); None: at the end of ``traces.jsonl``.
    """
    if (run_dir / _SNAPSHOT).exists():
        return None
    traces = run_dir / "traces.jsonl"
    try:
        size = os.stat(traces).st_size
    except FileNotFoundError:
        size = 0
    end = size if upto is None else upto
    log = read_log(run_dir)
    if log.stale or len(log.rows) > SMALL_LINES:
        return None
    expected = 0
    for row in log.rows:
        if row["offset"] != expected or not isinstance(row.get("episode_id"), str):
            return None
        expected += row["length"]
    if expected != end:
        return None
    if log.rows and not _ends_with(traces, log.rows[-1]):
        return None
    latest: dict[str, dict[str, Any]] = {}
    for row in log.rows:  # latest row per id, weights summed over its lines (as _index._latest)
        eid = row["episode_id"]
        before = latest.get(eid)
        fault = row.get("status") == "failed" and row.get("error_type") == _ENDPOINT_FAULT_TYPE
        latest[eid] = {
            **row,
            "attempts": (before["attempts"] if before else 0) + 1,
            "completed_lines": (before["completed_lines"] if before else 0) + int(bool(row.get("complete"))),
            "endpoint_faults": (before["endpoint_faults"] if before else 0) + int(fault),
        }
    return SmallIndex([latest[eid] for eid in sorted(latest)], log.rows)


def _ends_with(traces: Path, last: dict[str, Any]) -> bool:
    """The last logged line is still where it was and is whole (as ``_index._still_describes``)."""
    from shopsimrl_core.adapters._json import loads

    try:
        with open(traces, "rb") as handle:
            handle.seek(last["offset"])
            raw = handle.read(last["length"])
    except OSError:
        return False
    if len(raw) != last["length"] or not raw.endswith(b"\n"):
        return False
    try:
        value = loads(raw)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(value, dict) and value.get("episode_id") == last["episode_id"]
