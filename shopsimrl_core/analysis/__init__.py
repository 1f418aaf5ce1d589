"""Analysis of finished runs.

Summaries, statistics and intervals, checkpoint comparison, episode labels and the trace audit
behind the pipeline's checks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "EpisodeOutcome": "_audit",
    "TraceAudit": "_audit",
    "audit_traces": "_audit",
    "goal_leaks": "_audit",
    "category_intervals": "_categories",
    "compare_runs": "_comparison",
    "LabelTable": "_labels",
    "iter_latest_records": "_labels",
    "label_episode": "_labels",
    "label_run": "_labels",
    "read_labels": "_labels",
    "bootstrap_coefficients": "_ols",
    "fit_no_intercept_ols": "_ols",
    "bootstrap_mean_ci": "_stats",
    "paired_bootstrap_ci": "_stats",
    "pass_at_k": "_stats",
    "pass_hat_k": "_stats",
    "wilson_interval": "_stats",
    "build_summary": "_summary",
    "summarize_run": "_summary",
    "summary_from_index": "_summary",
    "judge_run": "_judge",
    "episode_metrics": "_metrics",
    "CheckpointRun": "_selection",
    "Regression": "_selection",
    "best_checkpoint": "_selection",
    "regression_against_best": "_selection",
}

if TYPE_CHECKING:  # the same names, imported for type checkers: mypy sees real types, import stays lazy
    from shopsimrl_core.analysis._audit import EpisodeOutcome as EpisodeOutcome
    from shopsimrl_core.analysis._audit import TraceAudit as TraceAudit
    from shopsimrl_core.analysis._audit import audit_traces as audit_traces
    from shopsimrl_core.analysis._audit import goal_leaks as goal_leaks
    from shopsimrl_core.analysis._categories import category_intervals as category_intervals
    from shopsimrl_core.analysis._comparison import compare_runs as compare_runs
    from shopsimrl_core.analysis._judge import judge_run as judge_run
    from shopsimrl_core.analysis._labels import LabelTable as LabelTable
    from shopsimrl_core.analysis._labels import iter_latest_records as iter_latest_records
    from shopsimrl_core.analysis._labels import label_episode as label_episode
    from shopsimrl_core.analysis._labels import label_run as label_run
    from shopsimrl_core.analysis._labels import read_labels as read_labels
    from shopsimrl_core.analysis._metrics import episode_metrics as episode_metrics
    from shopsimrl_core.analysis._ols import bootstrap_coefficients as bootstrap_coefficients
    from shopsimrl_core.analysis._ols import fit_no_intercept_ols as fit_no_intercept_ols
    from shopsimrl_core.analysis._selection import CheckpointRun as CheckpointRun
    from shopsimrl_core.analysis._selection import Regression as Regression
    from shopsimrl_core.analysis._selection import best_checkpoint as best_checkpoint
    from shopsimrl_core.analysis._selection import regression_against_best as regression_against_best
    from shopsimrl_core.analysis._stats import bootstrap_mean_ci as bootstrap_mean_ci
    from shopsimrl_core.analysis._stats import paired_bootstrap_ci as paired_bootstrap_ci
    from shopsimrl_core.analysis._stats import pass_at_k as pass_at_k
    from shopsimrl_core.analysis._stats import pass_hat_k as pass_hat_k
    from shopsimrl_core.analysis._stats import wilson_interval as wilson_interval
    from shopsimrl_core.analysis._summary import build_summary as build_summary
    from shopsimrl_core.analysis._summary import summarize_run as summarize_run
    from shopsimrl_core.analysis._summary import summary_from_index as summary_from_index

_getattr, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
if not TYPE_CHECKING:  # hidden from type checkers: a name missing above is an error, not Any
    __getattr__ = _getattr
