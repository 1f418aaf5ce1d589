"""Research loop: the analysts' repair loop and firewall, Trace2Skill end to end on the real sandbox with
the deterministic analyst endpoint, a training round's reproducibility, the curriculum, the judge and
the training exports."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from testkit.gatekit import ACTIVE, CANDS, EffectRunner, make_bare_run, write_config, write_split
from testkit.tracegen import GOLD_TITLE, make_trace

from shopsimrl_core._hashing import fingerprint, write_json_atomic
from shopsimrl_core.skills import check_text, context_from_traces
from shopsimrl_core.skills.trace2skill import (
    AnalystModel,
    StructuredOutputError,
    Trace2SkillConfig,
    run_online_failure_analysis,
    run_trace2skill,
)
from shopsimrl_core.skills.trace2skill._cards import _check_success, success_cards
from shopsimrl_core.skills.trace2skill._consolidate import _check_clusters, _check_skill


def _model(server) -> AnalystModel:
    return AnalystModel(base_url=server.url, model="shopsim-analyst", max_retries=1)


async def _cards(server, record, attempts):
    model = _model(server)
    async with model:
        return await success_cards(model, record, max_attempts=attempts), model.calls


def test_repair_loop_resends_the_original_messages_plus_one_repair(strict_analyst):
    record = make_trace(2, outcome="success")
    (cards, row), calls = asyncio.run(_cards(strict_analyst, record, 3))
    # every first answer of this endpoint is malformed; the repaired second one is valid
    assert row["attempts"] == 2 and calls == 2
    assert len(row["invalid_attempts"]) == 1 and row["invalid_attempts"][0]["contract_error"]
    assert cards and all(c["card_id"].startswith(f"success-{record['episode_id']}-") for c in cards)
    with pytest.raises(StructuredOutputError) as err:
        asyncio.run(_cards(strict_analyst, record, 1))
    assert err.value.code == "structured-output-invalid" and len(err.value.invalid_attempts) == 1


def test_firewall_rejects_instance_data_in_analyst_output():
    record = make_trace(2, outcome="success")
    card = {"mechanism": "m", "applicable_when": "w", "observed_evidence": "e", "decisive_behavior": "d",
            "generalizable_lesson": "买 " + GOLD_TITLE, "related_chunk_ids": [], "confidence": 0.5}
    error = _check_success(2, context_from_traces([record]))("submit_success_cards", {"cards": [card]})
    assert error and "copies_instance_product_title" in error
    assert _check_success(2, context_from_traces([record]))(
        "submit_success_cards", {"cards": [dict(card, generalizable_lesson="逐项核对规格")]}) is None
    cluster = {"workflow_stage": "s", "mechanism": "m", "applicable_when": "w", "procedure": "看 ASIN",
               "verification": "v", "common_failure": "f", "evidence_card_ids": ["c1"]}
    assert "mentions_asin" in _check_clusters(["c1"])("submit_clusters", {"clusters": [cluster],
                                                                          "evidence_only_card_ids": []})
    chunk = {"title": "t", "workflow_stage": "s", "applicable_when": "同 task-19", "procedure": ["p"],
             "verification": "v", "common_failure": "f", "evidence_cluster_ids": ["k1"]}
    args = {"skill_title": "T", "chunks": [chunk], "evidence_only_cluster_ids": [], "conflicts_resolved": []}
    assert "contains_task_id" in _check_skill(["k1"], 16)("submit_initial_skill", args)


def test_failure_cards_copying_the_gold_goal_are_forced_out(sandbox, leaky_analyst, train_run, tmp_path):
    traces = train_run / "traces.jsonl"
    cfg = Trace2SkillConfig(traces=traces, output_dir=tmp_path / "leaky", analyst=_model(leaky_analyst),
                            environment_url=sandbox.env_url)
    bank = {"schema_version": "shopsimrl-skillbank-v1", "bank_version": "b", "skills": []}
    doc = run_online_failure_analysis(cfg, bank, round_id="round-001", proposal_checkpoint="ck")
    cards = [json.loads(line) for line in (tmp_path / "leaky" / "evidence_cards.jsonl").read_text().splitlines()]
    assert cards and doc["proposals"] == []  # nothing reaches the pool
    for card in cards:
        assert card["proposed_status"] == "PROPOSE_ADD" and card["status"] == "NO_PROPOSAL"
        assert card["forced_no_proposal_reason"] == "firewall_findings"
        assert {f["code"] for f in card["firewall_findings"]} & {"copies_instance_product_title"}


def test_trace2skill_end_to_end_on_the_sandbox(sandbox, analyst, train_run, tmp_path):
    traces = train_run / "traces.jsonl"
    records = [json.loads(line) for line in traces.read_text().splitlines()]
    cfg = Trace2SkillConfig(traces=traces, output_dir=tmp_path / "t2s", analyst=_model(analyst),
                            environment_url=sandbox.env_url, batch_size=4)
    before = analyst.stats()
    result = run_trace2skill(cfg)
    malformed = analyst.stats()["malformed"] - before["malformed"]
    assert malformed > 0  # the seeded malformed answers were met, and repaired
    out = tmp_path / "t2s"
    manifest = json.loads((out / "trace2skill_manifest.json").read_text())
    assert manifest["schema_version"] == "shopsimrl-trace2skill-cold-start-v3"
    assert manifest["identity"]["analyst_model"]["model"] == "shopsim-analyst"
    assert manifest["identity"]["prompts_sha256"]
    cards = [json.loads(line) for line in (out / "evidence_cards.jsonl").read_text().splitlines()]
    assert {c["schema_version"] for c in cards} == {"shopsimrl-evidence-card-v3"}
    failures = [c for c in cards if c["channel"] == "failure"]
    n_fail = sum(1 for r in records if r["final"]["reward_detail"]["r_success"] != 1)
    assert len(failures) == n_fail > 0
    firewall = context_from_traces(records)
    for card in failures:
        gold = next(r for r in records if r["episode_id"] == card["episode_id"])["final"]["goal"]
        assert card["privileged_audit"]["gold_asin"] == gold["asin"]  # the audit used the privileged goal …
        deployable = json.dumps(card["deployable_abstraction"], ensure_ascii=False)
        # … which never reaches deployable text
        assert gold["asin"] not in deployable and gold["name"] not in deployable
        if card["status"] == "PROPOSE_ADD":
            assert card["successful_counterfactual_trials"] >= 1 and card["grounded_live_actions"] >= 1
    draft = json.loads((out / "initial_skill_draft.json").read_text())
    assert draft["schema_version"] == "shopsimrl-initial-skill-draft-v2" and 1 <= len(draft["chunks"]) <= 16
    clusters = [c for line in (out / "cluster_batches.jsonl").read_text().splitlines()
                for c in json.loads(line)["clusters"]]
    assert {c["schema_version"] for c in clusters} == {"shopsimrl-evidence-cluster-v2"}
    for chunk in draft["chunks"]:
        assert check_text(chunk["content"], firewall) == []
    bank = json.loads((out / "initial_skillbank.json").read_text())
    assert [s["skill_id"] for s in bank["skills"]] == result.chunk_ids
    # resume: the same inputs make no model call and give the same draft
    again = run_trace2skill(cfg)
    assert again.model_calls == 0 and again.manifest["draft_sha256"] == manifest["draft_sha256"]

    # Gate A reads the analyst-path draft as it reads the rule miner's (fake val rollouts: effect per chunk)
    from shopsimrl_core.skills import GateAConfig, run_gate_a

    gate_dir = tmp_path / "gate"
    gate_dir.mkdir()
    bare_cfg = write_config(gate_dir / "bare.yaml", write_split(gate_dir / "splits.json"))
    effects = {cid: (0.2 if n == 0 else -0.1) for n, cid in enumerate(result.chunk_ids)}
    gate = run_gate_a(GateAConfig(output_dir=gate_dir / "out", experiment_config=bare_cfg,
                                  bare_run_dir=make_bare_run(bare_cfg), draft_path=result.draft_path,
                                  bootstrap_samples=50), runner=EffectRunner(effects))
    assert gate.status == "complete" and gate.selected_chunk_ids == [result.chunk_ids[0]]

    # an interrupted run (half the analyses kept) redoes only the missing units and reaches the same draft
    ledger = (out / "trajectory_analyses.jsonl").read_text().splitlines()
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "trajectory_analyses.jsonl").write_text("\n".join(ledger[: len(ledger) // 2]) + "\n")
    resumed = run_trace2skill(Trace2SkillConfig(traces=traces, output_dir=partial, analyst=_model(analyst),
                                                environment_url=sandbox.env_url, batch_size=4))
    assert 0 < resumed.model_calls < result.model_calls
    assert resumed.manifest["draft_sha256"] == manifest["draft_sha256"]

    # the pipeline as a CandidateProvider beside the rule miner (resumed: no model call)
    from shopsimrl_core.analysis._labels import label_run
    from shopsimrl_core.skills import Trace2SkillProvider, mine_candidates

    provider = Trace2SkillProvider(cfg)
    mined = mine_candidates(label_run(train_run).path, traces, tmp_path / "cands.json", provider=provider,
                            min_support=1)
    assert provider.result.model_calls == 0
    assert mined.accepted and {c["content"] for c in mined.accepted} <= {c["content"] for c in draft["chunks"]}

    # an online round's failure analysis proposes candidates against the draft bank; the pool is valid
    online_cfg = Trace2SkillConfig(traces=traces, output_dir=tmp_path / "online", analyst=_model(analyst),
                                   environment_url=sandbox.env_url)
    doc = run_online_failure_analysis(online_cfg, bank, round_id="round-001", proposal_checkpoint="ckpt-research")
    assert doc["schema_version"] == "shopsimrl-online-failure-analysis-v1" and doc["failures_audited"] == n_fail
    from shopsimrl_core.skills import build_candidate_pool

    pool = build_candidate_pool(bank, json.loads(Path(doc["candidates_path"]).read_text()), round_id="round-001",
                                proposal_checkpoint="ckpt-research")
    assert pool["pool_sha256"] == fingerprint({k: v for k, v in pool.items() if k not in ("created_at", "pool_sha256")})
    assert pool["candidates"] and all(c["operation"] in ("ADD", "REWRITE") for c in pool["candidates"])


def _round(tmp: Path, name: str):
    from shopsimrl_core.skills import RoundConfig, run_training_round

    base = tmp / name
    base.mkdir()
    split = write_split(base / "splits.json")
    cfg = write_config(base / "bare.yaml", split)
    bare = make_bare_run(cfg)
    active = write_json_atomic(base / "active.json", ACTIVE)
    cands = write_json_atomic(base / "cands.json", CANDS)
    runner = EffectRunner({"chunk-a": 0.1, "cand-001": 0.25, "chunk-b": -0.1, "cand-002": 0.2})
    return run_training_round(RoundConfig(round_id="round-003", round_dir=base / "round", active_skillbank_path=active,
                                          candidates_path=cands, experiment_config=cfg, bare_run_dir=bare,
                                          proposal_checkpoint="ck-prev", bootstrap_samples=50), runner=runner)


def test_a_round_is_reproducible_and_freezes_a_curriculum(tmp_path):
    first, second = _round(tmp_path, "a"), _round(tmp_path, "b")
    assert first.status == second.status == "complete"
    assert first.bank_sha256 == second.bank_sha256 and first.pool_sha256 == second.pool_sha256
    assert first.state_id == second.state_id
    state = json.loads(first.curriculum_path.read_text())
    assert state["schema_version"] == "shopsimrl-skill-curriculum-v1"
    core = {k: v for k, v in state.items() if k not in ("schema_version", "created_at", "state_id")}
    assert state["state_id"] == fingerprint(core)  # the published core (runtime-semantics §19.2)
    effects = {c["skill_id"]: c["contribution"] for c in state["chunks"]}
    scale = max(effects.values())
    for chunk in state["chunks"]:  # ρ = clip(ρmin + (ρmax − ρmin)·effect/scale)
        expected = min(0.9, max(0.2, 0.2 + 0.7 * chunk["contribution"] / scale))
        assert chunk["inclusion_probability"] == pytest.approx(expected)
    from shopsimrl_core.skills import assign_group

    modes = [assign_group(state, str(k)) for k in range(400)]
    assert modes == [assign_group(state, str(k)) for k in range(400)]
    free = sum(1 for m in modes if m["mode"] == "skill_free") / 400
    assert 0.12 < free < 0.28  # q = 0.2


def test_slime_tasks_and_sft_exports(tmp_path, train_run, sandbox):
    from shopsimrl_core._errors import ConfigError
    from shopsimrl_core.export._training import export_slime_tasks, export_training_sft

    split = write_split(tmp_path / "splits.json")
    path = export_slime_tasks(split, "train", tmp_path / "tasks.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [{"prompt": str(t), "metadata": {"schema_version": "shopsimrl-slime-tasks-v1", "task_id": t,
                                                     "split": "train"}} for t in (0, 2, 3)]
    with pytest.raises(ConfigError, match="guarded"):
        export_slime_tasks(split, "test", tmp_path / "t2.jsonl")
    assert not (tmp_path / "t2.jsonl").exists()
    sft = export_training_sft([train_run], tmp_path / "sft.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert sft.records == len(rows) > 0
    lines = (train_run / "traces.jsonl").read_text().splitlines()
    traces = {json.loads(line)["episode_id"]: json.loads(line) for line in lines}
    for row in rows:  # the messages as evaluation sent them, and the environment's reward
        assert row["schema_version"] == "shopsimrl-sft-v1"
        assert row["messages"][0] == traces[row["episode_id"]]["conversation"][0]
        assert row["metadata"]["reward"] == traces[row["episode_id"]]["final"]["reward"]


def test_offline_judge_reports_agreement(analyst, train_run, tmp_path):
    from shopsimrl_core.analysis._judge import judge_run

    summary = judge_run(train_run, tmp_path / "judge", _model(analyst))
    assert summary["rubric"]["rubric_id"] and summary["rubric"]["version"] == "v1"
    assert summary["judged"] == summary["episodes"] > 0 and summary["inside_rollout"] is False
    agreement = summary["agreement"]
    assert sum(agreement["confusion"].values()) == summary["judged"]
    assert 0.0 <= agreement["accuracy"] <= 1.0
    rows = [json.loads(line) for line in (tmp_path / "judge" / "judgements.jsonl").read_text().splitlines()]
    assert all(isinstance(r["verdict"]["satisfied"], bool) and isinstance(r["raw_output"], str) for r in rows)
    model = _model(analyst)
    judge_run(train_run, tmp_path / "judge", model)
    assert model.calls == 0  # resumed by input fingerprint


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, analyst):
    from shopsimrl_core._errors import SkillError

    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps(make_trace(19, split="val")) + "\n")
    out = tmp_path / "out"
    cfg = Trace2SkillConfig(traces=traces, output_dir=out, analyst=_model(analyst))
    with pytest.raises(SkillError) as err:
        run_trace2skill(cfg)
    assert err.value.code == "evidence-not-train" and "\n" not in err.value.one_line() and str(traces) in str(err.value)
    traces.write_text("{not json\n")
    with pytest.raises(SkillError, match=r"traces.jsonl:1: line is not JSON"):
        run_trace2skill(cfg)
    cfg.validation_dimension_cap = 17
    with pytest.raises(SkillError, match="validation_dimension_cap must be 1..16"):
        run_trace2skill(cfg)
    assert not out.exists()


def test_trace2skill_yaml_is_validated_field_by_field(tmp_path):
    from shopsimrl_core._errors import ConfigError
    from shopsimrl_core.skills import load_trace2skill_config

    path = tmp_path / "t2s.yaml"
    path.write_text("experiment: {traces: t.jsonl, output_dir: out, bogus: 1}\n"
                    "analyst_model: {name: a, base_url: 'http://127.0.0.1:9/v1', api_key_env: null}\n"
                    "compilation: {validation_dimension_cap: 17}\n")
    with pytest.raises(ConfigError) as err:
        load_trace2skill_config(path)
    lines = str(err.value).splitlines()
    assert any(line.startswith(f"{path}: experiment.bogus: unknown key; valid keys: traces") for line in lines)
    assert any("compilation.validation_dimension_cap" in line for line in lines)
    path.write_text("experiment: {traces: t.jsonl, output_dir: out}\n"
                    "analyst_model: {name: a, base_url: 'http://127.0.0.1:9/v1', api_key_env: null}\n")
    cfg = load_trace2skill_config(path)
    assert cfg.traces == tmp_path / "t.jsonl" and cfg.analyst.max_tokens == 4096
    assert cfg.analyst.tool_choice == "required" and cfg.batch_size == 40 and cfg.max_failure_steps == 12


def test_the_example_trace2skill_config_loads():
    from shopsimrl_core.skills import load_trace2skill_config

    repo = Path(__file__).resolve().parents[2]
    cfg = load_trace2skill_config(repo / "configs" / "research" / "trace2skill.example.yaml")
    assert cfg.analyst.model == "shopsim-analyst" and cfg.analyst.api_key_env is None
    assert cfg.traces.name == "traces.jsonl" and cfg.output_dir.name == "trace2skill"
