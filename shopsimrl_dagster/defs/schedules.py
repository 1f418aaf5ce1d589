"""The nightly schedule: evaluate the latest checkpoint on ``automation.nightly_suite``.

"Latest" is the highest training step in the registry, not the most recently written file; the run
goes through that suite's ``evaluate_<suite>`` job, so exactly that suite's assets.
"""

import dagster as dg

from ..registry import latest_checkpoint
from ..run_tags import TRIGGER_TAG
from ..settings import PipelineSettings
from .jobs import evaluation_job_name, evaluation_jobs
from .partitions import CHECKPOINTS
from .resources import CheckpointRegistry

__all__ = ["build_nightly_schedule"]


def build_nightly_schedule(settings: PipelineSettings) -> dg.ScheduleDefinition:
    """The nightly schedule for *settings* (cron, timezone and suite from its ``automation`` block)."""
    automation = settings.automation
    suite = automation.nightly_suite

    @dg.schedule(
        name="nightly_latest_checkpoint",
        cron_schedule=automation.nightly_cron,
        execution_timezone=automation.nightly_timezone,
        job=evaluation_jobs(settings)[evaluation_job_name(suite)],
        description=f"Evaluates the checkpoint with the highest training step on suite {suite!r}.",
        default_status=(
            dg.DefaultScheduleStatus.RUNNING if automation.schedule_running else dg.DefaultScheduleStatus.STOPPED
        ),
    )
    def nightly_latest_checkpoint(
        context: dg.ScheduleEvaluationContext, checkpoint_registry: CheckpointRegistry
    ) -> dg.RunRequest | dg.SkipReason:
        problems: list[str] = []
        latest = latest_checkpoint(checkpoint_registry.checkpoints(problems=problems))
        for line in problems:
            context.log.warning(line)
        if latest is None:
            return dg.SkipReason(f"the checkpoint registry {checkpoint_registry.folder} is empty")
        # The registry sensor normally adds the partition; do it here too so the schedule also
        # works with the sensor switched off (adding an existing key is a no-op).
        if not context.instance.has_dynamic_partition(CHECKPOINTS, latest.checkpoint_id):
            context.instance.add_dynamic_partitions(CHECKPOINTS, [latest.checkpoint_id])
        night = context.scheduled_execution_time.strftime("%Y-%m-%d")
        return dg.RunRequest(
            run_key=f"nightly:{night}:{latest.checkpoint_id}:{suite}",
            partition_key=latest.checkpoint_id,
            tags={TRIGGER_TAG: "nightly", "shopsimrl/checkpoint-step": str(latest.step)},
        )

    return nightly_latest_checkpoint
