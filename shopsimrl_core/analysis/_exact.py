"""Exact float sums for long columns: ``math.fsum`` means and ``statistics.stdev``, bit for bit.

The summary's means are exactly rounded sums divided by n, and its SEMs use ``statistics.stdev``;
both are order-free and reproducible, but one value at a time they cost seconds per column over a
million episodes. Here the same exact sums come from integer arithmetic on the floats' mantissas.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

__all__ = ["_fmean", "_stdev"]

_EXACT_MIN_N = 4096  # below this the stdlib is fast enough and is used as is


def _as_array(values: Any) -> Any:
    import numpy as np

    if hasattr(values, "to_numpy"):
        return values.to_numpy().astype(np.float64, copy=False)
    return np.asarray(values, dtype=np.float64)


def _exact_sums(x: Any, squares: bool) -> tuple[int, int, int]:
    """Exact ``(Σx, Σx², e)`` with ``Σx = sx·2**e`` and ``Σx² = sxx·2**(2e)`` (Python ints).

    Every float is ``m·2**k`` with an integer mantissa ``|m| < 2**53``; mantissas are summed per
    exponent in int64 limbs small enough never to overflow, then combined as Python integers.
    """
    import numpy as np

    mantissa, exponent = np.frexp(x)
    m = np.ldexp(mantissa, 53).astype(np.int64)  # exact: |m| < 2**53, x = m * 2**(k - 53)
    e = exponent.astype(np.int64) - 53
    order = np.argsort(e, kind="stable")
    m, e = m[order], e[order]
    starts = np.flatnonzero(np.r_[True, e[1:] != e[:-1]])
    exps = e[starts].tolist()
    # sum(m) per exponent: m = hi * 2**26 + lo, so the int64 partial sums cannot overflow.
    hi, lo = m >> 26, m & ((1 << 26) - 1)
    sum_hi, sum_lo = np.add.reduceat(hi, starts).tolist(), np.add.reduceat(lo, starts).tolist()
    parts: list[list[int]] = []
    if squares:
        # sum(m*m) per exponent with 18-bit limbs of |m|: every partial product < 2**37.
        am = np.abs(m)
        a, b, c = am >> 36, (am >> 18) & ((1 << 18) - 1), am & ((1 << 18) - 1)
        parts = [np.add.reduceat(p, starts).tolist() for p in (a * a, a * b, a * c, b * b, b * c, c * c)]
    low = min(exps)
    sx = sxx = 0
    for i, exp in enumerate(exps):
        sx += ((sum_hi[i] << 26) + sum_lo[i]) << (exp - low)
        if squares:
            aa, ab, ac, bb, bc, cc = (p[i] for p in parts)
            sxx += ((aa << 72) + (ab << 55) + ((2 * ac + bb) << 36) + (bc << 19) + cc) << (2 * (exp - low))
    return sx, sxx, low


def _stdev(values: Any) -> float:
    """``statistics.stdev`` of *values* (a list or a polars Series without nulls), bit for bit.

    ``statistics`` sums exact ratios one value at a time; for long inputs the same exact sums come
    from :func:`_exact_sums`, then the same correctly rounded square root of the exact variance is
    taken. Short inputs go to ``statistics`` itself.
    """
    sqrt_of_frac = getattr(statistics, "_float_sqrt_of_frac", None)
    if len(values) < _EXACT_MIN_N or sqrt_of_frac is None:
        return float(statistics.stdev(values.to_list() if hasattr(values, "to_list") else values))
    from fractions import Fraction

    import numpy as np  # only for long inputs: its import costs more than a short run's whole summary
    x = _as_array(values)
    if not np.isfinite(x).all():
        return float(statistics.stdev(x.tolist()))
    sx, sxx, low = _exact_sums(x, squares=True)
    n = len(x)
    scale = Fraction(2) ** low
    fsx, fsxx = Fraction(sx) * scale, Fraction(sxx) * scale * scale
    mss = ((n * fsxx - fsx * fsx) / n) / (n - 1)
    return float(sqrt_of_frac(mss.numerator, mss.denominator))


def _fmean(series: Any) -> float | None:
    # Polars selects the values; the mean itself is an exactly rounded sum (math.fsum) divided by n,
    # which agrees with Python's own float means, not with a summation-order-dependent result. Long
    # series take the exact integer sum instead: its correctly rounded float is math.fsum's value.
    values = series.drop_nulls()
    n: int = values.len()
    if n == 0:
        return None
    if n < _EXACT_MIN_N:
        return math.fsum(values.to_list()) / n
    from fractions import Fraction

    import numpy as np  # only for long series (see _stdev)
    x = _as_array(values)
    if not np.isfinite(x).all():
        return math.fsum(x.tolist()) / n
    sx, _, low = _exact_sums(x, squares=False)
    return float(Fraction(sx) * Fraction(2) ** low) / n
