"""Choosing among checkpoints: the best so far, whether it stands out from the runner-up, and regressions.

Both questions are answered with the paired comparison of :func:`compare_runs` (task-level paired
bootstrap, docs/statistics.md), never with the two runs' separate intervals: two checkpoints evaluated
on the same tasks differ far less than their separate intervals suggest.

- **Best checkpoint**: the highest mean reward among the runs that have a summary (ties: the later
  training step); it is *distinguishable* from the runner-up when the paired interval of best minus
  runner-up lies above zero.
- **Regression**: a new checkpoint regressed when it is worse than the best earlier checkpoint by more
  than its paired interval, i.e. the whole interval of (new − best) lies below zero.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl_core.analysis._comparison import compare_runs
from shopsimrl_core.documents._base import DocumentError
from shopsimrl_core.documents._runs import EvalSummary

__all__ = ["CheckpointRun", "best_checkpoint", "regression_against_best"]

_METRIC = "reward"


@dataclass(frozen=True)
class CheckpointRun:
    """One checkpoint's run directory of a suite."""

    checkpoint_id: str
    step: int
    run_dir: Path

    def summary(self) -> EvalSummary | None:
        """The run's ``summary.json``, or None when the run has none (not evaluated yet) or it is unreadable.

        A file that does not follow the summary format counts as unreadable.
        """
        path = self.run_dir / "summary.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return EvalSummary.parse(data, str(path))
        except (OSError, ValueError, DocumentError):
            return None


def _headline(run: CheckpointRun, summary: EvalSummary) -> dict[str, Any]:
    primary = summary.primary
    return {
        "checkpoint_id": run.checkpoint_id,
        "step": run.step,
        "reward_mean": primary.reward_mean,
        "reward_ci": None if primary.reward_ci is None else primary.reward_ci.to_json(),
        "success_rate": primary.success_rate,
        "success_ci": None if primary.success_ci is None else primary.success_ci.to_json(),
    }


def _ranked(runs: Sequence[CheckpointRun]) -> list[tuple[CheckpointRun, EvalSummary]]:
    scored = []
    for run in runs:
        summary = run.summary()
        if summary is not None and summary.primary.reward_mean is not None:
            scored.append((run, summary))
    return sorted(scored, key=lambda pair: (pair[1].primary.reward_mean or 0.0, pair[0].step), reverse=True)


def _paired(values: dict[str, Any]) -> dict[str, Any]:
    ci = values.get("confidence_interval")
    return {
        "mean_difference": values.get("mean_difference"),
        "confidence_interval": list(ci) if ci else None,
        "minimum_detectable_difference": values.get("minimum_detectable_difference"),
        "within_noise": values.get("within_noise"),
    }


def best_checkpoint(runs: Sequence[CheckpointRun], **compare_options: Any) -> dict[str, Any] | None:
    """The best of *runs* by mean reward, the runner-up, and whether the paired comparison tells them apart.

    Returns None when no run has a summary. Otherwise ``{"metric", "best", "runner_up", "difference",
    "distinguishable", "ranking"}``: ``difference`` is the paired comparison of best minus runner-up
    (``mean_difference``, ``confidence_interval``, ``minimum_detectable_difference``, ``within_noise``),
    ``distinguishable`` is true when its interval lies above zero, and null (like ``runner_up`` and
    ``difference``) with a single run. *compare_options* go to :func:`compare_runs`.

    Raises:
        ConfigError: the two runs cannot be paired (different splits or jobs).
    """
    ranked = _ranked(runs)
    if not ranked:
        return None
    (best, best_summary), rest = ranked[0], ranked[1:]
    result: dict[str, Any] = {
        "metric": _METRIC,
        "best": _headline(best, best_summary),
        "runner_up": None,
        "difference": None,
        "distinguishable": None,
        "ranking": [_headline(run, summary) for run, summary in ranked],
    }
    if rest:
        runner_up, runner_summary = rest[0]
        comparison = compare_runs(runner_up.run_dir, best.run_dir, **compare_options)
        difference = _paired(comparison["paired"]["metrics"][_METRIC])
        ci = difference["confidence_interval"]
        result.update(
            runner_up=_headline(runner_up, runner_summary),
            difference=difference,
            distinguishable=bool(ci and ci[0] > 0),
        )
    return result


def regression_against_best(
    earlier: Sequence[CheckpointRun],
    current: CheckpointRun,
    *,
    comparison_with: tuple[str, dict[str, Any]] | None = None,
    **compare_options: Any,
) -> dict[str, Any] | None:
    """Whether *current* is worse than the best of *earlier* by more than its paired interval.

    Returns None when no earlier run has a summary. Otherwise ``{"best", "delta", "confidence_interval",
    "minimum_detectable_difference", "regressed"}`` with the paired comparison of current minus best;
    ``regressed`` is true when the whole interval lies below zero. *comparison_with* is an already
    computed ``(checkpoint_id, compare_runs document of that checkpoint against current)``, reused when
    that checkpoint is the best (the comparison with the previous checkpoint usually is).
    """
    ranked = _ranked(earlier)
    if not ranked:
        return None
    best, best_summary = ranked[0]
    if comparison_with is not None and comparison_with[0] == best.checkpoint_id:
        comparison = comparison_with[1]
    else:
        comparison = compare_runs(best.run_dir, current.run_dir, **compare_options)
    paired = _paired(comparison["paired"]["metrics"][_METRIC])
    ci = paired["confidence_interval"]
    return {
        "metric": _METRIC,
        "best": _headline(best, best_summary),
        "delta": paired["mean_difference"],
        "confidence_interval": ci,
        "minimum_detectable_difference": paired["minimum_detectable_difference"],
        "regressed": bool(ci and ci[1] < 0),
    }
