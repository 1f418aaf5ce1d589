"""The registry sensor: new checkpoint files become partitions and get evaluated.

Each tick reads the registry folder, adds the checkpoints that are not partitions yet, and requests
one run per (checkpoint, suite) of ``automation.new_checkpoint_suites``. The run key
``<checkpoint_id>:<suite>`` makes a request idempotent: Dagster never launches the same key twice
for this sensor, whatever happens to the cursor or the partitions.
"""


import dagster as dg

from ..run_tags import TRIGGER_TAG
from ..settings import PipelineSettings, load_pipeline_settings
from .jobs import evaluation_job_name, evaluation_jobs
from .partitions import checkpoints
from .resources import CheckpointRegistry

__all__ = ["run_key", "build_registry_sensor"]


def run_key(checkpoint_id: str, suite: str) -> str:
    """The idempotency key of one evaluation request."""
    return f"{checkpoint_id}:{suite}"


def build_registry_sensor(settings: PipelineSettings) -> dg.SensorDefinition:
    """The sensor for *settings* (suites and interval come from its ``automation`` block)."""
    suites = list(settings.automation.new_checkpoint_suites)

    @dg.sensor(
        name="checkpoint_registry_sensor",
        jobs=[evaluation_jobs(settings)[evaluation_job_name(suite)] for suite in suites],
        minimum_interval_seconds=settings.automation.sensor_interval_s,
        description=f"Registers new checkpoints from the registry folder and evaluates them on: {', '.join(suites)}.",
        default_status=(
            dg.DefaultSensorStatus.RUNNING if settings.automation.sensor_running else dg.DefaultSensorStatus.STOPPED
        ),
    )
    def checkpoint_registry_sensor(
        context: dg.SensorEvaluationContext, checkpoint_registry: CheckpointRegistry
    ) -> dg.SensorResult | dg.SkipReason:
        entries = checkpoint_registry.checkpoints()
        known = set(context.instance.get_dynamic_partitions(checkpoints.name))
        new = [entry for entry in entries if entry.checkpoint_id not in known]
        if not new:
            return dg.SkipReason(f"no new checkpoints in {checkpoint_registry.folder} ({len(entries)} registered)")
        requests = [
            dg.RunRequest(
                run_key=run_key(entry.checkpoint_id, suite),
                job_name=evaluation_job_name(suite),
                partition_key=entry.checkpoint_id,
                tags={TRIGGER_TAG: "registry-sensor"},
            )
            for entry in new
            for suite in suites
        ]
        return dg.SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=[checkpoints.build_add_request([entry.checkpoint_id for entry in new])],
        )

    return checkpoint_registry_sensor


@dg.definitions
def sensors() -> dg.Definitions:
    """The registry sensor configured by the pipeline settings file."""
    return dg.Definitions(sensors=[build_registry_sensor(load_pipeline_settings())])
