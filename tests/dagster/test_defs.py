"""The code location loads, validates, and has the expected assets, checks, jobs and automation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from shopsimrl_core import ConfigError
from shopsimrl_dagster.definitions import defs
from shopsimrl_dagster.instance import prepare_dagster_home
from shopsimrl_dagster.registry import Checkpoint, read_registry, register_checkpoint
from shopsimrl_dagster.settings import PIPELINE_CONFIG_ENV, load_pipeline_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
SUITES = ("test", "train", "val")
PER_SUITE = ("rollout_traces", "eval_summary", "checkpoint_comparison", "progress", "best_checkpoint")
SKILLS = {"episode_labels", "skill_candidates", "skill_gate", "skillbank_snapshot"}
RESEARCH = {"trace2skill_draft", "round_candidate_pool", "round_online_gate", "round_selected_bank",
            "round_curriculum", "judge_verdicts"}  # shopsimrl_dagster/defs/research.py (docs/research.md)
CHECKS = {
    "coverage_complete",
    "trace_lines_valid",
    "plan_matches_job_plan",
    "no_private_goal_in_prompts",
    "test_split_opt_in_recorded",
}


@pytest.fixture(scope="module")
def location() -> dg.Definitions:
    # The defs-folder loader reads state through the current instance; hold one only while loading.
    with dg.instance_for_test():
        return defs()


def test_definitions_load_with_one_asset_set_per_suite(location: dg.Definitions) -> None:
    dg.Definitions.validate_loadable(location)
    repo = location.get_repository_def()
    keys = {key.to_user_string() for key in repo.asset_graph.get_all_asset_keys()}
    assert keys == {"frozen_split", "job_plan", *SKILLS, *RESEARCH, *(f"{s}/{a}" for s in SUITES for a in PER_SUITE)}
    assert {job.name for job in repo.get_all_jobs()} >= {
        "evaluate_val",
        "evaluate_test",
        "evaluate_train",
        "prepare_plans",
        "progress_charts",
        "build_skills",
    }
    assert {s.name for s in repo.sensor_defs} == {"checkpoint_registry_sensor", "progress_sensor"}
    assert {s.name for s in repo.schedule_defs} == {"nightly_latest_checkpoint"}
    assert set(repo.get_top_level_resources()) >= {
        "inference_endpoint",
        "shopsim_environment",
        "run_storage",
        "checkpoint_registry",
        "evaluation_suites",
    }


def test_rollout_checks_are_blocking_and_rollouts_retry_without_a_global_pool(location: dg.Definitions) -> None:
    repo = location.get_repository_def()
    for suite in SUITES:
        rollout = repo.assets_defs_by_key[dg.AssetKey([suite, "rollout_traces"])]
        specs = {spec.name: spec for spec in rollout.check_specs}
        assert set(specs) == CHECKS and all(spec.blocking for spec in specs.values())
        comparison = repo.assets_defs_by_key[dg.AssetKey([suite, "checkpoint_comparison"])]
        assert [(spec.name, spec.blocking) for spec in comparison.check_specs] == [("no_regression_vs_best", True)]
        assert {op.pool for op in rollout.node_def.iterate_op_defs()} == {None}
        assert rollout.node_def.retry_policy is not None and rollout.node_def.retry_policy.max_retries >= 1
        for name in ("rollout_traces", "eval_summary", "checkpoint_comparison"):
            partitions = repo.assets_defs_by_key[dg.AssetKey([suite, name])].partitions_def
            assert isinstance(partitions, dg.DynamicPartitionsDefinition) and partitions.name == "checkpoints"
    assert repo.assets_defs_by_key[dg.AssetKey("job_plan")].partitions_def is None


def test_each_evaluation_job_selects_exactly_its_suite_and_no_tag_picks_a_suite(location: dg.Definitions) -> None:
    for suite in SUITES:
        job = location.resolve_job_def(f"evaluate_{suite}")
        keys = {k.to_user_string() for k in job.asset_layer.executable_asset_keys}
        assert keys == {f"{suite}/rollout_traces", f"{suite}/eval_summary", f"{suite}/checkpoint_comparison"}
        assert not any(key.startswith("shopsimrl/") for key in job.run_tags)
        assert job.executor_def.name == "in_process"
    skills = location.resolve_job_def("build_skills")
    assert {k.to_user_string() for k in skills.asset_layer.executable_asset_keys} == SKILLS
    # The package never reads a suite from a run tag.
    package = REPO_ROOT / "shopsimrl_dagster"
    assert not [p for p in package.rglob("*.py") if "shopsimrl/" + "suite" in p.read_text(encoding="utf-8")]


def test_the_skills_lineage_reads_train_labels_and_val_summaries_explicitly(location: dg.Definitions) -> None:
    graph = location.get_repository_def().asset_graph
    parents = {key: {p.to_user_string() for p in graph.get(dg.AssetKey(key)).parent_keys} for key in SKILLS}
    assert parents["episode_labels"] == {"train/eval_summary"}
    assert parents["skill_candidates"] == {"episode_labels"}
    assert parents["skill_gate"] == {"skill_candidates", "val/eval_summary"}
    assert parents["skillbank_snapshot"] == {"skill_gate"}


@pytest.mark.slow
def test_the_assets_that_call_the_endpoint_are_the_ones_the_coordinator_tags(location: dg.Definitions) -> None:
    from shopsimrl_dagster.run_tags import ENDPOINT_ASSET_NAMES

    repo = location.get_repository_def()
    calling = {
        key.path[-1]
        for assets in repo.assets_defs_by_key.values()
        if "inference_endpoint" in assets.required_resource_keys
        for key in assets.keys
    }
    # The gates call the endpoint of their experiment config in their masked rollouts: skill_gate through the
    # bare val run's generated config, round_online_gate through the round's experiment_config.
    assert calling | {"skill_gate", "round_online_gate"} == set(ENDPOINT_ASSET_NAMES)


def test_workspace_yaml_validates_with_the_dagster_cli(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={
            "PATH": "/usr/bin:/bin",
            "DAGSTER_HOME": str(prepare_dagster_home(tmp_path / "home")),
            "HOME": str(tmp_path),
        },
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Validation successful for code location shopsimrl" in result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.skipif(not (Path(sys.executable).parent / "dg").exists(), reason="dagster-dg-cli is not installed")
def test_dg_check_defs_accepts_the_project(tmp_path: Path) -> None:
    # The standard `dg` project shape: [tool.dg] in pyproject.toml names the package and its defs.
    result = subprocess.run(
        [str(Path(sys.executable).parent / "dg"), "check", "defs"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "DAGSTER_HOME": str(prepare_dagster_home(tmp_path / "home")), "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All definitions loaded successfully" in result.stdout + result.stderr


_REPORT_LOCATION = """
import json, dagster as dg, shopsimrl_dagster
from shopsimrl_dagster.definitions import defs
with dg.instance_for_test():
    location = defs()
    dg.Definitions.validate_loadable(location)  # resource requirements of every asset are met
    repo = location.get_repository_def()
    print(json.dumps({"package": shopsimrl_dagster.__file__,
                      "assets": sorted(k.to_user_string() for k in repo.asset_graph.get_all_asset_keys())}))
"""


@pytest.mark.skipif(not (Path(sys.executable).parent / "dg").exists(), reason="dagster-dg-cli is not installed")
def test_a_definition_scaffolded_into_the_defs_folder_joins_the_location(
    tmp_path: Path, location: dg.Definitions
) -> None:
    # A copy of the project (pyproject.toml's [tool.dg] and the package), so the real defs folder stays untouched.
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO_ROOT / "pyproject.toml", project)
    shutil.copytree(
        REPO_ROOT / "shopsimrl_dagster", project / "shopsimrl_dagster", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(project),  # the copy's package, not the installed one
        PIPELINE_CONFIG_ENV: str(REPO_ROOT / "configs" / "pipeline" / "pipeline.yaml"),
        "DAGSTER_HOME": str(prepare_dagster_home(tmp_path / "home")),
        "HOME": str(tmp_path),
    }
    folder = project / "shopsimrl_dagster" / "defs"
    scaffold = subprocess.run(
        [str(Path(sys.executable).parent / "dg"), "scaffold", "defs", "dagster.asset", "scaffolded_asset.py"],
        cwd=project, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert scaffold.returncode == 0, scaffold.stdout + scaffold.stderr
    assert "def scaffolded_asset(" in (folder / "scaffolded_asset.py").read_text(encoding="utf-8")
    # A hand-written one beside it that uses a resource of the location.
    (folder / "reads_runs_root.py").write_text(
        "import dagster as dg\n\nfrom shopsimrl_dagster.defs.resources import RunStorage\n\n\n"
        "@dg.asset\ndef reads_runs_root(run_storage: RunStorage) -> None:\n    run_storage.root_path.mkdir()\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-c", _REPORT_LOCATION], cwd=project, capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(loaded["package"]).is_relative_to(project)
    pipeline = {k.to_user_string() for k in location.get_repository_def().asset_graph.get_all_asset_keys()}
    assert set(loaded["assets"]) == pipeline | {"scaffolded_asset", "reads_runs_root"}


def test_instance_template_queues_runs_per_endpoint_and_monitors_run_workers(tmp_path: Path) -> None:
    from shopsimrl_dagster.instance import LocalProcessRunLauncher

    home = prepare_dagster_home(tmp_path / "home")
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        limits = instance.run_coordinator.get_run_queue_config().tag_concurrency_limits
        # The per-endpoint limit of the template, and the GPU pool's slots of the settings in use
        # (configs/pipeline/pipeline.yaml: launch mode, gpus ["0", "1"], one per server).
        assert [dict(limit) for limit in limits] == [
            {"key": "shopsimrl/endpoint", "value": {"applyLimitPerUniqueValue": True}, "limit": 1},
            {"key": "shopsimrl/gpu-pool", "value": "launch", "limit": 2},
        ]
        assert isinstance(instance.run_launcher, LocalProcessRunLauncher)
        assert type(instance.run_coordinator).__name__ == "EndpointQueuedRunCoordinator"
        assert instance.run_launcher.supports_check_run_worker_health
        assert instance.run_monitoring_enabled and instance.run_retries_enabled
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
    path.write_text(
        path.read_text(encoding="utf-8").replace("nightly_suite: val", "nightly_suite: vall"), encoding="utf-8"
    )
    with pytest.raises(ConfigError, match="suites.vall: unknown suite; defined suites: test, train, val"):
        load_pipeline_settings(path)


def test_registry_skips_bad_entries_naming_file_and_key(tmp_path: Path) -> None:
    folder = tmp_path / "registry"
    folder.mkdir()
    register_checkpoint(folder, Checkpoint("ok-1", 5))
    (folder / "broken.json").write_text(json.dumps({"checkpoint_id": "ok-2", "step": "400"}), encoding="utf-8")
    problems: list[str] = []
    assert [c.checkpoint_id for c in read_registry(folder, problems=problems)] == ["ok-1"]
    assert len(problems) == 1
    assert "broken.json: step: must be a non-negative integer training step (got '400')" in problems[0]
    (folder / "broken.json").write_text(json.dumps({"checkpoint_id": "bad id", "step": 1}), encoding="utf-8")
    problems.clear()
    read_registry(folder, problems=problems)
    assert "checkpoint_id: must be a non-empty string" in problems[0]
    (folder / "broken.json").unlink()
    register_checkpoint(folder, Checkpoint("ckpt-a", 10))
    register_checkpoint(folder, Checkpoint("ckpt-a", 10))  # same content: a no-op
    with pytest.raises(ConfigError, match="already registered with other values"):
        register_checkpoint(folder, Checkpoint("ckpt-a", 11))
    assert [c.checkpoint_id for c in read_registry(folder)] == ["ok-1", "ckpt-a"]
