import json

import pytest
from testkit.tracegen import GOLD_ASIN, GOLD_TITLE, make_trace, write_traces

from shopsimrl_core._errors import SkillError
from shopsimrl_core._hashing import dumps_pretty, fingerprint
from shopsimrl_core.analysis._labels import label_episode, label_run
from shopsimrl_core.documents import SkillCandidates
from shopsimrl_core.skills._candidates import (
    RuleBasedMiner,
    build_failure_groups,
    chunk_id_for,
    mine_candidates,
    propose_candidates,
    render_chunk,
)
from shopsimrl_core.skills._firewall import context_from_traces


def _train_records():
    recs = []
    for t in range(6):
        recs.append(make_trace(t, 0, outcome="wrong_option"))
        recs.append(make_trace(t, 1, outcome="success"))
    recs.append(make_trace(10, 0, outcome="action_limit"))
    recs.append(make_trace(11, 0, outcome="action_limit"))
    recs.append(make_trace(12, 0, outcome="over_budget"))  # support 1: not frequent
    return recs


def test_chunk_id_and_render_follow_spec_format():
    assert chunk_id_for("Verify Options!", ["c1"]) == "verify-options"
    cid = chunk_id_for("规格核验", ["b", "a"])
    assert cid == "chunk-" + fingerprint({"title": "规格核验", "evidence_cluster_ids": ["a", "b"]})[:12]
    text = render_chunk({"title": "T", "applicable_when": "W", "procedure": ["a", "b"], "verification": "V",
                         "common_failure": "F"})
    assert text == "### T\n\n- Applies when: W\n- Procedure:\n  1. a\n  2. b\n- Verify: V\n- Avoid: F"


def test_groups_have_contrasting_success_of_same_task():
    rows = [label_episode(r) for r in _train_records()]
    groups = {g.label: g for g in build_failure_groups(rows, min_support=2)}
    assert "outcome:wrong_option" in groups and "outcome:action_limit" in groups
    assert "outcome:over_budget" not in groups
    g = groups["outcome:wrong_option"]
    assert g.support == 6
    assert g.contrasts[0]["match"] == "task"
    assert g.contrasts[0]["task_id"] == g.failures[0]["task_id"]
    refs = g.evidence_refs()
    assert {"episode_id": "task-000000__sample-000", "step_index": 3, "role": "failure",
            "label": "outcome:wrong_option"} in refs
    assert any(r["role"] == "contrast_success" and r["step_index"] == 4 for r in refs)


def test_mine_candidates_end_to_end(tmp_path):
    run = tmp_path / "train"
    write_traces(run / "traces.jsonl", _train_records())
    label_run(run)
    cs = mine_candidates(run / "labels.parquet", run / "traces.jsonl", tmp_path / "cands.json")
    text = (tmp_path / "cands.json").read_text(encoding="utf-8")
    doc = json.loads(text)
    assert doc["schema_version"] == "shopsimrl-skill-candidates-v1"
    assert dumps_pretty(SkillCandidates.parse(doc, "cands.json").to_json()) == text  # the typed format, byte for byte
    by_label = {c["source_label"]: c for c in cs.accepted}
    for label in doc["frequent_labels"]:
        assert label in by_label, label  # >= 1 candidate per frequent failure label
    c = by_label["outcome:wrong_option"]
    assert c["content"].startswith("### ")
    assert c["content_sha256"] == fingerprint(c["content"])
    assert c["evidence"] and all("episode_id" in e and "step_index" in e for e in c["evidence"])
    # deterministic
    again = mine_candidates(run / "labels.parquet", run / "traces.jsonl", tmp_path / "again.json")
    assert again.document["candidates_sha256"] == doc["candidates_sha256"]


@pytest.mark.parametrize("split", ["val", "test"])
def test_val_and_test_evidence_refused(tmp_path, split):
    run = tmp_path / split
    recs = _train_records() + [make_trace(50, outcome="wrong_option", split=split)]
    write_traces(run / "traces.jsonl", recs)
    label_run(run)
    with pytest.raises(SkillError, match="train-split evidence only") as info:
        mine_candidates(run / "labels.parquet", run / "traces.jsonl", tmp_path / "c.json")
    assert info.value.code == "evidence-not-train"
    assert not (tmp_path / "c.json").exists()


class LeakyProvider:
    identity = {"provider": "leaky-test"}

    def propose(self, group):
        base = {"title": "规格", "workflow_stage": "s", "applicable_when": "w", "verification": "v",
                "common_failure": "f"}
        return [dict(base, procedure=[f"点击 {GOLD_ASIN}"]),
                dict(base, title="标题", procedure=[f"选择 {GOLD_TITLE}"]),
                dict(base, title="选项", procedure=["选 米白色加长加厚款"]),
                dict(base, title="ok", procedure=["核对规格"]),
                dict(base, title="ok", procedure=["核对规格"]),
                {"title": ""}]


def test_firewall_rejections_are_kept_with_reason():
    recs = _train_records()
    rows = [label_episode(r) for r in recs]
    groups = build_failure_groups(rows)[:1]
    out = propose_candidates(groups, LeakyProvider(), context_from_traces(recs))
    status = [(c["status"], (c["reason"] or "").split(":")[0]) for c in out]
    assert status == [("rejected", "firewall"), ("rejected", "firewall"), ("rejected", "firewall"),
                      ("accepted", ""), ("rejected", "duplicate_of"), ("rejected", "invalid")]
    assert out[0]["firewall_findings"][0]["code"] == "contains_long_identifier"
    assert out[1]["firewall_findings"][0]["code"] == "copies_instance_product_title"
    assert out[2]["firewall_findings"][0]["code"] == "copies_gold_option"


def test_rule_miner_templates_pass_firewall_for_every_label():
    recs = _train_records()
    ctx = context_from_traces(recs)
    from shopsimrl_core.skills._candidates import _TEMPLATES, FailureGroup
    labels = list(_TEMPLATES) + ["protocol_error:x", "invalid_action:y"]
    groups = [FailureGroup(label=name, support=2) for name in labels]
    out = propose_candidates(groups, RuleBasedMiner(), ctx)
    assert all(c["status"] == "accepted" or c["reason"].startswith("duplicate_of") for c in out), out
