"""How a run's numbers are shown in the Dagster UI: markdown tables and a chart.

Presentation only: the numbers themselves come from the core summary (``summary.json``) and the
core trace audit (``shopsimrl_core.audit_traces``). The chart is written next to the run
(``summary_chart.png``) and also embedded in the metadata as a base64 markdown image, so the UI
shows it without file access.
"""

from __future__ import annotations

import base64
import io
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from shopsimrl_core import EpisodeOutcome

__all__ = ["category_rows", "category_markdown", "mapping_markdown", "write_summary_chart"]


def category_rows(outcomes: Iterable[EpisodeOutcome]) -> list[dict[str, Any]]:
    """Per top-level category: episodes, completed, mean reward and success rate (completed only)."""
    groups: dict[str, list[EpisodeOutcome]] = defaultdict(list)
    for outcome in outcomes:
        groups[outcome.category].append(outcome)
    rows = []
    for position, category in enumerate(sorted(groups), start=1):
        items = groups[category]
        done = [o for o in items if o.completed]
        rewards = [o.reward for o in done if o.reward is not None]
        successes = [o.success for o in done if o.success is not None]
        rows.append(
            {
                "key": f"#{position}",
                "category": category,
                "episodes": len(items),
                "completed": len(done),
                "reward_mean": sum(rewards) / len(rewards) if rewards else None,
                "success_rate": sum(successes) / len(successes) if successes else None,
            }
        )
    return rows


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def category_markdown(rows: list[dict[str, Any]]) -> str:
    """The per-category rows as a markdown table."""
    lines = ["| # | category | episodes | completed | reward | success |", "|---|---|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(
            f"| {row['key']} | {row['category']} | {row['episodes']} | {row['completed']} | {_fmt(row['reward_mean'])} | {_fmt(row['success_rate'])} |"
        )
    return "\n".join(lines)


def mapping_markdown(values: Mapping[str, Any], key_header: str, value_header: str) -> str:
    """A two-column markdown table of *values* (keys sorted)."""
    lines = [f"| {key_header} | {value_header} |", "|---|---:|"]
    for key in sorted(values):
        lines.append(f"| {key} | {_fmt(values[key])} |")
    return "\n".join(lines)


def write_summary_chart(path: Path, rows: list[dict[str, Any]], rewards: list[float], title: str) -> str:
    """Draw per-category success and the reward distribution; write a PNG; return it as base64.

    Uses matplotlib's non-interactive backend (no display needed).
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib import font_manager

    # Category names are often Chinese; use a CJK font when the machine has one, else label the
    # bars with the row keys (#1, #2, …) of the per-category table.
    cjk_font = next(
        (name for name in ("Noto Sans CJK SC", "Noto Sans CJK JP", "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Droid Sans Fallback")
         if any(f.name == name for f in font_manager.fontManager.ttflist)),
        None,
    )
    if cjk_font is not None:
        matplotlib.rcParams["font.family"] = [cjk_font, "DejaVu Sans"]
        labels = [str(row["category"]) for row in rows]
    else:
        labels = [str(row["category"]) if str(row["category"]).isascii() else str(row["key"]) for row in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.0, 3.0), dpi=80)
    values = [row["success_rate"] or 0.0 for row in rows]
    left.barh(range(len(labels)), values, color="#4f6bed")
    left.set_yticks(range(len(labels)), labels=labels, fontsize=7)
    left.set_xlim(0, 1)
    left.set_xlabel("success rate")
    left.set_title("success by category", fontsize=9)
    right.hist(rewards, bins=[i / 10 for i in range(11)], color="#2aa876", edgecolor="white")
    right.set_xlabel("reward (r_strict)")
    right.set_ylabel("episodes")
    right.set_title("reward distribution", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    data = buffer.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return base64.b64encode(data).decode("ascii")
