"""The numbers README.md's "Performance in one line" may quote, formatted from the results files (issue 25).

README quotes ranges measured in one run of ``client_shape`` (per-round ratios to the requests +
thread-pool reference, with the machine load beside them) and the medians of the ``run_index`` curve.
:func:`expected_tokens` formats them from the JSON; :func:`tokens_in` reads the same kinds of token out
of prose. ``tests/benchmarks/test_readme_numbers.py`` requires the two sets to be equal, so a fresh run
that changes the JSON without README (or a README number no run supports) fails.

Formats (an en dash between the ends; one value when both ends round alike):

* ``0.15–0.18×`` — CPU per step, ours ÷ the reference's, two decimals (also start-up: one episode's
  whole process, where the ratio is above 1);
* ``8.1–9.6× the steps/s`` — steps/s, ours ÷ the reference's, one decimal;
* ``load 1.5–4.5`` — 1-minute load average at the start of the runs of the row, one decimal;
* ``97.1–98.3 %`` — steady share of ideal throughput at 256 in flight, one decimal;
* ``2.9 s CPU`` — median CPU seconds of the resume no-op (``shopsimrl run``) per run size, and of
  ``shopsimrl summarize`` at the largest size, one decimal.
"""

from __future__ import annotations

import re
from typing import Any

#: client_shape rows README quotes (_shape_report.HEADLINE_ROWS): CPU per step ratio; steps/s ratio too where True
RATIO_ROWS = {"start_1ep": False, "c64_0ms_1024": True, "c64_200ms": False, "c256_200ms": True}
_RANGE = r"\d+(?:\.\d+)?(?:–\d+(?:\.\d+)?)?"
PATTERNS = {
    "cpu_ratio": re.compile(rf"(?<![\d.–])({_RANGE})×(?! the steps/s)"),
    "rate_ratio": re.compile(rf"(?<![\d.–])({_RANGE})× the steps/s"),
    "load": re.compile(rf"load ({_RANGE})"),
    "percent": re.compile(rf"(?<![\d.–])({_RANGE}) %"),
    "cpu_s": re.compile(r"(?<![\d.–])(\d+(?:\.\d+)?) s CPU"),
}


def span(lo: float, hi: float, digits: int) -> str:
    """``lo–hi`` at *digits* decimals, or one value when both round alike."""
    a, b = f"{lo:.{digits}f}", f"{hi:.{digits}f}"
    return a if a == b else f"{a}–{b}"


def expected_tokens(shape: dict[str, Any], curve: dict[str, Any]) -> dict[str, set[str]]:
    """What README may quote, from ``client_shape.json``'s ``headline`` and ``run_index_curve.json``'s rows."""
    out: dict[str, set[str]] = {kind: set() for kind in PATTERNS}
    headline = shape.get("headline") or {}
    for label, with_rate in RATIO_ROWS.items():
        entry = headline.get(label)
        if entry is None:
            continue
        cpu = entry["cpu_per_step_ratio"]
        out["cpu_ratio"].add(span(cpu["min"], cpu["max"], 2))
        if with_rate:
            rate = entry["steps_per_s_ratio"]
            out["rate_ratio"].add(span(rate["min"], rate["max"], 1))
        out["load"].add(span(entry["load_1min"]["min"], entry["load_1min"]["max"], 1))
        steady = entry.get("steady_fraction_of_ideal")
        if label == "c256_200ms" and steady:
            out["percent"].add(span(steady["min"] * 100, steady["max"] * 100, 1))
    rows = curve.get("rows") or []
    for row in rows:
        out["cpu_s"].add(f"{row['resume']['cpu_s']['median']:.1f}")
    if rows:  # and `shopsimrl summarize` alone at the largest size
        out["cpu_s"].add(f"{rows[-1]['summarize']['cpu_s']['median']:.1f}")
    return out


def tokens_in(text: str) -> dict[str, set[str]]:
    """The tokens of each kind that *text* quotes."""
    return {kind: set(pattern.findall(text)) for kind, pattern in PATTERNS.items()}


def readme_section(readme: str, heading: str = "## Performance in one line") -> str:
    """The text of README's section *heading*, up to the next second-level heading."""
    start = readme.index(heading) + len(heading)
    end = readme.find("\n## ", start)
    return readme[start : end if end >= 0 else len(readme)]
