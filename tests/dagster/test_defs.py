"""The code location loads, validates, and has the expected assets, checks, jobs and automation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from shopsimrl_core import ConfigError
from shopsimrl_dagster.definitions import defs
from shopsimrl_dagster.instance import prepare_dagster_home
from shopsimrl_dagster.registry import Checkpoint, read_registry, register_checkpoint
from shopsimrl_dagster.settings import load_pipeline_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
LINEAGE = {"frozen_split", "job_plan", "rollout_traces", "eval_summary", "checkpoint_comparison"}
CHECKS = {
    "coverage_complete",
    "trace_lines_valid",
    "plan_matches_job_plan",
    "no_private_goal_in_prompts",
    "test_split_opt_in_recorded",
}


@pytest.fixture(scope="module", autouse=True)
def live_instance():
    # The defs-folder loader reads state through the current instance; keep a live one for this
    # module (an instance disposed by an earlier test may still be registered in this process).
    with dg.instance_for_test() as instance:
        yield instance


@pytest.fixture(scope="module")
def location(live_instance) -> dg.Definitions:
    return defs()


def test_definitions_load_and_validate(location: dg.Definitions) -> None:
    dg.Definitions.validate_loadable(location)
    repo = location.get_repository_def()
    keys = {key.to_user_string() for key in repo.asset_graph.get_all_asset_keys()}
    assert LINEAGE <= keys
    assert {job.name for job in repo.get_all_jobs()} >= {"evaluate_val", "evaluate_test", "evaluate_train", "prepare_plans"}
    assert {s.name for s in repo.sensor_defs} == {"checkpoint_registry_sensor"}
    assert {s.name for s in repo.schedule_defs} == {"nightly_latest_checkpoint"}
    assert set(repo.get_top_level_resources()) >= {
        "inference_endpoint", "shopsim_environment", "run_storage", "checkpoint_registry", "evaluation_suites"
    }


def test_rollout_checks_are_blocking_and_rollouts_share_the_gpu_pool(location: dg.Definitions) -> None:
    repo = location.get_repository_def()
    rollout = repo.assets_defs_by_key[dg.AssetKey("rollout_traces")]
    specs = {spec.name: spec for spec in rollout.check_specs}
    assert set(specs) == CHECKS
    assert all(spec.blocking for spec in specs.values())
    assert {op.pool for op in rollout.node_def.iterate_op_defs()} == {"gpu_endpoint"}
    for key in ("rollout_traces", "eval_summary", "checkpoint_comparison"):
        partitions = repo.assets_defs_by_key[dg.AssetKey(key)].partitions_def
        assert isinstance(partitions, dg.DynamicPartitionsDefinition) and partitions.name == "checkpoints"
    assert repo.assets_defs_by_key[dg.AssetKey("job_plan")].partitions_def is None


def test_evaluation_jobs_carry_their_suite_and_no_test_opt_in(location: dg.Definitions) -> None:
    for suite in ("val", "test", "train"):
        job = location.resolve_job_def(f"evaluate_{suite}")
        assert job.run_tags.get("shopsimrl/suite") == suite
        # The test opt-in is a launch-time tag only; no job may carry it.
        assert "shopsimrl/allow-test-split" not in job.run_tags
        keys = {k.to_user_string() for k in job.asset_layer.executable_asset_keys}
        assert keys >= {"rollout_traces", "eval_summary", "checkpoint_comparison"}
        assert not keys & {"frozen_split", "job_plan"}, "unpartitioned assets would re-run in every partition run"


def test_workspace_yaml_validates_with_the_dagster_cli(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
        env={"PATH": "/usr/bin:/bin", "DAGSTER_HOME": str(prepare_dagster_home(tmp_path / "home")), "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Validation successful for code location shopsimrl" in result.stdout + result.stderr


def test_instance_template_limits_each_endpoint_pool_to_one_rollout(tmp_path: Path) -> None:
    home = prepare_dagster_home(tmp_path / "home")
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        config = instance.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 1
        assert config.pool_config.pool_granularity.value == "op"
    finally:
        instance.dispose()


def test_settings_errors_name_file_and_key(tmp_path: Path, settings_writer) -> None:
    path = settings_writer(tmp_path)
    text = path.read_text(encoding="utf-8").replace("max_in_flight:", "max_in_flihgt:")
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_pipeline_settings(path)
    assert f"{path}: inference.max_in_flihgt: unknown key" in str(error.value)

    path = settings_writer(tmp_path)
    path.write_text(path.read_text(encoding="utf-8").replace("nightly_suite: val", "nightly_suite: vall"), encoding="utf-8")
    with pytest.raises(ConfigError, match="suites.vall: unknown suite; defined suites: test, train, val"):
        load_pipeline_settings(path)


def test_registry_rejects_bad_entries_with_file_and_key(tmp_path: Path) -> None:
    folder = tmp_path / "registry"
    folder.mkdir()
    (folder / "broken.json").write_text(json.dumps({"checkpoint_id": "ok-1", "step": "400"}), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"broken.json: step: must be a non-negative integer training step \(got '400'\)"):
        read_registry(folder)
    (folder / "broken.json").write_text(json.dumps({"checkpoint_id": "bad id", "step": 1}), encoding="utf-8")
    with pytest.raises(ConfigError, match="checkpoint_id: must be a non-empty string"):
        read_registry(folder)
    (folder / "broken.json").unlink()
    register_checkpoint(folder, Checkpoint("ckpt-a", 10))
    register_checkpoint(folder, Checkpoint("ckpt-a", 10))  # same content: a no-op
    with pytest.raises(ConfigError, match="already registered with other values"):
        register_checkpoint(folder, Checkpoint("ckpt-a", 11))
    assert [c.checkpoint_id for c in read_registry(folder)] == ["ckpt-a"]
