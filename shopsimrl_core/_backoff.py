"""Exponential backoff: the one place that says how long to wait before trying again.

Every retry loop of the core — model requests, environment calls safe to repeat, lease releases,
outage probes, an episode's next attempt — asks a :class:`Backoff` for its wait, so the schedule of
each is one line of parameters and is documented next to the setting that tunes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Backoff"]


@dataclass(frozen=True)
class Backoff:
    """The *n*-th wait (n ≥ 1) is ``min(base·2^(n−1), cap)``, then jittered.

    ``jitter``: ``"none"``; ``"equal"`` multiplies by ``0.5 + 0.5·u`` (spreads retries of many clients
    over half the wait); ``"additive"`` adds ``u·min(base·2^(n−1), 1)`` (the model client's published
    schedule, runtime-semantics §7.2: ``min(b·2^a, 30) + U·min(b·2^a, 1)`` with ``a = n − 1``).
    ``u`` is a uniform draw in [0, 1) supplied by the caller, so tests and seeded runs are repeatable.
    """

    base: float
    cap: float
    jitter: Literal["none", "equal", "additive"] = "equal"

    def delay(self, n: int, u: float = 0.0) -> float:
        """Seconds to wait after the *n*-th failure (n ≤ 1 gives the first wait)."""
        raw = self.base * 2.0 ** max(n - 1, 0)
        bounded = min(raw, self.cap)
        if self.jitter == "equal":
            return bounded * (0.5 + 0.5 * u)
        if self.jitter == "additive":
            return bounded + u * min(raw, 1.0)
        return bounded
