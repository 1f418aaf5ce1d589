"""`shopsimrl training preflight` and `shopsimrl training summarize` on a real round against the sandbox."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from testkit.training_sandbox import lapse_curriculum, policy_server, training_config, write_split_subset

from shopsimrl_core.export import export_slime_tasks
from shopsimrl_core.skills._curriculum import write_curriculum
from shopsimrl_core.training._factory import session_from_training_config

pytestmark = pytest.mark.slow

_SCRIPT = Path(sys.executable).with_name("shopsimrl")
EXE = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "shopsimrl_core.cli._main"]
IDLE = {"polite": "保持礼貌。", "calm": "不要着急。"}
ALL_LAPSES = {"ignore_budget": 1.0, "first_option": 1.0, "impatient": 1.0, "terse_query": 1.0, "runner_up": 0.0}


def _round_files(tmp_path: Path, sandbox: Any, policy_url: str, model: str) -> Path:
    split = write_split_subset(tmp_path, Path(sandbox.split_file), {"train": 3})
    evaluation = training_config(tmp_path, split_file=split, env_url=sandbox.env_url, policy_url=policy_url,
                                 model=model, name="evaluation",
                                 extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    curriculum = lapse_curriculum(IDLE)
    bank = {"schema_version": "shopsimrl-skillbank-v1", "bank_version": "1", "skills": [
        {"skill_id": c["skill_id"], "content": c["content"], "version": "1", "enabled": True,
         "metadata": c["metadata"]} for c in curriculum["chunks"]]}
    (tmp_path / "bank.json").write_text(json.dumps(bank, ensure_ascii=False), encoding="utf-8")
    write_curriculum(curriculum, tmp_path / "curriculum.json")
    export_slime_tasks(split, "train", tmp_path / "tasks.jsonl", curriculum=curriculum)
    training = {"evaluation": evaluation.name, "out_dir": "round-001", "group_size": 2, "adapter": None,
                "sampling": {"temperature": 1.0, "max_tokens": 256}, "backend": {"kind": "vllm-chat"},
                "curriculum": "curriculum.json", "skillbank": "bank.json", "task_data": "tasks.jsonl"}
    path = tmp_path / "training.yaml"
    path.write_text(yaml.safe_dump(training, allow_unicode=True), encoding="utf-8")
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EXE, *args], capture_output=True, text=True, timeout=300)


def test_preflight_passes_a_consistent_round_and_names_each_problem(tmp_path: Path, sandbox: Any) -> None:
    config = _round_files(tmp_path, sandbox, sandbox.policy_url, sandbox.served_model)
    done = _cli("training", "preflight", str(config))
    assert done.returncode == 0, done.stderr
    said = done.stdout
    for part in ("curriculum: 2 chunks equal to the SkillBank", "task data: all 3 train task ids exactly once",
                 "backend vllm-chat: exact tokens with logprobs", "environment "):
        assert part in said, said
    # the bank changed after the curriculum was built: one line naming the chunk, nothing else wrong
    bank = json.loads((tmp_path / "bank.json").read_text(encoding="utf-8"))
    bank["skills"][1]["content"] = "别的内容。"
    (tmp_path / "bank.json").write_text(json.dumps(bank, ensure_ascii=False), encoding="utf-8")
    done = _cli("training", "preflight", str(config))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "chunk 'calm': its text differs from the SkillBank's" in lines[0], done.stderr


def test_summarize_reports_a_round(tmp_path: Path, sandbox: Any) -> None:
    with policy_server(tmp_path, ALL_LAPSES) as url:
        config = _round_files(tmp_path, sandbox, url, "policy")
        session = session_from_training_config(config)

        async def play() -> None:
            async with session:
                for task in session.plan.split.task_ids:
                    await session.play_group(task)

        asyncio.run(play())
    done = _cli("training", "summarize", str(tmp_path / "round-001"))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["round_id"] == "round-001" and report["groups"] == 3 and report["episodes"] == 6
    assert report["classifications"]["full_skill_failure_pending_analysis"] == 3
    assert report["success_histogram"] == {"0": 3} and report["frontier_share"] == 0.0
    assert report["abort_rate"] == 0.0 and report["diagnostic_retries"] == 3
    assert report["samples_per_episode"] >= 1.0 and report["tokens_per_second"] > 0
    assert len(report["pending_analysis_episode_ids"]) == 6
    missing = _cli("training", "summarize", str(tmp_path / "nope"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
