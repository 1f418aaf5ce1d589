"""Per-category rows of a run (``breakdowns.category``) and their intervals (issue 23, docs/statistics.md).

Every summary publishes, per category, ``episodes``, ``reward_mean`` and ``success_rate``. The
intervals of a row follow the run's sampling design: task-resampled when some task has several
episodes, per episode otherwise; each row also has its ``tasks`` and a ``small_n`` flag.

Where they live:

- runs with repeats carry them in ``summary.json`` (they were never part of the published format);
- one-repeat runs keep the published bytes, rows of three keys, so their intervals are computed where
  they are shown, by :func:`category_intervals` — the one function the viewer, the Dagster metadata and
  ``shopsimrl summarize --categories`` call. It runs the same code, on the same episodes and with the
  same seeds, as the summary does for runs with repeats, and returns rows that already carry intervals
  unchanged: nothing is computed twice, and nowhere differently.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from shopsimrl_core.analysis._category_rows import SMALL_N, category_breakdown
from shopsimrl_core.analysis._summary import _BASE_COLUMNS, _planned_episodes, _planned_of
from shopsimrl_core.documents._runs import CategoryRow, EvalSummary

if TYPE_CHECKING:
    from shopsimrl_core.runs.storage._index import RunIndex

__all__ = ["category_intervals", "category_breakdown", "SMALL_N"]

_PUBLISHED_KEYS = ("episodes", "reward_mean", "success_rate")
"""The keys of a published category row (before issue 23, and with one repeat still)."""


def _completed_episodes(run: str | os.PathLike[str] | RunIndex) -> Any:
    """The completed planned episodes of *run* (a run directory or an opened run index), as the summary sees them.

    Read only: the run index is opened without writing its sidecar and the manifest's id cache is
    not written.
    """
    import polars as pl

    from shopsimrl_core.runs.storage._index import open_run_index
    from shopsimrl_core.runs.storage._store import RunStore

    index = open_run_index(run, persist=False) if isinstance(run, (str, os.PathLike)) else run
    planned = _planned_of(RunStore(index.run_dir), write=False)
    episodes, _ = _planned_episodes(index.episodes, planned)
    return episodes.select(_BASE_COLUMNS).filter(pl.col("complete"))


def category_intervals(summary: EvalSummary, run: str | os.PathLike[str] | RunIndex) -> dict[str, CategoryRow]:
    """The per-category rows of *summary* with their intervals, ``tasks`` and ``small_n`` flag.

    *run* is the summary's run directory, or its opened run index (``RunIndex``: the viewer's, so it
    is not read twice). Rows that carry their intervals already (runs with repeats) are returned as
    they are. The others (one-repeat runs, whose ``summary.json`` keeps the published three keys)
    get them computed from the run's completed planned episodes by the code and seeds the summary
    uses for runs with repeats. A row whose published numbers the run no longer gives (its traces
    changed after the summary was written) is returned without intervals rather than with intervals
    of other episodes. Rows come in the summary's order, as copies; nothing is written and *summary*
    is not changed.
    """
    breakdown = summary.breakdowns.category if summary.breakdowns is not None else {}
    rows = {str(name): row.model_copy(deep=True) for name, row in breakdown.items()}
    if not rows or all(row.small_n is not None for row in rows.values()):
        return rows
    computed = category_breakdown(_completed_episodes(run), intervals=True)
    for name, row in rows.items():
        fresh = computed.get(name)
        if row.small_n is not None or fresh is None:
            continue
        if all(fresh[key] == getattr(row, key) for key in _PUBLISHED_KEYS):
            extra = {key: value for key, value in fresh.items() if key not in _PUBLISHED_KEYS}
            rows[name] = CategoryRow.model_validate({**row.to_json(), **extra})
    return rows
