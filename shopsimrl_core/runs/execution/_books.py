"""What one invocation knows per planned episode: done before, attempted now, may it be attempted again.

Kept by plan position, in lists, not by episode id in dicts: resuming a finished run of a million
episodes builds no per-episode key or entry (issue 33). A finished run is told without even the
per-position pass (:func:`_finished`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shopsimrl_core.runs.storage._store import RunStore

__all__ = ["_Books", "_finished"]


def _finished(store: RunStore, index: Any) -> bool:
    """Whether the index holds exactly the planned episodes, each complete (``planned`` None: nothing to attempt).

    The manifest's planned ids come sorted from the summary's cache (``traces.index.planned.parquet``), so a
    million of them are compared with the index's sorted ids at once. Small plans (no cache) say False:
    the per-id pass is cheap there.
    """
    from shopsimrl_core.analysis._summary import _PLANNED_CACHE_MIN_BYTES, _planned_of

    try:
        if store.manifest_path.stat().st_size < _PLANNED_CACHE_MIN_BYTES:
            return False
    except OSError:
        return False
    planned = _planned_of(store)
    episodes = index.run_index.episodes
    if not hasattr(planned, "equals") or planned.len() != episodes.height:
        return False
    return bool(planned.equals(episodes.get_column("episode_id")) and episodes.get_column("complete").all())


@dataclass
class _Books:
    """Per-episode counters of one invocation, by plan position (lifetime lines, attempts now, completion, backoff)."""

    lifetime: list[int]
    complete: list[bool]
    this_invocation: list[int]
    eligible: list[bool] | None
    """None: every planned episode (lists by position, not dicts by id: no per-episode key at a million jobs)."""
    failures: dict[int, int] = field(default_factory=dict)
    not_before: dict[int, float] = field(default_factory=dict)

    def may_attempt(self, at: int, attempts_cap: int, total_cap: int | None) -> bool:
        if (self.eligible is not None and not self.eligible[at]) or self.complete[at]:
            return False
        if self.this_invocation[at] >= attempts_cap:
            return False
        return total_cap is None or self.lifetime[at] < total_cap
