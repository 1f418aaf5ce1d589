"""One job per evaluation suite: ``evaluate_<suite>`` materializes, for one checkpoint partition,
``rollout_traces`` and everything below it (summary, comparison, and the per-checkpoint skill assets
the location adds), and tags the run with its suite.

The unpartitioned ``frozen_split`` and ``job_plan`` stay out of these jobs (they would otherwise
re-run in every partition run); materialize them once, or let ``evaluate_all`` do it.
"""

from __future__ import annotations

import dagster as dg

from ..run_tags import SUITE_TAG
from ..settings import PipelineSettings, load_pipeline_settings

__all__ = ["EVALUATION_ASSETS", "evaluation_job_name", "build_evaluation_jobs", "evaluation_jobs"]

EVALUATION_ASSETS = ("rollout_traces", "eval_summary", "checkpoint_comparison")
"""The evaluation lineage proper; the jobs select these and everything downstream of them."""
# Sensors and schedules must target the very job objects the location defines; one build per settings file.
_BUILT: dict[tuple[str, tuple[str, ...]], dict[str, dg.UnresolvedAssetJobDefinition]] = {}


def evaluation_job_name(suite: str) -> str:
    """The job that evaluates one checkpoint on *suite*."""
    return f"evaluate_{suite}"


def build_evaluation_jobs(settings: PipelineSettings) -> list[dg.UnresolvedAssetJobDefinition]:
    """``evaluate_<suite>`` for every suite of *settings*, plus ``prepare_plans`` (split + plans)."""
    jobs = [
        dg.define_asset_job(
            evaluation_job_name(name),
            selection=dg.AssetSelection.assets(*EVALUATION_ASSETS).downstream(),
            description=f"Evaluate one checkpoint on suite {name!r} ({suite.split} split). {suite.purpose}".strip(),
            run_tags={SUITE_TAG: name},
        )
        for name, suite in sorted(settings.suites.items())
    ]
    jobs.append(
        dg.define_asset_job(
            "prepare_plans",
            selection=dg.AssetSelection.assets("frozen_split", "job_plan"),
            description="Validate the split file and write the job plan of every suite.",
        )
    )
    return jobs


def evaluation_jobs(settings: PipelineSettings) -> dict[str, dg.UnresolvedAssetJobDefinition]:
    """The jobs of *settings* by name, built once per settings file and suite list."""
    key = (str(settings.source), tuple(sorted(settings.suites)))
    if key not in _BUILT:
        _BUILT[key] = {job.name: job for job in build_evaluation_jobs(settings)}
    return _BUILT[key]


@dg.definitions
def jobs() -> dg.Definitions:
    """The evaluation jobs of the suites in the pipeline settings file."""
    return dg.Definitions(jobs=list(evaluation_jobs(load_pipeline_settings()).values()))
