"""Sensors.

- ``checkpoint_registry_sensor``: new checkpoint files become partitions and get evaluated. Each
  tick reads the registry folder, adds the checkpoints that are not partitions yet, and requests one
  ``evaluate_<suite>`` run per (checkpoint, suite) of ``automation.new_checkpoint_suites``. The run
  key ``<checkpoint_id>:<suite>`` makes a request idempotent. A bad registry file is skipped and
  named (with the fix) in the tick's log, while the other files register.
- ``progress_sensor``: after a successful ``evaluate_<suite>`` run, charts that suite's progress
  (``<suite>/progress``, ``<suite>/best_checkpoint``) so the chart follows every new evaluation, and
  catches up the comparison of the next checkpoint when it was evaluated first (a backfill runs
  checkpoints side by side: a later checkpoint whose baseline had no summary yet got no comparison).
"""

import dagster as dg

from ..registry import read_registry
from ..run_tags import TRIGGER_TAG
from ..settings import PipelineSettings
from .assets import suite_asset_key
from .jobs import evaluation_job_name, evaluation_jobs
from .partitions import CHECKPOINTS, checkpoints
from .resources import CheckpointRegistry

__all__ = ["run_key", "build_registry_sensor", "build_progress_sensor", "comparisons_to_catch_up"]


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


def comparisons_to_catch_up(settings: PipelineSettings, suite: str, checkpoint_id: str) -> list[str]:
    """Checkpoints whose comparison with *checkpoint_id* (their previous one) is due now that it has a summary.

    With ``comparison.baseline: previous``: the next registered checkpoint by training step, when it has a
    summary of *suite* but no ``comparison_vs_<checkpoint_id>.json`` (it finished first). Empty otherwise.
    """
    if settings.comparison.baseline != "previous":
        return []
    entries = read_registry(settings.checkpoint_registry)
    ids = [entry.checkpoint_id for entry in entries]
    if checkpoint_id not in ids or ids.index(checkpoint_id) + 1 >= len(ids):
        return []
    after = ids[ids.index(checkpoint_id) + 1]
    run_dir = settings.runs_root / suite / after
    if (run_dir / "summary.json").exists() and not (run_dir / f"comparison_vs_{checkpoint_id}.json").exists():
        return [after]
    return []


def build_progress_sensor(settings: PipelineSettings) -> dg.RunStatusSensorDefinition:
    """Launch ``progress_charts`` for the suite of every successful ``evaluate_<suite>`` run, and late comparisons."""
    jobs = evaluation_jobs(settings)
    by_job = {evaluation_job_name(suite): suite for suite in settings.suites}

    @dg.run_status_sensor(
        name="progress_sensor",
        run_status=dg.DagsterRunStatus.SUCCESS,
        monitored_jobs=[jobs[name] for name in sorted(by_job)],
        request_jobs=[jobs["progress_charts"], *(jobs[name] for name in sorted(by_job))],
        description="Redraws <suite>/progress and <suite>/best_checkpoint after each successful evaluate_<suite> "
        "run, and computes the comparison of a later checkpoint that finished before this one.",
        default_status=(
            dg.DefaultSensorStatus.RUNNING if settings.automation.sensor_running else dg.DefaultSensorStatus.STOPPED
        ),
    )
    def progress_sensor(context: dg.RunStatusSensorContext) -> list[dg.RunRequest] | dg.SkipReason:
        run = context.dagster_run
        suite = by_job.get(run.job_name)
        if suite is None:
            return dg.SkipReason(f"{run.job_name} is not an evaluation job")
        requests = [
            dg.RunRequest(
                run_key=f"progress:{run.run_id}",
                job_name="progress_charts",
                asset_selection=[suite_asset_key(suite, "progress"), suite_asset_key(suite, "best_checkpoint")],
                tags={TRIGGER_TAG: "progress-sensor"},
            )
        ]
        evaluated = run.tags.get("dagster/partition")
        for later in comparisons_to_catch_up(settings, suite, evaluated or ""):
            requests.append(
                dg.RunRequest(
                    run_key=f"comparison:{suite}:{later}:{evaluated}",
                    job_name=evaluation_job_name(suite),
                    partition_key=later,
                    asset_selection=[suite_asset_key(suite, "checkpoint_comparison")],
                    tags={TRIGGER_TAG: "progress-sensor"},
                )
            )
        return requests

    return progress_sensor
