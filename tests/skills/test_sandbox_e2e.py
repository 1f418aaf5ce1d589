"""End to end on the real sandbox (loopback HTTP): train rollouts → labels → candidates → draft →
bare val run → Gate A → snapshot → a new run injecting the snapshot, recorded in provenance."""

import json
from pathlib import Path

import pytest
import yaml

from shopsimrl_core._hashing import write_json_atomic
from shopsimrl_core.analysis._labels import label_run, read_labels
from shopsimrl_core.documents import ChunkContributions
from shopsimrl_core.episode._skillbank import bank_sha256, load_skillbank
from shopsimrl_core.export._records import export_sft, export_traces
from shopsimrl_core.runs.config._config import load_config
from shopsimrl_core.runs.execution._evaluator import run_evaluation
from shopsimrl_core.skills._bank import build_draft, build_skillbank, snapshot_skillbank, write_draft
from shopsimrl_core.skills._candidates import mine_candidates
from shopsimrl_core.skills._gate_a import GateAConfig, run_gate_a
from shopsimrl_core.skills._online_gate import OnlineGateConfig, build_candidate_pool, run_online_gate


def _config(path: Path, sandbox, *, name: str, split: str, sample_size=None, repeats=1, skills=None, seed=20260830):
    doc = {"experiment": {"name": name, "output_dir": str(path.parent / "runs"), "seed": seed, "concurrency": 8},
           "tasks": {"split_file": str(sandbox.split_file), "split": split, "sample_size": sample_size,
                     "repeats": repeats},
           "environment": {"base_url": sandbox.env_url},
           "skills": {"path": str(skills) if skills else None},
           "model": {"name": sandbox.served_model, "base_url": sandbox.policy_url, "api_key_env": None,
                     "checkpoint_id": "ckpt-e2e", "temperature": 0.7}}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


@pytest.mark.slow
def test_traces_to_skillbank_to_injected_run(sandbox, tmp_path):
    train = run_evaluation(load_config(_config(tmp_path / "train.yaml", sandbox, name="train", split="train",
                                               sample_size=24, repeats=2, seed=20260831)))
    assert train.counts.coverage == 1.0

    table = label_run(train.run_dir)
    labels = read_labels(table.path)
    trace_ids = {json.loads(line)["episode_id"] for line in (train.run_dir / "traces.jsonl").read_text().splitlines()}
    assert set(labels["episode_id"].to_list()) == trace_ids  # a label row for every episode
    assert labels["outcome"].null_count() == 0

    cands = mine_candidates(table.path, train.run_dir / "traces.jsonl", tmp_path / "skills" / "skill_candidates.json")
    frequent = cands.document["frequent_labels"]
    assert frequent, cands.document["label_support"]
    accepted_labels = {c["source_label"] for c in cands.accepted}
    assert set(frequent) <= accepted_labels  # >= 1 candidate per frequent failure label
    for c in cands.accepted:
        assert c["evidence"] and all(e["episode_id"] in trace_ids for e in c["evidence"])

    draft, bank = build_draft(cands.document, active_skill_budget=min(3, len(cands.accepted)))
    draft_path, _ = write_draft(draft, bank, tmp_path / "skills")

    bare_cfg = _config(tmp_path / "bare.yaml", sandbox, name="bare-val", split="val")
    bare = run_evaluation(load_config(bare_cfg))
    assert bare.counts.coverage == 1.0
    gate = run_gate_a(GateAConfig(output_dir=tmp_path / "runs" / "gate-a", experiment_config=bare_cfg,
                                  bare_run_dir=bare.run_dir, draft_path=draft_path, bootstrap_samples=200))
    assert gate.status == "complete"
    contributions = gate.contributions
    assert isinstance(contributions, ChunkContributions)
    assert contributions.observations == bare.counts.requested
    assert set(contributions.estimates) >= {"reward", "r_strict", "r_success"}
    masked = [json.loads(line) for line in (tmp_path / "runs" / "gate-a" / "traces.jsonl").read_text().splitlines()]
    assert all(r["provenance"]["skills"]["provider"] == "assigned_json_skillbank" for r in masked)
    assert any(r["selected_skills"] for r in masked)
    manifest = json.loads((tmp_path / "runs" / "gate-a" / "manifest.json").read_text())
    assert manifest["plan"]["trace2skill_gate"]["assignment_sha256"] == contributions.assignment_sha256
    from shopsimrl_core.skills._gate_a import plan_gate_a
    described = plan_gate_a(GateAConfig(output_dir=tmp_path / "runs" / "gate-a", experiment_config=bare_cfg,
                                        bare_run_dir=bare.run_dir, draft_path=draft_path))
    assert described["semantic_plan_fingerprint"] == manifest["plan_fingerprint"]

    # Rerunning the gate resumes: no new trace lines.
    lines_before = len(masked)
    again = run_gate_a(GateAConfig(output_dir=tmp_path / "runs" / "gate-a", experiment_config=bare_cfg,
                                   bare_run_dir=bare.run_dir, draft_path=draft_path, bootstrap_samples=200))
    assert again.status == "complete"
    assert len((tmp_path / "runs" / "gate-a" / "traces.jsonl").read_text().splitlines()) == lines_before

    snap = snapshot_skillbank(load_skillbank(gate.selected_skillbank_path), tmp_path / "skillbanks")
    assert snap.path.name == f"skillbank-{snap.bank_sha256}.json"

    equipped = run_evaluation(load_config(_config(tmp_path / "equipped.yaml", sandbox, name="equipped", split="val",
                                                  skills=snap.path)))
    records = [json.loads(line) for line in (equipped.run_dir / "traces.jsonl").read_text().splitlines()]
    assert records
    for r in records:
        prov = r["provenance"]["skills"]
        assert prov["provider"] == "json_skillbank" and prov["bank_sha256"] == snap.bank_sha256
        assert [s["skill_id"] for s in r["selected_skills"]] == snap.skill_ids
    assert bank_sha256(load_skillbank(snap.path)) == snap.bank_sha256

    # Real traces through the exporters.
    out = export_traces(train.run_dir, tmp_path / "public.jsonl", profile="public")
    exported = [json.loads(line) for line in out.path.read_text().splitlines()]
    assert len(exported) == len(trace_ids)
    assert all(r["final"]["goal"] == {} and r["reset"]["user_persona"] == {} for r in exported)
    assert all(s["model"]["reasoning"] is None for r in exported for s in r["steps"])
    sft = export_sft([train.run_dir], tmp_path / "sft.jsonl")
    assert sft.records == int(labels.filter(labels["outcome"] == "success").height) - sum(
        1 for r in exported if r["final"]["reward_detail"].get("r_success") == 1
        and any(s.get("protocol_error") for s in r["steps"]))


@pytest.mark.slow
def test_online_gate_on_the_sandbox(sandbox, tmp_path):
    train = run_evaluation(load_config(_config(tmp_path / "train.yaml", sandbox, name="train", split="train",
                                               sample_size=24, repeats=2, seed=20260831)))
    table = label_run(train.run_dir)
    cands = mine_candidates(table.path, train.run_dir / "traces.jsonl", tmp_path / "c.json").document
    accepted = [c for c in cands["candidates"] if c["status"] == "accepted"]
    assert len(accepted) >= 2
    active = build_skillbank([{"skill_id": accepted[0]["candidate_id"], "version": "active-1",
                               "content": accepted[0]["content"] + "\n(旧版)",
                               "metadata": {"source_label": accepted[0]["source_label"]}}], bank_version="round-0")
    pool = build_candidate_pool(active, cands, round_id="round-001", proposal_checkpoint="ckpt-e2e")
    assert pool["candidates"][0]["operation"] == "REWRITE"
    pool_path = write_json_atomic(tmp_path / "pool.json", pool)
    bare_cfg = _config(tmp_path / "bare.yaml", sandbox, name="bare-val", split="val")
    bare = run_evaluation(load_config(bare_cfg))
    result = run_online_gate(OnlineGateConfig(output_dir=tmp_path / "runs" / "online", experiment_config=bare_cfg,
                                              bare_run_dir=bare.run_dir, candidate_pool_path=pool_path,
                                              bootstrap_samples=100))
    assert result.status == "complete"
    masked = [json.loads(line) for line in (tmp_path / "runs" / "online" / "traces.jsonl").read_text().splitlines()]
    assert all(r["provenance"]["skills"]["bank"]["provider"] == "online_intervention_bank" for r in masked)
    for r in masked:  # old and rewritten versions of the active chunk never appear together
        ids = [s["skill_id"] for s in r["selected_skills"]]
        assert not {accepted[0]["candidate_id"], "cand-001"} <= set(ids)
    assert load_skillbank(result.selected_skillbank_path).bank_version == "online-round-001-selected-v1"
