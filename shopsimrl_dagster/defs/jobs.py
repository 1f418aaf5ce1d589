"""Jobs. One evaluation job per suite, plus plans and progress charts.

- ``evaluate_<suite>``: for one checkpoint partition, materializes exactly that suite's
  ``<suite>/rollout_traces`` → ``<suite>/eval_summary`` → ``<suite>/checkpoint_comparison`` (with
  the rollout's blocking checks) — evaluation assets only, never the skills lineage. Its steps run
  in the run worker's process (in-process executor): the chain is sequential anyway and one Python
  process per step cost ~5 s each. Every run carries the tag ``shopsimrl/endpoint`` of the
  checkpoint's inference endpoint, computed per partition, so the instance's run queue admits one
  run per endpoint (``configs/pipeline/dagster.yaml``) — backfills included.
- ``prepare_plans``: ``frozen_split`` and ``job_plan`` (unpartitioned; materialize once per
  settings change).
- ``progress_charts``: every suite's ``<suite>/progress`` (the progress sensor launches the one of a
  suite after each successful evaluation of it).
"""

from __future__ import annotations

from collections.abc import Mapping

import dagster as dg

from ..deploy.executors import evaluation_executor
from ..registry import read_registry
from ..run_tags import ENDPOINT_TAG, GPU_POOL_TAG, GPU_POOL_VALUE, endpoint_tag_value
from ..settings import PipelineSettings
from .assets import EVALUATION_ASSET_NAMES, suite_asset_key
from .partitions import checkpoints

__all__ = [
    "evaluation_job_name",
    "evaluation_selection",
    "endpoint_of",
    "run_tags_for",
    "build_jobs",
    "evaluation_jobs",
    "partition_config",
]

# Sensors and schedules must target the very job objects the location defines; one build per settings file.
_BUILT: dict[tuple[str, tuple[str, ...]], dict[str, dg.UnresolvedAssetJobDefinition]] = {}


def evaluation_job_name(suite: str) -> str:
    """The job that evaluates one checkpoint on *suite*."""
    return f"evaluate_{suite}"


def evaluation_selection(suite: str) -> dg.AssetSelection:
    """The evaluation assets of *suite* and their checks, nothing else."""
    return dg.AssetSelection.assets(*(suite_asset_key(suite, name) for name in EVALUATION_ASSET_NAMES))


def endpoint_of(settings: PipelineSettings, checkpoint_id: str) -> str:
    """Where *checkpoint_id* is served, as the run queue's endpoint tag.

    Its registry entry's endpoint; ``launch:<id>`` for a server launched for its runs; else the settings'
    default endpoint.
    """
    inference = settings.inference
    for entry in read_registry(settings.checkpoint_registry):
        if entry.checkpoint_id != checkpoint_id:
            continue
        if entry.endpoint:
            return entry.endpoint
        if inference.mode == "launch" and entry.serves_weights:
            return f"launch:{checkpoint_id}"
    return inference.base_url


def run_tags_for(settings: PipelineSettings, checkpoint_id: str) -> dict[str, str]:
    """The queue tags of a run that serves *checkpoint_id*: its endpoint, and the GPU pool for a launched server."""
    endpoint = endpoint_of(settings, checkpoint_id)
    if endpoint.startswith("launch:"):
        return {ENDPOINT_TAG: endpoint, GPU_POOL_TAG: GPU_POOL_VALUE}
    return {ENDPOINT_TAG: endpoint_tag_value(endpoint)}


def partition_config(settings: PipelineSettings) -> dg.PartitionedConfig:
    """Per-checkpoint run tags (``shopsimrl/endpoint``, ``shopsimrl/gpu-pool``) for a job partitioned by checkpoint."""

    def tags_for(partition_key: str) -> Mapping[str, str]:
        # Read when a run is created (launch, backfill, sensor), so a newly registered checkpoint counts.
        return run_tags_for(settings, partition_key)

    return dg.PartitionedConfig(
        partitions_def=checkpoints, run_config_for_partition_key_fn=lambda _key: {}, tags_for_partition_key_fn=tags_for
    )


def build_jobs(settings: PipelineSettings) -> list[dg.UnresolvedAssetJobDefinition]:
    """``evaluate_<suite>`` for every suite of *settings*, ``prepare_plans`` and ``progress_charts``."""
    jobs = [
        dg.define_asset_job(
            evaluation_job_name(name),
            selection=evaluation_selection(name),
            config=partition_config(settings),
            executor_def=evaluation_executor(settings.execution),
            description=f"Evaluate one checkpoint on suite {name!r} ({suite.split} split). {suite.purpose}".strip(),
        )
        for name, suite in sorted(settings.suites.items())
    ]
    jobs.append(
        dg.define_asset_job(
            "prepare_plans",
            selection=dg.AssetSelection.assets("frozen_split", "job_plan"),
            executor_def=dg.in_process_executor,
            description="Validate the split file and write the job plan of every suite.",
        )
    )
    jobs.append(
        dg.define_asset_job(
            "progress_charts",
            selection=dg.AssetSelection.assets(
                *(suite_asset_key(s, name) for s in sorted(settings.suites) for name in ("progress", "best_checkpoint"))
            ),
            executor_def=dg.in_process_executor,
            description="Chart reward and success against training step for every suite (or the selected ones).",
        )
    )
    return jobs


def evaluation_jobs(settings: PipelineSettings) -> dict[str, dg.UnresolvedAssetJobDefinition]:
    """The jobs of *settings* by name, built once per settings file and suite list."""
    key = (str(settings.source), tuple(sorted(settings.suites)))
    if key not in _BUILT:
        _BUILT[key] = {job.name: job for job in build_jobs(settings)}
    return _BUILT[key]
