"""Intervals that follow the sampling design: tasks are the unit when a task has several episodes.

A run with ``repeats > 1`` holds clusters: the episodes of one task share the task's difficulty, so
they are not independent draws. Treating them as independent makes an interval too narrow by the
square root of the *design effect* (Kish 1965, section 8.2): the variance of the mean under the cluster
design divided by the variance the same number of independent episodes would give.

Everything here works on per-task totals ``y_i`` (the sum of the task's episode values) and sizes
``m_i`` (its episode count); the mean is the ratio ``r = Σy / Σm``. The methods (docs/statistics.md):

- :func:`cluster_variance`: the with-replacement (linearised ratio) variance of ``r``,
  ``k/(k−1) · Σ(y_i − r·m_i)² / (Σm)²`` (Cochran 1977, sections 6.11 and 11.8); with one episode per task it
  is ``s²/n``, the usual squared standard error.
- :func:`design_effect`: that variance over ``s²/n`` of the episodes (``s²`` with ``n − 1``).
- :func:`cluster_bootstrap_ci`: the percentile bootstrap that draws *tasks* with replacement,
  keeping each task's episodes together (Davison & Hinkley 1997, section 3.8), reward's interval.
- :func:`wilson_design_effect_interval`: Wilson's interval at the effective sample size
  ``n / deff`` (Korn & Graubard 1998), success's interval. Chosen over a bootstrap for success because
  it keeps Wilson's behaviour near 0 and 1, where a percentile bootstrap of a few tasks collapses.

All functions are pure and deterministic; every random draw comes from the recorded per-metric seed
of :func:`shopsimrl_core.analysis._stats.metric_seed`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from shopsimrl_core.analysis._stats import _MAX_DRAW_BLOCK, metric_seed, percentile_interpolated

__all__ = [
    "TaskClusters",
    "group_by_task",
    "task_clusters",
    "cluster_variance",
    "design_effect",
    "cluster_bootstrap_ci",
    "wilson_design_effect_interval",
]


@dataclass(frozen=True)
class TaskClusters:
    """Per-task totals and episode counts of one metric, tasks in sorted key order."""

    totals: tuple[float, ...]
    """Σ of the task's episode values (``math.fsum``)."""
    sizes: tuple[int, ...]
    """Episodes of the task (≥ 1)."""
    episode_variance: float | None
    """Sample variance (n − 1) of the episode values; None with fewer than 2 episodes."""

    @property
    def tasks(self) -> int:
        """Number of tasks (clusters)."""
        return len(self.sizes)

    @property
    def episodes(self) -> int:
        """Number of episodes over all tasks."""
        return sum(self.sizes)

    @property
    def mean(self) -> float | None:
        """The episode mean ``Σy / Σm`` (correctly rounded sum); None without episodes."""
        return math.fsum(self.totals) / self.episodes if self.sizes else None


def group_by_task(values: Sequence[float], tasks: Sequence[Hashable]) -> dict[Hashable, list[float]]:
    """Episode *values* grouped by their *tasks* key (same length), in first-seen order.

    Raises:
        ValueError: the two sequences differ in length.
    """
    if len(values) != len(tasks):
        raise ValueError(f"{len(values)} values for {len(tasks)} task keys")
    groups: dict[Hashable, list[float]] = {}
    for value, task in zip(values, tasks, strict=True):
        groups.setdefault(task, []).append(float(value))
    return groups


def task_clusters(values: Sequence[float], tasks: Sequence[Hashable]) -> TaskClusters:
    """Group episode *values* by their *tasks* key (same length): totals, sizes and episode variance.

    The keys are sorted (they must be mutually comparable), so the result does not depend on the
    order of the episodes.

    Raises:
        ValueError: the two sequences differ in length.
    """
    groups = group_by_task(values, tasks)
    keys = sorted(groups)  # type: ignore[type-var]
    variance = None
    if len(values) >= 2:
        mean = math.fsum(values) / len(values)
        variance = math.fsum((float(v) - mean) ** 2 for v in values) / (len(values) - 1)
    return TaskClusters(
        totals=tuple(math.fsum(groups[k]) for k in keys),
        sizes=tuple(len(groups[k]) for k in keys),
        episode_variance=variance,
    )


def cluster_variance(clusters: TaskClusters) -> float | None:
    """Variance of the ratio mean under the task design; None with fewer than 2 tasks.

    ``k/(k−1) · Σ(y_i − r·m_i)² / M²`` with ``r = Σy/M``, ``M = Σm`` (the linearised with-replacement
    estimator). With one episode per task this equals ``s²/n`` up to rounding.
    """
    k = clusters.tasks
    if k < 2:
        return None
    total = clusters.episodes
    r = math.fsum(clusters.totals) / total
    residual = math.fsum((y - r * m) ** 2 for y, m in zip(clusters.totals, clusters.sizes))
    return k / (k - 1) * residual / (total * total)


def design_effect(clusters: TaskClusters) -> float | None:
    """Cluster variance of the mean over the variance of as many independent episodes (``s²/n``).

    None when either variance is undefined or the episodes do not vary (``s² = 0``). Values below 1
    are returned as computed (tasks more alike inside than between); callers that widen intervals
    floor it at 1.
    """
    var_cluster = cluster_variance(clusters)
    s2 = clusters.episode_variance
    if var_cluster is None or s2 is None or s2 <= 0.0:
        return None
    return var_cluster / (s2 / clusters.episodes)


def cluster_bootstrap_ci(
    clusters: TaskClusters,
    *,
    metric: str,
    seed: int = 20260901,
    samples: int = 2000,
    confidence_level: float = 0.95,
) -> dict[str, Any] | None:
    """Percentile bootstrap interval of the episode mean, drawing whole tasks with replacement.

    Each replicate draws ``k`` task indices (``numpy.random.default_rng(metric_seed(seed, metric))``,
    ``integers(0, k, size=(B, k))`` in blocks that do not change the draws) and takes
    ``Σ totals / Σ sizes`` of the drawn tasks; the ends interpolate the sorted replicates at
    ``p·(B−1)`` as runtime-semantics §20 does. None without tasks. The dict records everything needed to reproduce it.
    """
    k = clusters.tasks
    if k == 0:
        return None
    import numpy as np

    totals = np.asarray(clusters.totals, dtype=np.float64)
    sizes = np.asarray(clusters.sizes, dtype=np.float64)
    generator = np.random.default_rng(metric_seed(seed, metric))
    block = max(1, _MAX_DRAW_BLOCK // k)
    means: list[float] = []
    remaining = samples
    while remaining > 0:
        size = min(block, remaining)
        draws = generator.integers(0, k, size=(size, k))
        means.extend((totals[draws].sum(axis=1) / sizes[draws].sum(axis=1)).tolist())
        remaining -= size
    means.sort()
    tail = (1 - confidence_level) / 2
    return {
        "method": "task_cluster_percentile_bootstrap",
        "rng": "numpy",
        "seed": seed,
        "seed_derivation": "u64_be(sha256('{seed}:{metric}')[0:8])",
        "metric": metric,
        "samples": samples,
        "confidence_level": confidence_level,
        "tasks": k,
        "low": percentile_interpolated(means, tail),
        "high": percentile_interpolated(means, 1 - tail),
    }


def wilson_design_effect_interval(
    clusters: TaskClusters, confidence_level: float = 0.95
) -> dict[str, Any] | None:
    """Wilson interval of a success rate at the effective sample size ``n_eff = n / max(deff, 1)``.

    The point estimate stays ``p = Σy/n``; only the sample size shrinks. When every episode agrees
    (``p`` is 0 or 1) the design effect is undefined and the worst case is used, ``n_eff = k`` (each
    task one independent observation). None without episodes.
    """
    n = clusters.episodes
    if n == 0:
        return None
    successes = math.fsum(clusters.totals)
    p = successes / n
    deff = design_effect(clusters)
    if deff is None:
        used = n / clusters.tasks  # all alike inside tasks: intraclass correlation 1
    else:
        used = max(deff, 1.0)
    n_eff = n / used
    z = NormalDist().inv_cdf(1 - (1 - confidence_level) / 2)
    denom = 1 + z * z / n_eff
    centre = (p + z * z / (2 * n_eff)) / denom
    half = z * math.sqrt(p * (1 - p) / n_eff + z * z / (4 * n_eff * n_eff)) / denom
    return {
        "method": "wilson_design_effect",
        "confidence_level": confidence_level,
        "n": n,
        "tasks": clusters.tasks,
        "design_effect": used,
        "effective_n": n_eff,
        "low": 0.0 if p == 0.0 else max(0.0, centre - half),
        "high": 1.0 if p == 1.0 else min(1.0, centre + half),
    }
