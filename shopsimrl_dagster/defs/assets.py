"""The evaluation lineage, one set of assets per suite:

    frozen_split → job_plan → <suite>/rollout_traces[ckpt] → <suite>/eval_summary[ckpt]
                                → <suite>/checkpoint_comparison[ckpt], <suite>/progress

Suite × checkpoint is the identity of every evaluation asset: the suite is part of the asset key
(``val/rollout_traces``, ``train/rollout_traces`` …) and the checkpoint is the partition. No run tag
picks the suite, so a job, sensor, schedule or backfill evaluates exactly the suite its assets name,
and the partition bar of ``train/eval_summary`` is green only where a train run happened
(docs/pipeline.md explains why this beats a multi-partition).

Each body reads its inputs, calls the core library and reports paths, hashes and the core's own
numbers (never recomputed here). Files on disk (``<runs_root>/<suite>/<checkpoint_id>/``) are the
system of record. An asset with nothing to do (no baseline to compare with, no summary to chart)
yields nothing: no materialization and no check result, rather than a fake "skipped" one.

The assets of one suite are built by one module each, named after its step of the lineage:
``plans.py`` (frozen_split, job_plan), ``rollouts.py``, ``summaries.py``, ``comparisons.py``,
``progress.py`` and ``selection.py`` (``<suite>/best_checkpoint``).
"""

import dagster as dg

from ..settings import EvaluationSuite
from .comparisons import build_checkpoint_comparison
from .progress import build_progress
from .rollouts import build_rollout_traces
from .selection import build_best_checkpoint_asset
from .summaries import build_eval_summary

__all__ = ["EVALUATION_ASSET_NAMES", "suite_asset_key", "build_suite_assets"]

EVALUATION_ASSET_NAMES = ("rollout_traces", "eval_summary", "checkpoint_comparison")
"""The partitioned evaluation assets of one suite (what ``evaluate_<suite>`` materializes)."""


def suite_asset_key(suite: str, name: str) -> dg.AssetKey:
    """The key of evaluation asset *name* for *suite* (``<suite>/<name>``)."""
    return dg.AssetKey([suite, name])


def build_suite_assets(name: str, suite: EvaluationSuite) -> list[dg.AssetsDefinition]:
    """The five assets of suite *name*, keyed ``<name>/<asset>``.

    rollout_traces, eval_summary and checkpoint_comparison are partitioned by checkpoint; progress
    charts every checkpoint's summary of the suite and best_checkpoint picks the best of them.
    """
    group = f"suite_{name}"
    rollout_key = suite_asset_key(name, "rollout_traces")
    summary_key = suite_asset_key(name, "eval_summary")
    comparison_key = suite_asset_key(name, "checkpoint_comparison")
    progress_key = suite_asset_key(name, "progress")
    described = f"suite {name!r} ({suite.split} split)"

    return [
        build_rollout_traces(name, rollout_key=rollout_key, group=group, described=described),
        build_eval_summary(name, summary_key=summary_key, rollout_key=rollout_key, group=group, described=described),
        build_checkpoint_comparison(
            name, comparison_key=comparison_key, summary_key=summary_key, group=group, described=described
        ),
        build_progress(name, progress_key=progress_key, summary_key=summary_key, group=group, described=described),
        build_best_checkpoint_asset(name, group, summary_key),
    ]
