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

import math
import os
from typing import TYPE_CHECKING, Any

from shopsimrl_core.analysis._summary import (
    _BASE_COLUMNS,
    _BOOTSTRAP_SAMPLES,
    _BOOTSTRAP_SEED,
    _ci_dict,
    _clustered_reward_ci,
    _clustered_success_ci,
    _has_repeats,
    _planned_episodes,
    _planned_of,
    _task_clusters,
)
from shopsimrl_core.documents._runs import CategoryRow, EvalSummary

if TYPE_CHECKING:
    from shopsimrl_core.runs import RunIndex

__all__ = ["category_intervals", "category_breakdown", "SMALL_N"]

SMALL_N = 10
"""Categories with fewer sampling units (tasks, or episodes with one per task) are flagged ``small_n``."""
_CATEGORY_BOOTSTRAP_MAX_N = 50_000
"""Runs with more scored episodes than this give their categories normal-approximation reward intervals."""
_PUBLISHED_KEYS = ("episodes", "reward_mean", "success_rate")
"""The keys of a published category row (before issue 23, and with one repeat still)."""


def category_breakdown(done: Any, *, intervals: bool) -> dict[str, Any]:
    """``breakdowns.category`` of the completed episodes *done* (a polars frame of the summary's columns).

    Rows sorted by category, each ``episodes``, ``reward_mean`` and ``success_rate``; with *intervals*
    also ``tasks``, ``small_n``, ``success_ci`` and ``reward_ci`` (the design is read from *done*:
    task-resampled when some task has several episodes). Empty when no episode has a category.
    """
    import polars as pl

    with_cat = done.filter(pl.col("category").is_not_null())
    if with_cat.height == 0:
        return {}
    grouped = (
        with_cat.group_by("category")
        .agg(
            pl.len().alias("episodes"),
            pl.col("reward").mean().alias("reward_mean"),
            pl.col("r_success").mean().alias("success_rate"),
        )
        .sort("category")
    )
    clustered = _has_repeats(done)
    bootstrap = done.get_column("reward").drop_nulls().len() <= _CATEGORY_BOOTSTRAP_MAX_N
    out: dict[str, Any] = {}
    for row in grouped.iter_rows(named=True):
        name = row["category"]
        entry: dict[str, Any] = {
            "episodes": int(row["episodes"]),
            "reward_mean": row["reward_mean"],
            "success_rate": row["success_rate"],
        }
        if intervals:
            entry.update(_row_intervals(with_cat.filter(pl.col("category") == name), name, clustered, bootstrap))
        out[name] = entry
    return out


def _row_intervals(rows: Any, name: str, clustered: bool, bootstrap: bool) -> dict[str, Any]:
    """Additive keys of one category row: sampling units, the ``small_n`` flag and both intervals.

    The intervals follow the run's design: task-resampled with repeats, per episode otherwise; the
    reward interval is a bootstrap (seeded per category) unless the run is large.
    """
    from shopsimrl_core.analysis._design import cluster_variance
    from shopsimrl_core.analysis._stats import bootstrap_mean_ci, wilson_interval

    metric = f"reward:category:{name}"
    reward = _task_clusters(rows, "reward")
    success = rows.get_column("r_success").drop_nulls()
    units = reward.tasks if clustered else reward.episodes
    out: dict[str, Any] = {"tasks": reward.tasks, "small_n": units < SMALL_N}
    if success.len() > 0 and success.is_in([0.0, 1.0]).all():
        if clustered:
            out["success_ci"] = _clustered_success_ci(_task_clusters(rows, "r_success"))
        else:
            out["success_ci"] = _ci_dict(
                wilson_interval(int(success.sum()), success.len()), method="wilson", confidence_level=0.95,
                n=success.len(),
            )
    if reward.episodes >= 2:
        if bootstrap and clustered:
            out["reward_ci"] = _clustered_reward_ci(reward, metric)
        elif bootstrap:
            values = rows.get_column("reward").drop_nulls().to_list()
            out["reward_ci"] = bootstrap_mean_ci(values, metric=metric, seed=_BOOTSTRAP_SEED,
                                                 samples=_BOOTSTRAP_SAMPLES)
        else:
            variance = cluster_variance(reward) if clustered else (
                None if reward.episode_variance is None else reward.episode_variance / reward.episodes)
            mean = reward.mean
            if variance is not None and mean is not None:
                half = 1.959963984540054 * math.sqrt(variance)
                out["reward_ci"] = {
                    "method": "task_cluster_normal_approximation" if clustered else "normal_approximation",
                    "confidence_level": 0.95, "low": mean - half, "high": mean + half,
                }
    return out


def _completed_episodes(run: str | os.PathLike[str] | RunIndex) -> Any:
    """The completed planned episodes of *run* (a run directory or an opened run index), as the summary sees them.

    Read only: the run index is opened without writing its sidecar and the manifest's id cache is
    not written.
    """
    import polars as pl

    from shopsimrl_core.runs import RunStore, open_run_index

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
