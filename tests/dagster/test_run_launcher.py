"""``LocalProcessRunLauncher`` under the real daemon: it starts the run worker itself, and a termination reaches it.

The launcher starts ``dagster api execute_run`` as the daemon's child (not through the code server), so it
also owns termination: the UI's "Terminate" must mark the run canceling and interrupt that very process
(SIGINT, what the code server sends), and the worker must then finish. What the run does with the interrupt is
the job's: the rollout stops cleanly and stays stopped — Dagster applies a step's RetryPolicy to interrupts, so the
rollout turns the interrupt into a failure that is not retried (``interrupt_is_final``), and the terminated run never
ends SUCCESS. The lost-run-worker path is tests/ui/test_kill.py and tests/scale/test_celery_faults.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from daemon_harness import DagsterDev

from shopsim_sandbox.faults import FaultConfig
from shopsim_sandbox.testing import SandboxServer
from shopsimrl_dagster.instance import RUN_WORKER_PID_TAG, run_worker_pid

pytestmark = pytest.mark.slow

REPOSITORY = {"repositoryLocationName": "shopsimrl", "repositoryName": "__repository__"}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_termination_interrupts_the_run_worker_the_launcher_started(tmp_path: Path, settings_writer: Any,
                                                                  register: Any) -> None:
    # A slow policy (every completion 800 ms late): the rollout is still running when it is terminated.
    with SandboxServer(slots=4, policy_faults=FaultConfig(latency_ms=800)) as slow:
        dev = DagsterDev(tmp_path, slow, settings_writer)
        try:
            register(dev.settings, "term-step-000100", 100)
            with dg.DagsterInstance.from_config(str(dev.home)) as instance:
                instance.add_dynamic_partitions("checkpoints", ["term-step-000100"])
            launched = dev.gql(
                """mutation B($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
                     __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }""",
                {"params": {"selector": {"partitionSetName": "evaluate_val_partition_set",
                                         "repositorySelector": REPOSITORY}, "partitionNames": ["term-step-000100"]}})
            assert launched["launchPartitionBackfill"]["__typename"] == "LaunchBackfillSuccess", launched
            backfill_id = launched["launchPartitionBackfill"]["backfillId"]

            def rollout_started() -> tuple[bool, Any]:
                runs = list(dev.runs("dagster/backfill", backfill_id).values())
                if not runs:
                    return False, None
                with dg.DagsterInstance.from_config(str(dev.home)) as instance:
                    steps = [e.step_key for e in instance.all_logs(runs[0].run_id,
                                                                   of_type=dg.DagsterEventType.STEP_START)]
                started = any(key and key.endswith("rollout_traces") for key in steps)
                return started, (runs[0].run_id, runs[0].status.value, steps)

            run_id, _, _ = dev.wait("the rollout step to start", rollout_started)
            run = dev.runs("dagster/backfill", backfill_id)[run_id]
            with dg.DagsterInstance.from_config(str(dev.home)) as instance:
                reported = run_worker_pid(instance, run_id)
            # The launcher started the worker: its pid is the run's tag and the one the worker reported.
            pid = int(run.tags[RUN_WORKER_PID_TAG])
            assert reported == pid and _alive(pid)

            result = dev.gql("""mutation T($id: String!) { terminateRun(runId: $id) { __typename
                                ... on TerminateRunFailure { message } ... on PythonError { message } } }""",
                             {"id": run_id})
            assert result["terminateRun"]["__typename"] == "TerminateRunSuccess", result

            def finished() -> tuple[bool, Any]:
                status, alive = dev.runs("dagster/backfill", backfill_id)[run_id].status.value, _alive(pid)
                return status in ("SUCCESS", "FAILURE", "CANCELED") and not alive, (status, alive)

            final_status, _ = dev.wait("the run to finish and its worker to exit", finished)
            with dg.DagsterInstance.from_config(str(dev.home)) as instance:
                entries = [e for e in instance.all_logs(run_id) if e.dagster_event]
            kinds = [e.dagster_event.event_type for e in entries]  # type: ignore[union-attr]
            assert dg.DagsterEventType.RUN_CANCELING in kinds
            # The interrupt reached the worker the tag names: the run was canceled, or a step was interrupted.
            interrupted = [e for e in entries if e.step_key and e.dagster_event.event_type in (  # type: ignore[union-attr]
                dg.DagsterEventType.STEP_UP_FOR_RETRY, dg.DagsterEventType.STEP_FAILURE)
                and re.search(r"KeyboardInterrupt|DagsterExecutionInterruptedError", dg.serialize_value(e))]
            assert dg.DagsterEventType.RUN_CANCELED in kinds or interrupted, [k.value for k in kinds]
            # A terminated run is never a success, and its rollout was not started again by the retry policy.
            assert final_status != "SUCCESS", [k.value for k in kinds]
            assert dg.DagsterEventType.STEP_UP_FOR_RETRY not in kinds, [k.value for k in kinds]
        finally:
            dev.stop()
