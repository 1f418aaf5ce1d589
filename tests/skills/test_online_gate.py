import json

import pytest
from testkit.gatekit import EffectRunner, make_bare_run, online_pool, write_config, write_split

from shopsimrl_core._errors import SkillError
from shopsimrl_core._hashing import fingerprint, write_json_atomic
from shopsimrl_core.documents import OnlineContributions
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
    assert isinstance(result.contributions, OnlineContributions)
    beta = result.contributions.estimates["reward"].coefficients
    assert beta["cand-001"] == pytest.approx(0.25, abs=1e-12) and beta["chunk-b"] == pytest.approx(-0.1, abs=1e-12)
    assert result.contributions.replacement_winners == {"chunk-a": "cand-001"}
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


def _null_online_gate(rng, pool, tasks: int, mask_seed: int) -> tuple[list, list, dict]:
    """Masks of the online design (absent / old / rewrite per slot) and paired deltas where no
    intervention does anything: treated and bare are two draws of the task's success probability."""
    doc = build_online_assignments([EpisodeJob(t, 0, t, "val") for t in range(tasks)], pool, mask_seed=mask_seed)
    p_task = rng.beta(0.6, 0.7, size=tasks)
    deltas = [float(rng.random() < p) - float(rng.random() < p) for p in p_task]
    return [a["mask"] for a in doc["assignments"]], deltas, doc


def test_on_null_candidates_the_controlling_rule_keeps_its_nominal_share_and_published_does_not():
    # 200 simulated online gates (60 tasks, the pool's 4 columns: a rewrite slot, a kept chunk, an ADD)
    # where nothing has an effect. published keeps every positive survivor (about half); above_noise
    # selects any no-effect intervention in at most ~5 % of gates (family-wise, the max-|β| bar).
    import numpy as np

    from shopsimrl_core.analysis._ols import fit_no_intercept_ols, sign_flip_noise_bar

    pool = online_pool()
    slots = online_slots(pool)
    rng = np.random.default_rng(17)
    gates_with_any = published_selected = survivors_seen = 0
    for g in range(200):
        design, deltas, doc = _null_online_gate(rng, pool, 60, mask_seed=g)
        beta = dict(zip(doc["columns"], fit_no_intercept_ols(design, deltas)))
        bar = sign_flip_noise_bar(design, deltas, list(beta.values()), metric=f"online-{g}", samples=400)["noise_bar"]
        within = {c: abs(b) <= bar for c, b in beta.items()}
        published = select_online(beta, pool, slots, 10)
        controlled = select_online(beta, pool, slots, 10, within_noise=within)
        published_selected += len(published["selected"])
        survivors_seen += len(published["rank"])
        gates_with_any += bool(controlled["selected"])
        assert set(controlled["selected"]) <= set(published["selected"])
        for v in controlled["rank"]:
            if v not in controlled["selected"] and within[v] and beta[v] > 0 and v.startswith("cand-"):
                assert controlled["status"][v] == "within_noise"
    assert 0.35 <= published_selected / survivors_seen <= 0.65
    assert gates_with_any / 200 <= 0.08  # nominal 5 %


def test_published_stays_the_default_and_is_the_spec_rule():
    # §17.3 written out: rewrite winner per family (old on ties), then β > 0 strictly, top K, by (order, id).
    import random

    pool = online_pool()
    slots = online_slots(pool)
    order = {"chunk-a": 1, "cand-001": 1, "chunk-b": 2, "cand-002": 3}
    logical = {"chunk-a": "chunk-a", "cand-001": "chunk-a", "chunk-b": "chunk-b", "cand-002": "cand-002"}
    rng = random.Random(3)
    for _ in range(300):
        beta = {v: rng.choice([-0.2, -0.05, 0.0, 0.05, 0.1, 0.2, 0.3]) for v in order}
        budget = rng.randint(1, 4)
        winner = "chunk-a" if beta["chunk-a"] >= beta["cand-001"] else "cand-001"
        survivors = sorted([winner, "chunk-b", "cand-002"], key=lambda v: (-beta[v], v))
        expected = sorted([v for v in survivors if beta[v] > 0][:budget], key=lambda v: (order[v], logical[v]))
        default = select_online(beta, pool, slots, budget)
        assert default["selected"] == expected
        assert select_online(beta, pool, slots, budget, within_noise={v: False for v in beta}) == default
    assert OnlineGateConfig.__dataclass_fields__["selection_rule"].default == "published"


def test_online_gate_records_the_rule_and_marks_noise_level_interventions(tmp_path):
    split = write_split(tmp_path / "splits.json")
    cfg = write_config(tmp_path / "bare.yaml", split)
    bare = make_bare_run(cfg)
    pool_path = write_json_atomic(tmp_path / "pool.json", online_pool())
    runner = EffectRunner({"chunk-a": 0.1, "cand-001": 0.4, "chunk-b": -0.1, "cand-002": 0.02})
    documents = {}
    for rule in ("published", "above_noise"):
        result = run_online_gate(OnlineGateConfig(output_dir=tmp_path / rule, experiment_config=cfg, bare_run_dir=bare,
                                                  candidate_pool_path=pool_path, bootstrap_samples=50,
                                                  selection_rule=rule), runner=runner)
        assert result.status == "complete"
        doc = result.contributions
        assert isinstance(doc, OnlineContributions)
        documents[rule] = doc
        noise_bar = doc.estimates["reward"].noise_bar
        assert noise_bar is not None
        assert all(c.within_noise is (abs(c.coefficient) <= noise_bar.noise_bar) for c in doc.contributions)
        manifest = json.loads((tmp_path / rule / "online_gate_manifest.json").read_text())
        bank = json.loads(result.selected_skillbank_path.read_text())
        name = {"published": "strictly_positive_top_k", "above_noise": "above_noise_bar_top_k"}[rule]
        assert doc.estimator["selection_rule"] == f"rewrite_winners_then_{name}"
        assert bank["metadata"]["estimator"]["selection_rule"] == f"rewrite_winners_then_{name}"
        assert manifest["protocol"]["selection"] == f"replacement_winner_then_{name}"
    published, controlled = documents["published"], documents["above_noise"]
    assert published.selected_intervention_ids == ["cand-001", "cand-002"]  # β 0.02 > 0 is kept by published
    rows = {c.intervention_id: c for c in controlled.contributions}
    assert rows["cand-002"].within_noise is True and rows["cand-002"].status == "within_noise"
    assert controlled.selected_intervention_ids == ["cand-001"]
    ledger_text = (tmp_path / "above_noise" / "proposal_ledger.jsonl").read_text()
    ledger = [json.loads(line) for line in ledger_text.splitlines()]
    assert {r["candidate_id"]: r["validation_result"] for r in ledger} == {"cand-001": "selected",
                                                                         "cand-002": "within_noise"}


def test_online_gate_refuses_an_unknown_rule(tmp_path):
    split = write_split(tmp_path / "splits.json")
    cfg = write_config(tmp_path / "bare.yaml", split)
    bare = make_bare_run(cfg)
    pool_path = write_json_atomic(tmp_path / "pool.json", online_pool())
    with pytest.raises(SkillError, match="online_gate.selection_rule must be one of published, above_noise"):
        run_online_gate(OnlineGateConfig(output_dir=tmp_path / "g", experiment_config=cfg, bare_run_dir=bare,
                                         candidate_pool_path=pool_path, selection_rule="best"),
                        runner=EffectRunner({}))
    assert not (tmp_path / "g").exists()
