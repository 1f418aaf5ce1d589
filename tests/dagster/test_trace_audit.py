"""The blocking rollout checks over the core trace audit (``shopsimrl_core.audit_traces``, unit-tested in
tests/core/test_audit.py), on real traces of a Dagster rollout with planted defects."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
from dagster_helpers import run_job

from shopsimrl_core import audit_traces
from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.defs.checks import rollout_check_results

KEY = dg.AssetKey(["val", "rollout_traces"])


def _real_traces(settings, register) -> Path:
    register(settings, "ckpt-audit", 1)
    location = build_definitions(settings)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-audit"])
        run_job(location, "prepare_plans", instance)
        assert run_job(location, "evaluate_val", instance, "ckpt-audit").success
    return settings.runs_root / "val" / "ckpt-audit" / "traces.jsonl"


@pytest.mark.slow
def test_planted_goal_text_schema_break_and_torn_line_are_each_reported(
    tmp_path: Path, sandbox_settings, register
) -> None:
    source = _real_traces(sandbox_settings, register)
    records = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()]
    clean = audit_traces(source)
    assert (clean.lines, clean.invalid_count, clean.torn_lines, clean.leaks) == (8, 0, 0, [])

    # A persona task whose full instruction differs from what the agent was shown.
    victim = next(r for r in records if r["final"]["goal"]["instruction_text"] != r["reset"]["task_instruction"])
    victim["conversation"][1]["content"] += "\n" + victim["final"]["goal"]["instruction_text"]
    broken = dict(records[0], schema_version="shopsimrl-episode-v3")
    planted = tmp_path / "traces.jsonl"
    lines = [json.dumps(r, ensure_ascii=False) for r in records] + [
        json.dumps(broken, ensure_ascii=False),
        '{"episode_id": "task-0000',
    ]
    planted.write_text("\n".join(lines) + "\n", encoding="utf-8")

    audit = audit_traces(planted)
    checks = {
        r.check_name: r
        for r in rollout_check_results(
            asset_key=KEY,
            coverage=1.0,
            audit=audit,
            manifest=None,
            job_plan=None,
            guarded=False,
            ledger_path=tmp_path / "ledger.jsonl",
            run_dir=tmp_path,
        )
    }
    assert {name: r.passed for name, r in checks.items()} == {
        "coverage_complete": True,
        "trace_lines_valid": False,
        "plan_matches_job_plan": False,
        "no_private_goal_in_prompts": False,
        "test_split_opt_in_recorded": True,
    }
    valid = checks["trace_lines_valid"]
    assert valid.description.startswith("line 9:") and "schema_version" in valid.description
    assert valid.metadata["torn_lines"].value == 1 and valid.metadata["invalid_lines"].value == 1
    leak = checks["no_private_goal_in_prompts"]
    assert leak.description == f"{victim['episode_id']}: conversation.1 (user) contains goal.instruction_text"


def test_a_guarded_run_without_its_opt_in_record_fails_the_check(tmp_path: Path) -> None:
    audit = audit_traces(tmp_path / "missing.jsonl")
    manifest = {"plan_fingerprint": "abc", "plan": {}}
    results = {
        r.check_name: (r.passed, r.description)
        for r in rollout_check_results(
            asset_key=KEY,
            coverage=0.0,
            audit=audit,
            manifest=manifest,
            job_plan={"jobs_fingerprint": "x"},
            guarded=True,
            ledger_path=tmp_path / "test-access.jsonl",
            run_dir=tmp_path,
        )
    }
    passed, text = results["test_split_opt_in_recorded"]
    assert not passed and "no test_access opt-in record" in text
    manifest["test_access"] = {"opted_in": True, "source": "dagster run r1"}
    (tmp_path / "test-access.jsonl").write_text(
        json.dumps({"run_dir": str(tmp_path), "plan_fingerprint": "abc", "at": "t"}) + "\n"
    )
    results = {
        r.check_name: r.passed
        for r in rollout_check_results(
            asset_key=KEY,
            coverage=1.0,
            audit=audit,
            manifest=manifest,
            job_plan={"jobs_fingerprint": "x"},
            guarded=True,
            ledger_path=tmp_path / "test-access.jsonl",
            run_dir=tmp_path,
        )
    }
    assert results["test_split_opt_in_recorded"] is True
    assert results["plan_matches_job_plan"] is False  # the stored fingerprint is not the plan's
