import json

import pytest
from testkit.gatekit import EffectRunner, gate_setup, make_bare_run, make_draft, write_config, write_split
from testkit.tracegen import make_trace, write_traces

from shopsimrl_core._errors import SkillError
from shopsimrl_core._hashing import dumps_pretty, write_json_atomic
from shopsimrl_core.documents import ChunkContributions
from shopsimrl_core.runs.planning._jobs import EpisodeJob
from shopsimrl_core.skills._gate import mask_draw, preflight_bare_run, read_validation_traces
from shopsimrl_core.skills._gate_a import AssignedSkillBank, GateAConfig, build_assignments, run_gate_a, select_chunks


def test_mask_conformance_vector():
    d1 = mask_draw(20260901, "val", 19, 0, "chunk-27a7e5bb9344")
    d2 = mask_draw(20260901, "val", 19, 0, "chunk-a9e98e128a35")
    assert d1 == 4276684532744195547 and d1 < 2**63
    assert d2 == 15712069499289099951 and d2 >= 2**63
    doc = build_assignments([EpisodeJob(19, 0, 2694671387, "val")], ["chunk-27a7e5bb9344", "chunk-a9e98e128a35"],
                            mask_seed=20260901, draft_sha256="d")
    assert doc["assignments"][0]["mask"] == [1, 0]
    assert doc["assignments"][0]["included_chunk_ids"] == ["chunk-27a7e5bb9344"]


def test_selection_rule_statuses_no_padding_draft_order():
    sel = select_chunks({"a": 0.1, "b": 0.3, "c": -0.2, "d": 0.0, "e": 0.2}, ["a", "b", "c", "d", "e"], 2)
    assert sel["selected"] == ["b", "e"]  # top-2 by β, injected in draft order
    assert sel["status"] == {"a": "budget_excluded", "b": "selected", "c": "non_positive", "d": "non_positive",
                             "e": "selected"}
    assert sel["rank"]["b"] == 1 and sel["rank"]["c"] == 5
    assert select_chunks({"a": -1.0}, ["a"], 3)["selected"] == []


def test_strict_validation_reader(tmp_path):
    p = tmp_path / "t.jsonl"
    ok, failed = make_trace(19, split="val"), make_trace(19, split="val", status="failed")
    write_traces(p, [failed, ok])
    assert list(read_validation_traces(p)) == ["task-000019__sample-000"]
    write_traces(p, [ok, ok])
    with pytest.raises(SkillError, match="duplicate completed validation trace"):
        read_validation_traces(p)
    write_traces(p, [ok, failed])
    with pytest.raises(SkillError, match="validation attempt follows a completed trace"):
        read_validation_traces(p)


def test_gate_recovers_effects_selects_positive_and_resumes(tmp_path):
    bare_cfg, bare_run, draft_path = gate_setup(tmp_path)
    runner = EffectRunner({"chunk-000000000000": 0.3, "chunk-000000000001": -0.2, "chunk-000000000002": 0.05},
                          fail_first=2)
    settings = GateAConfig(output_dir=tmp_path / "gate", experiment_config=bare_cfg, bare_run_dir=bare_run,
                           draft_path=draft_path, bootstrap_samples=200)
    first = run_gate_a(settings, runner=runner)
    assert first.status == "incomplete"
    assert json.loads((tmp_path / "gate" / "gate_a_manifest.json").read_text())["status"] == "incomplete"
    assert not (tmp_path / "gate" / "contributions.json").exists()
    result = run_gate_a(settings, runner=runner)  # resume: only the 2 failed episodes run again
    assert result.status == "complete"
    assert runner.episodes_run == 20
    assert isinstance(result.contributions, ChunkContributions)
    est = result.contributions.estimates
    for metric in ("reward", "r_strict"):
        beta = est[metric].coefficients
        assert beta["chunk-000000000000"] == pytest.approx(0.3, abs=1e-12)
        assert beta["chunk-000000000001"] == pytest.approx(-0.2, abs=1e-12)
    intervals = est["reward"].confidence_intervals
    assert intervals is not None and intervals["chunk-000000000000"] is not None
    lo, hi = intervals["chunk-000000000000"]
    assert lo == pytest.approx(0.3, abs=1e-9) and hi == pytest.approx(0.3, abs=1e-9)
    assert result.selected_chunk_ids == ["chunk-000000000000", "chunk-000000000002"]
    # the result's document is the file, byte for byte
    text = (tmp_path / "gate" / "contributions.json").read_text(encoding="utf-8")
    assert dumps_pretty(result.contributions.to_json()) == text
    statuses = {c.chunk_id: c.status for c in result.contributions.contributions}
    assert statuses["chunk-000000000001"] == "non_positive"
    bank = json.loads(result.selected_skillbank_path.read_text())
    assert bank["bank_version"] == "cold-start-gate-a-selected-v2"
    assert [s["skill_id"] for s in bank["skills"]] == result.selected_chunk_ids
    assert all("draft_only" not in s["metadata"] for s in bank["skills"])
    assert bank["skills"][0]["metadata"]["estimated_effect"] == pytest.approx(0.3)
    csv_text = (tmp_path / "gate" / "contributions.csv").read_text()
    assert csv_text.splitlines()[0].startswith("chunk_id,draft_order,title,coefficient_reward")
    assert (tmp_path / "gate" / "selected_skill.md").read_text().startswith("# ")
    assert len((tmp_path / "gate" / "proposal_ledger.jsonl").read_text().splitlines()) == 3


def test_gate_refuses_changed_assignment_on_resume(tmp_path):
    bare_cfg, bare_run, draft_path = gate_setup(tmp_path)
    runner = EffectRunner({})
    settings = GateAConfig(output_dir=tmp_path / "gate", experiment_config=bare_cfg, bare_run_dir=bare_run,
                           draft_path=draft_path, bootstrap_samples=0)
    run_gate_a(settings, runner=runner)
    settings.mask_seed = 7
    with pytest.raises(SkillError, match="belongs to another draft, seed or job list"):
        run_gate_a(settings, runner=runner)


def test_preflight_rejects_bare_run_with_skills_or_bad_fingerprint(tmp_path):
    bare_cfg, bare_run, draft_path = gate_setup(tmp_path)
    manifest = json.loads((bare_run / "manifest.json").read_text())
    plan = manifest["plan"]
    baseline = preflight_bare_run(bare_run, plan, send_seed=True)
    assert baseline.digest["observations"] == 20
    assert baseline.digest["mean_outcomes"]["reward"] == pytest.approx(
        sum(0.25 + (t % 3) * 0.1 for t in [19, 20, 30, 31, 47, 54] + list(range(60, 74))) / 20
    )
    manifest["plan_fingerprint"] = "0" * 64
    write_json_atomic(bare_run / "manifest.json", manifest)
    with pytest.raises(SkillError, match="bare validation manifest fingerprint mismatch"):
        preflight_bare_run(bare_run, plan, send_seed=True)
    other = dict(plan, jobs=plan["jobs"][:-1])
    manifest["plan_fingerprint"] = __import__("shopsimrl_core._hashing", fromlist=["x"]).fingerprint(plan)
    write_json_atomic(bare_run / "manifest.json", manifest)
    with pytest.raises(SkillError, match="job coverage mismatch"):
        preflight_bare_run(bare_run, other, send_seed=True)
    with pytest.raises(SkillError, match="differs from the gate plan on model"):
        preflight_bare_run(bare_run, dict(plan, model=dict(plan["model"], model="other")), send_seed=True)


def test_rank_deficient_design_fails_before_any_rollout(tmp_path):
    split = write_split(tmp_path / "splits.json", val=[19, 20])  # 2 episodes, 3 chunks: n <= p
    bare_cfg = write_config(tmp_path / "bare.yaml", split)
    bare_run = make_bare_run(bare_cfg)
    draft_path, _ = make_draft(tmp_path)
    runner = EffectRunner({})
    with pytest.raises(SkillError, match="more observations than chunk factors"):
        run_gate_a(
            GateAConfig(
                output_dir=tmp_path / "gate", experiment_config=bare_cfg, bare_run_dir=bare_run, draft_path=draft_path
            ),
            runner=runner,
        )
    assert runner.calls == 0


def test_assigned_provider_lookup_and_identity():
    bank = {
        "schema_version": "shopsimrl-skillbank-v1",
        "skills": [{"skill_id": "a", "content": "A"}, {"skill_id": "b", "content": "B", "task_ids": [20]}],
    }
    doc = build_assignments(
        [EpisodeJob(19, 0, 1, "val"), EpisodeJob(20, 0, 2, "val")], ["a", "b"], mask_seed=3, draft_sha256="d"
    )
    doc["assignments"][0].update(mask=[1, 0], included_chunk_ids=["a"])
    doc["assignments"][1].update(mask=[1, 1], included_chunk_ids=["a", "b"])
    p = AssignedSkillBank(bank, doc)
    assert p.identity["provider"] == "assigned_json_skillbank" and p.identity["assignment"]["episodes"] == 2
    assert [s["skill_id"] for s in p.select({"split": "val", "task_id": 20, "sample_id": 0})] == ["a", "b"]
    with pytest.raises(SkillError, match="no mask assignment"):
        p.select({"split": "val", "task_id": 99, "sample_id": 0})
    doc["assignments"][0]["included_chunk_ids"] = ["b"]
    with pytest.raises(SkillError, match="out of scope"):
        AssignedSkillBank(bank, doc).select({"split": "val", "task_id": 19, "sample_id": 0})


def test_gate_plan_makes_no_rollout_and_matches_the_run(tmp_path):
    from shopsimrl_core.skills._gate_a import plan_gate_a

    bare_cfg, bare_run, draft_path = gate_setup(tmp_path)
    settings = GateAConfig(
        output_dir=tmp_path / "gate",
        experiment_config=bare_cfg,
        bare_run_dir=bare_run,
        draft_path=draft_path,
        bootstrap_samples=0,
    )
    described = plan_gate_a(settings)
    assert not (tmp_path / "gate").exists()
    assert described["design_matrix"] == "full_rank" and described["tasks"] == 20 and described["chunks"] == 3
    assert sum(described["included_counts"].values()) > 0
    run_gate_a(settings, runner=EffectRunner({}))
    assignments = json.loads((tmp_path / "gate" / "mask_assignments.json").read_text())
    assert described["assignment_sha256"] == assignments["assignment_sha256"]
