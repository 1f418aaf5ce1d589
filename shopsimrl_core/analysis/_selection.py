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
from shopsimrl_core.documents._comparisons import CheckpointComparison
from shopsimrl_core.documents._pipeline import BestCheckpoint, CheckpointHeadline, PairedDifference
from shopsimrl_core.documents._runs import EvalSummary

__all__ = ["CheckpointRun", "Regression", "best_checkpoint", "regression_against_best"]

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


def _headline(run: CheckpointRun, summary: EvalSummary) -> CheckpointHeadline:
    primary = summary.primary
    return CheckpointHeadline(
        checkpoint_id=run.checkpoint_id,
        step=run.step,
        reward_mean=primary.reward_mean,
        reward_ci=primary.reward_ci,
        success_rate=primary.success_rate,
        success_ci=primary.success_ci,
    )


def _ranked(runs: Sequence[CheckpointRun]) -> list[tuple[CheckpointRun, EvalSummary]]:
    scored = []
    for run in runs:
        summary = run.summary()
        if summary is not None and summary.primary.reward_mean is not None:
            scored.append((run, summary))
    return sorted(scored, key=lambda pair: (pair[1].primary.reward_mean or 0.0, pair[0].step), reverse=True)


def _paired(comparison: CheckpointComparison) -> PairedDifference:
    values = comparison.paired.metrics[_METRIC]
    return PairedDifference(
        mean_difference=values.mean_difference,
        confidence_interval=list(values.confidence_interval) if values.confidence_interval else None,
        minimum_detectable_difference=values.minimum_detectable_difference,
        within_noise=values.within_noise,
    )


def best_checkpoint(runs: Sequence[CheckpointRun], **compare_options: Any) -> BestCheckpoint | None:
    """The best of *runs* by mean reward, the runner-up, and whether the paired comparison tells them apart.

    Returns None when no run has a summary. Otherwise the ``best_checkpoint.json`` document
    (``metric``, ``best``, ``runner_up``, ``difference``, ``distinguishable``, ``ranking``; written as
    its ``to_json()``): ``difference`` is the paired comparison of best minus runner-up
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
    runner_up = difference = distinguishable = None
    if rest:
        runner, runner_summary = rest[0]
        difference = _paired(compare_runs(runner.run_dir, best.run_dir, **compare_options))
        ci = difference.confidence_interval
        runner_up, distinguishable = _headline(runner, runner_summary), bool(ci and ci[0] > 0)
    return BestCheckpoint.model_validate(
        {
            "schema_version": BestCheckpoint.SCHEMA,
            "metric": _METRIC,
            "best": _headline(best, best_summary),
            "runner_up": runner_up,
            "difference": difference,
            "distinguishable": distinguishable,
            "ranking": [_headline(run, summary) for run, summary in ranked],
        }
    )


@dataclass(frozen=True)
class Regression:
    """Whether a checkpoint is worse than the best earlier one by more than its paired interval."""

    metric: str
    """The compared metric (``reward``)."""
    best: CheckpointHeadline
    """The best earlier checkpoint's headline."""
    delta: float | int
    """Mean task-level difference, current minus best."""
    confidence_interval: list[float | int] | None
    """Paired bootstrap interval of ``delta`` (None with fewer than two paired tasks)."""
    minimum_detectable_difference: float | int | None
    regressed: bool
    """The whole interval lies below zero."""


def regression_against_best(
    earlier: Sequence[CheckpointRun],
    current: CheckpointRun,
    *,
    comparison_with: tuple[str, CheckpointComparison] | None = None,
    **compare_options: Any,
) -> Regression | None:
    """Whether *current* is worse than the best of *earlier* by more than its paired interval.

    Returns None when no earlier run has a summary. Otherwise the :class:`Regression` of the paired
    comparison of current minus best; ``regressed`` is true when the whole interval lies below zero.
    *comparison_with* is an already computed ``(checkpoint_id, compare_runs document of that
    checkpoint against current)``, reused when that checkpoint is the best (the comparison with the
    previous checkpoint usually is).
    """
    ranked = _ranked(earlier)
    if not ranked:
        return None
    best, best_summary = ranked[0]
    if comparison_with is not None and comparison_with[0] == best.checkpoint_id:
        comparison = comparison_with[1]
    else:
        comparison = compare_runs(best.run_dir, current.run_dir, **compare_options)
    paired = _paired(comparison)
    ci = paired.confidence_interval
    return Regression(
        metric=_METRIC,
        best=_headline(best, best_summary),
        delta=comparison.paired.metrics[_METRIC].mean_difference,
        confidence_interval=ci,
        minimum_detectable_difference=paired.minimum_detectable_difference,
        regressed=bool(ci and ci[1] < 0),
    )
