"""The registry sensor never loses a request to a run that failed before any step started (issue 24).

The sensor's bookkeeping on a real (temporary) instance with runs in the states it must tell apart; then
the whole path with the real daemon: ``dagster dev`` whose run launcher fails the first two launches (the
sensor's run and Dagster's own retry of it), and the checkpoint's partition ends materialized without a human.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from daemon_harness import DagsterDev

from shopsimrl_dagster.defs.resources import CheckpointRegistry
from shopsimrl_dagster.defs.sensors import MAX_REQUEST_ATTEMPTS, build_registry_sensor, requests_to_renew
from shopsimrl_dagster.run_tags import TRIGGER_TAG


def _tick(sensor: dg.SensorDefinition, instance: dg.DagsterInstance, registry: CheckpointRegistry) -> Any:
    with dg.build_sensor_context(instance=instance, resources={"checkpoint_registry": registry}) as context:
        result = sensor(context)
    if isinstance(result, dg.SensorResult):  # what the daemon does with it: register the partitions
        for request in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return result


def _run(instance: dg.DagsterInstance, checkpoint_id: str, run_key: str | None, trigger: str | None = "registry-sensor",
         job: str = "evaluate_val") -> dg.DagsterRun:
    tags = {"dagster/partition": checkpoint_id}
    tags.update({TRIGGER_TAG: trigger} if trigger else {})
    tags.update({"dagster/run_key": run_key} if run_key else {})
    return instance.create_run_for_job(dg.GraphDefinition(name=job).to_job(), tags=tags)


def _fail_at_start(instance: dg.DagsterInstance, checkpoint_id: str, run_key: str,
                   job: str = "evaluate_val") -> dg.DagsterRun:
    run = _run(instance, checkpoint_id, run_key, job=job)
    instance.report_run_failed(run, "injected: the launch failed")
    return run


def _fail_in_a_step(instance: dg.DagsterInstance, checkpoint_id: str, run_key: str) -> None:
    @dg.op
    def rollout() -> None:
        raise RuntimeError("a real failure of the step")

    @dg.job(name="evaluate_val")
    def evaluate_val() -> None:
        rollout()

    result = evaluate_val.execute_in_process(
        instance=instance, raise_on_error=False,
        tags={"dagster/partition": checkpoint_id, TRIGGER_TAG: "registry-sensor", "dagster/run_key": run_key})
    assert not result.success


def test_a_request_whose_run_failed_before_any_step_is_renewed_a_bounded_number_of_times(
        offline_settings, register, capfd) -> None:
    sensor = build_registry_sensor(offline_settings)
    registry = CheckpointRegistry(folder=str(offline_settings.checkpoint_registry))
    register(offline_settings, "lost-step-000100", 100)
    with dg.instance_for_test() as instance:
        first = _tick(sensor, instance, registry)
        assert [r.run_key for r in first.run_requests] == ["lost-step-000100:val"]
        assert isinstance(_tick(sensor, instance, registry), dg.SkipReason)  # queued or running: nothing to do

        failed = _fail_at_start(instance, "lost-step-000100", "lost-step-000100:val")
        renewed = _tick(sensor, instance, registry)
        assert [(r.run_key, r.partition_key, r.job_name) for r in renewed.run_requests] == [
            ("lost-step-000100:val:attempt-2", "lost-step-000100", "evaluate_val")]
        assert renewed.run_requests[0].tags[TRIGGER_TAG] == "registry-sensor"
        assert renewed.run_requests[0].tags["shopsimrl/checkpoint-step"] == "100"
        assert renewed.dynamic_partitions_requests == []
        # The tick's log (what the UI shows for the tick) says which run was lost and which request this is.
        line = next(line for line in capfd.readouterr().err.splitlines() if failed.run_id in line)
        assert " - WARNING - " in line and "failed before any step started" in line
        assert f"request 2 of {MAX_REQUEST_ATTEMPTS}" in line

        for attempt in range(2, MAX_REQUEST_ATTEMPTS):
            _fail_at_start(instance, "lost-step-000100", f"lost-step-000100:val:attempt-{attempt}")
            again = _tick(sensor, instance, registry)
            assert [r.run_key for r in again.run_requests] == [f"lost-step-000100:val:attempt-{attempt + 1}"]
        last = _fail_at_start(instance, "lost-step-000100", f"lost-step-000100:val:attempt-{MAX_REQUEST_ATTEMPTS}")
        done = _tick(sensor, instance, registry)
        assert isinstance(done, dg.SkipReason)
        assert last.run_id in (done.skip_message or "") and "not requested again" in (done.skip_message or "")


def test_failures_in_a_step_retries_pending_later_runs_and_cancels_are_left_alone(offline_settings) -> None:
    suite_by_job = {"evaluate_val": "val"}
    with dg.instance_for_test() as instance:
        _fail_in_a_step(instance, "stepped", "stepped:val")
        _fail_at_start(instance, "backfilled", "backfilled:val")
        _run(instance, "backfilled", None, trigger=None)  # a later run from a backfill: in flight
        _fail_at_start(instance, "not-registered", "not-registered:val")
        canceled = _run(instance, "canceled", "canceled:val")
        instance.report_run_canceled(canceled)
        _fail_at_start(instance, "other-suite", "other-suite:train", job="evaluate_train")  # not the sensor's suite
        renewals, given_up = requests_to_renew(
            instance, {"stepped", "backfilled", "canceled", "other-suite"}, suite_by_job)
        assert renewals == [] and given_up == []

    # With Dagster's run retries on, a failure Dagster is about to retry is Dagster's to handle.
    with dg.instance_for_test(overrides={"run_retries": {"enabled": True, "max_retries": 1}}) as instance:
        waiting = _fail_at_start(instance, "retrying", "retrying:val")
        assert instance.get_run_by_id(waiting.run_id).is_complete_and_waiting_to_retry  # type: ignore[union-attr]
        assert requests_to_renew(instance, {"retrying"}, suite_by_job) == ([], [])


# --------------------------------------------------------------------------------------------------
# the real daemon
# --------------------------------------------------------------------------------------------------


def _statuses(runs: dict[str, dg.DagsterRun]) -> dict[str, str]:
    return {run_id: run.status.value for run_id, run in runs.items()}


@pytest.mark.slow
def test_the_daemon_ends_with_the_checkpoint_materialized_when_its_first_launches_fail(
        tmp_path: Path, sandbox: Any, settings_writer, register) -> None:
    dev = DagsterDev(tmp_path, sandbox, settings_writer, failures=2, sensor=True)
    try:
        register(dev.settings, "flaky-step-000100", 100)

        def check() -> tuple[bool, dict[str, str]]:
            statuses = _statuses(dev.runs("dagster/partition", "flaky-step-000100"))
            return "SUCCESS" in statuses.values(), statuses

        dev.wait("an evaluation of the registered checkpoint", check)
        with dg.DagsterInstance.from_config(str(dev.home)) as instance:
            materialized = instance.get_materialized_partitions(dg.AssetKey(["val", "eval_summary"]))
        records = list(dev.runs("dagster/partition", "flaky-step-000100").values())
        assert "flaky-step-000100" in materialized
        by_key = {run.tags.get("dagster/run_key"): run for run in records}
        # The sensor's run failed at launch, Dagster retried it (same run key, a retry number) and that
        # failed too; the sensor then requested it again, and that run evaluated the checkpoint.
        failed = [run for run in records if run.status == dg.DagsterRunStatus.FAILURE]
        assert len(failed) == 2 and any(run.tags.get("dagster/retry_number") == "1" for run in failed), \
            [(run.tags.get("dagster/run_key"), run.status) for run in records]
        assert by_key["flaky-step-000100:val:attempt-2"].status == dg.DagsterRunStatus.SUCCESS
    finally:
        dev.stop()


@pytest.mark.slow
def test_what_a_job_backfill_shows_when_a_run_retry_saved_its_partition(
        tmp_path: Path, sandbox: Any, settings_writer, register) -> None:
    dev = DagsterDev(tmp_path, sandbox, settings_writer, failures=1, sensor=False)
    partitions = ["bf-step-000100", "bf-step-000200"]
    try:
        for step, checkpoint_id in enumerate(partitions, 1):
            register(dev.settings, checkpoint_id, 100 * step)
        with dg.DagsterInstance.from_config(str(dev.home)) as instance:
            instance.add_dynamic_partitions("checkpoints", partitions)
        launched = dev.gql(
            """mutation B($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
                 __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }""",
            {"params": {"selector": {"partitionSetName": "evaluate_val_partition_set",
                                     "repositorySelector": {"repositoryLocationName": "shopsimrl",
                                                            "repositoryName": "__repository__"}},
                        "partitionNames": partitions}})
        assert launched["launchPartitionBackfill"]["__typename"] == "LaunchBackfillSuccess", launched
        backfill_id = launched["launchPartitionBackfill"]["backfillId"]
        query = """query B($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill {
                     status partitionStatuses { results { partitionName runStatus runId } } } } }"""

        def check() -> tuple[bool, Any]:
            backfill = dev.gql(query, {"id": backfill_id})["partitionBackfillOrError"]
            runs = _statuses(dev.runs("dagster/backfill", backfill_id))
            finished = backfill["status"] not in ("REQUESTED",) and all(
                status in ("SUCCESS", "FAILURE", "CANCELED") for status in runs.values())
            return finished and "SUCCESS" in runs.values() and len(runs) >= 3, (backfill, runs)

        backfill, runs = dev.wait("the backfill and the retry of its failed run", check)
        per_partition = {p["partitionName"]: p["runStatus"] for p in backfill["partitionStatuses"]["results"]}
        print(f"\nbackfill status {backfill['status']}; partitionStatuses {per_partition}; runs {runs}")
        with dg.DagsterInstance.from_config(str(dev.home)) as instance:
            materialized = instance.get_materialized_partitions(dg.AssetKey(["val", "eval_summary"]))
        records = dev.runs("dagster/backfill", backfill_id).values()
        # One launch failed and Dagster's run retry (same backfill tag, a retry number) evaluated that partition.
        assert sorted(run.status.value for run in records) == ["FAILURE", "SUCCESS", "SUCCESS"], runs
        assert any(run.tags.get("dagster/retry_number") == "1" and run.status == dg.DagsterRunStatus.SUCCESS
                   for run in records)
        assert set(partitions) <= set(materialized)
        # What Dagster 1.13 shows (docs/pipeline.md, "Reading a backfill's status"): the backfill's status is
        # COMPLETED_FAILED (the UI's "Failed" tag) because one of its runs failed, although every partition
        # succeeded; the per-partition statuses (the backfill page's Partitions table: Succeeded / Failed
        # counts) follow each partition's latest run and say SUCCESS for both.
        assert backfill["status"] == "COMPLETED_FAILED"
        assert per_partition == {partition: "SUCCESS" for partition in partitions}
    finally:
        dev.stop()
