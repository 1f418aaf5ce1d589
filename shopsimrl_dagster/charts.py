"""The PNG charts of the Dagster UI: categories of one summary, a suite's progress over training steps.

Split from ``report.py`` (which keeps tables and rounded text): drawing only, every number from the core
documents. Charts are written next to their data and returned as base64 so the metadata can embed them;
:func:`inline_chart` links one from the trace viewer, short enough for Dagster to draw it in place.
"""

from __future__ import annotations

import base64
import hashlib
import io
import math
from pathlib import Path
from typing import Any

import dagster as dg

from shopsimrl_core.documents._pipeline import ProgressPoint
from shopsimrl_core.documents._runs import CategoryRow, EvalSummary, SummaryInterval

__all__ = ["inline_chart", "write_category_chart", "write_progress_chart"]


def is_num(value: Any) -> bool:
    """A finite int or float (never a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def categories_of(summary: EvalSummary) -> dict[str, CategoryRow]:
    """The summary's per-category rows (empty without a breakdown)."""
    return summary.breakdowns.category if summary.breakdowns is not None else {}


def inline_chart(viewer_base_url: str, runs_root: Path, chart: Path, alt: str) -> Any:
    """A markdown image of *chart* served by the trace viewer, short enough for Dagster to draw it in place.

    Dagster's asset pages render a markdown metadata entry inline only when it is under 1,000
    characters; the base64 chart is far longer and opens on a click. This one links the viewer's
    ``/chart`` route with the chart's path under the runs root and its sha256, so a materialization
    shows the chart it drew or none (the viewer refuses a chart redrawn since). A null entry when the
    chart lies outside the runs root (the viewer would not serve it).
    """
    try:
        rel = chart.resolve().relative_to(Path(runs_root).resolve()).as_posix()
    except ValueError:
        return dg.MetadataValue.null()
    from urllib.parse import urlencode

    digest = hashlib.sha256(chart.read_bytes()).hexdigest()[:16]
    query = urlencode({"path": rel, "sha256": digest})
    text = alt.replace("[", "(").replace("]", ")")
    return dg.MetadataValue.md(f"![{text}]({viewer_base_url.rstrip('/')}/chart?{query})")



def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import font_manager
    from matplotlib import pyplot as plt

    # Category names are often Chinese; use a CJK font when the machine has one.
    cjk = next(
        (
            name
            for name in (
                "Noto Sans CJK SC",
                "Noto Sans CJK JP",
                "WenQuanYi Micro Hei",
                "WenQuanYi Zen Hei",
                "Droid Sans Fallback",
            )
            if any(f.name == name for f in font_manager.fontManager.ttflist)
        ),
        None,
    )
    if cjk is not None:
        matplotlib.rcParams["font.family"] = [cjk, "DejaVu Sans"]
    return plt, cjk is not None


def _save(fig: Any, plt: Any, path: Path) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    data = buffer.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return base64.b64encode(data).decode("ascii")


def _error_bars(values: list[float], intervals: list[SummaryInterval | None]) -> list[list[float]]:
    """Matplotlib ``xerr`` (below, above) of each value from its core interval (0 without one)."""
    below, above = [], []
    for value, ci in zip(values, intervals):
        low, high = (ci.low, ci.high) if ci is not None else (None, None)
        finite = low is not None and high is not None and is_num(low) and is_num(high)
        below.append(max(0.0, value - low) if finite and low is not None else 0.0)
        above.append(max(0.0, high - value) if finite and high is not None else 0.0)
    return [below, above]


def write_category_chart(path: Path, summary: EvalSummary, title: str) -> str:
    """Success rate and mean reward per category with their 95 % intervals; write a PNG; return base64.

    Everything comes from the core summary's breakdown; each label carries the category's sampling
    units and ``small n`` where the core flags it.
    """
    plt, has_cjk = _pyplot()
    breakdown = sorted(categories_of(summary).items())
    clustered = summary.primary.sampling_design is not None
    labels = []
    for i, (name, row) in enumerate(breakdown, start=1):
        text = name if has_cjk or str(name).isascii() else f"#{i}"
        units = row.tasks if clustered else row.episodes
        if units is not None:
            text += f" (n={units}{' tasks' if clustered else ''}{', small n' if row.small_n else ''})"
        labels.append(text)
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.0, max(2.4, 0.3 * len(labels) + 1.2)), dpi=80, sharey=True)
    ys = list(range(len(labels)))
    success = [row.success_rate or 0.0 for _, row in breakdown]
    reward = [row.reward_mean or 0.0 for _, row in breakdown]
    bars = {"capsize": 2, "ecolor": "#333333", "error_kw": {"elinewidth": 0.8}}
    left.barh(ys, success, color="#4f6bed", xerr=_error_bars(success, [r.success_ci for _, r in breakdown]),
              **bars)
    left.set_yticks(ys, labels=labels, fontsize=7)
    left.set_xlim(0, 1)
    left.set_xlabel("success rate (95% interval)")
    right.barh(ys, reward, color="#2aa876", xerr=_error_bars(reward, [r.reward_ci for _, r in breakdown]),
               **bars)
    right.set_xlim(0, 1)
    right.set_xlabel("mean reward (95% interval)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, plt, path)


def _plotted(point: ProgressPoint, key: str) -> tuple[Any, Any, Any]:
    """``(value, low, high)`` of *key* (``reward`` or ``success``) of a progress point."""
    if key == "reward":
        return point.reward, point.reward_low, point.reward_high
    return point.success_rate, point.success_low, point.success_high


def write_progress_chart(path: Path, points: list[ProgressPoint], title: str) -> str:
    """Reward and success against training step with their 95 % intervals as error bars; PNG; base64."""
    plt, _ = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.0), dpi=80)
    for axis, key, color, label in (
        (axes[0], "reward", "#2aa876", "mean reward"),
        (axes[1], "success", "#4f6bed", "success rate"),
    ):
        usable = [(p.step, *_plotted(p, key)) for p in points if is_num(_plotted(p, key)[0])]
        xs = [step for step, _, _, _ in usable]
        ys = [y for _, y, _, _ in usable]
        lows = [y - low if is_num(low) else 0.0 for _, y, low, _ in usable]
        highs = [high - y if is_num(high) else 0.0 for _, y, _, high in usable]
        axis.errorbar(xs, ys, yerr=[lows, highs], fmt="-o", color=color, capsize=3, markersize=4)
        axis.set_xlabel("training step")
        axis.set_ylabel(label)
        axis.set_ylim(0, 1)
        axis.set_title(f"{label} (95% interval)", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, plt, path)
