"""The research assets load beside the location's definitions, and the judge asset materializes for a
checkpoint partition on a real (ephemeral) Dagster instance, showing agreement numbers."""

from __future__ import annotations

import shutil

import dagster as dg

from shopsimrl_dagster.defs.research import (
    RESEARCH_ASSET_KEYS,
    AnalystEndpoint,
    build_research_assets,
)
from shopsimrl_dagster.defs.resources import RunStorage


def _settings():
    from shopsimrl_dagster.settings import load_pipeline_settings

    return load_pipeline_settings("configs/pipeline/pipeline.yaml")


def test_research_assets_are_registered_in_the_location():
    from shopsimrl_dagster.definitions import build_definitions

    location = build_definitions(_settings())
    dg.Definitions.validate_loadable(location)
    for job in ("analyst_skills", "training_round", "judge_traces"):
        assert location.resolve_job_def(job).partitions_def is not None
    assert isinstance(location.resources["analyst"], AnalystEndpoint)
    graph = location.resolve_asset_graph()
    for key in RESEARCH_ASSET_KEYS:
        assert graph.has(key), key
    assert dg.AssetKey("episode_labels") in graph.get(RESEARCH_ASSET_KEYS[0]).parent_keys
    assert graph.get(RESEARCH_ASSET_KEYS[2]).parent_keys == {RESEARCH_ASSET_KEYS[1]}  # gate after pool


def test_judge_asset_shows_agreement(analyst, train_run, tmp_path):
    settings = _settings()
    root = tmp_path / "runs"
    shutil.copytree(train_run, root / settings.skills.val_suite / "ckpt-j")
    assets = {a.key: a for a in build_research_assets(settings)}
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("checkpoints", ["ckpt-j"])
    result = dg.materialize([assets[RESEARCH_ASSET_KEYS[-1]]], partition_key="ckpt-j", instance=instance,
                            resources={"run_storage": RunStorage(root=str(root)),
                                       "analyst": AnalystEndpoint.of(api_key_env=None, base_url=analyst.url,
                                                                     max_retries=1)})
    assert result.success
    [event] = result.get_asset_materialization_events()
    meta = event.materialization.metadata
    assert meta["judged"].value > 0 and 0.0 <= meta["accuracy"].value <= 1.0
    assert set(meta["confusion"].value) == {"judge_yes_env_yes", "judge_yes_env_no", "judge_no_env_yes",
                                            "judge_no_env_no"}


def test_analyst_path_asset_materializes_on_the_sandbox(sandbox, analyst, train_run, tmp_path):
    settings = _settings()
    root = tmp_path / "runs"
    shutil.copytree(train_run, root / settings.skills.train_suite / "ckpt-t")
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("checkpoints", ["ckpt-t"])
    from shopsimrl_dagster.settings import EnvironmentSettings

    settings_env = settings.model_copy(update={"environment": EnvironmentSettings(base_url=sandbox.env_url)})
    assets = {a.key: a for a in build_research_assets(settings_env)}
    result = dg.materialize([assets[RESEARCH_ASSET_KEYS[0]]], partition_key="ckpt-t", instance=instance,
                            resources={"run_storage": RunStorage(root=str(root)),
                                       "analyst": AnalystEndpoint.of(api_key_env=None, base_url=analyst.url,
                                                                     max_retries=1)},
                            run_config={"ops": {"trace2skill_draft": {"config": {"batch_size": 4}}}})
    assert result.success
    [event] = result.get_asset_materialization_events()
    meta = event.materialization.metadata
    assert 1 <= meta["chunks"].value <= 16 and meta["model_calls_this_run"].value > 0
    draft = root / settings.skills.train_suite / "ckpt-t" / "trace2skill" / "initial_skill_draft.json"
    assert meta["draft"].value == str(draft) and draft.is_file()


def test_a_round_is_one_backfill_on_the_sandbox(sandbox, analyst, train_run, tmp_path):
    """Analyst proposals from the train run's failures → pool → online gate (real masked rollouts on
    the sandbox) → selected bank → curriculum, as one materialization of the four round assets."""
    import json

    import yaml
    from testkit.researchkit import run_config

    from shopsimrl_core.runs.config._config import load_config
    from shopsimrl_core.runs.execution._evaluator import run_evaluation
    from shopsimrl_core.skills import AnalystModel, Trace2SkillConfig, run_online_failure_analysis, run_trace2skill

    root = tmp_path / "runs"
    traces = train_run / "traces.jsonl"
    draft = run_trace2skill(Trace2SkillConfig(traces=traces, output_dir=root / "draft", environment_url=sandbox.env_url,
                                              analyst=AnalystModel(base_url=analyst.url, model="shopsim-analyst")))
    active = json.loads(draft.skillbank_path.read_text())
    doc = run_online_failure_analysis(
        Trace2SkillConfig(traces=traces, output_dir=root / "online", environment_url=sandbox.env_url,
                          analyst=AnalystModel(base_url=analyst.url, model="shopsim-analyst")),
        active, round_id="round-001", proposal_checkpoint="ckpt-research")
    # a gate runs a whole val split: a split file whose val split is the first 16 val tasks of the sandbox
    splits = json.loads(sandbox.split_file.read_text())
    val = splits["splits"]["val"]
    val["task_ids"] = val["task_ids"][:16]
    val.pop("task_ids_sha256", None)
    val["task_count"] = 16
    splits.pop("checks", None)  # a trimmed file no longer covers every persona task (checks.persona_task_count)
    small = tmp_path / "splits-small.json"
    small.write_text(json.dumps(splits))
    cfg = run_config(tmp_path / "val.yaml", sandbox, name="bare-val", split="val", seed=20260830)
    doc_cfg = yaml.safe_load(cfg.read_text())
    doc_cfg["tasks"]["split_file"] = str(small)
    cfg.write_text(yaml.safe_dump(doc_cfg))
    bare = run_evaluation(load_config(cfg))
    assert bare.counts.coverage == 1.0

    assets = build_research_assets(_settings())
    round_assets = [a for a in assets if a.key in RESEARCH_ASSET_KEYS[1:5]]
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("training_rounds", ["round-001"])
    config = {"active_skillbank": str(draft.skillbank_path), "candidates": doc["candidates_path"],
              "experiment_config": str(cfg), "bare_run_dir": str(bare.run_dir),
              "proposal_checkpoint": "ckpt-research", "active_skill_budget": 3}
    result = dg.materialize(round_assets, partition_key="round-001", instance=instance,
                            resources={"run_storage": RunStorage(root=str(root))},
                            run_config={"ops": {"round_candidate_pool": {"config": config},
                                                "round_online_gate": {"config": config},
                                                "round_curriculum": {"config": config}}})
    assert result.success
    meta = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
    gate = meta["round_online_gate"]
    assert gate["status"].value == "complete"
    round_dir = root / "rounds" / "round-001"
    manifest = json.loads((round_dir / "online_gate" / "online_gate_manifest.json").read_text())
    assert manifest["schema_version"] == "shopsimrl-online-validation-gate-v2"
    assert gate["selected"].value  # the seeded sandbox policy gives these chunks positive effects
    contributions = json.loads((round_dir / "online_gate" / "contributions.json").read_text())
    # the rule in use, as skill_gate shows Gate A's (published by default)
    assert gate["selection_rule"].value == contributions["estimator"]["selection_rule"] == (
        "rewrite_winners_then_strictly_positive_top_k")
    assert gate["noise_bar"].value == contributions["estimates"]["reward"]["noise_bar"]["noise_bar"]
    assert gate["chunks_within_noise"].value == sum(c["within_noise"] for c in contributions["contributions"])
    bank_meta, curriculum_meta = meta["round_selected_bank"], meta["round_curriculum"]
    assert curriculum_meta["bank_sha256"].value == bank_meta["bank_sha256"].value
    state = json.loads((round_dir / "curriculum.json").read_text())
    assert state["schema_version"] == "shopsimrl-skill-curriculum-v1"
    assert state["state_id"] == curriculum_meta["state_id"].value
    assert [c["skill_id"] for c in state["chunks"]] == bank_meta["chunks"].value
    bank = json.loads((round_dir / f"skillbank-{bank_meta['bank_sha256'].value}.json").read_text())
    assert bank["bank_version"] == "online-round-001-selected-v1"
    assert len(bank["skills"]) == len(gate["selected"].value)


def test_analyst_endpoint_health_check(analyst):
    import pytest

    from shopsimrl_dagster.defs.resources import EndpointUnavailable

    assert "shopsim-analyst" in AnalystEndpoint.of(api_key_env=None, base_url=analyst.url).health_check()
    with pytest.raises(EndpointUnavailable, match="does not serve model 'other'"):
        AnalystEndpoint.of(api_key_env=None, base_url=analyst.url, name="other").health_check()


def test_a_rerun_of_the_analyst_path_on_another_port_makes_no_calls(sandbox, train_run, tmp_path):
    """Issue 33 item 6: the analyst's cache identity is its ``identity``, not its URL (a new port each demo)."""
    from testkit.researchkit import AnalystServer

    from shopsimrl_dagster.settings import EnvironmentSettings

    settings = _settings()
    root = tmp_path / "runs"
    shutil.copytree(train_run, root / settings.skills.train_suite / "ckpt-r")
    settings_env = settings.model_copy(update={"environment": EnvironmentSettings(base_url=sandbox.env_url)})
    assets = {a.key: a for a in build_research_assets(settings_env)}
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("checkpoints", ["ckpt-r"])
    ledger = root / settings.skills.train_suite / "ckpt-r" / "trace2skill" / "trajectory_analyses.jsonl"

    def materialize(workdir, identity: str | None = "shopsim-sandbox-analyst:test") -> tuple[int, int, int]:
        workdir.mkdir()
        server = AnalystServer(workdir, seed=7, malformed_rate=0.3)  # the same deterministic analyst, a new port
        try:
            endpoint = AnalystEndpoint.of(api_key_env=None, base_url=server.url, max_retries=1,
                                          identity=identity)
            result = dg.materialize([assets[RESEARCH_ASSET_KEYS[0]]], partition_key="ckpt-r", instance=instance,
                                    resources={"run_storage": RunStorage(root=str(root)), "analyst": endpoint},
                                    run_config={"ops": {"trace2skill_draft": {"config": {"batch_size": 4}}}})
            assert result.success
            [event] = result.get_asset_materialization_events()
            calls = event.materialization.metadata["model_calls_this_run"].value
            return calls, server.stats()["requests"], len(ledger.read_text(encoding="utf-8").splitlines())
        finally:
            server.stop()

    first_calls, _, first_rows = materialize(tmp_path / "first")
    assert first_calls > 0 and first_rows > 0
    second_calls, second_requests, second_rows = materialize(tmp_path / "second")
    assert second_calls == 0, f"the rerun made {second_calls} analyst calls"
    assert second_rows == first_rows  # no new analysis rows
    assert second_requests == 0  # the second server answered no completion
    # Without an identity the URL stays in it (the published rule): a new port is a new analyst.
    third_calls, _, _ = materialize(tmp_path / "third", identity=None)
    assert third_calls > 0
