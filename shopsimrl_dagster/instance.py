"""The project's Dagster instance folder (DAGSTER_HOME), its ``dagster.yaml`` and its run launcher.

``configs/pipeline/dagster.yaml`` is the template (per-endpoint run queue limits, run monitoring,
run retries, telemetry off); this module copies it into the instance folder, ``.dagster_home/`` in
the repository unless ``SHOPSIMRL_DAGSTER_HOME`` names another. ``make demo`` writes
materializations there and ``make ui`` serves the UI from there, so the UI shows what the demo
produced.

    python -m shopsimrl_dagster.instance      # prints the prepared folder
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import dagster as dg

# Custom run launchers and coordinators implement these interfaces; Dagster exposes them from its
# launcher and run-coordinator packages.
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._core.run_coordinator import QueuedRunCoordinator, SubmitRunContext
from dagster._core.run_coordinator.queued_run_coordinator import RunQueueConfig

from shopsimrl_core import ShopSimRLError

from .run_tags import ENDPOINT_TAG, GPU_POOL_TAG, GPU_POOL_VALUE, uses_endpoint
from .settings import REPO_ROOT

__all__ = [
    "DAGSTER_HOME_ENV",
    "PROJECT_DAGSTER_HOME",
    "INSTANCE_TEMPLATE",
    "LocalProcessRunLauncher",
    "EndpointQueuedRunCoordinator",
    "run_worker_pid",
    "default_dagster_home",
    "prepare_dagster_home",
]

DAGSTER_HOME_ENV = "SHOPSIMRL_DAGSTER_HOME"
INSTANCE_TEMPLATE = REPO_ROOT / "configs" / "pipeline" / "dagster.yaml"
PROJECT_DAGSTER_HOME = REPO_ROOT / ".dagster_home"
"""The project's own instance folder (``make demo`` and ``make ui`` without ``SHOPSIMRL_DAGSTER_HOME``)."""
_WORKER_MESSAGES = (
    "Started process for run",
    "Executing steps in process",
    "Executing steps using multiprocess executor",
)


def run_worker_pid(instance: dg.DagsterInstance, run_id: str) -> int | None:
    """The pid of the latest run worker process of *run_id*, from its engine events.

    The run worker reports its pid when it starts ("Started process for run (pid: N)") and again
    when its executor starts ("Executing steps in process (pid: N)" for the in-process executor,
    "… multiprocess executor: parent process (pid: N)"); step subprocesses are not run workers.
    """
    pid = None
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        # Events reported straight to the instance (``report_engine_event``: "Started process for run",
        # the only one a Celery run worker writes) carry their text in the event, not in user_message.
        message = entry.user_message or (entry.dagster_event.message if entry.dagster_event else None) or ""
        if not message.startswith(_WORKER_MESSAGES):
            continue
        event = entry.dagster_event
        metadata = event.engine_event_data.metadata if event is not None and event.engine_event_data else {}
        value = getattr(metadata.get("pid"), "value", None) or (
            message.rsplit("(pid: ", 1)[-1].split(")", 1)[0] if "(pid: " in message else None
        )
        try:
            pid = int(str(value))
        except (TypeError, ValueError):
            continue
    return pid


def _process_alive(pid: int) -> bool:
    # A killed child that its parent has not reaped yet is a zombie: dead for our purpose.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state not in ("Z", "X")


class LocalProcessRunLauncher(dg.DefaultRunLauncher):
    """Dagster's default launcher (a run worker process per run, on this machine) plus a health check.

    The default launcher cannot tell the run monitor that a run worker died, so a killed run stays
    STARTED forever and keeps its place in the per-endpoint run queue. This launcher reports a run
    whose worker process no longer exists as FAILED; the run monitor (``run_monitoring`` in
    ``dagster.yaml``) then marks the run failed, which frees its queue slot, and run retries
    relaunch it (the rollout resumes, so finished episodes are kept). When the monitor is first to see
    the worker gone, a run whose steps run on Celery workers is reported FAILED only once those steps
    stopped (``deploy.celery_steps``; the code server that started the worker may fail it sooner, and
    the steps then stop at their next heartbeat).
    """

    @property
    def supports_check_run_worker_health(self) -> bool:
        """Always: the worker is a local process whose pid the run's events record."""
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        """RUNNING while the run worker process exists (or has not reported its pid yet), else FAILED."""
        pid = run_worker_pid(self._instance, run.run_id)
        if pid is None:
            # Not started far enough to log its pid: the monitor's start timeout covers a worker that never starts.
            return CheckRunHealthResult(WorkerStatus.RUNNING, "the run worker has not reported its pid yet")
        if _process_alive(pid):
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"run worker pid {pid} is alive", run_worker_id=str(pid))
        # Steps of the run on Celery workers outlive their run worker: stop them before the run is
        # marked failed, so none calls an endpoint or writes an event after (docs/scaling.md).
        from .deploy.celery_steps import celery_steps_still_running

        running = celery_steps_still_running(self._instance, run.run_id, f"run worker pid {pid} is gone")
        if running:
            return CheckRunHealthResult(
                WorkerStatus.RUNNING,
                f"run worker pid {pid} is gone; waiting for its Celery step(s) {', '.join(running)} to stop",
                run_worker_id=str(pid),
            )
        return CheckRunHealthResult(
            WorkerStatus.FAILED, f"run worker pid {pid} is gone (killed or crashed)", run_worker_id=str(pid)
        )


class EndpointQueuedRunCoordinator(QueuedRunCoordinator):
    """Dagster's run queue, plus the endpoint tags on every run that calls an inference endpoint, plus the GPU pool.

    The queue admits one run per value of ``shopsimrl/endpoint`` (``tag_concurrency_limits`` in
    ``dagster.yaml``). The evaluation jobs and ``build_skills`` set that tag per partition, but a
    "Materialize" from the asset graph runs Dagster's implicit asset job, which has no tags of its
    own. This coordinator adds the tags at submission, before the run is enqueued, to any run of a
    checkpoint partition whose assets include one that calls the endpoint (``ENDPOINT_ASSET_NAMES``),
    so every launch path queues per endpoint. A run that already has the tag is left as it is.

    Runs that launch a checkpoint's server carry ``shopsimrl/gpu-pool``; their limit is the GPU pool's
    slots of the pipeline settings in use (``inference.launch``), added to the queue's tag limits each
    time the daemon reads them, so the settings file is the one place the pool is declared.
    """

    def get_run_queue_config(self) -> RunQueueConfig:
        """The queue settings of ``dagster.yaml`` plus the GPU pool's limit of the pipeline settings."""
        config = super().get_run_queue_config()
        slots = _gpu_pool_slots()
        if slots is None or any(limit.get("key") == GPU_POOL_TAG for limit in config.tag_concurrency_limits):
            return config
        return config._replace(
            tag_concurrency_limits=[
                *config.tag_concurrency_limits,
                {"key": GPU_POOL_TAG, "value": GPU_POOL_VALUE, "limit": slots},
            ]
        )

    def submit_run(self, context: SubmitRunContext) -> dg.DagsterRun:
        """Tag *context*'s run with its checkpoint's endpoint when it needs one, then enqueue it."""
        run = context.dagster_run
        checkpoint_id = run.tags.get("dagster/partition")
        if ENDPOINT_TAG not in run.tags and checkpoint_id and uses_endpoint(run.asset_selection):
            from .defs.jobs import run_tags_for
            from .settings import load_pipeline_settings, pipeline_config_path

            try:
                tags = run_tags_for(load_pipeline_settings(pipeline_config_path()), checkpoint_id)
            except ShopSimRLError as exc:
                # The run is already created: enqueue it untagged rather than leave it NOT_STARTED;
                # its own step fails on the same settings error, with the same one-line message.
                self._logger.warning(f"run {run.run_id}: no endpoint tag ({exc.one_line()})")
            else:
                self._instance.add_run_tags(run.run_id, tags)
                tagged = self._instance.get_run_by_id(run.run_id)
                if tagged is not None:
                    context = SubmitRunContext(tagged, context.workspace)
        return super().submit_run(context)


def _gpu_pool_slots() -> int | None:
    """Slots of the GPU pool in the pipeline settings in use (``launch`` mode), else None."""
    from .settings import load_pipeline_settings, pipeline_config_path

    try:
        inference = load_pipeline_settings(pipeline_config_path()).inference
    except ShopSimRLError:
        return None  # a broken settings file fails the runs themselves, with its one-line message
    if inference.mode != "launch" or inference.launch is None:
        return None
    return inference.launch.slots


def default_dagster_home() -> Path:
    """``$SHOPSIMRL_DAGSTER_HOME`` when set, else ``<repo>/.dagster_home``."""
    override = os.environ.get(DAGSTER_HOME_ENV)
    return Path(override).expanduser().resolve() if override else PROJECT_DAGSTER_HOME


def prepare_dagster_home(home: str | Path | None = None) -> Path:
    """Create the instance folder and install the project's ``dagster.yaml`` in it; return the folder.

    The template always wins (it is the project's configuration, not a user file), and the copy is
    atomic so a running webserver never reads half a file.
    """
    target = Path(home).expanduser().resolve() if home is not None else default_dagster_home()
    target.mkdir(parents=True, exist_ok=True)
    config = target / "dagster.yaml"
    if not config.exists() or config.read_bytes() != INSTANCE_TEMPLATE.read_bytes():
        tmp = target / ".dagster.yaml.tmp"
        shutil.copyfile(INSTANCE_TEMPLATE, tmp)
        tmp.replace(config)
    return target


if __name__ == "__main__":
    print(prepare_dagster_home())
