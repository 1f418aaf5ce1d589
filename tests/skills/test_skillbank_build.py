import json

import pytest

from shopsimrl_core._errors import SkillError
from shopsimrl_core._hashing import dumps_pretty, fingerprint
from shopsimrl_core.episode._skillbank import JsonSkillBank, bank_sha256, content_sha256, load_skillbank
from shopsimrl_core.skills._bank import build_draft, build_skillbank, snapshot_skillbank

# spec §2.2 vectors
ABC = "6cc43f858fbb763301637b5af970e2a46b46f461f27e5a0f41e009c59b827b25"
GUIGE = "ebbf7fd6ec7513d73ea1d4edb827aa009f60d1d7bdb84013e3f530adc54b6d71"

# A bank in the published shopsimrl-skillbank-v1 shape (spec §11.2), with the stated content hashes of §2.2.
PUBLISHED_STYLE = {
    "schema_version": "shopsimrl-skillbank-v1",
    "bank_version": "cold-start-gate-a-selected-v2",
    "metadata": {"skill_title": "t", "gate_status": {"gate_a": "passed", "gate_b": "not_run"},
                 "selected_chunk_ids": ["chunk-27a7e5bb9344"], "injection_order": "canonical_draft_order"},
    "skills": [
        {"skill_id": "chunk-27a7e5bb9344", "version": "active-1", "enabled": True, "content": "规格\n核验",
         "metadata": {"workflow_stage": "s", "validation_result": "selected", "estimated_effect": 0.07497},
         "content_sha256": GUIGE},
        {"skill_id": "task-scoped-example", "version": "1", "enabled": True, "task_ids": [19, 20], "content": "abc",
         "metadata": {}, "content_sha256": ABC},
    ],
}


def test_published_format_loads_and_stated_hashes_reproduce(tmp_path):
    p = tmp_path / "bank.json"
    p.write_text(json.dumps(PUBLISHED_STYLE, ensure_ascii=False, indent=2), encoding="utf-8")
    bank = load_skillbank(p)
    for skill in bank.skills:
        assert content_sha256(skill.content) == skill.content_sha256
    # the model is the file: written back, the same bytes (the snapshot writes exactly this)
    assert dumps_pretty(bank.to_json()) == p.read_text(encoding="utf-8") + "\n"
    # reformatting the file does not change bank_sha256
    p2 = tmp_path / "bank2.json"
    p2.write_text(json.dumps(PUBLISHED_STYLE, ensure_ascii=True), encoding="utf-8")
    assert bank_sha256(load_skillbank(p2)) == bank_sha256(bank)
    selected = JsonSkillBank(bank).select({"task_id": 19})
    assert [s["skill_id"] for s in selected] == ["chunk-27a7e5bb9344", "task-scoped-example"]
    assert selected[0]["content_sha256"] == GUIGE


def test_build_skillbank_matches_published_convention_and_dedupes():
    bank = build_skillbank([{"skill_id": "chunk-27a7e5bb9344", "version": "active-1", "content": "规格\n核验"},
                            {"skill_id": "dup", "content": "规格\n核验"},
                            {"skill_id": "b", "content": "abc"}], bank_version="v")
    assert [s["skill_id"] for s in bank["skills"]] == ["chunk-27a7e5bb9344", "b"]
    assert [s["content_sha256"] for s in bank["skills"]] == [GUIGE, ABC]


def test_build_skillbank_refuses_leaky_content():
    with pytest.raises(SkillError, match="contains_long_identifier"):
        build_skillbank([{"skill_id": "x", "content": "click 640099999999"}], bank_version="v")


def test_snapshot_is_named_by_hash_immutable_and_loadable(tmp_path):
    bank = build_skillbank([{"skill_id": "b", "content": "abc"}], bank_version="v1")
    snap = snapshot_skillbank(bank, tmp_path)
    assert snap.path.name == f"skillbank-{fingerprint(bank)}.json" and not snap.reused
    assert bank_sha256(load_skillbank(snap.path)) == snap.bank_sha256
    assert snap.path.read_text(encoding="utf-8") == dumps_pretty(bank)  # the bank as built, byte for byte
    # a loaded bank (the model) snapshots to the same file
    assert snapshot_skillbank(load_skillbank(snap.path), tmp_path).reused
    again = snapshot_skillbank(bank, tmp_path)
    assert again.reused and again.path == snap.path
    snap.path.write_text(json.dumps(dict(bank, bank_version="tampered")), encoding="utf-8")
    with pytest.raises(SkillError, match="does not match the hash"):
        snapshot_skillbank(bank, tmp_path)


def test_build_draft_from_candidates():
    cands = {"candidates_sha256": "x", "candidates": [
        {"status": "accepted", "candidate_id": "chunk-aaaaaaaaaaaa", "title": "A", "workflow_stage": "s",
         "applicable_when": "w", "procedure": ["p"], "verification": "v", "common_failure": "f",
         "evidence_cluster_ids": ["c1"], "content": "### A\n\nbody"},
        {"status": "rejected", "candidate_id": "r", "reason": "firewall"}]}
    draft, bank = build_draft(cands, active_skill_budget=3)
    assert draft["schema_version"] == "shopsimrl-initial-skill-draft-v2"
    assert [c["order"] for c in draft["chunks"]] == [1]
    assert draft["active_skill_budget"] == 1
    assert bank["skills"][0]["metadata"]["draft_only"] is True
    assert bank["bank_version"] == "cold-start-draft-pre-validation"
    with pytest.raises(SkillError, match="no accepted candidate"):
        build_draft({"candidates": []})
