"""The trace audit (shopsimrl_core.audit_traces) on real sandbox traces with planted defects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from testkit.core_runkit import record

from shopsimrl_core import audit_traces, goal_leaks, load_config, run_evaluation


@pytest.fixture
def real_traces(tmp_path: Path, sandbox: Any) -> Path:
    data = {
        "experiment": {"name": "audit", "output_dir": str(tmp_path / "runs"), "seed": 20260830, "concurrency": 4},
        "tasks": {"split_file": str(sandbox.split_file), "split": "val", "sample_size": 6},
        "environment": {"base_url": sandbox.env_url, "timeout": 30},
        "model": {"name": sandbox.served_model, "base_url": sandbox.policy_url, "api_key_env": None,
                  "max_retries": 3, "retry_backoff_seconds": 0.05},
    }
    path = tmp_path / "audit.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = run_evaluation(load_config(path))
    assert result.counts.completed == 6
    return result.traces_path


def test_clean_run_then_planted_leak_schema_break_and_torn_line(tmp_path: Path, real_traces: Path) -> None:
    records = [json.loads(line) for line in real_traces.read_text(encoding="utf-8").splitlines()]
    clean = audit_traces(real_traces)
    assert (clean.lines, clean.invalid_count, clean.torn_lines, clean.leaks) == (6, 0, 0, [])
    assert len(clean.latest) == 6 and all(o.completed for o in clean.latest.values())
    assert clean.failures_by_stage == {}

    victim = next(r for r in records if r["final"]["goal"]["instruction_text"] != r["reset"]["task_instruction"])
    victim["conversation"][1]["content"] += "\n" + victim["final"]["goal"]["instruction_text"]
    broken = dict(records[0], schema_version="shopsimrl-episode-v3")
    planted = tmp_path / "planted.jsonl"
    lines = [json.dumps(r, ensure_ascii=False) for r in records] + [
        "",
        json.dumps(broken, ensure_ascii=False),
        '{"episode_id": "task-0000',
    ]
    planted.write_text("\n".join(lines) + "\n", encoding="utf-8")

    audit = audit_traces(planted)
    assert audit.lines == 8  # the blank line is not counted
    assert audit.torn_lines == 1
    assert audit.invalid_count == 1 and audit.invalid[0].startswith("line 8:") and "schema_version" in audit.invalid[0]
    assert audit.leaks == [f"{victim['episode_id']}: conversation.1 (user) contains goal.instruction_text"]
    # The invalid line does not replace the episode's valid latest record.
    assert audit.latest[records[0]["episode_id"]].completed


def test_goal_leaks_finds_hidden_reasoning_and_the_serialised_goal() -> None:
    rec = record(3)
    secret = "prefers quiet brands, never says so"
    rec["final"]["goal"] = {"instruction_text": "x", "user_persona": {"__reasoning__": secret}}
    rec["conversation"] = [{"role": "system", "content": "你是购物助手"}, {"role": "user", "content": "买一件外套"}]
    assert goal_leaks(rec) == []
    rec["steps"][0]["observation"] = f"page … {secret}"
    rec["conversation"].append({"role": "tool", "content": '{"instruction_text": "x", "goal_options": {}}'})
    assert goal_leaks(rec) == [
        f"{rec['episode_id']}: conversation.2 (tool) contains the serialised goal object",
        f"{rec['episode_id']}: steps.1.observation contains goal.user_persona.__reasoning__",
    ]
    # The assistant's own words are not model input of the environment's making.
    assert goal_leaks({**rec, "conversation": [{"role": "assistant", "content": secret}], "steps": []}) == []


def test_failed_latest_records_are_counted_by_stage_and_missing_file_is_empty(tmp_path: Path) -> None:
    failed = record(4, status="failed", steps=[])
    lines = [record(4, steps=[]), failed, record(5, steps=[])]
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    audit = audit_traces(path)
    assert audit.invalid == [] and len(audit.latest) == 2
    assert audit.latest[failed["episode_id"]].completed is False
    assert audit.failures_by_stage == {failed["error"]["stage"]: 1}
    empty = audit_traces(tmp_path / "missing.jsonl")
    assert (empty.lines, empty.latest, empty.leaks) == (0, {}, [])
