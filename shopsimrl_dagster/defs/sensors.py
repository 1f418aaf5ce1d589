"""Sensors.

- ``checkpoint_registry_sensor``: new checkpoint files become partitions and get evaluated. Each
  tick reads the registry folder, adds the checkpoints that are not partitions yet, and requests one
  ``evaluate_<suite>`` run per (checkpoint, suite) of ``automation.new_checkpoint_suites``. The run
  key ``<checkpoint_id>:<suite>`` makes a request idempotent. A bad registry file is skipped and
  named (with the fix) in the tick's log, while the other files register.
- ``progress_sensor``: after a successful ``evaluate_<suite>`` run, charts that suite's progress
  (``<suite>/progress``) so the chart follows every new evaluation.
"""

import dagster as dg

from ..run_tags import TRIGGER_TAG
from ..settings import PipelineSettings
from .assets import suite_asset_key
from .jobs import evaluation_job_name, evaluation_jobs
from .partitions import CHECKPOINTS, checkpoints
from .resources import CheckpointRegistry

__all__ = ["run_key", "build_registry_sensor", "build_progress_sensor"]


def run_key(checkpoint_id: str, suite: str) -> str:
    """The idempotency key of one evaluation request."""
    return f"{checkpoint_id}:{suite}"


def build_registry_sensor(settings: PipelineSettings) -> dg.SensorDefinition:
    """The sensor for *settings* (suites and interval come from its ``automation`` block)."""
    suites = list(settings.automation.new_checkpoint_suites)
    jobs = evaluation_jobs(settings)

    @dg.sensor(
        name="checkpoint_registry_sensor",
        jobs=[jobs[evaluation_job_name(suite)] for suite in suites],
        minimum_interval_seconds=settings.automation.sensor_interval_s,
        description=f"Registers new checkpoints from the registry folder and evaluates them on: {', '.join(suites)}.",
        default_status=(
            dg.DefaultSensorStatus.RUNNING if settings.automation.sensor_running else dg.DefaultSensorStatus.STOPPED
        ),
    )
    def checkpoint_registry_sensor(
        context: dg.SensorEvaluationContext, checkpoint_registry: CheckpointRegistry
    ) -> dg.SensorResult | dg.SkipReason:
        problems: list[str] = []
        entries = checkpoint_registry.checkpoints(problems=problems)
        for line in problems:
            context.log.warning(line)
        known = set(context.instance.get_dynamic_partitions(CHECKPOINTS))
        new = [entry for entry in entries if entry.checkpoint_id not in known]
        if not new:
            skipped = f"; {len(problems)} bad file(s) skipped: {' | '.join(problems)}" if problems else ""
            return dg.SkipReason(
                f"no new checkpoints in {checkpoint_registry.folder} ({len(entries)} registered){skipped}"
            )
        requests = [
            dg.RunRequest(
                run_key=run_key(entry.checkpoint_id, suite),
                job_name=evaluation_job_name(suite),
                partition_key=entry.checkpoint_id,
                tags={TRIGGER_TAG: "registry-sensor", "shopsimrl/checkpoint-step": str(entry.step)},
            )
            for entry in new
            for suite in suites
        ]
        return dg.SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=[checkpoints.build_add_request([entry.checkpoint_id for entry in new])],
        )

    return checkpoint_registry_sensor


def build_progress_sensor(settings: PipelineSettings) -> dg.RunStatusSensorDefinition:
    """Launch ``progress_charts`` for the suite of every successful ``evaluate_<suite>`` run."""
    jobs = evaluation_jobs(settings)
    by_job = {evaluation_job_name(suite): suite for suite in settings.suites}

    @dg.run_status_sensor(
        name="progress_sensor",
        run_status=dg.DagsterRunStatus.SUCCESS,
        monitored_jobs=[jobs[name] for name in sorted(by_job)],
        request_job=jobs["progress_charts"],
        description="Redraws <suite>/progress after each successful evaluate_<suite> run.",
        default_status=(
            dg.DefaultSensorStatus.RUNNING if settings.automation.sensor_running else dg.DefaultSensorStatus.STOPPED
        ),
    )
    def progress_sensor(context: dg.RunStatusSensorContext) -> dg.RunRequest | dg.SkipReason:
        suite = by_job.get(context.dagster_run.job_name)
        if suite is None:
            return dg.SkipReason(f"{context.dagster_run.job_name} is not an evaluation job")
        return dg.RunRequest(
            run_key=f"progress:{context.dagster_run.run_id}",
            asset_selection=[suite_asset_key(suite, "progress"), suite_asset_key(suite, "best_checkpoint")],
            tags={TRIGGER_TAG: "progress-sensor"},
        )

    return progress_sensor
