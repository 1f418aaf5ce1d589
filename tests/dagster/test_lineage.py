"""The evaluation jobs executed in process against a real sandbox (loopback HTTP, real run directories)."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
from dagster_helpers import materialized, run_job

from shopsim_sandbox.faults import FaultConfig
from shopsim_sandbox.testing import SandboxServer
from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.run_tags import ALLOW_TEST_SPLIT_TAG
from shopsimrl_dagster.settings import load_pipeline_settings


def _checks(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


@pytest.mark.slow
def test_each_suite_job_evaluates_its_own_suite_for_two_checkpoints(sandbox_settings, register) -> None:
    register(sandbox_settings, "ckpt-step-000100", 100)
    register(sandbox_settings, "ckpt-step-000200", 200)
    location = build_definitions(sandbox_settings)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-step-000100", "ckpt-step-000200"])
        plans = run_job(location, "prepare_plans", instance)
        assert materialized(plans, "job_plan")["val_episodes"] == 8
        assert materialized(plans, "frozen_split")["val_tasks"] == 60

        results = {
            key: run_job(location, "evaluate_val", instance, key) for key in ("ckpt-step-000100", "ckpt-step-000200")
        }
        train = run_job(location, "evaluate_train", instance, "ckpt-step-000200")
        for result in [*results.values(), train]:
            # The rollout's five checks; each val run also has its comparison (step 100's: "no baseline") and its
            # regression check; train's step 200 waits for a train summary of step 100 (none here).
            assert len(_checks(result)) == 5 + (result is not train) and all(_checks(result).values())
        assert _checks(results["ckpt-step-000200"])["no_regression_vs_best"] is True
        for result in [*results.values(), train]:
            # Evaluation jobs materialize evaluation assets only (never the skills lineage).
            keys = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
            assert all(k.split("/")[0] in ("val", "train") for k in keys), keys

        for key, result in results.items():
            run_dir = sandbox_settings.runs_root / "val" / key
            for name in ("manifest.json", "traces.jsonl", "summary.json", "summary_chart.png"):
                assert (run_dir / name).is_file(), name
            rollout = materialized(result, "val/rollout_traces")
            assert rollout["suite"] == "val" and rollout["coverage"] == 1.0 and rollout["episodes_completed"] == 8
            assert list(rollout)[0] == "verdict"  # issue 33: the verdict leads, in words
            assert rollout["verdict"].startswith("8/8 episodes completed (coverage 1.00), 0 failed; ")
            assert rollout["episodes"] == f"http://127.0.0.1:3300/run/val/{key}"
            summary = materialized(result, "val/eval_summary")
            on_disk = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
            assert summary["reward"] == on_disk["primary"]["reward_mean"]
            assert summary["success_ci_low"] == on_disk["primary"]["success_ci"]["low"]
            assert summary["success_display"].startswith(f"{on_disk['primary']['success_rate']:.3f} [")
            assert {row.data["category"] for row in summary["per_category"].records} == set(
                on_disk["breakdowns"]["category"]
            )
            assert summary["chart"].startswith("![")

        # The first checkpoint has no baseline: materialized as just that (issue 33), with no comparison document.
        first = materialized(results["ckpt-step-000100"], "val/checkpoint_comparison")
        assert first["verdict"].startswith("no baseline: ") and first["baseline"] is None
        assert not list((sandbox_settings.runs_root / "val" / "ckpt-step-000100").glob("comparison*.json"))
        second = materialized(results["ckpt-step-000200"], "val/checkpoint_comparison")
        assert second["baseline"] == "ckpt-step-000100" and second["pairs"] == 8
        assert (
            sandbox_settings.runs_root / "val" / "ckpt-step-000200" / "comparison_vs_ckpt-step-000100.json"
        ).is_file()

        # Suite × checkpoint identity: val has both partitions, train only the one that ran, with train numbers.
        val_records = instance.fetch_materializations(dg.AssetKey(["val", "eval_summary"]), limit=10).records
        assert {r.partition_key for r in val_records} == {"ckpt-step-000100", "ckpt-step-000200"}
        train_records = instance.fetch_materializations(dg.AssetKey(["train", "eval_summary"]), limit=10).records
        assert [r.partition_key for r in train_records] == ["ckpt-step-000200"]
        train_disk = json.loads(
            (sandbox_settings.runs_root / "train" / "ckpt-step-000200" / "summary.json").read_text()
        )
        assert train_records[0].asset_materialization.metadata["reward"].value == train_disk["primary"]["reward_mean"]
        assert materialized(train, "train/rollout_traces")["episodes_completed"] == 6  # 3 tasks × 2 repeats
        # With repeats the intervals resample tasks, and the label says so (issue 23).
        train_summary = materialized(train, "train/eval_summary")
        design = train_disk["primary"]["sampling_design"]
        assert "(task-cluster Wilson 95%, n=3 tasks × 2" in train_summary["success_display"]
        assert "(task-cluster bootstrap 95%, n=3 tasks × 2" in train_summary["reward_display"]
        assert train_summary["tasks"] == design["tasks"] == 3
        # One repeat on val: the label published before issue 23.
        assert summary["success_display"].endswith("(Wilson 95%, n=8)")
        val_dir = sandbox_settings.runs_root / "val" / "ckpt-step-000200"
        comparison = json.loads((val_dir / "comparison_vs_ckpt-step-000100.json").read_text())
        reward = comparison["paired"]["metrics"]["reward"]
        assert second["mde_reward"] == reward["minimum_detectable_difference"]
        assert second["within_noise_reward"] is reward["within_noise"]

        progress = run_job(location, "progress_charts", instance)
        chart = materialized(progress, "val/progress")
        assert [r.data["step"] for r in chart["points"].records] == [100, 200]
        assert (
            chart["chart"].startswith("![")
            and (sandbox_settings.runs_root / "_progress" / "val" / "progress.png").is_file()
        )


@pytest.mark.slow
def test_test_suite_runs_only_with_the_launch_opt_in_and_records_it(sandbox_settings, register) -> None:
    register(sandbox_settings, "ckpt-final", 900)
    location = build_definitions(sandbox_settings)
    root = sandbox_settings.runs_root
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-final"])
        run_job(location, "prepare_plans", instance)
        before = sorted(p.relative_to(root) for p in root.rglob("*"))
        refused = run_job(location, "evaluate_test", instance, "ckpt-final", raise_on_error=False)
        assert not refused.success
        failure = next(e for e in refused.all_events if e.event_type_value == "STEP_FAILURE")
        assert ALLOW_TEST_SPLIT_TAG in failure.event_specific_data.error.message
        # Refused before anything was written: no run dir, no config file, no ledger line; one attempt only.
        assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
        assert not refused.get_asset_materialization_events()
        assert sum(e.event_type_value == "STEP_RESTARTED" for e in refused.all_events) == 0

        allowed = run_job(location, "evaluate_test", instance, "ckpt-final", tags={ALLOW_TEST_SPLIT_TAG: "true"})
        assert _checks(allowed)["test_split_opt_in_recorded"] is True
        assert materialized(allowed, "test/rollout_traces")["suite"] == "test"
        manifest = json.loads((root / "test" / "ckpt-final" / "manifest.json").read_text())
        assert manifest["test_access"]["opted_in"] is True
        ledger = (root / "test-access.jsonl").read_text().splitlines()
        assert len(ledger) == 1 and json.loads(ledger[0])["checkpoint_id"] == "ckpt-final"


@pytest.fixture(scope="module")
def failing_policy_sandbox():
    """A sandbox whose policy answers every chat completion with HTTP 500."""
    with SandboxServer(slots=4, policy_faults=FaultConfig(rate_500=1.0)) as server:
        yield server


@pytest.mark.slow
def test_a_refused_rollout_stops_the_lineage_with_one_line(
    tmp_path: Path, settings_writer, register, failing_policy_sandbox
) -> None:
    server = failing_policy_sandbox
    settings = load_pipeline_settings(
        settings_writer(
            tmp_path,
            env_url=server.env_url,
            policy_url=server.policy_url,
            served_model=server.served_model,
            split_file=server.split_file,
            val_sample=2,
            max_retries=1,
        )
    )
    register(settings, "ckpt-broken", 1)
    location = build_definitions(settings)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-broken"])
        run_job(location, "prepare_plans", instance)
        result = run_job(location, "evaluate_val", instance, "ckpt-broken", raise_on_error=False)
        assert not result.success
        failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
        message = failure.event_specific_data.error.message
        assert "[model-probe-failed]" in message and "HTTP 500" in message
        # A refusal is configuration/data, not a crash: not retried, and nothing below it ran.
        assert not any(e.event_type_value == "STEP_RESTARTED" for e in result.all_events)
        assert not result.get_asset_materialization_events()
        assert not (settings.runs_root / "val" / "ckpt-broken" / "summary_chart.png").exists()
