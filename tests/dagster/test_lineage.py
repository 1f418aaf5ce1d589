"""The lineage materialized in process against a real sandbox (loopback HTTP, real run directories)."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from shopsim_sandbox.faults import FaultConfig
from shopsim_sandbox.testing import SandboxServer
from shopsimrl_dagster.defs import assets as lineage
from shopsimrl_dagster.defs.resources import resources_from_settings
from shopsimrl_dagster.run_tags import ALLOW_TEST_SPLIT_TAG, SUITE_TAG
from shopsimrl_dagster.settings import load_pipeline_settings

PLANS = [lineage.frozen_split, lineage.job_plan]
PER_CHECKPOINT = [lineage.rollout_traces, lineage.eval_summary, lineage.checkpoint_comparison]


def _metadata(result: dg.ExecuteInProcessResult, key: str) -> dict:
    events = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == key]
    assert events, f"{key} was not materialized"
    return {name: getattr(value, "value", value) for name, value in events[-1].materialization.metadata.items()}


def _checks(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def test_lineage_for_two_checkpoint_partitions(sandbox_settings, sandbox_resources, register) -> None:
    register(sandbox_settings, "ckpt-step-000100", 100)
    register(sandbox_settings, "ckpt-step-000200", 200)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-step-000100", "ckpt-step-000200"])
        plans = dg.materialize(PLANS, resources=sandbox_resources, instance=instance)
        assert plans.success
        assert _metadata(plans, "job_plan")["val_episodes"] == 8
        assert _metadata(plans, "frozen_split")["val_tasks"] == 60

        results = {}
        for key in ("ckpt-step-000100", "ckpt-step-000200"):
            results[key] = dg.materialize(PER_CHECKPOINT, resources=sandbox_resources, instance=instance, partition_key=key)
            assert results[key].success
            assert all(_checks(results[key]).values()) and len(_checks(results[key])) == 5

        for key, result in results.items():
            run_dir = sandbox_settings.runs_root / "val" / key
            for name in ("manifest.json", "traces.jsonl", "summary.json", "summary_chart.png"):
                assert (run_dir / name).is_file(), name
            rollout = _metadata(result, "rollout_traces")
            assert rollout["coverage"] == 1.0 and rollout["episodes_completed"] == 8
            summary = _metadata(result, "eval_summary")
            on_disk = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
            assert summary["reward"] == on_disk["primary"]["reward_mean"]
            assert summary["success_ci_low"] <= summary["success_rate"] <= summary["success_ci_high"]
            assert "| category |" in summary["per_category"]
            assert summary["chart"].startswith("![")

        first = _metadata(results["ckpt-step-000100"], "checkpoint_comparison")
        assert first["status"].startswith("skipped")
        second = _metadata(results["ckpt-step-000200"], "checkpoint_comparison")
        assert second["status"] == "compared" and second["baseline"] == "ckpt-step-000100"
        assert second["pairs"] == 8
        assert (sandbox_settings.runs_root / "val" / "ckpt-step-000200" / "comparison_vs_ckpt-step-000100.json").is_file()
        # Both partitions are visible to Dagster with their own reward.
        records = instance.fetch_materializations(dg.AssetKey("eval_summary"), limit=10).records
        assert {r.partition_key for r in records} == {"ckpt-step-000100", "ckpt-step-000200"}


def test_test_split_runs_only_with_the_launch_tag_and_record_it(sandbox_settings, sandbox_resources, register) -> None:
    register(sandbox_settings, "ckpt-final", 900)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-final"])
        assert dg.materialize(PLANS, resources=sandbox_resources, instance=instance).success
        refused = dg.materialize(
            PER_CHECKPOINT, resources=sandbox_resources, instance=instance, partition_key="ckpt-final",
            tags={SUITE_TAG: "test"}, raise_on_error=False,
        )
        assert not refused.success
        failure = next(e for e in refused.all_events if e.event_type_value == "STEP_FAILURE")
        assert ALLOW_TEST_SPLIT_TAG in failure.event_specific_data.error.message
        assert not (sandbox_settings.runs_root / "test" / "ckpt-final").exists()

        allowed = dg.materialize(
            PER_CHECKPOINT, resources=sandbox_resources, instance=instance, partition_key="ckpt-final",
            tags={SUITE_TAG: "test", ALLOW_TEST_SPLIT_TAG: "true"},
        )
        assert allowed.success
        assert _checks(allowed)["test_split_opt_in_recorded"] is True
        manifest = json.loads((sandbox_settings.runs_root / "test" / "ckpt-final" / "manifest.json").read_text())
        assert manifest["test_access"]["opted_in"] is True
        ledger = (sandbox_settings.runs_root / "test-access.jsonl").read_text().splitlines()
        assert len(ledger) == 1 and json.loads(ledger[0])["checkpoint_id"] == "ckpt-final"


@pytest.fixture(scope="module")
def failing_policy_sandbox():
    """A sandbox whose policy answers every chat completion with HTTP 500."""
    with SandboxServer(slots=4, policy_faults=FaultConfig(rate_500=1.0)) as server:
        yield server


def test_a_failed_blocking_check_stops_the_summary(tmp_path: Path, settings_writer, register, failing_policy_sandbox) -> None:
    server = failing_policy_sandbox
    settings = load_pipeline_settings(settings_writer(
        tmp_path, env_url=server.env_url, policy_url=server.policy_url, served_model=server.served_model,
        split_file=server.split_file, val_sample=2, max_retries=1,
    ))
    register(settings, "ckpt-broken", 1)
    resources = resources_from_settings(settings)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-broken"])
        assert dg.materialize(PLANS, resources=resources, instance=instance).success
        result = dg.materialize(
            PER_CHECKPOINT, resources=resources, instance=instance, partition_key="ckpt-broken", raise_on_error=False
        )
        assert not result.success
        checks = _checks(result)
        assert checks["coverage_complete"] is False
        assert checks["trace_lines_valid"] is True
        materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
        assert "eval_summary" not in materialized and "checkpoint_comparison" not in materialized
        assert not (settings.runs_root / "val" / "ckpt-broken" / "summary_chart.png").exists()
        # The failed episodes are on disk, with their failure stage in the rollout metadata.
        rollout = _metadata(result, "rollout_traces")
        assert rollout["coverage"] == 0.0 and rollout["episodes_failed"] == 2
