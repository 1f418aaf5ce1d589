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
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus  # private: dagster 1.13 does not export them

from shopsimrl_core import ShopSimRLError

from .run_tags import ENDPOINT_TAG, GPU_POOL_TAG, GPU_POOL_VALUE, uses_endpoint
from .settings import REPO_ROOT

if TYPE_CHECKING:
    from dagster._core.launcher import LaunchRunContext  # private: dagster 1.13 does not export it
    from dagster._core.run_coordinator.queued_run_coordinator import RunQueueConfig  # private: not exported
    from dagster._serdes import ConfigurableClassData  # private: dagster 1.13 does not export it

__all__ = [
    "DAGSTER_HOME_ENV",
    "PROJECT_DAGSTER_HOME",
    "INSTANCE_TEMPLATE",
    "LocalProcessRunLauncher",
    "EndpointQueuedRunCoordinator",
    "RUN_WORKER_PID_TAG",
    "run_worker_pid",
    "default_dagster_home",
    "prepare_dagster_home",
]

DAGSTER_HOME_ENV = "SHOPSIMRL_DAGSTER_HOME"
INSTANCE_TEMPLATE = REPO_ROOT / "configs" / "pipeline" / "dagster.yaml"
PROJECT_DAGSTER_HOME = REPO_ROOT / ".dagster_home"
"""The project's own instance folder (``make demo`` and ``make ui`` without ``SHOPSIMRL_DAGSTER_HOME``)."""
RUN_WORKER_PID_TAG = "shopsimrl/run-worker-pid"
"""Run tag: the pid of the run worker process ``LocalProcessRunLauncher`` started on the daemon's host."""
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
    """A run worker process per run on this machine, started by the launcher itself, plus a health check.

    Dagster's default launcher asks the code server to start the run worker; the code server then
    marks the run failed within half a second of that process dying, before a step the run handed
    to a Celery worker has stopped calling its endpoint. This launcher starts the run worker itself
    (``dagster api execute_run``, the command Dagster's container launchers run, with the run's code
    origin; it records the pid in the run tag :data:`RUN_WORKER_PID_TAG`), so the only judge of a
    dead run worker is :meth:`check_run_worker_health`, which the run monitor (``run_monitoring`` in
    ``dagster.yaml``) calls: a run whose worker is gone is reported FAILED only once its Celery
    steps have stopped (``deploy.celery_steps``); the monitor then marks it failed, which frees its
    queue slot, and run retries relaunch it (the rollout resumes, so finished episodes are kept). A
    worker that exits before the run started is failed at once (the run retries apply). Runs without a
    Python code origin fall back to the code server, as Dagster's default launcher does.
    """

    def __init__(self, inst_data: ConfigurableClassData | None = None) -> None:
        super().__init__(inst_data=inst_data)
        self._workers: dict[str, subprocess.Popen[bytes]] = {}
        self._workers_lock = threading.Lock()

    def launch_run(self, context: LaunchRunContext) -> None:
        """Start the run worker of *context*'s run as a child process of this one (the daemon's)."""
        from dagster._grpc.types import ExecuteRunArgs  # private: the run worker's own arguments; not exported

        run = context.dagster_run
        origin = run.job_code_origin
        if origin is None:
            super().launch_run(context)
            return
        args = ExecuteRunArgs(
            job_origin=origin, run_id=run.run_id, instance_ref=self._instance.get_ref(), set_exit_code_on_failure=True
        )
        working_directory = getattr(origin.repository_origin.code_pointer, "working_directory", None)
        # Same process group as the daemon: stopping the daemon's group (dagster dev, local-cluster.sh)
        # stops its run workers too, as when the code server owned them.
        process = subprocess.Popen(
            [origin.executable_path or sys.executable, "-m", "dagster", "api", "execute_run", dg.serialize_value(args)],
            cwd=working_directory or None,
            stdin=subprocess.DEVNULL,
        )
        with self._workers_lock:
            self._workers[run.run_id] = process
        self._instance.add_run_tags(run.run_id, {RUN_WORKER_PID_TAG: str(process.pid)})
        threading.Thread(
            target=self._reap, args=(run.run_id, process), name=f"shopsimrl-run-worker-{process.pid}", daemon=True
        ).start()

    def _reap(self, run_id: str, process: subprocess.Popen[bytes]) -> None:
        # Waits for the worker (no zombie is left) and fails a run whose worker died before starting it:
        # no step of it ran, so nothing has to stop first, and the run monitor only watches STARTED runs.
        code = process.wait()
        with self._workers_lock:
            self._workers.pop(run_id, None)
        try:
            run = self._instance.get_run_by_id(run_id)
            if run is not None and run.status in (dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING):
                self._instance.report_run_failed(
                    run, f"run worker pid {process.pid} exited with code {code} before the run started"
                )
        except Exception as exc:  # the run monitor's start timeout still covers the run
            print(f"shopsimrl: run {run_id}: could not report its run worker's exit: {exc}", file=sys.stderr)

    def _worker_alive(self, run_id: str, pid: int) -> bool:
        with self._workers_lock:
            process = self._workers.get(run_id)
        if process is not None and process.pid == pid:
            return process.returncode is None  # set by _reap as soon as the process ends
        return _process_alive(pid)

    @property
    def supports_check_run_worker_health(self) -> bool:
        """Always: the worker is a local process whose pid the run's tags and events record."""
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        """RUNNING while the run worker lives (or has not reported its pid) or its Celery steps run, else FAILED."""
        pid = run_worker_pid(self._instance, run.run_id) or _tagged_pid(run)
        if pid is None:
            # Not started far enough to log its pid: the monitor's start timeout covers a worker that never starts.
            return CheckRunHealthResult(WorkerStatus.RUNNING, "the run worker has not reported its pid yet")
        if self._worker_alive(run.run_id, pid):
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

    def terminate(self, run_id: str) -> bool:
        """Ask the run worker to stop (SIGINT, as the code server does on a termination); True when asked."""
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        pid = _tagged_pid(run)
        if pid is None:
            return bool(super().terminate(run_id))  # started by the code server
        self._instance.report_run_canceling(run)
        if self._worker_alive(run_id, pid):
            try:
                os.kill(pid, signal.SIGINT)  # the run worker stops its steps and reports the run canceled
                return True
            except ProcessLookupError:
                pass
        self._instance.report_run_canceled(run, f"run worker pid {pid} was already gone")
        return True


def _tagged_pid(run: dg.DagsterRun) -> int | None:
    value = run.tags.get(RUN_WORKER_PID_TAG)
    return int(value) if value and value.isdigit() else None


class EndpointQueuedRunCoordinator(dg.QueuedRunCoordinator):
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

    def submit_run(self, context: dg.SubmitRunContext) -> dg.DagsterRun:
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
                    context = dg.SubmitRunContext(tagged, context.workspace)
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
