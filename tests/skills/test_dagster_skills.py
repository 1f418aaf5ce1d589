"""The skills assets in process against the real sandbox: train + val rollouts, then
episode_labels → skill_candidates → skill_gate → skillbank_snapshot for one checkpoint partition."""

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml

from shopsimrl_core._hashing import dumps_pretty
from shopsimrl_core.documents import ChunkContributions
from shopsimrl_core.runs.config._config import load_config
from shopsimrl_core.runs.execution._evaluator import run_evaluation
from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.registry import Checkpoint, register_checkpoint
from shopsimrl_dagster.settings import load_pipeline_settings

REPO_ROOT = Path(__file__).resolve().parents[2]
SKILL_KEYS = ["episode_labels", "skill_candidates", "skill_gate", "skillbank_snapshot"]


def _settings(tmp_path: Path, sandbox, **skills):
    base = yaml.safe_load((REPO_ROOT / "configs" / "pipeline" / "pipeline.yaml").read_text(encoding="utf-8"))
    base.update(
        runs_root=str(tmp_path / "runs"),
        checkpoint_registry=str(tmp_path / "registry"),
        split_file=str(sandbox.split_file),
    )
    base["environment"]["base_url"] = sandbox.env_url
    base["inference"].update(base_url=sandbox.policy_url, name=sandbox.served_model)
    base["suites"]["val"]["sample_size"] = None  # Gate A needs the full val split
    base["suites"]["train"].update(sample_size=10, repeats=3)
    base["skills"].update(skills)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(base, sort_keys=False), encoding="utf-8")
    return load_pipeline_settings(path)


@pytest.fixture
def pipeline(tmp_path, sandbox):
    settings = _settings(tmp_path, sandbox)
    register_checkpoint(settings.checkpoint_registry, Checkpoint(checkpoint_id="ckpt-a", step=10))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-a"])
        location = build_definitions(settings)
        assert _job(location, instance, "prepare_plans", None).success
        yield settings, instance, location


def _job(location, instance, name, partition="ckpt-a", **kw):
    """Run one of the location's jobs (evaluate_<suite>, build_skills, prepare_plans) in process."""
    return location.resolve_job_def(name).execute_in_process(instance=instance, partition_key=partition, **kw)


def _materialized(result):
    return {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}


def _meta(result, key):
    events = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == key]
    return {k: getattr(v, "value", v) for k, v in events[-1].materialization.metadata.items()}


@pytest.mark.slow
def test_skills_lineage_in_process(pipeline, tmp_path):
    settings, instance, location = pipeline
    early = _job(location, instance, "build_skills")
    # Nothing to label yet: nothing is materialized and no check claims a pass.
    assert early.success and not _materialized(early) and not early.get_asset_check_evaluations()

    assert _job(location, instance, "evaluate_train").success
    assert _job(location, instance, "evaluate_val").success
    result = _job(location, instance, "build_skills")
    assert result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {
        "labels_cover_every_episode": True,
        "candidates_pass_firewall": True,
        "no_val_or_test_evidence": True,
        "gate_paired_with_bare_val": True,
        "snapshot_reproduces_hash": True,
    }

    labels = _meta(result, "episode_labels")
    assert labels["suite"] == "train" and labels["episodes"] == 30
    assert {r.data["outcome"] for r in labels["label_distribution"].records} >= {"success"}
    cands = _meta(result, "skill_candidates")
    assert cands["accepted"] >= len(cands["frequent_labels"]) >= 1
    # The skill text is shown beside each candidate.
    doc = json.loads((tmp_path / "runs" / "skills" / "ckpt-a" / "skill_candidates.json").read_text())
    assert [r.data["text"] for r in cands["candidates"].records][0] == doc["candidates"][0]["content"][:600] or [
        r.data["text"] for r in cands["candidates"].records
    ][0].endswith("…")
    gate = _meta(result, "skill_gate")
    assert gate["status"] == "complete" and gate["observations"] == 60
    assert all(r.data["text"] for r in gate["chunks"].records)
    # The gate's noise bar and per-chunk verdicts are the contributions document's (issue 23).
    contributions = json.loads((tmp_path / "runs" / "gate-a" / "ckpt-a" / "contributions.json").read_text())
    assert gate["noise_bar"] == contributions["estimates"]["reward"]["noise_bar"]["noise_bar"]
    assert gate["selection_rule"] == contributions["estimator"]["selection_rule"] == "strictly_positive_top_k"
    assert {r.data["chunk"]: r.data["noise"] == "within noise" for r in gate["chunks"].records} == {
        c["chunk_id"]: c["within_noise"] for c in contributions["contributions"]
    }
    snap = _meta(result, "skillbank_snapshot")
    snap_path = Path(snap["path"])
    noisy = {c["chunk_id"] for c in contributions["contributions"] if c["status"] == "selected" and c["within_noise"]}
    assert snap["skills_within_noise"] == len(noisy)
    assert {r.data["skill"] for r in snap["selected_skills"].records if r.data["noise"] == "within noise"} == noisy
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
    again = _job(location, instance, "build_skills")
    assert again.success and _meta(again, "skillbank_snapshot")["reused_existing_file"] is True
    assert len((tmp_path / "runs" / "gate-a" / "ckpt-a" / "traces.jsonl").read_text().splitlines()) == lines


@pytest.mark.slow
def test_candidates_refuse_val_evidence(tmp_path, sandbox):
    """A settings file that points the skills lineage at the val suite is refused by the miner."""
    settings = _settings(tmp_path, sandbox, train_suite="val")
    register_checkpoint(settings.checkpoint_registry, Checkpoint(checkpoint_id="ckpt-a", step=10))
    location = build_definitions(settings)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-a"])
        assert _job(location, instance, "prepare_plans", None).success
        assert _job(location, instance, "evaluate_val").success
        result = _job(location, instance, "build_skills", raise_on_error=False)
    assert not result.success
    failures = [e for e in result.all_events if e.is_step_failure]
    assert "evidence-not-train" in failures[0].step_failure_data.error.message


def test_candidates_through_the_inference_endpoint_analyst(tmp_path, stub, monkeypatch):
    """provider=analyst reaches the checkpoint's InferenceEndpoint (here the loopback analyst stub)."""
    from testkit.tracegen import make_trace, write_traces

    base_url, _ = stub
    base = yaml.safe_load((REPO_ROOT / "configs" / "pipeline" / "pipeline.yaml").read_text(encoding="utf-8"))
    base.update(
        runs_root=str(tmp_path / "runs"),
        checkpoint_registry=str(tmp_path / "registry"),
        split_file=str(REPO_ROOT / "configs" / "sandbox" / "persona_splits.sandbox.json"),
    )
    base["inference"].update(base_url=base_url, name="analyst-model", api_key_env="STUB_ANALYST_KEY")
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump(base, sort_keys=False), encoding="utf-8")
    settings = load_pipeline_settings(tmp_path / "pipeline.yaml")
    monkeypatch.setenv("STUB_ANALYST_KEY", "k-1")
    register_checkpoint(settings.checkpoint_registry, Checkpoint(checkpoint_id="ckpt-b", step=1))
    recs = [make_trace(t, s, outcome="wrong_option" if s == 0 else "success") for t in range(4) for s in range(2)]
    write_traces(tmp_path / "runs" / "train" / "ckpt-b" / "traces.jsonl", recs)
    location = build_definitions(settings)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-b"])
        job = location.resolve_job_def("build_skills")
        result = job.execute_in_process(
            instance=instance,
            partition_key="ckpt-b",
            asset_selection=[dg.AssetKey("episode_labels"), dg.AssetKey("skill_candidates")],
            run_config={"ops": {"skill_candidates": {"config": {"provider": "analyst"}}}},
        )
    assert result.success
    meta = _meta(result, "skill_candidates")
    assert meta["provider"] == "analyst_model" and meta["accepted"] == 1
    doc = json.loads((tmp_path / "runs" / "skills" / "ckpt-b" / "skill_candidates.json").read_text())
    assert doc["provider"]["model"] == "analyst-model" and doc["provider"]["base_url"] == base_url


@pytest.mark.slow
def test_gate_skips_a_sampled_val_suite(tmp_path, sandbox, capfd):
    """A val suite with sample_size is a valid evaluation but no Gate A baseline: skipped, with the fix logged."""
    settings = _settings(tmp_path, sandbox)
    raw = yaml.safe_load(settings.source.read_text(encoding="utf-8"))
    raw["suites"]["val"]["sample_size"] = 4
    settings.source.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    settings = load_pipeline_settings(settings.source)
    register_checkpoint(settings.checkpoint_registry, Checkpoint(checkpoint_id="ckpt-a", step=10))
    location = build_definitions(settings)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-a"])
        assert _job(location, instance, "prepare_plans", None).success
        assert _job(location, instance, "evaluate_val").success
        # A draft exists (its content is not read before the precondition), so only the sampling stops the gate.
        draft = tmp_path / "runs" / "skills" / "ckpt-a" / "initial_skill_draft.json"
        draft.parent.mkdir(parents=True)
        draft.write_text("{}", encoding="utf-8")
        result = _job(location, instance, "build_skills", asset_selection=[dg.AssetKey("skill_gate")])
        assert result.success
        assert not _materialized(result) and not result.get_asset_check_evaluations()
        assert not (tmp_path / "runs" / "gate-a" / "ckpt-a").exists()
    log = capfd.readouterr().err
    assert "Gate A needs the bare 'val' run on the full val split" in log
    assert "tasks.sample_size is 4" in log and "suites.val.sample_size: null" in log


def test_gate_and_snapshot_tables_mark_chunks_within_noise(tmp_path):
    """Issue 23: a noise-level chunk that the published rule selects is marked in both tables, with the
    gate's own noise bar, adjusted p-value and selection rule (a real Gate A over the testkit runner)."""
    from types import SimpleNamespace

    from testkit.gatekit import EffectRunner, gate_setup

    from shopsimrl_core import GateAConfig, run_gate_a
    from shopsimrl_dagster.defs.resources import RunStorage
    from shopsimrl_dagster.defs.skills import gate_chunk_table, noise_metadata

    offline = SimpleNamespace(split_file=REPO_ROOT / "configs" / "sandbox" / "persona_splits.sandbox.json",
                              env_url="http://127.0.0.1:9", policy_url="http://127.0.0.1:9/v1", served_model="m")
    settings = _settings(tmp_path, offline)
    (tmp_path / "inputs").mkdir()
    bare_cfg, bare_run, draft_path = gate_setup(tmp_path / "inputs")
    # +0.3 clears the bar; +0.05 is selected by the published rule (β > 0) though within noise.
    runner = EffectRunner({"chunk-000000000000": 0.3, "chunk-000000000001": -0.2, "chunk-000000000002": 0.05})
    gate_dir = RunStorage(root=str(settings.runs_root)).gate_dir("ckpt-a")
    result = run_gate_a(
        GateAConfig(output_dir=gate_dir, experiment_config=bare_cfg, bare_run_dir=bare_run, draft_path=draft_path,
                    bootstrap_samples=50),
        runner=runner,
    )
    text = (gate_dir / "contributions.json").read_text(encoding="utf-8")
    doc = json.loads(text)
    assert isinstance(result.contributions, ChunkContributions)
    assert dumps_pretty(result.contributions.to_json()) == text  # the result's document is the file
    model = result.contributions
    bar = doc["estimates"]["reward"]["noise_bar"]["noise_bar"]
    by_id = {c["chunk_id"]: c for c in doc["contributions"]}
    noisy = "chunk-000000000002"
    assert by_id[noisy]["status"] == "selected" and by_id[noisy]["within_noise"] is True

    chunks = {c["chunk_id"]: c for c in json.loads(draft_path.read_text(encoding="utf-8"))["chunks"]}
    rows, schema = gate_chunk_table(model, chunks)
    assert [c.name for c in schema.columns][5:10] == ["beta_reward", "interval_95", "noise_bar", "noise", "adjusted_p"]
    for row in rows:
        core_row = by_id[row.data["chunk"]]
        assert row.data["beta_reward"] == round(core_row["coefficient"], 4)
        assert row.data["noise_bar"] == round(bar, 4)
        assert row.data["adjusted_p"] == round(core_row["adjusted_p_value"], 4)
        assert row.data["noise"] == ("within noise" if core_row["within_noise"] else "above noise bar")
        low, high = core_row["confidence_interval"]
        assert row.data["interval_95"] == f"[{low:+.4f}, {high:+.4f}]"
    gate_meta = noise_metadata(model)
    assert gate_meta["selection_rule"] == doc["estimator"]["selection_rule"] == "strictly_positive_top_k"
    assert gate_meta["noise_bar"] == bar
    assert gate_meta["noise_bar_median_max_abs"] == doc["estimates"]["reward"]["noise_bar"]["median_max_abs"]
    assert gate_meta["chunks_within_noise"] == sum(c["within_noise"] for c in doc["contributions"]) >= 2
    assert gate_meta["selected_within_noise"] == 1
    assert gate_meta["noise_note"].startswith("1 of 2 selected chunks within noise")

    # The snapshot asset, materialized by the location's job, marks the same chunk.
    register_checkpoint(settings.checkpoint_registry, Checkpoint(checkpoint_id="ckpt-a", step=10))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-a"])
        snap_result = _job(build_definitions(settings), instance, "build_skills",
                           asset_selection=[dg.AssetKey("skillbank_snapshot")])
    snap = _meta(snap_result, "skillbank_snapshot")
    skills = {r.data["skill"]: r.data for r in snap["selected_skills"].records}
    assert set(skills) == {"chunk-000000000000", noisy}
    assert skills[noisy]["noise"] == "within noise" and skills["chunk-000000000000"]["noise"] == "above noise bar"
    assert skills[noisy]["adjusted_p"] == round(by_id[noisy]["adjusted_p_value"], 4)
    assert snap["skills_within_noise"] == 1 and snap["noise_bar"] == bar
    assert snap["selection_rule"] == "strictly_positive_top_k"

    # The controlling rule: the same chunk is not selected, and the table says why.
    strict = run_gate_a(
        GateAConfig(output_dir=tmp_path / "above", experiment_config=bare_cfg, bare_run_dir=bare_run,
                    draft_path=draft_path, bootstrap_samples=50, selection_rule="above_noise"),
        runner=runner,
    )
    assert strict.contributions is not None
    rows, _ = gate_chunk_table(strict.contributions, chunks)
    status = {r.data["chunk"]: (r.data["status"], r.data["noise"]) for r in rows}
    assert status[noisy] == ("within_noise", "within noise")
    assert noise_metadata(strict.contributions)["selection_rule"] == "above_noise_bar_top_k"
    assert noise_metadata(strict.contributions)["noise_note"].startswith("no selected chunk within noise")
