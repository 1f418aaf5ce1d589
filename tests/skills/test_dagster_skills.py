"""The skills assets in process against the real sandbox: train + val rollouts, then
episode_labels → skill_candidates → skill_gate → skillbank_snapshot for one checkpoint partition."""

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml

from shopsimrl_core.runs._config import load_config
from shopsimrl_core.runs._evaluator import run_evaluation
from shopsimrl_dagster.defs import assets as eval_assets
from shopsimrl_dagster.defs import skills
from shopsimrl_dagster.defs.resources import resources_from_settings
from shopsimrl_dagster.registry import Checkpoint, register_checkpoint
from shopsimrl_dagster.settings import load_pipeline_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
ALL = [eval_assets.frozen_split, eval_assets.job_plan, eval_assets.rollout_traces, eval_assets.eval_summary,
       eval_assets.checkpoint_comparison, skills.episode_labels, skills.skill_candidates, skills.skill_gate,
       skills.skillbank_snapshot]
SKILL_KEYS = ["episode_labels", "skill_candidates", "skill_gate", "skillbank_snapshot"]


def _settings(tmp_path: Path, sandbox):
    base = yaml.safe_load((REPO_ROOT / "configs" / "pipeline" / "pipeline.yaml").read_text(encoding="utf-8"))
    base.update(runs_root=str(tmp_path / "runs"), checkpoint_registry=str(tmp_path / "registry"),
                split_file=str(sandbox.split_file))
    base["environment"]["base_url"] = sandbox.env_url
    base["inference"].update(base_url=sandbox.policy_url, served_model=sandbox.served_model)
    base["suites"]["val"]["sample_size"] = None  # Gate A needs the full val split
    base["suites"]["train"].update(sample_size=10, repeats=3)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(base, sort_keys=False), encoding="utf-8")
    return load_pipeline_settings(path)


@pytest.fixture
def pipeline(tmp_path, sandbox):
    settings = _settings(tmp_path, sandbox)
    register_checkpoint(settings.checkpoint_registry, Checkpoint(checkpoint_id="ckpt-a", step=10))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("checkpoints", ["ckpt-a"])
    resources = resources_from_settings(settings)
    assert dg.materialize(ALL, selection=["frozen_split", "job_plan"], instance=instance, resources=resources).success
    yield settings, instance, resources
    instance.dispose()


def _run(instance, resources, selection, suite, **kw):
    return dg.materialize(ALL, selection=selection, instance=instance, resources=resources, partition_key="ckpt-a",
                          tags={"shopsimrl/suite": suite}, **kw)


def _meta(result, key):
    events = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == key]
    return {k: getattr(v, "value", v) for k, v in events[-1].materialization.metadata.items()}


def test_skills_lineage_in_process(pipeline, tmp_path):
    settings, instance, resources = pipeline
    early = _run(instance, resources, SKILL_KEYS, "val")
    assert early.success
    assert _meta(early, "episode_labels")["status"].startswith("skipped")

    assert _run(instance, resources, ["rollout_traces", "eval_summary"], "train").success
    assert _run(instance, resources, ["rollout_traces", "eval_summary"], "val").success
    result = _run(instance, resources, SKILL_KEYS, "val")
    assert result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {"labels_cover_every_episode": True, "candidates_pass_firewall": True,
                      "no_val_or_test_evidence": True, "gate_paired_with_bare_val": True,
                      "snapshot_reproduces_hash": True}

    labels = _meta(result, "episode_labels")
    assert labels["train_episodes"] == 30 and labels["val_episodes"] == 60
    assert "| success |" in labels["label_distribution"]
    cands = _meta(result, "skill_candidates")
    assert cands["accepted"] >= len(cands["frequent_labels"]) >= 1
    gate = _meta(result, "skill_gate")
    assert gate["status"] == "complete" and gate["observations"] == 60
    assert "β reward" in gate["chunks"]
    snap = _meta(result, "skillbank_snapshot")
    snap_path = Path(snap["path"])
    assert snap_path.name == f"skillbank-{snap['bank_sha256']}.json" and snap_path.is_file()

    # Inject the snapshot into a new run: its provenance records the bank hash.
    config = yaml.safe_load((tmp_path / "runs" / "_configs" / "val" / "ckpt-a.yaml").read_text())
    config["experiment"].update(name="ckpt-a-equipped")
    config["skills"] = {"path": str(snap_path), "max_skills": None}
    (tmp_path / "equipped.yaml").write_text(yaml.safe_dump(config))
    run = run_evaluation(load_config(tmp_path / "equipped.yaml"))
    first = json.loads((run.run_dir / "traces.jsonl").read_text().splitlines()[0])
    assert first["provenance"]["skills"]["bank_sha256"] == snap["bank_sha256"]

    # Re-materializing resumes: the gate adds no trace lines, the snapshot file is reused.
    lines = len((tmp_path / "runs" / "gate-a" / "ckpt-a" / "traces.jsonl").read_text().splitlines())
    again = _run(instance, resources, ["skill_gate", "skillbank_snapshot"], "val")
    assert again.success and _meta(again, "skillbank_snapshot")["reused_existing_file"] is True
    assert len((tmp_path / "runs" / "gate-a" / "ckpt-a" / "traces.jsonl").read_text().splitlines()) == lines


def test_candidates_refuse_val_evidence(pipeline):
    settings, instance, resources = pipeline
    assert _run(instance, resources, ["rollout_traces", "eval_summary", "episode_labels"], "val").success
    result = _run(instance, resources, ["skill_candidates"], "val", raise_on_error=False,
                  run_config={"ops": {"skill_candidates": {"config": {"train_suite": "val"}}}})
    assert not result.success
    failures = [e for e in result.all_events if e.is_step_failure]
    assert "evidence-not-train" in failures[0].step_failure_data.error.message


def test_candidates_through_the_inference_endpoint_analyst(tmp_path, stub, monkeypatch):
    """provider=analyst reaches the checkpoint's InferenceEndpoint (here the loopback analyst stub)."""
    from tracegen import make_trace, write_traces

    base_url, _ = stub
    base = yaml.safe_load((REPO_ROOT / "configs" / "pipeline" / "pipeline.yaml").read_text(encoding="utf-8"))
    base.update(runs_root=str(tmp_path / "runs"), checkpoint_registry=str(tmp_path / "registry"),
                split_file=str(REPO_ROOT / "configs" / "sandbox" / "persona_splits.sandbox.json"))
    base["inference"].update(base_url=base_url, served_model="analyst-model", api_key_env="STUB_ANALYST_KEY")
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(base, sort_keys=False), encoding="utf-8")
    settings = load_pipeline_settings(tmp_path / "pipeline.yaml")
    monkeypatch.setenv("STUB_ANALYST_KEY", "k-1")
    register_checkpoint(settings.checkpoint_registry, Checkpoint(checkpoint_id="ckpt-b", step=1))
    recs = [make_trace(t, s, outcome="wrong_option" if s == 0 else "success") for t in range(4) for s in range(2)]
    write_traces(tmp_path / "runs" / "train" / "ckpt-b" / "traces.jsonl", recs)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("checkpoints", ["ckpt-b"])
    try:
        result = dg.materialize(ALL, selection=["episode_labels", "skill_candidates"], instance=instance,
                                resources=resources_from_settings(settings), partition_key="ckpt-b",
                                run_config={"ops": {"skill_candidates": {"config": {"provider": "analyst"}}}})
    finally:
        instance.dispose()
    assert result.success
    meta = _meta(result, "skill_candidates")
    assert meta["provider"] == "analyst_model" and meta["accepted"] == 1
    doc = json.loads((tmp_path / "runs" / "skills" / "ckpt-b" / "skill_candidates.json").read_text())
    assert doc["provider"]["model"] == "analyst-model" and doc["provider"]["base_url"] == base_url


def test_gate_skips_a_sampled_val_suite(tmp_path, sandbox):
    """A val suite with sample_size is a valid evaluation but no Gate A baseline: skipped, with the fix."""
    settings = _settings(tmp_path, sandbox)
    raw = yaml.safe_load(settings.source.read_text(encoding="utf-8"))
    raw["suites"]["val"]["sample_size"] = 4
    settings.source.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    settings = load_pipeline_settings(settings.source)
    register_checkpoint(settings.checkpoint_registry, Checkpoint(checkpoint_id="ckpt-a", step=10))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("checkpoints", ["ckpt-a"])
    resources = resources_from_settings(settings)
    try:
        assert dg.materialize(ALL, selection=["frozen_split", "job_plan"], instance=instance, resources=resources).success
        assert _run(instance, resources, ["rollout_traces"], "val").success
        # A draft exists (its content is not read before the precondition), so only the sampling stops the gate.
        draft = tmp_path / "runs" / "skills" / "ckpt-a" / "initial_skill_draft.json"
        draft.parent.mkdir(parents=True)
        draft.write_text("{}", encoding="utf-8")
        result = _run(instance, resources, ["skill_gate"], "val")
        assert result.success
        status = _meta(result, "skill_gate")["status"]
        assert status.startswith("skipped: Gate A needs the bare 'val' run on the full val split")
        assert "tasks.sample_size is 4" in status and "suites.val.sample_size: null" in status
        assert not (tmp_path / "runs" / "gate-a" / "ckpt-a").exists()
        checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
        assert checks == {"gate_paired_with_bare_val": True}
    finally:
        instance.dispose()
