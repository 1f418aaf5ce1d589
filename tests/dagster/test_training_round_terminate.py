"""Issue 31 acceptance 3 in the real daemon: Terminate stops the trainer's whole process group.

The round's trainer hangs after its first checkpoint with a worker that ignores SIGTERM. Terminating the
``round_trainer`` run (as the UI's Terminate does, over GraphQL) must leave neither the trainer nor its
worker running, within ``training.stop_timeout_s`` of the supervisor being told (plus Dagster's own
termination path), and the registry keeps exactly the whole entry written before.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from daemon_harness import DagsterDev
from testkit.roundkit import add_training_section

from shopsimrl_dagster.registry import read_registry

ROUND = "round-001"
REPOSITORY = {"repositoryLocationName": "shopsimrl", "repositoryName": "__repository__"}
pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def _launch(dev: DagsterDev, job: str, assets: list[str] | None = None) -> str:
    selector: dict[str, Any] = {**REPOSITORY, "pipelineName": job}
    if assets:
        selector["assetSelection"] = [{"path": [a]} for a in assets]
    launched = dev.gql("""mutation Launch($params: ExecutionParams!) { launchRun(executionParams: $params) {
             __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }""",
                       {"params": {"selector": selector, "mode": "default", "executionMetadata": {
                           "tags": [{"key": "dagster/partition", "value": ROUND}]}}})
    assert launched["launchRun"]["__typename"] == "LaunchRunSuccess", launched
    return launched["launchRun"]["run"]["runId"]


def _status(dev: DagsterDev, run_id: str) -> str:
    return dev.gql("query R($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }",
                   {"id": run_id})["runOrError"]["status"]


def test_terminate_stops_the_trainers_whole_group_and_keeps_whole_entries(
        tmp_path: Path, sandbox: Any, settings_writer: Any) -> None:
    def writer(folder: Path, **kwargs: Any) -> Path:
        path = settings_writer(folder, **kwargs)
        add_training_section(path, sandbox, trainer_args=("--hang-after-step", "1"))
        return path

    dev = DagsterDev(tmp_path, sandbox, writer, sensor=False)
    try:
        settings = dev.settings
        stop_timeout = settings.training.stop_timeout_s
        added = dev.gql("""mutation Add($repo: RepositorySelector!, $name: String!, $key: String!) {
                 addDynamicPartition(repositorySelector: $repo, partitionsDefName: $name, partitionKey: $key) {
                   __typename } }""", {"repo": REPOSITORY, "name": "training_rounds", "key": ROUND})
        assert added["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess", added
        inputs = _launch(dev, "__ASSET_JOB", ["round_inputs"])
        dev.wait("round_inputs", lambda: (_status(dev, inputs) in ("SUCCESS", "FAILURE"), _status(dev, inputs)))
        assert _status(dev, inputs) == "SUCCESS"
        run_id = _launch(dev, "round_trainer")
        worker_pid = settings.runs_root / "rounds" / ROUND / "checkpoints" / "worker.pid"

        def hanging() -> tuple[bool, Any]:
            status = _status(dev, run_id)
            assert status not in ("SUCCESS", "FAILURE", "CANCELED"), (status, dev.log_tail())
            return worker_pid.exists() and bool(worker_pid.read_text()), status

        dev.wait("the trainer to hang after its first checkpoint", hanging)
        worker = int(worker_pid.read_text())
        trainer = os.getpgid(worker)  # the trainer leads its own group; the worker is in it
        assert _alive(trainer) and trainer != os.getpgid(dev.process.pid)
        entries = [c.checkpoint_id for c in read_registry(settings.checkpoint_registry)]
        assert entries == [f"{ROUND}-step-000001"]

        started = time.monotonic()
        result = dev.gql("""mutation T($id: String!) { terminateRun(runId: $id) { __typename
                 ... on TerminateRunFailure { message } ... on PythonError { message } } }""", {"id": run_id})
        assert result["terminateRun"]["__typename"] == "TerminateRunSuccess", result
        while (_alive(trainer) or _alive(worker)) and time.monotonic() - started < stop_timeout + 60:
            time.sleep(0.2)
        gone_after = time.monotonic() - started
        assert not _alive(trainer) and not _alive(worker), f"trainer group still running after {gone_after:.1f} s"
        dev.wait("the run to end", lambda: (_status(dev, run_id) in ("CANCELED", "FAILURE"), _status(dev, run_id)))
        status = json.loads((settings.runs_root / "rounds" / ROUND / "trainer_status.json").read_text())
        # the supervisor was told (SIGINT from the Pipes client) and stopped the group: SIGTERM, then SIGKILL for
        # the worker that ignored it, after stop_timeout
        assert status["stopped_by"] and status["stopped_by"][0] in ("SIGINT", "SIGTERM"), status
        print(f"\ntrainer group gone {gone_after:.1f} s after terminateRun (stop_timeout_s {stop_timeout})")
        assert [c.checkpoint_id for c in read_registry(settings.checkpoint_registry)] == entries
        assert sorted(p.name for p in settings.checkpoint_registry.iterdir()) == [f"{entries[0]}.json"]
    finally:
        dev.stop()
