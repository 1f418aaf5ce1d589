"""The registry sensor and the nightly schedule, evaluated with Dagster's build contexts."""

from __future__ import annotations

import os
from datetime import UTC, datetime

import dagster as dg
import pytest

from shopsimrl_dagster.defs.partitions import checkpoints
from shopsimrl_dagster.defs.resources import CheckpointRegistry
from shopsimrl_dagster.defs.schedules import build_nightly_schedule
from shopsimrl_dagster.defs.sensors import build_registry_sensor


def _tick(sensor: dg.SensorDefinition, instance: dg.DagsterInstance, registry: CheckpointRegistry):
    with dg.build_sensor_context(instance=instance, resources={"checkpoint_registry": registry}) as context:
        result = sensor(context)
    # What the daemon does with a SensorResult: register the new partitions.
    if isinstance(result, dg.SensorResult):
        for request in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return result


@pytest.mark.slow
def test_sensor_registers_new_checkpoints_once_with_stable_run_keys(offline_settings, register) -> None:
    sensor = build_registry_sensor(offline_settings)
    registry = CheckpointRegistry(folder=str(offline_settings.checkpoint_registry))
    register(offline_settings, "grpo-step-000200", 200)
    register(offline_settings, "grpo-step-000100", 100)
    with dg.instance_for_test() as instance:
        first = _tick(sensor, instance, registry)
        assert isinstance(first, dg.SensorResult)
        requests = {(r.partition_key, r.job_name, r.run_key) for r in first.run_requests}
        assert requests == {
            ("grpo-step-000100", "evaluate_val", "grpo-step-000100:val"),
            ("grpo-step-000200", "evaluate_val", "grpo-step-000200:val"),
        }
        assert set(instance.get_dynamic_partitions(checkpoints.name)) == {"grpo-step-000100", "grpo-step-000200"}

        # Nothing new: no second request for the same checkpoints.
        second = _tick(sensor, instance, registry)
        assert isinstance(second, dg.SkipReason)

        register(offline_settings, "grpo-step-000300", 300)
        third = _tick(sensor, instance, registry)
        assert [(r.partition_key, r.run_key) for r in third.run_requests] == [
            ("grpo-step-000300", "grpo-step-000300:val")
        ]

    # A fresh instance (e.g. a lost partition table) asks again with the same keys, which the
    # daemon de-duplicates: the request is idempotent per checkpoint and suite.
    with dg.instance_for_test() as instance:
        again = _tick(sensor, instance, registry)
        assert {r.run_key for r in again.run_requests} == {
            "grpo-step-000100:val",
            "grpo-step-000200:val",
            "grpo-step-000300:val",
        }


def test_schedule_picks_the_highest_training_step_not_the_newest_file(offline_settings, register) -> None:
    schedule = build_nightly_schedule(offline_settings)
    registry = CheckpointRegistry(folder=str(offline_settings.checkpoint_registry))
    register(offline_settings, "run7-step-000900", 900)
    register(offline_settings, "run7-step-001200", 1200)
    newest = register(offline_settings, "run7-step-000300", 300)
    # Make the low-step file the most recently modified one as well.
    folder = offline_settings.checkpoint_registry
    os.utime(folder / f"{newest.checkpoint_id}.json", (2_000_000_000, 2_000_000_000))
    when = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
    with dg.instance_for_test() as instance:
        # Used as a context manager so its resources are torn down here, not whenever the garbage
        # collector finds them (which would reset Dagster's current state storage mid-way through
        # a later test).
        with dg.build_schedule_context(
            instance=instance, scheduled_execution_time=when, resources={"checkpoint_registry": registry}
        ) as context:
            request = schedule(context)
        assert isinstance(request, dg.RunRequest)
        assert request.partition_key == "run7-step-001200"
        assert request.run_key == "nightly:2026-11-30:run7-step-001200:val"
        assert request.tags["shopsimrl/checkpoint-step"] == "1200"
        assert instance.has_dynamic_partition(checkpoints.name, "run7-step-001200")
    assert schedule.job_name == "evaluate_val"


def test_schedule_skips_an_empty_registry(offline_settings) -> None:
    schedule = build_nightly_schedule(offline_settings)
    registry = CheckpointRegistry(folder=str(offline_settings.checkpoint_registry))
    with dg.instance_for_test() as instance:
        with dg.build_schedule_context(
            instance=instance,
            scheduled_execution_time=datetime(2026, 11, 30, 3, tzinfo=UTC),
            resources={"checkpoint_registry": registry},
        ) as context:
            result = schedule(context)
        assert isinstance(result, dg.SkipReason)
        assert "is empty" in (result.skip_message or "")


def test_sensor_and_schedule_start_running_unless_the_settings_say_otherwise(offline_settings) -> None:
    assert build_registry_sensor(offline_settings).default_status == dg.DefaultSensorStatus.RUNNING
    assert build_nightly_schedule(offline_settings).default_status == dg.DefaultScheduleStatus.RUNNING
    quiet = offline_settings.model_copy(
        update={
            "automation": offline_settings.automation.model_copy(
                update={"sensor_running": False, "schedule_running": False}
            )
        }
    )
    assert build_registry_sensor(quiet).default_status == dg.DefaultSensorStatus.STOPPED
    assert build_nightly_schedule(quiet).default_status == dg.DefaultScheduleStatus.STOPPED


@pytest.mark.slow
def test_a_bad_registry_file_is_named_and_skipped_while_the_rest_register(offline_settings, register, capfd) -> None:
    import subprocess
    import sys

    sensor = build_registry_sensor(offline_settings)
    folder = offline_settings.checkpoint_registry
    registry = CheckpointRegistry(folder=str(folder))
    register(offline_settings, "good-step-000100", 100)
    (folder / "half.json").write_text('{"checkpoint_id": "half-step-1", "st', encoding="utf-8")
    (folder / "latin1.json").write_bytes('{"checkpoint_id": "caf\xe9", "step": 1}'.encode("latin-1"))
    (folder / "badurl.json").write_text(
        '{"checkpoint_id": "u-1", "step": 1, "endpoint": "gpu-3:30000"}', encoding="utf-8"
    )
    with dg.instance_for_test() as instance:
        result = _tick(sensor, instance, registry)
        assert [r.partition_key for r in result.run_requests] == ["good-step-000100"]
        assert instance.get_dynamic_partitions(checkpoints.name) == ["good-step-000100"]
    # The tick's log (what the UI shows for the tick) carries one warning line per bad file.
    warnings = [line for line in capfd.readouterr().err.splitlines() if " - WARNING - skipped " in line]
    for name, fix in (
        ("half.json", "not valid JSON"),
        ("latin1.json", "not UTF-8"),
        ("badurl.json", "endpoint: must be an http(s) URL"),
    ):
        line = next(w for w in warnings if name in w)
        assert fix in line and "\n" not in line

    cli = subprocess.run(
        [sys.executable, "-m", "shopsimrl_dagster.registry", "list", "--registry", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 1 and "Traceback" not in cli.stderr
    assert '"good-step-000100"' in cli.stdout
    assert len([line for line in cli.stderr.splitlines() if line.startswith("warning: skipped ")]) == 3


def test_evaluation_runs_carry_the_endpoint_of_their_checkpoint(offline_settings, register) -> None:
    from shopsimrl_dagster.definitions import build_definitions

    register(offline_settings, "own-endpoint", 1, endpoint="http://GPU-7:30000/v1/")
    register(offline_settings, "default-endpoint", 2)
    location = build_definitions(offline_settings)
    for job_name in ("evaluate_val", "evaluate_train", "build_skills"):
        job = location.resolve_job_def(job_name)
        assert (
            job.partitioned_config.get_tags_for_partition_key("own-endpoint")["shopsimrl/endpoint"]
            == "http://gpu-7:30000/v1"
        )
        assert (
            job.partitioned_config.get_tags_for_partition_key("default-endpoint")["shopsimrl/endpoint"]
            == offline_settings.inference.base_url
        )
