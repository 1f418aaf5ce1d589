"""The step guard's bookkeeping without Celery: lost-worker detection, resubmission, the fence (issue 26)."""

from __future__ import annotations

import time
from typing import Any

import dagster as dg
import pytest

from shopsimrl_core import ConfigError
from shopsimrl_dagster.deploy.celery_steps import (
    GuardedStepHandle,
    StepGuard,
    attempt_key,
    celery_steps_still_running,
    heartbeat_key,
    read_json_value,
)
from shopsimrl_dagster.deploy.executors import ExecutionSettings, celery_config_source

R1, R2 = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"


class FakeResult:
    def __init__(self, attempt: str) -> None:
        self.attempt, self.state, self.revoked, self.done = attempt, "PENDING", False, False
        self.id = attempt

    def ready(self) -> bool:
        return self.done

    def get(self) -> list[str]:
        return [f"events of {self.attempt[:8]}"]

    def revoke(self) -> None:
        self.revoked = True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _handle(instance: dg.DagsterInstance, clock: Clock, max_resubmits: int = 3) -> tuple[GuardedStepHandle,
                                                                                             list[FakeResult]]:
    run = instance.create_run_for_job(dg.GraphDefinition(name="g").to_job(), run_id=R1)
    results: list[FakeResult] = []

    def submit(attempt: str) -> FakeResult:
        results.append(FakeResult(attempt))
        return results[-1]

    handle = GuardedStepHandle(submit, instance, run, "val__rollout_traces", lost_after_seconds=10,
                               max_resubmits=max_resubmits, clock=clock)
    return handle, results


def _beat(instance: dg.DagsterInstance, attempt: str, n: int, **extra: Any) -> None:
    instance.run_storage.set_cursor_values({heartbeat_key(R1, "val__rollout_traces"): __import__("json").dumps(
        {"attempt": attempt, "worker": "w1@h:1", "beat": n, "at": time.time(), **extra})})


def test_a_started_step_whose_heartbeat_stops_is_submitted_again() -> None:
    clock = Clock()
    with dg.instance_for_test() as instance:
        handle, results = _handle(instance, clock)
        assert read_json_value(instance, attempt_key(R1, "val__rollout_traces"))["attempt"] == handle.attempt
        clock.now = 100  # queued for long: waiting for a free worker is no loss
        assert not handle.ready() and len(results) == 1
        results[0].state = "STARTED"
        for n in range(5):  # a moving heartbeat keeps the attempt
            _beat(instance, handle.attempt, n)
            clock.now += 9
            assert not handle.ready()
        clock.now += 9.9
        assert not handle.ready() and len(results) == 1
        clock.now += 0.2  # 10 s without a new beat: the worker is lost
        assert not handle.ready()
        assert len(results) == 2 and results[0].revoked
        assert read_json_value(instance, attempt_key(R1, "val__rollout_traces"))["attempt"] == results[1].attempt
        results[1].done = True
        assert handle.ready() and handle.get() == [f"events of {results[1].attempt[:8]}"]
        messages = [e.dagster_event.message for e in instance.all_logs(R1) if e.dagster_event]
        assert any("Celery worker w1@h:1 lost" in (m or "") for m in messages)


def test_a_step_gives_up_after_its_resubmissions() -> None:
    clock = Clock()
    with dg.instance_for_test() as instance:
        handle, results = _handle(instance, clock, max_resubmits=1)
        for _ in range(2):
            results[-1].state = "STARTED"
            handle.ready()
            clock.now += 11
            handle.ready()
        assert handle.ready()
        with pytest.raises(RuntimeError, match="after 2 attempts; giving up"):
            handle.get()


def test_the_fence_drops_events_of_a_finished_run_and_the_guard_says_why() -> None:
    with dg.instance_for_test() as instance:
        run = instance.create_run_for_job(dg.GraphDefinition(name="g").to_job(), run_id=R2)
        instance.run_storage.set_cursor_values({attempt_key(R2, "s"): '{"attempt": "a1"}'})
        guard = StepGuard(instance, R2, "s", "a1", heartbeat_seconds=30, worker="w1")
        assert guard.stale_reason() is None
        with guard:
            instance.report_engine_event("before", run)
            instance.report_run_failed(run)  # e.g. by the code server that saw its run worker die
            instance.report_engine_event("after", run)
            assert guard.fenced and "FAILURE" in (guard.reason or "")
        messages = [e.dagster_event.message for e in instance.all_logs(R2) if e.dagster_event]
        assert "before" in messages and "after" not in messages
        assert read_json_value(instance, heartbeat_key(R2, "s"))["stopped"] is True
        # A superseded attempt of a running run is stale too.
        instance.create_run_for_job(dg.GraphDefinition(name="g").to_job(), run_id=R1)
        instance.run_storage.set_cursor_values({attempt_key(R1, "s"): '{"attempt": "a2"}'})
        assert "attempt a2" in (StepGuard(instance, R1, "s", "a1", heartbeat_seconds=30, worker="w").stale_reason()
                                or "")


def test_a_dead_run_worker_s_steps_are_asked_to_stop_and_counted_until_they_have() -> None:
    with dg.instance_for_test() as instance:
        assert celery_steps_still_running(instance, R1, "gone") == []  # no Celery steps: nothing to wait for
        clock = Clock()
        handle, _ = _handle(instance, clock)
        _beat(instance, handle.attempt, 1)
        assert celery_steps_still_running(instance, R1, "run worker pid 7 is gone") == ["val__rollout_traces"]
        assert "pid 7" in read_json_value(instance, f"shopsimrl/celery-cancel/{R1}")["reason"]  # type: ignore[index]
        _beat(instance, handle.attempt, 2, stopped=True)
        assert celery_steps_still_running(instance, R1, "gone") == []


def test_a_step_starting_as_its_run_is_stopped_either_is_waited_for_or_never_starts() -> None:
    """The health check writes the stop request, then reads heartbeats; a step beats, then reads the request."""
    with dg.instance_for_test() as instance:
        clock = Clock()
        handle, _ = _handle(instance, clock)
        # The check comes first: no heartbeat yet, so it waits for nobody — and the step then refuses to start.
        assert celery_steps_still_running(instance, R1, "run worker pid 7 is gone") == []
        guard = StepGuard(instance, R1, "val__rollout_traces", handle.attempt, heartbeat_seconds=30, worker="w1")
        with guard:
            assert not guard.confirm_start() and "pid 7" in (guard.reason or "")
        # The step comes first: its heartbeat is seen, and the run waits for it until it stopped.
        instance.run_storage.set_cursor_values({f"shopsimrl/celery-cancel/{R1}": ""})
        guard = StepGuard(instance, R1, "val__rollout_traces", handle.attempt, heartbeat_seconds=30, worker="w1")
        with guard:
            assert guard.confirm_start()
            assert celery_steps_still_running(instance, R1, "run worker pid 8 is gone") == ["val__rollout_traces"]
        assert celery_steps_still_running(instance, R1, "run worker pid 8 is gone") == []


def test_execution_settings_and_the_celery_settings_both_sides_use() -> None:
    with pytest.raises(ValueError, match="at least 3 x step_heartbeat_seconds"):
        ExecutionSettings(step_heartbeat_seconds=5, step_lost_after_seconds=10)
    source = celery_config_source(ExecutionSettings(celery_visibility_timeout_seconds=7200))
    assert source["task_acks_late"] and source["task_reject_on_worker_lost"]
    assert source["worker_prefetch_multiplier"] == 1
    assert source["broker_transport_options"]["visibility_timeout"] == 7200
    with pytest.raises(ValueError):
        ExecutionSettings(executor="dask")  # type: ignore[arg-type]
    assert isinstance(ConfigError("x", code="pipeline-config-invalid"), Exception)
