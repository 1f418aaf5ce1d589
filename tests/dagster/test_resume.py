"""Killing a rollout midway and re-materializing the partition finishes it without redoing episodes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
from dagster_helpers import materialized, run_job, trace_lines

from shopsim_sandbox.testing import SandboxServer
from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.settings import load_pipeline_settings

CHILD = Path(__file__).with_name("rollout_child.py")
EPISODES = 30


@pytest.mark.slow
def test_rerun_after_kill_completes_without_redoing_finished_episodes(
    tmp_path: Path, settings_writer, register
) -> None:
    # Environment latency makes the rollout long enough to be killed in the middle.
    with SandboxServer(slots=4, latency_ms=25) as server:
        path = settings_writer(
            tmp_path,
            env_url=server.env_url,
            policy_url=server.policy_url,
            served_model=server.served_model,
            split_file=server.split_file,
            val_sample=EPISODES,
            max_in_flight=3,
        )
        settings = load_pipeline_settings(path)
        register(settings, "ckpt-killed", 5)
        traces = settings.runs_root / "val" / "ckpt-killed" / "traces.jsonl"

        log = tmp_path / "child.log"
        with log.open("wb") as sink:
            child = subprocess.Popen(
                [sys.executable, str(CHILD), str(path), "ckpt-killed"],
                start_new_session=True,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 120
        while len(trace_lines(traces)) < 6:
            assert child.poll() is None, f"the child exited early:\n{log.read_text(errors='replace')[-3000:]}"
            assert time.monotonic() < deadline, "the rollout never started writing traces"
            time.sleep(0.05)
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)

        before = {r["episode_id"] for r in trace_lines(traces) if r.get("status") == "completed"}
        assert 6 <= len(before) < EPISODES, "the kill must land in the middle of the rollout"

        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions("checkpoints", ["ckpt-killed"])
            location = build_definitions(settings)
            run_job(location, "prepare_plans", instance)
            result = run_job(location, "evaluate_val", instance, "ckpt-killed")
        assert all(e.passed for e in result.get_asset_check_evaluations())
        metadata = materialized(result, "val/rollout_traces")
        assert metadata["episodes_completed_before_this_run"] == len(before)
        assert metadata["coverage"] == 1.0

        records = trace_lines(traces)
        completed = Counter(r["episode_id"] for r in records if r.get("status") == "completed")
        assert len(completed) == EPISODES
        # Every episode finished before the kill has exactly one completed line: none was redone.
        assert all(completed[episode] == 1 for episode in before)
        assert max(completed.values()) == 1
