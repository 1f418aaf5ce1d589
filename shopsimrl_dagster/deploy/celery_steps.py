"""Celery steps that survive a lost worker and never outlive their run.

Dagster's Celery executor hands a step to a worker and waits for its result; nothing in it notices a
worker that died (the run stays STARTED with the step's task unacknowledged in the broker), nor
stops a step whose run was marked failed (the orphan keeps calling the endpoint and writes its
events into the failed run). Measured with Celery 5.7 / kombu 5.7 on Redis (docs/scaling.md):
late acknowledgement redelivers a SIGKILLed solo worker's task only after the broker's visibility
timeout, which also redelivers a *running* task to a second worker once it runs longer than that
timeout, so it cannot be short for rollouts of hours. This module adds what is missing, on both sides:

**The worker side** (``shopsimrl.execute_step``, registered by ``deploy.celery_worker``) runs the step
the way Dagster's ``execute_plan`` task does, under a :class:`StepGuard`: a thread that every
``heartbeat_seconds`` writes the step's heartbeat into the Dagster instance (its key-value store, so
PostgreSQL on a team instance) and reads the run's status and the step's current attempt. When the
run is finished (FAILURE, CANCELED, …) or the step was handed to another worker, the guard

- *fences* the step: from then on no event of it reaches the instance (every event is also checked
  against the run's status just before it is stored, so nothing lands in a run already marked failed);
- *cancels* it: SIGINT to the worker's main thread, which the rollout turns into a clean stop
  (in-flight episodes release their leases, the run lock is freed, a launched server is stopped).

A delivery whose run is finished, whose attempt was superseded, or whose attempt is running on
another live worker (a visibility-timeout redelivery) is dropped without writing anything.

**The run-worker side** (:func:`guarded_celery_executor`, ``execution.executor: celery``): Dagster's own
Celery execution loop, whose per-step result handle is a :class:`GuardedStepHandle`. While the task is
started and its heartbeat does not move for ``lost_after_seconds``, the worker is taken as lost: the
step is submitted again as a new attempt (an engine event says so), and the old attempt, should its
worker come back, fences and cancels itself. The rollout resumes from its run directory, so no
finished episode is redone and the dead worker's leases are released by the resumed run.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import dagster as dg

if TYPE_CHECKING:
    from celery import Celery  # type: ignore[import-untyped]
    from celery.result import AsyncResult  # type: ignore[import-untyped]

__all__ = [
    "STEP_TASK_NAME",
    "FINISHED_RUN_STATUSES",
    "StepGuard",
    "GuardedStepHandle",
    "attempt_key",
    "heartbeat_key",
    "cancel_key",
    "run_steps_key",
    "celery_steps_still_running",
    "read_json_value",
    "guarded_celery_executor",
    "register_step_task",
]

STEP_TASK_NAME = "shopsimrl.execute_step"
"""The Celery task name of a guarded step (routed to Dagster's ``dagster`` queue like its own task)."""

FINISHED_RUN_STATUSES = frozenset(
    {dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.CANCELING,
     dg.DagsterRunStatus.SUCCESS}
)
"""A step of a run in one of these states must not call an endpoint or write an event any more."""

_log = logging.getLogger("shopsimrl.celery")


def attempt_key(run_id: str, step_key: str) -> str:
    """Instance key-value key holding the step's current attempt (written by the run worker)."""
    return f"shopsimrl/celery-attempt/{run_id}/{step_key}"


def heartbeat_key(run_id: str, step_key: str) -> str:
    """Instance key-value key holding the step's last heartbeat (written by the worker running it)."""
    return f"shopsimrl/celery-beat/{run_id}/{step_key}"


def cancel_key(run_id: str) -> str:
    """Instance key-value key set when the run's steps must stop (its run worker is gone)."""
    return f"shopsimrl/celery-cancel/{run_id}"


def run_steps_key(run_id: str) -> str:
    """Instance key-value key listing the run's Celery steps and its lost-worker bound (written by the run worker)."""
    return f"shopsimrl/celery-steps/{run_id}"


def celery_steps_still_running(instance: dg.DagsterInstance, run_id: str, reason: str) -> list[str]:
    """Ask every Celery step of *run_id* to stop (*reason*); return those whose heartbeat is still fresh.

    Called by the run launcher's health check once the run worker is gone: the run is marked failed
    only when this is empty, so a step of it never calls an endpoint, nor writes an event, after its
    run failed, and the next run of the same endpoint (queued behind it) cannot overlap it. A step
    whose worker is gone too stops counting after the lost-worker bound (heartbeat age on the
    worker's clock against this host's: keep the hosts' clocks in sync, e.g. NTP).
    """
    steps = read_json_value(instance, run_steps_key(run_id))
    if not steps or not steps.get("steps"):
        return []
    _write_json_value(instance, cancel_key(run_id), {"reason": reason, "at": time.time()})
    bound = float(steps.get("lost_after_seconds") or 30.0)
    running = []
    for step_key in steps["steps"]:
        beat = read_json_value(instance, heartbeat_key(run_id, step_key))
        if beat and not beat.get("stopped") and time.time() - float(beat.get("at") or 0) < bound:
            running.append(step_key)
    return running


def read_json_value(instance: dg.DagsterInstance, key: str) -> dict[str, Any] | None:
    """The JSON object stored under *key* in the instance's key-value store, or None."""
    raw = instance.run_storage.get_cursor_values({key}).get(key)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _write_json_value(instance: dg.DagsterInstance, key: str, value: dict[str, Any]) -> None:
    instance.run_storage.set_cursor_values({key: json.dumps(value, sort_keys=True)})


# --------------------------------------------------------------------------------------------------
# worker side
# --------------------------------------------------------------------------------------------------


class StepGuard:
    """Heartbeat, fence and cancellation of one step attempt running in this process's main thread.

    Use as a context manager around the step's execution in the main thread; :meth:`fenced` says
    whether the step was stopped (then nothing of it may be reported).
    """

    def __init__(self, instance: dg.DagsterInstance, run_id: str, step_key: str, attempt: str, *,
                 heartbeat_seconds: float, worker: str) -> None:
        self.instance, self.run_id, self.step_key, self.attempt = instance, run_id, step_key, attempt
        self.heartbeat_seconds = heartbeat_seconds
        self.worker = worker
        self.reason: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._executing = False
        self._thread = threading.Thread(target=self._watch, name=f"shopsimrl-step-guard-{step_key}", daemon=True)
        self._original_handle_new_event: Callable[..., None] | None = None

    @property
    def fenced(self) -> bool:
        """True once the run finished or the attempt was superseded: the step writes nothing more."""
        return self.reason is not None

    def stale_reason(self) -> str | None:
        """Why this attempt must not run (now), or None: finished run, superseded attempt."""
        run = self.instance.get_run_by_id(self.run_id)
        if run is None:
            return f"run {self.run_id} no longer exists"
        if run.status in FINISHED_RUN_STATUSES:
            return f"run {self.run_id} is {run.status.value}"
        cancel = read_json_value(self.instance, cancel_key(self.run_id))
        if cancel is not None:
            return f"run {self.run_id} is being stopped: {cancel.get('reason')}"
        current = read_json_value(self.instance, attempt_key(self.run_id, self.step_key))
        if current is not None and current.get("attempt") != self.attempt:
            return f"step {self.step_key} was handed to attempt {current.get('attempt')}"
        return None

    def confirm_start(self) -> bool:
        """Whether the step may start (else it is fenced), asked after its first heartbeat was written.

        The health check writes a stop request, then reads heartbeats: it waits for this step, or this sees the request.
        """
        if (reason := self.stale_reason()) is not None:
            with self._lock:
                self._fence(reason)
        return not self.fenced

    def beat(self, *, stopped: bool = False) -> None:
        """Write this attempt's heartbeat (a counter the run worker watches, plus who and when).

        ``stopped``: the last one, written when the step is no longer running in this process.
        """
        self._beats = getattr(self, "_beats", 0) + 1
        _write_json_value(self.instance, heartbeat_key(self.run_id, self.step_key), {
            "attempt": self.attempt, "worker": self.worker, "pid": os.getpid(), "beat": self._beats,
            "at": time.time(), "stopped": stopped})

    def __enter__(self) -> StepGuard:
        self._install_fence()
        self.beat()
        with self._lock:
            self._executing = True
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._executing = False
        self._stop.set()
        self._thread.join(timeout=30)
        self._remove_fence()
        current = read_json_value(self.instance, heartbeat_key(self.run_id, self.step_key))
        if current is None or current.get("attempt") == self.attempt:
            self.beat(stopped=True)

    # The fence: events of this run pass only while the attempt is current and the run not finished.
    def _install_fence(self) -> None:
        instance = self.instance
        original = instance.handle_new_event
        self._original_handle_new_event = original

        def handle_new_event(event: Any, *args: Any, **kwargs: Any) -> None:
            if getattr(event, "run_id", None) == self.run_id:
                with self._lock:
                    if self.reason is None:
                        reason = self.stale_reason()
                        if reason is not None:
                            self._fence(reason)
                    if self.reason is not None:
                        return
                    original(event, *args, **kwargs)
                    return
            original(event, *args, **kwargs)

        instance.handle_new_event = handle_new_event  # type: ignore[method-assign]

    def _remove_fence(self) -> None:
        if self._original_handle_new_event is not None:
            self.instance.__dict__.pop("handle_new_event", None)
            self._original_handle_new_event = None

    def _fence(self, reason: str) -> None:
        # Called with self._lock held.
        if self.reason is None:
            self.reason = reason
            _log.warning("step %s of run %s stopped and fenced: %s", self.step_key, self.run_id, reason)

    def _interrupt_main(self) -> None:
        # SIGINT to the main thread: the rollout (shopsimrl_core.runs) cancels cleanly on it, and
        # Dagster's step execution turns it into an interrupted step; both run in the main thread.
        with self._lock:
            if self._executing:
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    def _watch(self) -> None:
        interrupts = 0
        while not self._stop.wait(self.heartbeat_seconds):
            try:
                if not self.fenced:
                    self.beat()
                    reason = self.stale_reason()
                    if reason is not None:
                        with self._lock:
                            self._fence(reason)
                if self.fenced and interrupts < 3:
                    # Once, then again if the step is still running a few heartbeats later.
                    interrupts += 1
                    self._interrupt_main()
            except Exception as exc:  # the instance may be briefly unreachable: try again next beat
                _log.warning("step guard of %s: %s: %s", self.step_key, type(exc).__name__, exc)


@contextmanager
def _captured_interrupts() -> Iterator[None]:
    """Dagster's SIGINT capture for the whole task, so a late SIGINT never reaches Celery's own handler."""
    from dagster._utils.interrupts import capture_interrupts, pop_captured_interrupt  # private: not exported

    with capture_interrupts():
        try:
            yield
        finally:
            pop_captured_interrupt()


def register_step_task(app: Celery) -> Any:
    """Register the guarded step task (:data:`STEP_TASK_NAME`) on the worker's Celery *app*."""
    from celery.exceptions import Ignore  # type: ignore[import-untyped]
    from dagster._core.definitions.reconstruct import ReconstructableJob  # private: no public step execution
    from dagster._core.events import EngineEventData  # private: engine-event data is not exported
    from dagster._core.execution.api import create_execution_plan, execute_plan_iterator  # private: no public one
    from dagster._grpc.types import ExecuteStepArgs  # private: a step's arguments; not exported
    from dagster_celery.core_execution_loop import DELEGATE_MARKER
    from dagster_celery.executor import CeleryExecutor

    @app.task(bind=True, name=STEP_TASK_NAME, track_started=True)
    def execute_step(self: Any, execute_step_args_packed: str, executable_dict: dict, attempt: str,
                     heartbeat_seconds: float, lost_after_seconds: float) -> list[str]:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("shopsimrl.execute_step runs in a worker's main thread only: start the worker with "
                               "--pool solo (or prefork), not threads/eventlet/gevent (docs/scaling.md)")
        args = dg.deserialize_value(execute_step_args_packed, ExecuteStepArgs)
        instance = dg.DagsterInstance.from_ref(args.instance_ref)  # type: ignore[arg-type]
        try:
            step_keys = list(args.step_keys_to_execute or [])
            step_key = step_keys[0] if len(step_keys) == 1 else ", ".join(step_keys)
            worker = f"{self.request.hostname or socket.gethostname()}:{os.getpid()}"
            guard = StepGuard(instance, args.run_id, step_key, attempt, heartbeat_seconds=heartbeat_seconds,
                              worker=worker)
            reason = guard.stale_reason() or _running_elsewhere(instance, args.run_id, step_key, attempt, worker,
                                                                 lost_after_seconds)
            if reason is not None:
                _log.warning("dropping delivery of step %s (attempt %s): %s", step_key, attempt, reason)
                raise Ignore()
            recon_job = ReconstructableJob.from_dict(executable_dict)
            run = instance.get_run_by_id(args.run_id)
            assert run is not None
            plan = create_execution_plan(recon_job, run.run_config, step_keys_to_execute=step_keys,
                                         known_state=args.known_state)
            events: list[Any] = []
            with _captured_interrupts(), guard:
                if not guard.confirm_start():
                    raise Ignore()
                try:
                    events.append(instance.report_engine_event(
                        f"Executing steps {step_key} in celery worker (attempt {attempt[:8]})", run,
                        EngineEventData({"step_keys": step_key, "Celery worker": self.request.hostname,
                                         "attempt": attempt}, marker_end=DELEGATE_MARKER),
                        CeleryExecutor, step_key=step_key))
                    for event in execute_plan_iterator(execution_plan=plan, job=recon_job, dagster_run=run,
                                                       instance=instance, retry_mode=args.retry_mode,
                                                       run_config=run.run_config):
                        events.append(event)
                except BaseException:
                    if guard.fenced:
                        raise Ignore() from None
                    raise
            if guard.fenced:
                raise Ignore()
            return [dg.serialize_value(event) for event in events]
        finally:
            instance.dispose()

    return execute_step


def _running_elsewhere(instance: dg.DagsterInstance, run_id: str, step_key: str, attempt: str, worker: str,
                       lost_after_seconds: float) -> str | None:
    """A reason when this very attempt is already running on another live worker (a broker redelivery)."""
    beat = read_json_value(instance, heartbeat_key(run_id, step_key))
    if beat is None or beat.get("attempt") != attempt or beat.get("worker") == worker:
        return None
    age = time.time() - float(beat.get("at") or 0)
    if age < lost_after_seconds:
        return f"attempt {attempt[:8]} is running on {beat.get('worker')} (heartbeat {age:.0f} s ago)"
    return None


# --------------------------------------------------------------------------------------------------
# run-worker side
# --------------------------------------------------------------------------------------------------


class GuardedStepHandle:
    """The run worker's handle of one Celery step: Dagster's loop polls it like a Celery ``AsyncResult``.

    ``ready()`` also watches the step's heartbeat; a started attempt whose heartbeat has not moved for
    ``lost_after_seconds`` lost its worker, and the step is submitted again as a new attempt (at most
    ``max_resubmits`` times; then the step fails with a message saying so).
    """

    def __init__(self, submit: Callable[[str], AsyncResult], instance: dg.DagsterInstance, run: dg.DagsterRun,
                 step_key: str, *, lost_after_seconds: float, max_resubmits: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._submit, self._instance, self._run, self.step_key = submit, instance, run, step_key
        self.lost_after_seconds, self.max_resubmits = lost_after_seconds, max_resubmits
        self._clock = clock
        self.attempts: list[str] = []
        self._error: str | None = None
        self._start()

    def _start(self) -> None:
        if not self.attempts:
            key = run_steps_key(self._run.run_id)
            steps = read_json_value(self._instance, key) or {}
            known = [step for step in steps.get("steps", []) if step != self.step_key]
            _write_json_value(self._instance, key, {"steps": [*known, self.step_key],
                                                    "lost_after_seconds": self.lost_after_seconds})
        attempt = uuid.uuid4().hex
        _write_json_value(self._instance, attempt_key(self._run.run_id, self.step_key),
                          {"attempt": attempt, "number": len(self.attempts) + 1})
        self.attempts.append(attempt)
        self.result = self._submit(attempt)
        self._last_beat: Any = None
        self._last_change = self._clock()

    @property
    def attempt(self) -> str:
        """The current attempt's id."""
        return self.attempts[-1]

    def ready(self) -> bool:
        """True when the current attempt's task finished (or the step gave up); else checks the heartbeat."""
        if self._error is not None or self.result.ready():
            return True
        beat = read_json_value(self._instance, heartbeat_key(self._run.run_id, self.step_key))
        beat_value = (beat.get("worker"), beat.get("beat")) if beat and beat.get("attempt") == self.attempt else None
        now = self._clock()
        if beat_value is None and self.result.state == "PENDING":
            self._last_change = now  # still queued: waiting for a free worker is not a loss
            return False
        if beat_value != self._last_beat:
            self._last_beat, self._last_change = beat_value, now
            return False
        silent = now - self._last_change
        if silent < self.lost_after_seconds:
            return False
        worker = beat.get("worker") if beat else "unknown"
        if len(self.attempts) > self.max_resubmits:
            self._error = (f"step {self.step_key}: Celery worker {worker} lost (no heartbeat for {silent:.0f} s) "
                           f"after {len(self.attempts)} attempts; giving up")
            self._report(self._error)
            return True
        self._report(f"Celery worker {worker} lost: no heartbeat of step {self.step_key} for {silent:.0f} s; "
                     f"submitting it again (attempt {len(self.attempts) + 1})")
        try:
            self.result.revoke()
        except Exception as exc:  # revoking is a courtesy: the old attempt fences itself anyway
            _log.warning("revoke of lost task %s failed: %s", self.result.id, exc)
        self._start()
        return False

    def get(self) -> Any:
        """The finished attempt's serialized events (raises the task's error, or the give-up message)."""
        if self._error is not None:
            raise RuntimeError(self._error)
        return self.result.get()

    def revoke(self) -> None:
        """Revoke the current attempt (run termination)."""
        self.result.revoke()

    def _report(self, message: str) -> None:
        from dagster._core.events import EngineEventData  # private: engine-event data is not exported

        self._instance.report_engine_event(message, self._run,
                                           EngineEventData({"attempts": len(self.attempts)}), step_key=self.step_key)


def guarded_celery_executor() -> dg.ExecutorDefinition:
    """Dagster's Celery executor (same config) plus ``heartbeat_seconds``, ``lost_after_seconds`` and ``max_resubmits``.

    Steps go out as :data:`STEP_TASK_NAME` on Dagster's ``dagster`` queue; the workers must run
    ``deploy.celery_worker``, which registers that task.
    """
    from dagster import Field
    from dagster._core.execution.retries import RetryMode  # private: the executor's retry mode is not exported
    from dagster_celery.core_execution_loop import core_celery_execution_loop
    from dagster_celery.executor import CELERY_CONFIG, CeleryExecutor

    class GuardedCeleryExecutor(CeleryExecutor):
        def __init__(self, *, heartbeat_seconds: float, lost_after_seconds: float, max_resubmits: int,
                     **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.heartbeat_seconds, self.lost_after_seconds = heartbeat_seconds, lost_after_seconds
            self.max_resubmits = max_resubmits

        def execute(self, plan_context: Any, execution_plan: Any) -> Any:
            return core_celery_execution_loop(plan_context, execution_plan, step_execution_fn=self._submit_step)

        def _submit_step(self, app: Celery, plan_context: Any, step: Any, queue: str, priority: int,
                         known_state: Any) -> GuardedStepHandle:
            from dagster._grpc.types import ExecuteStepArgs  # private: as Dagster's executors send a step

            args = ExecuteStepArgs(
                job_origin=plan_context.reconstructable_job.get_python_origin(),
                run_id=plan_context.dagster_run.run_id,
                step_keys_to_execute=[step.key],
                instance_ref=plan_context.instance.get_ref(),
                retry_mode=plan_context.executor.retries.for_inner_plan(),
                known_state=known_state,
                print_serialized_events=True,
            )
            packed, executable = dg.serialize_value(args), plan_context.reconstructable_job.to_dict()

            def submit(attempt: str) -> AsyncResult:
                return app.send_task(
                    STEP_TASK_NAME,
                    kwargs={"execute_step_args_packed": packed, "executable_dict": executable, "attempt": attempt,
                            "heartbeat_seconds": self.heartbeat_seconds,
                            "lost_after_seconds": self.lost_after_seconds},
                    queue=queue, routing_key=f"{queue}.execute_plan", priority=priority)

            return GuardedStepHandle(submit, plan_context.instance, plan_context.dagster_run, step.key,
                                     lost_after_seconds=self.lost_after_seconds, max_resubmits=self.max_resubmits)

    config_schema = dict(CELERY_CONFIG)
    config_schema.update(
        heartbeat_seconds=Field(float, default_value=2.0, description="Seconds between a running step's heartbeats "
                                "(and run-status checks)."),
        lost_after_seconds=Field(float, default_value=30.0, description="A started step whose heartbeat has not "
                                 "moved this long lost its worker and is submitted again."),
        max_resubmits=Field(int, default_value=3, description="Resubmissions of one step after lost workers."),
    )

    @dg.executor(name="celery", config_schema=config_schema,
                 requirements=dg.multiple_process_executor_requirements())
    def celery_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
        config = init_context.executor_config
        return GuardedCeleryExecutor(
            broker=config.get("broker"), backend=config.get("backend"), config_source=config.get("config_source"),
            include=config.get("include"), retries=RetryMode.from_config(config["retries"]),  # type: ignore[arg-type]
            heartbeat_seconds=float(config["heartbeat_seconds"]),  # type: ignore[arg-type]
            lost_after_seconds=float(config["lost_after_seconds"]),  # type: ignore[arg-type]
            max_resubmits=int(config["max_resubmits"]))  # type: ignore[call-overload]

    return celery_executor
