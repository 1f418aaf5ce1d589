"""verifiers' own `vf-eval` plays the ShopSimulator environment (shopsimrl-verifiers) against the sandbox policy
and gets the rewards `shopsimrl run` gets on the same tasks and seeds (issue 30, acceptance 1).

Both are real: the sandbox environment and its policy server over loopback HTTP, `shopsimrl run` and `vf-eval`
as subprocesses (the installed console scripts). The policy's lapses are drawn from the request seed, so a
seed lost on the verifiers path changes rewards; the test also reads the seeds verifiers recorded per call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from shopsimrl_core.runs.planning._jobs import call_seed

# no importorskip: verifiers is part of the [dev] extra, and this test must fail, not skip, without it

BIN = Path(sys.executable).parent


def _config(tmp_path: Path, sandbox: Any, **tasks: Any) -> Path:
    # temperature > 0: mode train refuses greedy decoding (nothing to train on); both sides send the same one
    data = {
        "experiment": {"name": "vf-parity", "output_dir": "runs", "seed": 20261204, "concurrency": 4},
        "tasks": {"split_file": str(sandbox.split_file), "split": "val", "sample_size": 8, **tasks},
        "environment": {"base_url": sandbox.env_url, "timeout": 30},
        "model": {"name": sandbox.served_model, "base_url": sandbox.policy_url, "api_key_env": None,
                  "temperature": 1.0, "max_retries": 3, "retry_backoff_seconds": 0.05},
    }
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _vf_eval(config: Path, sandbox: Any, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if "API_KEY" not in k}  # nothing of the caller's goes upstream
    argv = [str(BIN / "vf-eval"), "shopsimrl-verifiers", "--env.taskset.config", str(config),
            "-m", sandbox.served_model, "--client.base-url", sandbox.policy_url,
            "--client.api-key-var", "SHOPSIMRL_TEST_NO_SUCH_KEY", "--no-push", "--no-rich",
            "-c", "4", "-o", str(out), "--run.name", "parity", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=out.parent)


def _run(config: Path) -> dict[str, dict[str, Any]]:
    """`shopsimrl run` of *config*: its trace records by episode id."""
    done = subprocess.run([str(BIN / "shopsimrl"), "run", "--progress", "none", str(config)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    records = {}
    for line in (config.parent / "runs" / "vf-parity" / "traces.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        records[record["episode_id"]] = record
    return records


def _episodes(out: Path) -> list[dict[str, Any]]:
    lines = (out / "parity" / "traces.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.slow
def test_vf_eval_rewards_equal_shopsimrl_run_on_the_same_tasks_and_seeds(tmp_path: Path, sandbox: Any) -> None:
    config = _config(tmp_path, sandbox)
    records = _run(config)
    assert len(records) == 8 and all(r["status"] == "completed" for r in records.values())

    played = _vf_eval(config, sandbox, tmp_path / "vf")
    assert played.returncode == 0, played.stderr[-3000:]
    episodes = _episodes(tmp_path / "vf")
    assert len(episodes) == 8
    rewards_vf: dict[str, float] = {}
    for episode in episodes:
        assert episode["ok"], episode["errors"]
        (trace,) = episode["traces"]
        data = episode["task"]["data"]
        eid = data["id"]
        record = records[eid]
        # the same job: task, sample and seed of the evaluation plan
        assert {k: data[k] for k in ("task_id", "sample_id", "seed", "split")} == record["job"]
        rewards_vf[eid] = trace["rewards"]["environment_reward"]["score"]
        # every model call went through verifiers with the evaluator's per-call seed
        seeds = [call["sampling"]["seed"] for call in trace["calls"]]
        assert seeds == [call_seed(record["job"]["seed"], step["step_index"]) for step in record["steps"]]
        summary = trace["info"]["shopsimrl"]
        assert summary["steps"] == len(record["steps"])
        assert summary["termination_reason"] == record["final"]["termination_reason"]
    rewards_run = {eid: float(r["final"]["reward"]) for eid, r in records.items()}
    assert rewards_vf == rewards_run
    # not a degenerate sample: the parity is checked on more than one reward value
    assert len(set(rewards_run.values())) > 1


@pytest.mark.slow
def test_a_guarded_split_is_refused_and_nothing_is_played(tmp_path: Path, sandbox: Any) -> None:
    config = _config(tmp_path, sandbox, split="test")
    played = _vf_eval(config, sandbox, tmp_path / "vf")
    assert played.returncode != 0
    assert "guarded test split" in played.stderr
    assert not (tmp_path / "vf" / "parity" / "traces.jsonl").exists()


@pytest.mark.slow
def test_train_mode_plays_grpo_groups_through_the_training_session(tmp_path: Path, sandbox: Any) -> None:
    config = _config(tmp_path, sandbox, split="train", sample_size=3, repeats=2)
    records = _run(config)  # the same jobs evaluated: groups of 2 are samples 0 and 1 of each task
    assert len(records) == 6
    out = tmp_path / "session"
    played = _vf_eval(config, sandbox, tmp_path / "vf", "--env.taskset.mode", "train",
                      "--env.taskset.out-dir", str(out), "--env.taskset.group-size", "2", "-r", "2")
    assert played.returncode == 0, played.stderr[-3000:]
    episodes = _episodes(tmp_path / "vf")
    assert len(episodes) == 6 and all(e["ok"] for e in episodes)
    trained = {}
    for line in (out / "traces.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        trained[record["episode_id"]] = record
    assert sorted(trained) == sorted(records)  # same tasks, samples (and so seeds) as the evaluation
    for episode in episodes:
        (trace,) = episode["traces"]
        eid = trace["info"]["shopsimrl"]["episode_id"]
        block = trained[eid]["training"]
        assert block["adapter"] == "verifiers" and block["group_key"] == str(trained[eid]["job"]["task_id"])
        assert trained[eid]["job"] == records[eid]["job"]
        reward = trace["rewards"]["environment_reward"]["score"]
        assert reward == trained[eid]["final"]["reward"] == records[eid]["final"]["reward"]
    triage = sorted((out / "triage").glob("*.json"))
    assert len(triage) == 3  # every group completed (by its last finisher)
    for path in triage:
        assert len(json.loads(path.read_text(encoding="utf-8"))["members"]) == 2
