"""Acceptance 2: under `dagster dev` (daemon on), killing a rollout's run worker frees its endpoint:
the next queued run of the same endpoint starts, and it completes without redoing finished episodes.

The checkpoint is served by its own slow policy endpoint (a second sandbox whose policy answers with
added latency), so the rollout lasts long enough to be killed in the middle, and runs on the other
endpoint are unaffected.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest

from shopsim_sandbox.faults import FaultConfig
from shopsim_sandbox.testing import SandboxServer
from shopsimrl_dagster.instance import run_worker_pid
from shopsimrl_dagster.registry import Checkpoint, register_checkpoint
from shopsimrl_dagster.settings import load_pipeline_settings

REPOSITORY = {"repositoryLocationName": "shopsimrl", "repositoryName": "__repository__"}

pytestmark = [pytest.mark.ui, pytest.mark.slow]

CHECKPOINT = "kill-step-000300"
EPISODES = 30  # the train suite of the dev settings (10 tasks × 3 repeats): two waves of max_in_flight 16


def _completed(traces: Path) -> list[str]:
    if not traces.exists():
        return []
    done = []
    for line in traces.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn line left by the kill
        if record.get("status") == "completed":
            done.append(record["episode_id"])
    return done


def _status(dagster_dev, run_id: str) -> tuple[str, float | None]:
    data = dagster_dev.gql(
        "query Run($id: ID!) { runOrError(runId: $id) { ... on Run { status startTime } } }", {"id": run_id}
    )
    return data["runOrError"]["status"], data["runOrError"]["startTime"]


def _launch_partition(dagster_dev, job: str, partition: str, trigger: str) -> str:
    """Launch one partition of *job* the way the launchpad does: with the partition's tags (endpoint included)."""
    data = dagster_dev.gql(
        """query Tags($repo: RepositorySelector!, $set: String!, $p: String!) {
             partitionSetOrError(repositorySelector: $repo, partitionSetName: $set) { ... on PartitionSet {
               partition(partitionName: $p) { tagsOrError { ... on PartitionTags { results { key value } } } } } } }""",
        {"repo": REPOSITORY, "set": f"{job}_partition_set", "p": partition},
    )
    tags = data["partitionSetOrError"]["partition"]["tagsOrError"]["results"]
    assert any(t["key"] == "shopsimrl/endpoint" for t in tags), tags
    launched = dagster_dev.gql(
        """mutation Launch($params: ExecutionParams!) { launchRun(executionParams: $params) {
             __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }""",
        {
            "params": {
                "selector": {**REPOSITORY, "pipelineName": job},
                "mode": "default",
                "runConfigData": {},
                "executionMetadata": {"tags": [*tags, {"key": "shopsimrl/trigger", "value": trigger}]},
            }
        },
    )
    assert launched["launchRun"]["__typename"] == "LaunchRunSuccess", launched
    return launched["launchRun"]["run"]["runId"]


def test_killed_run_worker_frees_its_endpoint_for_the_next_queued_run(dagster_dev) -> None:
    with SandboxServer(slots=4, policy_faults=FaultConfig(latency_ms=800)) as slow:
        settings = load_pipeline_settings(dagster_dev.settings_path)
        register_checkpoint(
            settings.checkpoint_registry,
            Checkpoint(CHECKPOINT, 300, served_model=slow.served_model, endpoint=slow.policy_url),
        )
        dagster_dev.add_partition(CHECKPOINT)
        assert dagster_dev.wait_run(dagster_dev.launch_assets(["frozen_split", "job_plan"], {})) == "SUCCESS"
        traces = dagster_dev.runs_root / "train" / CHECKPOINT / "traces.jsonl"

        victim = _launch_partition(dagster_dev, "evaluate_train", CHECKPOINT, "kill-victim")
        deadline = time.monotonic() + 180
        while _status(dagster_dev, victim)[1] is None:
            assert time.monotonic() < deadline, dagster_dev.log_tail()
            time.sleep(0.2)
        # The next run on the same endpoint is created now and waits in the queue behind the running one.
        waiting = _launch_partition(dagster_dev, "evaluate_train", CHECKPOINT, "after-kill")
        while len(_completed(traces)) < 2:
            status = _status(dagster_dev, victim)[0]
            assert status == "STARTED", f"victim {status}:\n{dagster_dev.log_tail()}"
            assert time.monotonic() < deadline, "the rollout never completed an episode"
            time.sleep(0.2)
        assert _status(dagster_dev, waiting)[0] == "QUEUED"

        instance = dg.DagsterInstance.from_config(str(dagster_dev.home))
        try:
            pid = run_worker_pid(instance, victim)
        finally:
            instance.dispose()
        assert pid is not None
        # In-process executor: the run worker is also the rollout's step process.
        os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        before = set(_completed(traces))
        assert 2 <= len(before) < EPISODES, "the kill must land in the middle of the rollout"

        deadline = time.monotonic() + 60
        while _status(dagster_dev, waiting)[1] is None:
            assert time.monotonic() < deadline, f"the queued run did not start within 60 s:\n{dagster_dev.log_tail()}"
            time.sleep(0.5)
        assert _status(dagster_dev, victim)[0] == "FAILURE"
        assert _status(dagster_dev, waiting)[1] >= killed_at - 1
        assert dagster_dev.wait_run(waiting, timeout_s=240) == "SUCCESS", dagster_dev.log_tail()

        meta = dagster_dev.partition_metadata(["train", "rollout_traces"], CHECKPOINT)
        assert meta["episodes_completed_before_this_run"] >= len(before)
        completed = Counter(_completed(traces))
        assert len(completed) == EPISODES
        # Every episode finished before the kill has exactly one completed line: none was redone.
        assert all(completed[episode] == 1 for episode in before)
        assert max(completed.values()) == 1
