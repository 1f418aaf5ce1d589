"""Power and sample size for paired checkpoint comparisons: what difference a design can detect.

A comparison (runtime-semantics §20) estimates the mean over tasks of a per-task difference ``d_t``
(B − A, each side averaged over the task's repeats). With ``T`` tasks its standard error is
``σ_d / √T``, so a two-sided test at level α detects a true difference δ with power 1 − β when

    δ ≥ (z_{1−α/2} + z_{1−β}) · σ_d / √T        (the minimum detectable difference, MDE)
    T ≥ (z_{1−α/2} + z_{1−β})² · σ_d² / δ²       (the tasks needed to detect δ)

(the normal approximation for the mean of paired differences — a one-sample z test on ``d_t``, e.g.
Chow, Shao & Wang, *Sample Size Calculations in Clinical Research*, 2nd ed., 2008, section 3.1 — named
``normal_paired_difference`` wherever it is recorded).

This is **not** McNemar's sample size. For a 0/1 metric with one repeat ``σ_d² = ψ − δ²`` (ψ the discordant
share), the setting of Connor (*Biometrics* 43, 1987), whose McNemar formula
``(z_{1−α/2}·√ψ + z_{1−β}·√(ψ − δ²))² / δ²`` uses the null variance ψ for the first term and asks for a few
more tasks (312 instead of 307 at ψ = 0.4, δ = 0.1). The number here is the one for the test the comparison
runs (its interval on the mean task difference, with the variance estimated): computed exactly over the
trinomial outcomes, that test has 79.97 % power at 307 tasks, McNemar's test 79.58 %
(``tests/core/test_power.py``).

With repeats, ``σ_d²`` at ``R`` repeats per task is ``σ²_between + σ²_within / R``: the one-way
random-effects (ANOVA) decomposition of the episode-level values (Searle, Casella & McCulloch,
*Variance Components*, 1992, section 3.5), which lets a past run answer for another number of repeats.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from shopsimrl_core.analysis._design import group_by_task

__all__ = [
    "VarianceComponents",
    "variance_components",
    "detection_z",
    "minimum_detectable_difference",
    "required_tasks",
]


def detection_z(alpha: float = 0.05, power: float = 0.8) -> float:
    """``z_{1−α/2} + z_{power}``: the multiplier of the standard error in the MDE (2.8016 at 0.05, 0.8).

    Raises:
        ValueError: *alpha* or *power* outside (0, 1).
    """
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha and power must be between 0 and 1 (got alpha={alpha}, power={power})")
    normal = NormalDist()
    return normal.inv_cdf(1 - alpha / 2) + normal.inv_cdf(power)


def minimum_detectable_difference(
    task_variance: float | None, tasks: int, *, alpha: float = 0.05, power: float = 0.8
) -> float | None:
    """Smallest true mean difference a paired design of *tasks* tasks detects with *power* at level *alpha*.

    *task_variance* is the variance of one task's difference ``σ_d²`` at the design's repeats. None
    when it is unknown or there are no tasks.
    """
    if task_variance is None or tasks < 1:
        return None
    return detection_z(alpha, power) * math.sqrt(max(task_variance, 0.0) / tasks)


def required_tasks(difference: float, task_variance: float, *, alpha: float = 0.05, power: float = 0.8) -> int:
    """Fewest tasks whose paired comparison detects *difference* with *power* at level *alpha*.

    ``ceil((z_{1−α/2} + z_{power})² · σ_d² / δ²)``, at least 1 (also when ``σ_d² = 0``): the normal
    approximation for the paired mean difference (``normal_paired_difference``), not McNemar's formula
    (see the module docstring).

    Raises:
        ValueError: *difference* is not positive, or alpha/power outside (0, 1).
    """
    if not difference > 0.0:
        raise ValueError(f"the difference to detect must be > 0 (got {difference})")
    z = detection_z(alpha, power)
    return max(1, math.ceil(z * z * max(task_variance, 0.0) / (difference * difference)))


@dataclass(frozen=True)
class VarianceComponents:
    """One-way random-effects decomposition of episode values by task."""

    between: float
    """σ²_between: variance of the tasks' true means (floored at 0). Without repeats it is the whole
    variance of one task's single value (the within part cannot be separated)."""
    within: float | None
    """σ²_within: variance of episodes inside a task (pooled); None when no task has two episodes."""
    tasks: int
    """Tasks observed."""
    repeats: float
    """Episodes per task of the observed design (Searle's n₀ when tasks differ: ``(N − Σm²/N)/(k − 1)``)."""

    def task_variance(self, repeats: int | float) -> float:
        """Variance of one task's mean over *repeats* episodes: ``σ²_between + σ²_within / repeats``.

        Without a within part (one-repeat data) the observed single-episode variance is returned for
        every *repeats*: an upper bound, since repeats can only help.
        """
        if self.within is None:
            return self.between
        return self.between + self.within / repeats


def variance_components(values: Sequence[float], tasks: Sequence[Hashable]) -> VarianceComponents | None:
    """ANOVA estimates of σ²_between and σ²_within from episode *values* grouped by *tasks*.

    ``MSW = Σ(y_ij − ȳ_i)² / (N − k)``, ``MSB = Σ m_i (ȳ_i − ȳ)² / (k − 1)``,
    ``σ²_within = MSW``, ``σ²_between = max(0, (MSB − MSW) / n₀)``. With equal repeats ``m`` this is
    ``max(0, s²(task means) − σ²_within / m)``. Without repeats: ``between`` = the sample variance of
    the values, ``within`` None. None with fewer than 2 tasks.

    Raises:
        ValueError: the two sequences differ in length.
    """
    groups = group_by_task(values, tasks)
    k, n = len(groups), len(values)
    if k < 2:
        return None
    grand = math.fsum(values) / n
    means = {t: math.fsum(v) / len(v) for t, v in groups.items()}
    msb = math.fsum(len(v) * (means[t] - grand) ** 2 for t, v in groups.items()) / (k - 1)
    if n == k:
        return VarianceComponents(between=msb, within=None, tasks=k, repeats=1.0)
    msw = math.fsum((x - means[t]) ** 2 for t, v in groups.items() for x in v) / (n - k)
    n0 = (n - math.fsum(len(v) ** 2 for v in groups.values()) / n) / (k - 1)
    return VarianceComponents(between=max(0.0, (msb - msw) / n0), within=msw, tasks=k, repeats=n0)
