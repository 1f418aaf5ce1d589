"""Statistics for summaries and comparisons: Wilson intervals, bootstrap intervals, pass@k / pass^k.

Pure functions of numbers (no file I/O); ``_comparison`` applies them to two run directories.

Every random draw is reproducible and recorded: the per-metric seed follows the paired-comparison
convention of runtime-semantics §20, ``u64_be(SHA-256("{seed}:{metric}")[0:8])``. The ``cpython``
generator reproduces §20 exactly (``random.Random(s_m)``, ``randrange(n)``); the default ``numpy``
generator (``numpy.random.default_rng(s_m)``) gives the same kind of interval much faster and is
named in every output that uses it.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from math import comb
from statistics import NormalDist
from typing import Any

__all__ = [
    "metric_seed",
    "wilson_interval",
    "bootstrap_mean_ci",
    "paired_bootstrap_ci",
    "percentile_interpolated",
    "pass_at_k",
    "pass_hat_k",
]

# Indices drawn per numpy block (512 KB of int64). Small enough to stay in cache and inside malloc's
# heap: 2 M-index blocks were fresh 16 MB mmaps, whose page faults made a process's first interval
# cost 0.1 s instead of 0.015 s. The draws do not depend on the block size (tests/core/test_stats.py).
_MAX_DRAW_BLOCK = 65_536


def metric_seed(seed: int, metric: str) -> int:
    """The per-metric seed of §20: first 8 bytes (big-endian) of SHA-256 of ``"{seed}:{metric}"``."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{metric}".encode()).digest()[:8], "big")


def wilson_interval(successes: int, n: int, confidence_level: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval of a success proportion; None when *n* is 0."""
    if n <= 0:
        return None
    z = NormalDist().inv_cdf(1 - (1 - confidence_level) / 2)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact ends: no 1e-17 residue
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


def percentile_interpolated(sorted_values: Sequence[float], p: float) -> float:
    """Linear interpolation at position ``p·(B−1)`` of sorted values (§20)."""
    position = p * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = position - low
    return float(sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction)


def _bootstrap_means(values: Sequence[float], samples: int, seed_value: int, rng: str) -> list[float]:
    n = len(values)
    if rng == "cpython":
        generator = random.Random(seed_value)
        means = []
        for _ in range(samples):
            total = 0.0
            for _ in range(n):
                total += values[generator.randrange(n)]
            means.append(total / n)
        return sorted(means)
    if rng != "numpy":
        raise ValueError(f"rng must be 'numpy' or 'cpython' (got {rng!r})")
    import numpy as np

    data = np.asarray(values, dtype=np.float64)
    generator_np = np.random.default_rng(seed_value)
    block = max(1, _MAX_DRAW_BLOCK // max(n, 1))
    out: list[float] = []
    remaining = samples
    while remaining > 0:
        size = min(block, remaining)
        draws = generator_np.integers(0, n, size=(size, n))
        out.extend(data[draws].mean(axis=1).tolist())
        remaining -= size
    return sorted(out)


def bootstrap_mean_ci(
    values: Sequence[float],
    *,
    metric: str,
    seed: int = 20260901,
    samples: int = 2000,
    confidence_level: float = 0.95,
    rng: str = "numpy",
) -> dict[str, Any] | None:
    """Percentile bootstrap interval of a mean; None when there are no values.

    The returned dict records the method, generator, seed derivation and sample count so the
    interval can be reproduced.
    """
    if not values:
        return None
    seed_value = metric_seed(seed, metric)
    means = _bootstrap_means(list(values), samples, seed_value, rng)
    tail = (1 - confidence_level) / 2
    return {
        "method": "percentile_bootstrap",
        "rng": rng,
        "seed": seed,
        "seed_derivation": "u64_be(sha256('{seed}:{metric}')[0:8])",
        "metric": metric,
        "samples": samples,
        "confidence_level": confidence_level,
        "low": percentile_interpolated(means, tail),
        "high": percentile_interpolated(means, 1 - tail),
    }


def paired_bootstrap_ci(
    differences: Sequence[float],
    *,
    metric: str,
    seed: int = 20260901,
    samples: int = 10000,
    confidence_level: float = 0.95,
    rng: str = "numpy",
) -> tuple[float, float] | None:
    """Task-level paired percentile bootstrap of the mean difference (runtime-semantics §20).

    ``rng="cpython"`` reproduces the legacy comparison tool's draws exactly; equal differences d
    give ``(d, d)``.
    """
    if not differences:
        return None
    means = _bootstrap_means(list(differences), samples, metric_seed(seed, metric), rng)
    tail = (1 - confidence_level) / 2
    return (percentile_interpolated(means, tail), percentile_interpolated(means, 1 - tail))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: probability that at least one of k draws (of n, c correct) succeeds."""
    if k > n:
        raise ValueError(f"k={k} exceeds n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k for one task: probability that all k draws (of n, c correct) succeed."""
    if k > n:
        raise ValueError(f"k={k} exceeds n={n}")
    return comb(c, k) / comb(n, k)
