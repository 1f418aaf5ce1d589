"""Analysis of finished runs.

Summaries, statistics and intervals, checkpoint comparison, episode labels and the trace audit
behind the pipeline's checks.
"""

from __future__ import annotations

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "EpisodeOutcome": "_audit",
    "TraceAudit": "_audit",
    "audit_traces": "_audit",
    "goal_leaks": "_audit",
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
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
