"""The ``shopsimrl power`` report: how many tasks × repeats detect a difference, from a past run or comparison.

Two sources, two bases (docs/statistics.md#power-and-sample-size):

- a comparison document (``compare`` output): the observed paired variance of the task-level
  differences (``sd_difference``) and, with repeats, its ``variance_components`` — ``paired_differences``;
- a run directory: the variance components of the metric over its tasks, doubled for the difference
  of two checkpoints whose task effects are assumed uncorrelated — ``one_run_independent_checkpoints``,
  an upper bound for checkpoints that find the same tasks hard (the usual case).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ConfigError
from shopsimrl_core.analysis._power import (
    VarianceComponents,
    detection_z,
    minimum_detectable_difference,
    required_tasks,
    variance_components,
)

__all__ = ["power_report"]

_RUN_COLUMNS = {"reward": "reward", "r_success": "r_success"}


def _from_comparison(path: Path, metric: str) -> tuple[VarianceComponents, float]:
    """Variance components of the paired differences and the observed task-level variance."""
    from shopsimrl_core.documents._comparisons import CheckpointComparison

    document = CheckpointComparison.parse(json.loads(path.read_text(encoding="utf-8")), str(path))
    metrics = document.paired.metrics
    if metric not in metrics:
        raise ConfigError(
            f"{path}: no metric {metric!r} in the comparison; valid metrics: {', '.join(sorted(metrics))}",
            code="power-unknown-metric",
        )
    entry = metrics[metric]
    if entry.sd_difference is None:
        raise ConfigError(
            f"{path}: metric {metric!r} has no sd_difference (a comparison written before issue 23, or one "
            "pair); rerun `shopsimrl compare` on the two runs, or pass the run directory",
            code="power-no-variance",
        )
    observed = float(entry.sd_difference) ** 2
    vc = entry.variance_components
    if vc is not None and vc.within_task is not None:
        components = VarianceComponents(
            between=float(vc.between_task or 0.0),
            within=float(vc.within_task),
            tasks=entry.pairs,
            repeats=float(vc.repeats or 1.0),
        )
    else:
        components = VarianceComponents(between=observed, within=None, tasks=entry.pairs, repeats=1.0)
    return components, observed


def _from_run(run_dir: Path, metric: str) -> tuple[VarianceComponents, float]:
    """Variance components of the metric over the run's complete episodes, grouped by task."""
    import polars as pl

    from shopsimrl_core.runs.storage._store import RunStore

    episodes = RunStore(run_dir).index().run_index.episodes
    column = _RUN_COLUMNS.get(metric, f"c::{metric}")
    valid = sorted(["reward", *(c[3:] for c in episodes.columns if c.startswith("c::"))])
    if column not in episodes.columns:
        raise ConfigError(
            f"{run_dir}: no metric {metric!r} in the run; valid metrics: {', '.join(valid)}",
            code="power-unknown-metric",
        )
    rows = episodes.filter(pl.col("complete") & pl.col(column).is_not_null() & pl.col("task_id").is_not_null())
    components = variance_components(rows.get_column(column).to_list(), rows.get_column("task_id").to_list())
    if components is None:
        raise ConfigError(
            f"{run_dir}: metric {metric!r} has values for fewer than 2 tasks; no variance to plan from",
            code="power-no-variance",
        )
    means = rows.group_by("task_id").agg(pl.col(column).mean()).get_column(column)
    observed = float(means.var() or 0.0) if means.len() >= 2 else components.task_variance(components.repeats)
    # The difference of two checkpoints with uncorrelated task effects: twice each variance.
    doubled = VarianceComponents(
        between=2 * components.between,
        within=None if components.within is None else 2 * components.within,
        tasks=components.tasks,
        repeats=components.repeats,
    )
    return doubled, 2 * observed


def power_report(
    source: str | Path,
    *,
    metric: str = "reward",
    detect: float | None = None,
    tasks: int | None = None,
    repeats: Sequence[int] = (),
    alpha: float = 0.05,
    power: float = 0.8,
) -> dict[str, Any]:
    """Minimum detectable differences and required designs for *metric*, from a comparison file or run dir.

    ``observed`` is the design the source ran (its MDE from the observed task-level variance);
    ``design`` (with *tasks*) the MDE of *tasks* tasks at each of *repeats* (default: the observed
    repeats); ``detect`` (with *detect*) the tasks needed at each of *repeats* (default 1, 2, 4, 8).
    Repeats are planned from the variance components; a source with one episode per task cannot
    separate them, and the report then assumes repeats do not help (an upper bound) and says so.

    Raises:
        ConfigError: ``power-unknown-metric`` (the metric is not in the source; the message lists the
            valid ones), ``power-no-variance`` (the source has no variance to plan from).
        ShopSimRLError: ``run-dir-missing`` (the path is neither a file nor a run directory).
        ValueError: *detect* ≤ 0, or alpha / power outside (0, 1).
    """
    from shopsimrl_core._errors import ShopSimRLError

    path = Path(source)
    if path.is_file():
        kind, basis = "comparison", "paired_differences"
        components, observed = _from_comparison(path, metric)
    elif path.is_dir() and ((path / "manifest.json").exists() or (path / "traces.jsonl").exists()):
        kind, basis = "run", "one_run_independent_checkpoints"
        components, observed = _from_run(path, metric)
    else:
        raise ShopSimRLError(
            f"{path}: neither a comparison file nor a run directory; pass comparison.json from "
            "`shopsimrl compare --output`, or the folder holding traces.jsonl",
            code="run-dir-missing",
        )
    z = detection_z(alpha, power)
    k, r_obs = components.tasks, components.repeats
    report: dict[str, Any] = {
        "source": str(path),
        "kind": kind,
        "metric": metric,
        "basis": basis,
        "alpha": alpha,
        "power": power,
        "z": z,
        "variance": {
            "between_task": components.between,
            "within_task": components.within,
            "observed_task_level": observed,
        },
        "observed": {
            "tasks": k,
            "repeats": r_obs,
            "minimum_detectable_difference": minimum_detectable_difference(observed, k, alpha=alpha, power=power),
        },
    }
    if tasks is not None:
        report["design"] = [
            {
                "tasks": tasks,
                "repeats": r,
                "episodes": tasks * r,
                "minimum_detectable_difference": minimum_detectable_difference(
                    components.task_variance(r), tasks, alpha=alpha, power=power
                ),
            }
            for r in (list(repeats) or [max(1, round(r_obs))])
        ]
    if detect is not None:
        designs = []
        for r in list(repeats) or [1, 2, 4, 8]:
            needed = required_tasks(detect, components.task_variance(r), alpha=alpha, power=power)
            designs.append(
                {"repeats": r, "tasks": needed, "episodes": needed * r, "exceeds_observed_tasks": needed > k}
            )
        report["detect"] = {"difference": detect, "designs": designs}
    notes = []
    if components.within is None:
        notes.append("one episode per task in the source: within-task variance cannot be separated, so more "
                     "repeats are assumed not to help (tasks needed are an upper bound for repeats > 1)")
    if kind == "run":
        notes.append("from one run: the two checkpoints' task effects are assumed uncorrelated (variance doubled), "
                     "an upper bound when they find the same tasks hard; a comparison gives the paired variance")
    report["notes"] = notes
    return report
