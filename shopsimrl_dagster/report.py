"""How numbers are shown in the Dagster UI: tables, rounded text and PNG charts.

Presentation only: every number comes from the core summary (``summary.json``: ``primary`` with
its intervals, ``breakdowns.category``); nothing here recomputes a statistic. Charts are written
next to their data and also returned as base64 so the metadata can embed them (the UI shows a
markdown image without file access).
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import dagster as dg

__all__ = [
    "rounded",
    "mapping_table",
    "category_table",
    "progress_points",
    "progress_table",
    "write_category_chart",
    "write_progress_chart",
]


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def rounded(value: Any, low: Any = None, high: Any = None, note: str | None = None, digits: int = 3) -> str:
    """``0.383 [0.310, 0.460] (note)`` for reading; ``n/a`` when *value* is not a number."""
    if not _is_num(value):
        return "n/a"
    text = f"{value:.{digits}f}"
    if _is_num(low) and _is_num(high):
        text += f" [{low:.{digits}f}, {high:.{digits}f}]"
    return f"{text} ({note})" if note else text


def _round(value: Any, digits: int = 4) -> Any:
    return round(float(value), digits) if _is_num(value) else None


def mapping_table(
    values: Mapping[str, Any], key_header: str, value_header: str
) -> tuple[list[dg.TableRecord], dg.TableSchema]:
    """A two-column table of *values* (keys sorted) for ``MetadataValue.table``."""
    numeric_int = all(isinstance(v, int) and not isinstance(v, bool) for v in values.values())
    rows = [
        dg.TableRecord({key_header: str(k), value_header: values[k] if numeric_int else _round(values[k])})
        for k in sorted(values)
    ]
    schema = dg.TableSchema(
        columns=[dg.TableColumn(key_header, "string"), dg.TableColumn(value_header, "int" if numeric_int else "float")]
    )
    return rows, schema


def category_table(summary: Mapping[str, Any]) -> tuple[list[dg.TableRecord], dg.TableSchema]:
    """The core summary's per-category breakdown (``breakdowns.category``) as table rows."""
    breakdown = (summary.get("breakdowns") or {}).get("category") or {}
    rows = [
        dg.TableRecord(
            {
                "category": str(name),
                "episodes": int(row.get("episodes") or 0),
                "reward": _round(row.get("reward_mean")),
                "success": _round(row.get("success_rate")),
            }
        )
        for name, row in sorted(breakdown.items())
    ]
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("category", "string"),
            dg.TableColumn("episodes", "int"),
            dg.TableColumn("reward", "float"),
            dg.TableColumn("success", "float"),
        ]
    )
    return rows, schema


def progress_points(runs: Iterable[tuple[str, int, Mapping[str, Any] | None]]) -> list[dict[str, Any]]:
    """One point per (checkpoint_id, training step, core summary or None), sorted by training step.

    Each point holds the summary's reward mean and success rate with their 95 % intervals
    (``primary.reward_ci`` / ``primary.success_ci``); checkpoints without a summary are left out.
    """
    points = []
    for checkpoint_id, step, summary in runs:
        if not summary or "primary" not in summary:
            continue
        primary = summary["primary"]
        reward_ci = primary.get("reward_ci") or {}
        success_ci = primary.get("success_ci") or {}
        points.append(
            {
                "checkpoint_id": checkpoint_id,
                "step": int(step),
                "episodes": int((summary.get("counts") or {}).get("completed") or 0),
                "reward": primary.get("reward_mean"),
                "reward_low": reward_ci.get("low"),
                "reward_high": reward_ci.get("high"),
                "success_rate": primary.get("success_rate"),
                "success_low": success_ci.get("low"),
                "success_high": success_ci.get("high"),
            }
        )
    return sorted(points, key=lambda p: (p["step"], p["checkpoint_id"]))


def progress_table(points: list[dict[str, Any]]) -> tuple[list[dg.TableRecord], dg.TableSchema]:
    """The progress points as table rows, rounded for reading (raw values are in progress.json)."""
    rows = [
        dg.TableRecord(
            {
                "step": p["step"],
                "checkpoint": p["checkpoint_id"],
                "episodes": p["episodes"],
                "reward": rounded(p["reward"], p["reward_low"], p["reward_high"]),
                "success": rounded(p["success_rate"], p["success_low"], p["success_high"]),
            }
        )
        for p in points
    ]
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("step", "int"),
            dg.TableColumn("checkpoint", "string"),
            dg.TableColumn("episodes", "int"),
            dg.TableColumn("reward", "string", description="mean [95% interval]"),
            dg.TableColumn("success", "string", description="rate [Wilson 95% interval]"),
        ]
    )
    return rows, schema


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


def write_category_chart(path: Path, summary: Mapping[str, Any], title: str) -> str:
    """Success rate and mean reward per category (the core summary's breakdown); write a PNG; return base64."""
    plt, has_cjk = _pyplot()
    breakdown = sorted(((summary.get("breakdowns") or {}).get("category") or {}).items())
    labels = [name if has_cjk or str(name).isascii() else f"#{i}" for i, (name, _) in enumerate(breakdown, start=1)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.0, max(2.4, 0.3 * len(labels) + 1.2)), dpi=80, sharey=True)
    ys = list(range(len(labels)))
    left.barh(ys, [row.get("success_rate") or 0.0 for _, row in breakdown], color="#4f6bed")
    left.set_yticks(ys, labels=labels, fontsize=7)
    left.set_xlim(0, 1)
    left.set_xlabel("success rate")
    right.barh(ys, [row.get("reward_mean") or 0.0 for _, row in breakdown], color="#2aa876")
    right.set_xlim(0, 1)
    right.set_xlabel("mean reward")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, plt, path)


def write_progress_chart(path: Path, points: list[dict[str, Any]], title: str) -> str:
    """Reward and success against training step with their 95 % intervals as error bars; PNG; base64."""
    plt, _ = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.0), dpi=80)
    for axis, key, color, label in (
        (axes[0], "reward", "#2aa876", "mean reward"),
        (axes[1], "success", "#4f6bed", "success rate"),
    ):
        value_key = "reward" if key == "reward" else "success_rate"
        usable = [p for p in points if _is_num(p[value_key])]
        xs = [p["step"] for p in usable]
        ys = [p[value_key] for p in usable]
        lows = [y - p[f"{key}_low"] if _is_num(p[f"{key}_low"]) else 0.0 for p, y in zip(usable, ys)]
        highs = [p[f"{key}_high"] - y if _is_num(p[f"{key}_high"]) else 0.0 for p, y in zip(usable, ys)]
        axis.errorbar(xs, ys, yerr=[lows, highs], fmt="-o", color=color, capsize=3, markersize=4)
        axis.set_xlabel("training step")
        axis.set_ylabel(label)
        axis.set_ylim(0, 1)
        axis.set_title(f"{label} (95% interval)", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, plt, path)
