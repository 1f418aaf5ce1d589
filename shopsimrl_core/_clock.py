"""The clock readings a trace records: millisecond durations and UTC timestamps, made cheaply.

Both are taken several times per step of every episode, so their cost shows in the client's CPU
per step (docs/benchmarks.md); each function says what it returns and why it is not the obvious
one-liner.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["round_ms", "utc_now"]


def round_ms(milliseconds: float) -> float:
    """*milliseconds* rounded to three decimals (to the microsecond), as a float.

    The nearest double to a whole number of microseconds, like ``round(x, 3)``; that one formats
    and re-parses a decimal string (~0.7 µs a call here, ~0.25 µs for this). The two differ only
    when ``x * 1000`` falls within one rounding step of a half, which a measured duration never
    makes meaningful (no difference in 200,000 random durations).
    """
    return round(milliseconds * 1000.0) / 1000.0


_formatted: tuple[int, str] = (-1, "")  # (second, its "YYYY-MM-DDTHH:MM:SS"), replaced as one object


def utc_now() -> str:
    """Current UTC time as ISO-8601 with offset, e.g. ``2026-10-02T08:15:03.120000+00:00``.

    The same text as ``datetime.now(UTC).isoformat(timespec="microseconds")``; the date and time
    of the current second are formatted once per second (``isoformat`` alone took ~3 µs a call).
    """
    global _formatted
    second, micro = divmod(time.time_ns() // 1000, 1_000_000)
    cached, prefix = _formatted  # one read: threads never pair one second's text with another's
    if cached != second:
        prefix = datetime.fromtimestamp(second, UTC).isoformat()[:19]
        _formatted = (second, prefix)
    return f"{prefix}.{micro:06d}+00:00"
