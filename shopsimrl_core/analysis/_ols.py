"""The paired estimator: no-intercept OLS of treated-minus-bare deltas on chunk masks (runtime-semantics §15).

Model ``R_i − B_i = C_iᵀ β + ε_i`` with ``C_i`` the 0/1 mask row of episode *i*: no constant column,
no centring, all-zero rows stay in. The normal equations are accumulated row by row in float64 and
solved by Gauss–Jordan elimination with partial pivoting exactly as the spec prescribes, so refits of
published tables reproduce published coefficients bit for bit.

Beyond the legacy harness, ``bootstrap_coefficients`` reports task-level bootstrap intervals for
every coefficient (runtime-semantics §23 item 12). The RNG is recorded: CPython ``random.Random`` seeded with
``u64_be(SHA-256("{seed}:{metric}")[0:8])``, the convention of the paired comparison (§20).

``sign_flip_noise_bar`` calibrates "indistinguishable from noise" on the data (issue 23): under no
effect at all each pair's delta is as likely positive as negative, so flipping the signs of the
deltas at random and refitting draws the largest |β| a gate would see by chance.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from shopsimrl_core._errors import SkillError
from shopsimrl_core.analysis._stats import metric_seed, percentile_interpolated

__all__ = [
    "ZERO_TOLERANCE",
    "RANK_DEFICIENT_MESSAGE",
    "fit_no_intercept_ols",
    "check_design",
    "bootstrap_coefficients",
    "sign_flip_noise_bar",
    "metric_seed",
]

ZERO_TOLERANCE = 1e-12
RANK_DEFICIENT_MESSAGE = "randomized mask design is rank deficient; use a different mask seed"
TOO_FEW_MESSAGE = "OLS requires more observations than chunk factors"


def _validate(design: Sequence[Sequence[int]], deltas: Sequence[float] | None) -> tuple[int, int]:
    n = len(design)
    if n == 0 or not design[0]:
        raise SkillError("OLS design must have at least one row and one chunk column", code="ols-invalid-design")
    p = len(design[0])
    for i, row in enumerate(design):
        if len(row) != p:
            raise SkillError(f"OLS design row {i} has {len(row)} entries, expected {p}", code="ols-invalid-design")
        for v in row:
            if isinstance(v, bool) or v not in (0, 1):
                raise SkillError(
                    f"OLS design row {i}: mask entries must be 0 or 1 (got {v!r})", code="ols-invalid-design"
                )
    if n <= p:
        raise SkillError(f"{TOO_FEW_MESSAGE} (n={n}, p={p})", code="ols-too-few-observations")
    if deltas is not None:
        if len(deltas) != n:
            raise SkillError(f"OLS got {len(deltas)} deltas for {n} design rows", code="ols-invalid-design")
        for i, d in enumerate(deltas):
            if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d):
                raise SkillError(f"OLS delta {i} must be a finite number (got {d!r})", code="ols-invalid-outcome")
    return n, p


def fit_no_intercept_ols(design: Sequence[Sequence[int]], deltas: Sequence[float]) -> list[float]:
    """Return β solving ``XᵀX β = XᵀΔ`` for a 0/1 design without intercept (runtime-semantics §15).

    Coefficients with ``|β| ≤ 1e-12`` are returned as exactly ``0.0``.

    Raises:
        SkillError (``ols-too-few-observations``): ``n ≤ p``.
        SkillError (``rank-deficient-design``): a pivot ``≤ max(1, max|XᵀX|)·1e-12``; message
            ``randomized mask design is rank deficient; use a different mask seed``.
        SkillError (``ols-invalid-design`` / ``ols-invalid-outcome``): ragged rows, non-0/1 entries,
            non-finite deltas.
    """
    n, p = _validate(design, deltas)
    xtx = [[0.0] * p for _ in range(p)]
    xty = [0.0] * p
    for row, delta in zip(design, deltas):
        d = float(delta)
        for a in range(p):
            if row[a]:
                xty[a] += d
                xa = xtx[a]
                for b in range(p):
                    if row[b]:
                        xa[b] += 1.0
    # Augmented matrix [XᵀX | XᵀΔ]
    m = [xtx[r][:] + [xty[r]] for r in range(p)]
    scale = max(1.0, max(abs(v) for r in xtx for v in r))
    tol = scale * ZERO_TOLERANCE
    for col in range(p):
        pivot_row = col
        best = abs(m[col][col])
        for r in range(col + 1, p):
            if abs(m[r][col]) > best:  # strict: the first row wins ties
                best = abs(m[r][col])
                pivot_row = r
        if best <= tol:
            raise SkillError(RANK_DEFICIENT_MESSAGE, code="rank-deficient-design", column=col)
        if pivot_row != col:
            m[col], m[pivot_row] = m[pivot_row], m[col]
        pivot = m[col][col]
        m[col] = [v / pivot for v in m[col]]
        for r in range(p):
            if r == col:
                continue
            factor = m[r][col]
            if factor == 0.0:
                continue
            m[r] = [rv - factor * cv for rv, cv in zip(m[r], m[col])]
    beta = [m[r][p] for r in range(p)]
    return [0.0 if abs(b) <= ZERO_TOLERANCE else b for b in beta]


def check_design(design: Sequence[Sequence[int]]) -> None:
    """Fit the design on an all-zero outcome so a rank-deficient mask fails before any rollout (§14.2.8).

    Raises:
        SkillError: as :func:`fit_no_intercept_ols`.
    """
    fit_no_intercept_ols(design, [0.0] * len(design))


def bootstrap_coefficients(
    design: Sequence[Sequence[int]],
    deltas: Sequence[float],
    groups: Sequence[Any],
    *,
    metric: str,
    samples: int = 1000,
    seed: int = 20260901,
    level: float = 0.95,
) -> dict[str, Any]:
    """Task-level (cluster) bootstrap percentile intervals for every coefficient.

    Each replicate draws ``len(unique groups)`` groups with replacement (``rng.randrange``), stacks
    their rows and refits. Replicates whose design is rank deficient are skipped and counted; the
    interval ends are linear interpolations at ``p·(B−1)`` of the sorted valid replicates.

    Returns ``{"method", "samples", "seed", "metric_seed", "confidence_level", "valid_samples",
    "skipped_rank_deficient", "intervals": [[lo, hi] | None per column]}``.
    """
    _validate(design, deltas)
    order: list[Any] = []
    rows_of: dict[Any, list[int]] = {}
    for i, g in enumerate(groups):
        if g not in rows_of:
            rows_of[g] = []
            order.append(g)
        rows_of[g].append(i)
    s = metric_seed(seed, metric)
    rng = random.Random(s)
    p = len(design[0])
    reps: list[list[float]] = [[] for _ in range(p)]
    skipped = 0
    k = len(order)
    for _ in range(samples):
        idx: list[int] = []
        for _ in range(k):
            idx.extend(rows_of[order[rng.randrange(k)]])
        try:
            beta = fit_no_intercept_ols([design[i] for i in idx], [deltas[i] for i in idx])
        except SkillError:
            skipped += 1
            continue
        for j, b in enumerate(beta):
            reps[j].append(b)
    lo_q = (1 - level) / 2
    intervals: list[list[float] | None] = []
    for j in range(p):
        values = sorted(reps[j])
        intervals.append(
            [percentile_interpolated(values, lo_q), percentile_interpolated(values, 1 - lo_q)] if values else None
        )
    return {
        "method": "task_cluster_percentile_bootstrap",
        "samples": samples,
        "seed": seed,
        "metric_seed": s,
        "confidence_level": level,
        "valid_samples": samples - skipped,
        "skipped_rank_deficient": skipped,
        "intervals": intervals,
    }


def sign_flip_noise_bar(
    design: Sequence[Sequence[int]],
    deltas: Sequence[float],
    coefficients: Sequence[float],
    *,
    metric: str,
    samples: int = 1000,
    seed: int = 20260901,
    quantile: float = 0.95,
) -> dict[str, Any]:
    """The largest |β| no effect produces: a sign-flip permutation distribution of ``max_j |β_j|``.

    Under the null of no chunk effect the paired deltas are symmetric around 0 (treated and bare
    episodes of a pair are exchangeable), so each replicate multiplies every delta by an independent
    random sign (numpy ``default_rng(metric_seed(seed, "sign_flip:" + metric))``), refits the same
    design by least squares and keeps ``max_j |β*_j|``. ``noise_bar`` is its *quantile* (interpolated
    at ``p·(B−1)`` as runtime-semantics §20 does), ``median_max_abs`` its median. ``adjusted_p_values``
    are the single-step max-T p-values of the observed *coefficients* (Westfall & Young 1993),
    ``(1 + #{max|β*| ≥ |β_j|}) / (B + 1)`` (Phipson & Smyth 2010): a chunk with p < 1 − *quantile*
    is above the bar, and selecting only those keeps the chance of selecting any null chunk at most
    1 − *quantile* (family-wise).

    Raises:
        SkillError: as :func:`fit_no_intercept_ols` (``ols-invalid-design`` ...).
    """
    import numpy as np

    _validate(design, deltas)
    x = np.asarray(design, dtype=np.float64)
    d = np.asarray(deltas, dtype=np.float64)
    try:
        hat = np.linalg.solve(x.T @ x, x.T)  # p × n: β = hat @ deltas
    except np.linalg.LinAlgError:
        raise SkillError(RANK_DEFICIENT_MESSAGE, code="rank-deficient-design") from None
    s = metric_seed(seed, f"sign_flip:{metric}")
    rng = np.random.default_rng(s)
    n = len(d)
    block = max(1, 65_536 // max(n, 1))
    maxima: list[float] = []
    remaining = samples
    while remaining > 0:
        size = min(block, remaining)
        signs = rng.integers(0, 2, size=(size, n)) * 2 - 1
        betas = (signs * d) @ hat.T  # size × p
        maxima.extend(np.abs(betas).max(axis=1).tolist())
        remaining -= size
    maxima.sort()
    observed = np.abs(np.asarray(coefficients, dtype=np.float64))
    exceed = len(maxima) - np.searchsorted(np.asarray(maxima), observed, side="left")
    return {
        "method": "sign_flip_max_abs_coefficient",
        "samples": samples,
        "seed": seed,
        "metric_seed": s,
        "seed_derivation": "u64_be(sha256('{seed}:sign_flip:{metric}')[0:8])",
        "quantile": quantile,
        "noise_bar": percentile_interpolated(maxima, quantile),
        "median_max_abs": percentile_interpolated(maxima, 0.5),
        "adjusted_p_values": [(1 + int(e)) / (samples + 1) for e in exceed],
    }
