"""A backfill evaluates checkpoints side by side, so a later checkpoint can finish before its baseline and get no
comparison. The progress sensor catches it up: after the baseline's evaluation succeeds it requests the later
checkpoint's comparison (and only then)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from dagster_helpers import run_job

from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.defs.sensors import comparisons_to_catch_up


@pytest.mark.slow
def test_the_progress_sensor_requests_the_comparison_a_later_checkpoint_missed(
    sandbox_settings, register
) -> None:
    settings = sandbox_settings
    register(settings, "c-1", 1)
    register(settings, "c-2", 2)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["c-1", "c-2"])
        location = build_definitions(settings)
        run_job(location, "prepare_plans", instance)
        run_job(location, "evaluate_val", instance, "c-2")  # first: c-1 has no summary, no comparison
        later = Path(settings.runs_root) / "val" / "c-2"
        assert (later / "summary.json").exists() and not (later / "comparison_vs_c-1.json").exists()
        assert comparisons_to_catch_up(settings, "val", "c-2") == []
        result = run_job(location, "evaluate_val", instance, "c-1")
        assert comparisons_to_catch_up(settings, "val", "c-1") == ["c-2"]

        run = instance.get_run_by_id(result.run_id)
        success = next(
            e.dagster_event for e in instance.all_logs(result.run_id, of_type=dg.DagsterEventType.RUN_SUCCESS)
        )
        sensor = location.get_sensor_def("progress_sensor")
        context = dg.build_run_status_sensor_context(
            sensor_name="progress_sensor", dagster_event=success, dagster_instance=instance, dagster_run=run
        )
        requests = sensor(context)
        assert [r.job_name for r in requests] == ["progress_charts", "evaluate_val"]
        catch_up = requests[1]
        assert catch_up.partition_key == "c-2"
        assert catch_up.asset_selection == [dg.AssetKey(["val", "checkpoint_comparison"])]
        assert catch_up.run_key == "comparison:val:c-2:c-1"

        job = location.resolve_job_def("evaluate_val")
        done = job.execute_in_process(
            instance=instance, partition_key="c-2", asset_selection=catch_up.asset_selection
        )
        assert done.success
        assert (later / "comparison_vs_c-1.json").exists()
        assert comparisons_to_catch_up(settings, "val", "c-1") == []
