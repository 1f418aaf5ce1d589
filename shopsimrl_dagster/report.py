"""How numbers are shown in the Dagster UI: tables, rounded text and PNG charts.

Presentation only: every number comes from the core documents (``summary.json``: ``primary`` with
its intervals and ``sampling_design``, ``breakdowns.category``; ``comparison_vs_<baseline>.json``:
``paired.metrics`` with their power fields); nothing here recomputes a statistic. Interval labels
are derived from the interval's own ``method`` and units, so a run with repeats says that its
intervals resample tasks (docs/statistics.md). Charts are written next to their data and also
returned as base64 so the metadata can embed them (the UI shows a markdown image without file access).
The PNG charts (and their viewer links, drawn in place on the asset page) are in ``charts.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import dagster as dg

from shopsimrl_core.documents._comparisons import CheckpointComparison, ComparisonMetric
from shopsimrl_core.documents._pipeline import MetricChange, PointComparison, ProgressPoint
from shopsimrl_core.documents._runs import CategoryRow, EvalSummary, SamplingDesign, SummaryInterval

__all__ = [
    "rounded",
    "metadata_float",
    "interval_note",
    "design_text",
    "comparison_verdict",
    "delta_text",
    "comparison_point",
    "point_change",
    "mapping_table",
    "category_table",
    "progress_points",
    "progress_table",
    "progress_verdict",
]


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def metadata_float(value: Any) -> Any:
    """*value* as a float metadata entry, or a null entry when it is not a number (None, a bool, text).

    Dagster plots float entries across partitions; None is not a float, so a missing number is shown as null.
    """
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else dg.MetadataValue.null()


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


_CLUSTER_METHODS = {
    "wilson_design_effect": "task-cluster Wilson",
    "task_cluster_percentile_bootstrap": "task-cluster bootstrap",
    "task_cluster_normal_approximation": "task-cluster normal approximation",
}
"""Interval methods that resample tasks (runs with repeats) → their short name in labels."""


def _repeats(design: SamplingDesign | None) -> str | None:
    low, high = (design.repeats_min, design.repeats_max) if design is not None else (None, None)
    if low is None or high is None:
        return None
    return str(low) if low == high else f"{low}–{high}"


def interval_note(
    ci: SummaryInterval | None, design: SamplingDesign | None = None, metric: str = "reward"
) -> str | None:
    """What an interval is, read from its own ``method`` and units.

    ``Wilson 95%, n=60`` or ``task-cluster Wilson 95%, n=32 tasks × 4, design effect 2.26``.
    *ci* is a core interval (``primary.success_ci``, a category's ``reward_ci`` …), *design*
    the summary's ``primary.sampling_design`` (repeats and the estimated design effect of *metric*,
    ``reward`` or ``success``). Episode-level intervals keep the labels published before issue 23
    (``Wilson 95%, n=60``, ``percentile_bootstrap 95%``). Task-resampled ones name the tasks, the
    repeats and the design effect: the one the interval used when it records one (Wilson at the
    effective sample size), else the summary's estimate. None without an interval.
    """
    if ci is None:
        return None
    method = ci.method
    level = f"{int(100 * (ci.confidence_level if ci.confidence_level is not None else 0.95))}%"
    if method == "wilson":
        return f"Wilson {level}, n={ci.n}"
    if method not in _CLUSTER_METHODS:
        return f"{method or 'interval'} {level}"
    tasks = ci.tasks if ci.tasks is not None else (design.tasks if design is not None else None)
    repeats = _repeats(design)
    units = f"{tasks} tasks" + (f" × {repeats}" if repeats else "")
    if repeats is None and ci.n is not None:
        units += f", {ci.n} episodes"
    deff = ci.design_effect if ci.design_effect is not None else (
        design.design_effect.get(metric) if design is not None else None)
    effect = f", design effect {deff:.2f}" if _is_num(deff) else ""
    return f"{_CLUSTER_METHODS[method]} {level}, n={units}{effect}"


def design_text(summary: EvalSummary) -> str:
    """The sampling design of a summary in a few words (``primary.sampling_design``).

    ``60 episodes, 1 per task`` or ``32 tasks × 4, design effect success 2.26, reward 2.20``.
    """
    design = summary.primary.sampling_design
    if design is None:
        return f"{summary.counts.completed} episodes, 1 per task"
    effects = design.design_effect
    parts = [f"{name} {effects[name]:.2f}" for name in ("success", "reward") if _is_num(effects.get(name))]
    text = f"{design.tasks} tasks × {_repeats(design) or '?'}"
    return text + (f", design effect {', '.join(parts)}" if parts else "")


def comparison_verdict(values: ComparisonMetric, digits: int = 3) -> str:
    """One line on one compared metric (a ``paired.metrics`` entry of the core comparison).

    ``within noise: |Δ| 0.018 < MDE 0.063 (interval [-0.021, +0.057] covers 0)`` or
    ``detected: Δ +0.183, interval [+0.101, +0.268] excludes 0 (MDE 0.093)``. The verdict is the
    core's ``within_noise`` (the interval covers 0); the minimum detectable difference says how
    large a difference this design would find with 80 % power.
    """
    delta, ci = values.mean_difference, values.confidence_interval
    mde, noise = values.minimum_detectable_difference, values.within_noise
    mde_text = f"MDE {mde:.{digits}f}" if _is_num(mde) else "MDE n/a"
    if not _is_num(delta) or not ci or noise is None:
        return f"no interval (fewer than 2 paired tasks); {mde_text}"
    size = abs(delta)
    interval = f"[{ci[0]:+.{digits}f}, {ci[1]:+.{digits}f}]"
    if noise:
        against = f" {'<' if size < mde else '≥'} {mde_text}" if mde is not None and _is_num(mde) else f", {mde_text}"
        return f"within noise: |Δ| {size:.{digits}f}{against} (interval {interval} covers 0)"
    return f"detected: Δ {delta:+.{digits}f}, interval {interval} excludes 0 ({mde_text})"


def delta_text(delta: Any, low: Any, high: Any, mde: Any, within_noise: Any, digits: int = 3) -> str:
    """``+0.183 [+0.101, +0.268] (MDE 0.093, detected)`` for a printed headline; ``n/a`` without a delta."""
    if not _is_num(delta):
        return "n/a"
    text = f"{delta:+.{digits}f}"
    if _is_num(low) and _is_num(high):
        text += f" [{low:+.{digits}f}, {high:+.{digits}f}]"
    verdict = "within noise" if within_noise is True else "detected" if within_noise is False else "no interval"
    mde_text = f"MDE {mde:.{digits}f}" if _is_num(mde) else "MDE n/a"
    return f"{text} ({mde_text}, {verdict})"


def _change(values: ComparisonMetric) -> MetricChange:
    low, high = values.confidence_interval or (None, None)
    return MetricChange(
        delta=values.mean_difference,
        low=low,
        high=high,
        minimum_detectable_difference=values.minimum_detectable_difference,
        sd_difference=values.sd_difference,
        within_noise=values.within_noise,
        verdict=comparison_verdict(values),
    )


def comparison_point(baseline: str, comparison: CheckpointComparison) -> PointComparison:
    """What a progress point shows of its comparison with the checkpoint before it.

    From the core comparison's ``paired.metrics``, for ``reward`` and ``r_success``: the difference,
    its interval, the minimum detectable difference, ``sd_difference``, ``within_noise`` and a verdict.
    """
    metrics = comparison.paired.metrics
    point = PointComparison(baseline=baseline, pairs=comparison.paired.pairs)
    if "reward" in metrics:
        point.reward = _change(metrics["reward"])
    if "r_success" in metrics:
        point.r_success = _change(metrics["r_success"])
    return point


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


def _interval(ci: SummaryInterval | None, digits: int = 3) -> str:
    if ci is None or not _is_num(ci.low) or not _is_num(ci.high):
        return "–"
    return f"[{ci.low:.{digits}f}, {ci.high:.{digits}f}]"


def _categories(summary: EvalSummary) -> dict[str, CategoryRow]:
    return summary.breakdowns.category if summary.breakdowns is not None else {}


def category_table(summary: EvalSummary) -> tuple[list[dg.TableRecord], dg.TableSchema]:
    """The core summary's per-category breakdown (``breakdowns.category``) as table rows.

    Each row shows the category's sampling units (``tasks``, ``episodes``), its mean reward and
    success rate with their 95 % intervals (the core's, task-resampled when the run has repeats),
    the interval method and the core's ``small_n`` flag (fewer than 10 sampling units: read the
    interval as a rough range).
    """
    rows = []
    for name, row in sorted(_categories(summary).items()):
        success_ci, reward_ci = row.success_ci, row.reward_ci
        rows.append(
            dg.TableRecord(
                {
                    "category": str(name),
                    "tasks": row.tasks,
                    "episodes": row.episodes,
                    "reward": _round(row.reward_mean),
                    "reward_95": _interval(reward_ci),
                    "success": _round(row.success_rate),
                    "success_95": _interval(success_ci),
                    "small_n": bool(row.small_n),
                    "intervals": "; ".join(
                        note
                        for note in (
                            interval_note(success_ci, None, "success"),
                            interval_note(reward_ci, None, "reward"),
                        )
                        if note
                    )
                    or "–",
                }
            )
        )
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("category", "string"),
            dg.TableColumn("tasks", "int", description="distinct tasks (the sampling unit with repeats)"),
            dg.TableColumn("episodes", "int"),
            dg.TableColumn("reward", "float", description="mean reward"),
            dg.TableColumn("reward_95", "string", description="95% interval of the mean reward"),
            dg.TableColumn("success", "float", description="success rate"),
            dg.TableColumn("success_95", "string", description="95% interval of the success rate"),
            dg.TableColumn(
                "small_n", "bool", description="fewer than 10 sampling units: read the interval as a rough range"
            ),
            dg.TableColumn("intervals", "string", description="interval methods (success; reward)"),
        ]
    )
    return rows, schema


def progress_points(runs: Iterable[tuple[str, int, EvalSummary | None]]) -> list[ProgressPoint]:
    """One point per (checkpoint_id, training step, core summary or None), sorted by training step.

    Each point holds the summary's reward mean and success rate with their 95 % intervals
    (``primary.reward_ci`` / ``primary.success_ci``), what those intervals are (``reward_interval``,
    ``success_interval``: method, units, design effect) and the sampling design (``design``,
    ``tasks``); checkpoints without a summary are left out. ``vs_previous`` starts as None
    (:func:`comparison_point` fills it where a comparison with the previous point exists).
    """
    points = []
    for checkpoint_id, step, summary in runs:
        if summary is None:
            continue
        primary = summary.primary
        reward_ci, success_ci, design = primary.reward_ci, primary.success_ci, primary.sampling_design
        points.append(
            ProgressPoint(
                checkpoint_id=checkpoint_id,
                step=int(step),
                episodes=summary.counts.completed,
                reward=primary.reward_mean,
                reward_low=None if reward_ci is None else reward_ci.low,
                reward_high=None if reward_ci is None else reward_ci.high,
                success_rate=primary.success_rate,
                success_low=None if success_ci is None else success_ci.low,
                success_high=None if success_ci is None else success_ci.high,
                tasks=None if design is None else design.tasks,
                design=design_text(summary),
                reward_interval=interval_note(reward_ci, design, "reward"),
                success_interval=interval_note(success_ci, design, "success"),
                vs_previous=None,
            )
        )
    return sorted(points, key=lambda p: (p.step, p.checkpoint_id))


def point_change(point: PointComparison | None, metric: str) -> MetricChange | None:
    """The ``reward`` or ``r_success`` change of a progress point's comparison (None without one)."""
    if point is None:
        return None
    return point.reward if metric == "reward" else point.r_success


def _mde(point: ProgressPoint, metric: str) -> Any:
    change = point_change(point.vs_previous, metric)
    return None if change is None else _round(change.minimum_detectable_difference)


def _vs_previous(point: ProgressPoint) -> str:
    previous = point.vs_previous
    if previous is None:
        return "–"
    parts = [
        f"{label} {change.verdict}"
        for metric, label in (("reward", "reward"), ("r_success", "success"))
        if (change := point_change(previous, metric)) is not None
    ]
    return f"vs {previous.baseline}: " + "; ".join(parts)


def progress_verdict(point: ProgressPoint) -> str:
    """The latest point in one line: its numbers with intervals and its change from the point before it.

    ``demo-step-000300 (step 300): reward 0.753 [0.642, 0.850], success 0.717 [0.592, 0.815]; vs
    demo-step-000200: Δ reward +0.142 [+0.058, +0.233] (MDE 0.125, detected), Δ success …``.
    """
    reward = rounded(point.reward, point.reward_low, point.reward_high)
    success = rounded(point.success_rate, point.success_low, point.success_high)
    text = f"{point.checkpoint_id} (step {point.step}): reward {reward}, success {success}"
    previous = point.vs_previous
    if previous is None:
        return text + "; no comparison with the point before it"
    changes = [
        f"Δ {label} " + delta_text(change.delta, change.low, change.high, change.minimum_detectable_difference,
                                   change.within_noise)
        for metric, label in (("reward", "reward"), ("r_success", "success"))
        if (change := point_change(previous, metric)) is not None
    ]
    return f"{text}; vs {previous.baseline}: " + ", ".join(changes)


def progress_table(points: list[ProgressPoint]) -> tuple[list[dg.TableRecord], dg.TableSchema]:
    """The progress points as table rows, rounded for reading (raw values are in progress.json).

    Beside each point's intervals: its sampling design, and where the comparison with the previous
    point exists, the minimum detectable difference of that comparison (``mde_reward``,
    ``mde_success``) and its verdict per metric.
    """
    rows = [
        dg.TableRecord(
            {
                "step": p.step,
                "checkpoint": p.checkpoint_id,
                "episodes": p.episodes,
                "design": p.design or "–",
                "reward": rounded(p.reward, p.reward_low, p.reward_high),
                "success": rounded(p.success_rate, p.success_low, p.success_high),
                "intervals": "; ".join(
                    f"{label}: {note}" for note, label in ((p.success_interval, "success"),
                                                           (p.reward_interval, "reward")) if note
                )
                or "–",
                "mde_reward": _mde(p, "reward"),
                "mde_success": _mde(p, "r_success"),
                "vs_previous": _vs_previous(p),
            }
        )
        for p in points
    ]
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("step", "int"),
            dg.TableColumn("checkpoint", "string"),
            dg.TableColumn("episodes", "int"),
            dg.TableColumn("design", "string", description="sampling design: tasks × repeats, design effects"),
            dg.TableColumn("reward", "string", description="mean [95% interval]"),
            dg.TableColumn("success", "string", description="rate [95% interval]"),
            dg.TableColumn("intervals", "string", description="how each interval was made (follows the design)"),
            dg.TableColumn(
                "mde_reward", "float", description="minimum detectable difference of the comparison with the previous "
                "point (80% power, alpha 0.05)"
            ),
            dg.TableColumn("mde_success", "float", description="the same for the success rate (r_success)"),
            dg.TableColumn("vs_previous", "string", description="the comparison with the previous point"),
        ]
    )
    return rows, schema
