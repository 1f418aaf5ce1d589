import json

import pytest
from testkit.gatekit import EffectRunner, make_bare_run, online_pool, write_config, write_split

from shopsimrl_core._errors import SkillError
from shopsimrl_core._hashing import fingerprint, write_json_atomic
from shopsimrl_core.runs.planning._jobs import EpisodeJob
from shopsimrl_core.skills._gate import mask_draw
from shopsimrl_core.skills._online_gate import (
    OnlineGateConfig,
    build_online_assignments,
    online_slots,
    run_online_gate,
    select_online,
    validate_pool,
)


def test_pool_operations_and_validation():
    pool = online_pool()
    assert [(c["candidate_id"], c["operation"], c["target_chunk_id"]) for c in pool["candidates"]] == [
        ("cand-001", "REWRITE", "chunk-a"), ("cand-002", "ADD", None)]  # x4 is already active content
    assert [s["skill_id"] for s in pool["current_skills"]] == ["chunk-a", "chunk-b"]  # disabled record left out
    validate_pool(pool)
    tampered = dict(pool, round_id="round-999")
    with pytest.raises(SkillError, match="pool_sha256 does not match"):
        validate_pool(tampered)
    bad = json.loads(json.dumps(pool))
    bad["candidates"][0]["target_chunk_id"] = "chunk-zzz"
    core = {k: v for k, v in bad.items() if k not in ("created_at", "pool_sha256")}
    bad["pool_sha256"] = fingerprint(core)
    with pytest.raises(SkillError, match="REWRITE must target an active chunk"):
        validate_pool(bad)


def test_slots_and_uniform_mutually_exclusive_masks():
    pool = online_pool()
    slots = online_slots(pool)
    assert slots == [{"slot_id": "chunk-a", "old_version_id": "chunk-a", "versions": ["chunk-a", "cand-001"]},
                     {"slot_id": "chunk-b", "old_version_id": "chunk-b", "versions": ["chunk-b"]},
                     {"slot_id": "cand-002", "old_version_id": None, "versions": ["cand-002"]}]
    jobs = [EpisodeJob(t, 0, t, "val") for t in range(300)]
    doc = build_online_assignments(jobs, pool, mask_seed=20260901)
    assert doc["columns"] == ["chunk-a", "cand-001", "chunk-b", "cand-002"]
    counts = {None: 0, "chunk-a": 0, "cand-001": 0}
    for a, job in zip(doc["assignments"], jobs):
        assert a["mask"][0] + a["mask"][1] <= 1  # old and new never together
        state = a["slot_states"]["chunk-a"]
        counts[state] += 1
        k = mask_draw(20260901, "val", job.task_id, 0, "chunk-a") % 3
        assert state == [None, "chunk-a", "cand-001"][k]
        assert a["included_chunk_ids"] == [c for c, bit in zip(doc["columns"], a["mask"]) if bit]
    assert all(70 < n < 130 for n in counts.values())  # roughly uniform thirds


def test_selection_rewrite_rules():
    pool = online_pool()
    slots = online_slots(pool)
    tie = select_online({"chunk-a": 0.2, "cand-001": 0.2, "chunk-b": -0.1, "cand-002": 0.0}, pool, slots, 5)
    assert tie["winners"] == {"chunk-a": "chunk-a"}  # old wins ties
    assert tie["status"] == {"cand-001": "rewrite_loser", "chunk-a": "selected", "chunk-b": "retired",
                             "cand-002": "non_positive"}
    assert "cand-001" not in tie["rank"]  # rewrite losers carry no rank
    win = select_online({"chunk-a": 0.1, "cand-001": 0.3, "chunk-b": 0.05, "cand-002": 0.2}, pool, slots, 2)
    assert win["selected"] == ["cand-001", "cand-002"]  # ordered by (bank order, logical id)
    assert win["logical"]["cand-001"] == "chunk-a"
    assert win["status"]["chunk-b"] == "retired" and win["status"]["chunk-a"] == "rewrite_loser"


def test_online_gate_end_to_end_with_rewrite_winner(tmp_path):
    split = write_split(tmp_path / "splits.json")
    cfg = write_config(tmp_path / "bare.yaml", split)
    bare = make_bare_run(cfg)
    pool_path = write_json_atomic(tmp_path / "pool.json", online_pool())
    runner = EffectRunner({"chunk-a": 0.1, "cand-001": 0.25, "chunk-b": -0.1, "cand-002": 0.2})
    result = run_online_gate(OnlineGateConfig(output_dir=tmp_path / "online", experiment_config=cfg, bare_run_dir=bare,
                                              candidate_pool_path=pool_path, active_skill_budget=10,
                                              bootstrap_samples=50), runner=runner)
    assert result.status == "complete"
    beta = result.contributions["estimates"]["reward"]["coefficients"]
    assert beta["cand-001"] == pytest.approx(0.25, abs=1e-12) and beta["chunk-b"] == pytest.approx(-0.1, abs=1e-12)
    assert result.contributions["replacement_winners"] == {"chunk-a": "cand-001"}
    bank = json.loads(result.selected_skillbank_path.read_text())
    assert bank["bank_version"] == "online-round-003-selected-v1"
    assert [(s["skill_id"], s["content"], s["version"]) for s in bank["skills"]] == [
        ("chunk-a", "### A2\n\nnew a", "candidate"), ("cand-002", "### C\n\nbudget", "candidate")]
    assert bank["skills"][0]["metadata"]["selected_intervention_id"] == "cand-001"
    manifest = json.loads((tmp_path / "online" / "online_gate_manifest.json").read_text())
    assert manifest["protocol"]["rewrite_treatment"] == "mutually_exclusive_absent_old_new"
    ledger = [json.loads(line) for line in (tmp_path / "online" / "proposal_ledger.jsonl").read_text().splitlines()]
    assert [(r["candidate_id"], r["validation_result"]) for r in ledger] == [("cand-001", "selected"),
                                                                           ("cand-002", "selected")]
