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


def _tick(location, instance, cursor):
    """One evaluation of the progress sensor as the daemon makes it: ``(run requests, new cursor)``."""
    sensor = location.get_sensor_def("progress_sensor")
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, repository_def=location.get_repository_def(), sensor_name=sensor.name
    )
    with dg.partition_loading_context(dynamic_partitions_store=instance):  # as the daemon's tick has it
        data = sensor.evaluate_tick(context)
    return data.run_requests or [], data.cursor


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
        requests, cursor = _tick(location, instance, None)  # the first tick only starts the cursor
        assert requests == [] and cursor is not None
        run_job(location, "evaluate_val", instance, "c-2")  # first: c-1 has no summary, no comparison
        later = Path(settings.runs_root) / "val" / "c-2"
        assert (later / "summary.json").exists() and not (later / "comparison_vs_c-1.json").exists()
        assert comparisons_to_catch_up(settings, "val", "c-2") == []
        run_job(location, "evaluate_val", instance, "c-1")
        assert comparisons_to_catch_up(settings, "val", "c-1") == ["c-2"]

        # Issue 33 item 7: ONE tick handles both finished evaluations: one chart run, and c-2's comparison
        # (Dagster's run_status_sensor handled one run per tick: c-2's chart now, c-1's a tick later).
        requests, cursor = _tick(location, instance, cursor)
        assert [r.job_name for r in requests] == ["progress_charts", "evaluate_val"]
        charts = [dg.AssetKey(["val", "progress"]), dg.AssetKey(["val", "best_checkpoint"])]
        assert requests[0].asset_selection == charts
        catch_up = requests[1]
        assert catch_up.partition_key == "c-2"
        assert catch_up.asset_selection == [dg.AssetKey(["val", "checkpoint_comparison"])]
        assert catch_up.run_key == "comparison:val:c-2:c-1"
        assert _tick(location, instance, cursor)[0] == []  # nothing left over for the next tick

        job = location.resolve_job_def("evaluate_val")
        done = job.execute_in_process(
            instance=instance, partition_key="c-2", asset_selection=catch_up.asset_selection
        )
        assert done.success
        assert (later / "comparison_vs_c-1.json").exists()
        assert comparisons_to_catch_up(settings, "val", "c-1") == []
        # The catch-up run is an evaluate_val run too: the next tick charts it, and once more only while
        # no chart run of its own is still waiting to start.
        requests, cursor = _tick(location, instance, cursor)
        assert [r.job_name for r in requests] == ["progress_charts"]
        instance.create_run_for_job(
            location.resolve_job_def("progress_charts"), asset_selection=frozenset(requests[0].asset_selection),
            tags={"shopsimrl/trigger": "progress-sensor"},
        )  # created, not started: the chart it will draw reads the summaries when it starts
        job.execute_in_process(instance=instance, partition_key="c-2", asset_selection=catch_up.asset_selection)
        assert _tick(location, instance, cursor)[0] == []
