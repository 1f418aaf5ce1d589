"""Intervals that follow the sampling design (analysis/_design.py), each checked against an independent computation."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from shopsimrl_core.analysis import _design
from shopsimrl_core.analysis._design import (
    TaskClusters,
    cluster_bootstrap_ci,
    cluster_variance,
    design_effect,
    task_clusters,
    wilson_design_effect_interval,
)
from shopsimrl_core.analysis._stats import metric_seed, wilson_interval


def _clustered(tasks: int, repeats: int, seed: int, spread: float = 0.35) -> tuple[list[float], list[int]]:
    """Binary outcomes whose success probability varies by task (intraclass correlation > 0)."""
    rng = np.random.default_rng(seed)
    p_task = np.clip(rng.normal(0.45, spread, size=tasks), 0.02, 0.98)
    values, keys = [], []
    for t in range(tasks):
        for _ in range(repeats):
            values.append(float(rng.random() < p_task[t]))
            keys.append(t)
    return values, keys


def test_task_clusters_sorts_tasks_and_sums_exactly() -> None:
    c = task_clusters([0.1, 0.2, 0.7, 1.0, 0.0], [3, 1, 3, 1, 2])
    assert c.sizes == (2, 1, 2) and c.totals == (math.fsum([0.2, 1.0]), 0.0, math.fsum([0.1, 0.7]))
    assert c.episode_variance == pytest.approx(statistics.variance([0.1, 0.2, 0.7, 1.0, 0.0]), rel=1e-15)
    assert c.mean == math.fsum([0.1, 0.2, 0.7, 1.0, 0.0]) / 5
    assert task_clusters([0.1, 0.2], [2, 1]) == task_clusters([0.2, 0.1], [1, 2])  # order-free
    with pytest.raises(ValueError):
        task_clusters([1.0], [1, 2])


def test_cluster_variance_equals_the_variance_of_task_means_over_k_for_equal_sizes() -> None:
    values, keys = _clustered(40, 4, seed=1)
    c = task_clusters(values, keys)
    task_means = np.asarray(values).reshape(40, 4).mean(axis=1)
    assert cluster_variance(c) == pytest.approx(task_means.var(ddof=1) / 40, rel=1e-12)
    assert cluster_variance(task_clusters([1.0], [0])) is None


def test_one_episode_per_task_has_design_effect_one() -> None:
    values = np.random.default_rng(3).random(57).tolist()
    c = task_clusters(values, list(range(57)))
    assert cluster_variance(c) == pytest.approx(statistics.variance(values) / 57, rel=1e-12)
    assert design_effect(c) == pytest.approx(1.0, rel=1e-12)


def test_identical_repeats_give_the_textbook_maximum_design_effect() -> None:
    # Every episode of a task alike (ICC = 1): deff = (m·k − 1)/(k − 1), m repeats of k tasks.
    base = np.random.default_rng(5).random(20)
    values = np.repeat(base, 4).tolist()
    c = task_clusters(values, np.repeat(np.arange(20), 4).tolist())
    assert design_effect(c) == pytest.approx((4 * 20 - 1) / (20 - 1), rel=1e-12)


def test_cluster_bootstrap_matches_a_brute_force_numpy_resampling() -> None:
    values, keys = _clustered(25, 3, seed=7)
    sizes = [3] * 25
    c = task_clusters(values, keys)
    ci = cluster_bootstrap_ci(c, metric="reward", samples=500)
    assert ci is not None and ci["method"] == "task_cluster_percentile_bootstrap" and ci["tasks"] == 25
    # independent: draw the same task indices, rebuild each replicate from the raw episodes
    grid = np.asarray(values).reshape(25, 3)
    draws = np.random.default_rng(metric_seed(20260901, "reward")).integers(0, 25, size=(500, 25))
    reps = np.array([grid[row].sum() / (sizes[0] * 25) for row in draws])
    low, high = np.percentile(reps, [2.5, 97.5])  # numpy's default is the same linear interpolation
    assert ci["low"] == pytest.approx(low, abs=1e-12) and ci["high"] == pytest.approx(high, abs=1e-12)


def test_cluster_bootstrap_does_not_depend_on_the_draw_block(monkeypatch: pytest.MonkeyPatch) -> None:
    c = task_clusters(*_clustered(31, 2, seed=9))
    whole = cluster_bootstrap_ci(c, metric="reward", samples=301)
    monkeypatch.setattr(_design, "_MAX_DRAW_BLOCK", 31 * 4 + 7)
    assert cluster_bootstrap_ci(c, metric="reward", samples=301) == whole
    assert cluster_bootstrap_ci(TaskClusters((), (), None), metric="reward") is None


def test_wilson_design_effect_reduces_to_wilson_without_clustering() -> None:
    values = [1.0] * 13 + [0.0] * 27
    ci = wilson_design_effect_interval(task_clusters(values, list(range(40))))
    assert ci is not None
    low, high = wilson_interval(13, 40)
    assert ci["design_effect"] == 1.0 and ci["low"] == pytest.approx(low, abs=1e-15)
    assert ci["high"] == pytest.approx(high, abs=1e-15)


def test_wilson_design_effect_uses_the_effective_sample_size() -> None:
    values, keys = _clustered(32, 4, seed=11)
    c = task_clusters(values, keys)
    ci = wilson_design_effect_interval(c)
    assert ci is not None
    deff = design_effect(c)
    assert deff is not None and deff > 1.2 and ci["design_effect"] == deff
    # independent Wilson at n_eff = n/deff, written out from the textbook formula
    n_eff, p, z = 128 / deff, sum(values) / 128, 1.959963984540054
    centre = (p + z * z / (2 * n_eff)) / (1 + z * z / n_eff)
    half = z * math.sqrt(p * (1 - p) / n_eff + z * z / (4 * n_eff**2)) / (1 + z * z / n_eff)
    assert ci["low"] == pytest.approx(centre - half, abs=1e-12)
    assert ci["high"] == pytest.approx(centre + half, abs=1e-12)
    episode_level = wilson_interval(int(sum(values)), 128)
    assert episode_level is not None and ci["high"] - ci["low"] > episode_level[1] - episode_level[0]


def test_all_alike_takes_one_observation_per_task() -> None:
    ci = wilson_design_effect_interval(task_clusters([1.0] * 12, [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]))
    assert ci is not None and ci["effective_n"] == 4 and ci["high"] == 1.0
    assert ci["low"] == pytest.approx(wilson_interval(4, 4)[0])  # type: ignore[index]


def test_task_level_intervals_keep_their_coverage_where_episode_level_ones_do_not() -> None:
    # 300 simulated runs of 32 tasks × 4 repeats, tasks drawn from a population whose success
    # probabilities vary (Beta(0.6, 0.7)): the estimand is the population's rate, the question a suite
    # answers. The design-aware intervals cover it near 95 %, the episode-level Wilson clearly less often.
    rng = np.random.default_rng(2026)
    truth = 0.6 / 1.3
    covered_design = covered_naive = covered_boot = 0
    runs = 300
    for r in range(runs):
        p_task = rng.beta(0.6, 0.7, size=32)
        outcomes = (rng.random((32, 4)) < p_task[:, None]).astype(float)
        c = task_clusters(outcomes.ravel().tolist(), np.repeat(np.arange(32), 4).tolist())
        design = wilson_design_effect_interval(c)
        assert design is not None
        naive = wilson_interval(int(outcomes.sum()), 128)
        assert naive is not None
        boot = cluster_bootstrap_ci(c, metric=f"sim-{r}", samples=400)
        assert boot is not None
        covered_design += design["low"] <= truth <= design["high"]
        covered_naive += naive[0] <= truth <= naive[1]
        covered_boot += boot["low"] <= truth <= boot["high"]
    # measured: 290, 285 and 243 of 300
    assert covered_design / runs >= 0.92 and covered_boot / runs >= 0.92
    assert covered_naive / runs <= 0.85
