"""``breakdowns.category``: one row per category of a run's completed episodes (issue 23, docs/statistics.md).

The summary builds these rows (``_summary.py``) and :func:`~shopsimrl_core.analysis._categories.category_intervals`
rebuilds them, with intervals, where they are shown; both call :func:`category_breakdown` here, which
imports neither of them.
"""

from __future__ import annotations

import math
from typing import Any

from shopsimrl_core.analysis._intervals import (
    _BOOTSTRAP_SAMPLES,
    _BOOTSTRAP_SEED,
    _ci_dict,
    _clustered_reward_ci,
    _clustered_success_ci,
    _has_repeats,
    _task_clusters,
)

__all__ = ["SMALL_N", "category_breakdown"]

SMALL_N = 10
"""Categories with fewer sampling units (tasks, or episodes with one per task) are flagged ``small_n``."""
_CATEGORY_BOOTSTRAP_MAX_N = 50_000
"""Runs with more scored episodes than this give their categories normal-approximation reward intervals."""


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
