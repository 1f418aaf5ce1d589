"""The intervals a summary and its category rows share: per episode, or task-resampled when tasks repeat.

Below both ``_summary.py`` and ``_category_rows.py`` (issue 33: the summary and its category rows
imported each other); the seeds and sample counts here are part of the published numbers.
"""

from __future__ import annotations

import math
from typing import Any

_BOOTSTRAP_SEED = 20260901
_BOOTSTRAP_SAMPLES = 2000
_BOOTSTRAP_MAX_N = 200_000  # above this the reward interval uses the normal approximation


def _ci_dict(low_high: tuple[float, float] | None, **meta: Any) -> dict[str, Any] | None:
    if low_high is None:
        return None
    return {**meta, "low": low_high[0], "high": low_high[1]}


def _has_repeats(done: Any) -> bool:
    """True when some task has more than one completed episode: tasks, not episodes, are then the unit."""
    ids = done.get_column("task_id").drop_nulls()
    return bool(ids.len() > ids.n_unique())


def _task_clusters(frame: Any, column: str) -> Any:
    """Per-task totals of *column* over the rows that have it; an episode without a task is its own task.

    The same clusters as :func:`~shopsimrl_core.analysis._design.task_clusters` over the keys
    ``(0, task_id)`` and ``(1, episode_id)``, to the bit: polars groups the rows (one pass, no Python
    key per episode: at 1 M episodes the keys cost more than the statistics), the sums stay
    ``math.fsum``, which is correctly rounded and so independent of the order within a group.
    """
    import polars as pl

    from shopsimrl_core.analysis._design import TaskClusters

    rows = frame.filter(pl.col(column).is_not_null()).select(
        "task_id", "episode_id", pl.col(column).cast(pl.Float64).alias("value")
    )
    grouped = rows.filter(pl.col("task_id").is_not_null()).group_by("task_id").agg(pl.col("value")).sort("task_id")
    alone = rows.filter(pl.col("task_id").is_null()).sort("episode_id").get_column("value").to_list()
    groups = grouped.get_column("value").to_list()
    values = rows.get_column("value").to_list()
    variance = None
    if len(values) >= 2:
        mean = math.fsum(values) / len(values)
        variance = math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return TaskClusters(
        totals=tuple(math.fsum(group) for group in groups) + tuple(alone),
        sizes=tuple(len(group) for group in groups) + (1,) * len(alone),
        episode_variance=variance,
    )


def _clustered_success_ci(clusters: Any) -> dict[str, Any] | None:
    from shopsimrl_core.analysis._design import wilson_design_effect_interval

    return wilson_design_effect_interval(clusters)


def _clustered_reward_ci(clusters: Any, metric: str) -> dict[str, Any] | None:
    """Task-resampling bootstrap of the reward mean; the cluster-SEM normal interval for huge task counts."""
    from shopsimrl_core.analysis._design import cluster_bootstrap_ci, cluster_variance

    if clusters.tasks <= _BOOTSTRAP_MAX_N:
        return cluster_bootstrap_ci(clusters, metric=metric, seed=_BOOTSTRAP_SEED, samples=_BOOTSTRAP_SAMPLES)
    variance, mean = cluster_variance(clusters), clusters.mean
    if variance is None or mean is None:
        return None
    half = 1.959963984540054 * math.sqrt(variance)
    return {"method": "task_cluster_normal_approximation", "confidence_level": 0.95, "tasks": clusters.tasks,
            "low": mean - half, "high": mean + half}


def _sampling_design(reward: Any, success: Any, binary_success: bool) -> dict[str, Any]:
    """``primary.sampling_design``: tasks are the unit; how many, how many episodes each, the design effects."""
    from shopsimrl_core.analysis._design import cluster_variance, design_effect

    sizes = reward.sizes or success.sizes
    variance = cluster_variance(reward)
    return {
        "unit": "task",
        "tasks": len(sizes),
        "episodes": sum(sizes),
        "repeats_min": min(sizes) if sizes else None,
        "repeats_max": max(sizes) if sizes else None,
        "ci_method": {
            "reward": "task_cluster_percentile_bootstrap"
            if reward.tasks <= _BOOTSTRAP_MAX_N
            else "task_cluster_normal_approximation",
            "success": "wilson_design_effect" if binary_success else None,
        },
        "design_effect": {"reward": design_effect(reward), "success": design_effect(success)},
        "reward_sem": None if variance is None else math.sqrt(variance),
    }
