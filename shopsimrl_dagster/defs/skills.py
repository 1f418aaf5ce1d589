"""The skills lineage: eval_summary[ckpt] → episode_labels → skill_candidates → skill_gate → skillbank_snapshot.

Every asset is partitioned by checkpoint and stays thin: it finds the run directories of the
checkpoint, calls one ``shopsimrl_core`` function and reports paths, hashes and headline numbers.

- ``episode_labels`` labels every suite run of the checkpoint that exists (``labels.parquet`` next to
  each ``traces.jsonl``).
- ``skill_candidates`` mines the TRAIN suite's labelled traces (never val or test) and writes the
  candidates and the cold-start draft to ``<runs_root>/skills/<checkpoint>/``.
- ``skill_gate`` runs Gate A against the checkpoint's bare VAL run (reused after the pairing checks)
  into ``<runs_root>/gate-a/<checkpoint>/``; it shares the GPU pool with rollouts.
- ``skillbank_snapshot`` freezes the selected bank as ``<runs_root>/skillbanks/skillbank-<sha256>.json``.

An asset whose input run does not exist yet (e.g. the train suite was never rolled out for this
checkpoint) records ``status: skipped: …`` instead of failing, so a suite-by-suite job (the demo
runs train, then val) fills the lineage as its inputs appear.
"""


import json
from pathlib import Path
from typing import Any

import dagster as dg

import shopsimrl_core as core
from shopsimrl_core import (
    GateAConfig,
    build_draft,
    check_text,
    context_from_traces,
    iter_latest_records,
    label_run,
    load_skillbank,
    mine_candidates,
    read_labels,
    require_train_only,
    run_gate_a,
    snapshot_skillbank,
    write_draft,
)

from .assets import ROLLOUT_POOL, as_failure
from .checks import check_result
from .partitions import checkpoints
from .resources import CheckpointRegistry, EvaluationSuites, InferenceEndpoint, RunStorage

__all__ = ["episode_labels", "skill_candidates", "skill_gate", "skillbank_snapshot", "skills_job",
           "SkillBuildingConfig", "GateSettings"]

_GROUP = "skills"

LABELS_COVER = "labels_cover_every_episode"
FIREWALL = "candidates_pass_firewall"
TRAIN_ONLY = "no_val_or_test_evidence"
GATE_PAIRED = "gate_paired_with_bare_val"
SNAPSHOT_HASH = "snapshot_reproduces_hash"


class SkillBuildingConfig(dg.Config):
    """Where skill evidence comes from and how candidates are proposed."""

    train_suite: str = "train"
    """Suite whose traces are the evidence (must run on a train-role split)."""
    min_support: int = 2
    """A failure label needs at least this many episodes to get a candidate."""
    active_skill_budget: int = 10
    """Chunks Gate A may keep (written into the draft)."""
    provider: str = "rule_based"
    """``rule_based`` (deterministic, offline) or ``analyst`` (the checkpoint's inference endpoint)."""
    analyst_model: str | None = None
    """Served model of the analyst; null uses the checkpoint's served model."""


class GateSettings(dg.Config):
    """Gate A settings (spec §16.1; the bootstrap is this project's addition)."""

    val_suite: str = "val"
    """Suite of the bare validation run (skill-free, full val split, repeats 1)."""
    mask_seed: int = 20260901
    bootstrap_samples: int = 1000


def _skills_dir(run_storage: RunStorage, checkpoint_id: str) -> Path:
    return run_storage.root_path / "skills" / checkpoint_id


def _skipped(reason: str, checks: list[str]) -> dg.MaterializeResult:
    # Nothing was produced, so nothing can violate a check; say so instead of claiming a pass on data.
    return dg.MaterializeResult(
        metadata={"status": f"skipped: {reason}"},
        check_results=[check_result(name, True, f"not applicable: {reason}") for name in checks],
    )


# --------------------------------------------------------------------------- labels


@dg.asset(
    group_name=_GROUP,
    deps=["eval_summary"],
    partitions_def=checkpoints,
    kinds={"polars", "parquet"},
    check_specs=[dg.AssetCheckSpec(LABELS_COVER, asset="episode_labels", blocking=True,
                                   description="Every episode of every labelled run has exactly one label row.")],
)
def episode_labels(
    context: dg.AssetExecutionContext, run_storage: RunStorage, evaluation_suites: EvaluationSuites
) -> dg.MaterializeResult:
    """Outcome and behaviour labels (with evidence step indexes) for every suite run of the checkpoint."""
    settings = evaluation_suites.settings()
    checkpoint_id = context.partition_key
    tables: dict[str, Any] = {}
    coverage: dict[str, tuple[int, int]] = {}
    for suite in sorted(settings.suites):
        run_dir = run_storage.run_dir(suite, checkpoint_id)
        if not (run_dir / "traces.jsonl").is_file():
            continue
        with as_failure():
            table = label_run(run_dir)
            episode_ids = {r["episode_id"] for r in iter_latest_records(run_dir / "traces.jsonl")}
            rows = read_labels(table.path).get_column("episode_id").to_list()
        tables[suite] = table
        coverage[suite] = (len(rows), len(episode_ids)) if len(set(rows)) == len(rows) and set(rows) == episode_ids \
            else (len(rows), -1)
    if not tables:
        return _skipped(f"no suite has traces for checkpoint {checkpoint_id} yet", [LABELS_COVER])
    outcomes = sorted({o for t in tables.values() for o in t.distribution["outcomes"]})
    suites = sorted(tables)
    lines = ["| outcome | " + " | ".join(suites) + " |", "|---|" + "---:|" * len(suites)]
    for outcome in outcomes:
        lines.append(f"| {outcome} | " + " | ".join(str(tables[s].distribution["outcomes"].get(outcome, 0)) for s in suites) + " |")
    lines.append("| **episodes** | " + " | ".join(str(tables[s].episodes) for s in suites) + " |")
    behaviour = ["| behaviour | " + " | ".join(suites) + " |", "|---|" + "---:|" * len(suites)]
    for key in ("first_buy_incomplete_options", "episodes_with_loops", "searches_mean", "result_pages_mean",
                "steps_to_purchase_mean"):
        cells = []
        for s in suites:
            value = tables[s].distribution.get(key)
            cells.append("–" if value is None else (f"{value:.2f}" if isinstance(value, float) else str(value)))
        behaviour.append(f"| {key} | " + " | ".join(cells) + " |")
    metadata: dict[str, Any] = {
        "status": "labelled",
        "suites": ", ".join(suites),
        "label_distribution": dg.MetadataValue.md("\n".join(lines)),
        "behaviour": dg.MetadataValue.md("\n".join(behaviour)),
    }
    for suite, table in tables.items():
        metadata[f"{suite}_episodes"] = table.episodes
        metadata[f"{suite}_labels_path"] = dg.MetadataValue.path(str(table.path))
        metadata[f"{suite}_labels_sha256"] = table.sha256
        metadata[f"{suite}_invalid_action_reasons"] = dg.MetadataValue.json(table.distribution["invalid_action_reasons"])
        metadata[f"{suite}_protocol_error_codes"] = dg.MetadataValue.json(table.distribution["protocol_error_codes"])
        metadata[f"{suite}_budget_status"] = dg.MetadataValue.json(table.distribution["budget_status"])
        success = table.distribution["outcomes"].get("success", 0)
        metadata[f"{suite}_success_share"] = success / table.episodes if table.episodes else 0.0
    bad = {s: c for s, c in coverage.items() if c[1] < 0}
    check = check_result(LABELS_COVER, not bad,
                   "one label row per episode in every run" if not bad else f"label rows do not match episodes in {sorted(bad)}",
                   rows=dg.MetadataValue.json({s: c[0] for s, c in coverage.items()}))
    return dg.MaterializeResult(metadata=metadata, check_results=[check])


# --------------------------------------------------------------------------- candidates


@dg.asset(
    group_name=_GROUP,
    deps=[episode_labels],
    partitions_def=checkpoints,
    kinds={"json"},
    check_specs=[
        dg.AssetCheckSpec(FIREWALL, asset="skill_candidates", blocking=True,
                          description="No accepted candidate contains a product id, long number, task id, product "
                          "title, brand or gold option value of the source traces (leakage firewall)."),
        dg.AssetCheckSpec(TRAIN_ONLY, asset="skill_candidates", blocking=True,
                          description="Every evidence reference points at a train-split episode; no val or test "
                          "trace was read."),
    ],
)
def skill_candidates(
    context: dg.AssetExecutionContext,
    config: SkillBuildingConfig,
    run_storage: RunStorage,
    evaluation_suites: EvaluationSuites,
    checkpoint_registry: CheckpointRegistry,
    inference_endpoint: InferenceEndpoint,
) -> dg.MaterializeResult:
    """Skill candidates mined from the train suite's labelled traces, plus the cold-start draft."""
    settings = evaluation_suites.settings()
    with as_failure():
        settings.suite(config.train_suite)
    checkpoint_id = context.partition_key
    run_dir = run_storage.run_dir(config.train_suite, checkpoint_id)
    if not (run_dir / "labels.parquet").is_file():
        return _skipped(f"no labelled {config.train_suite!r} run for {checkpoint_id}; run job "
                        f"evaluate_{config.train_suite} for this checkpoint first", [FIREWALL, TRAIN_ONLY])
    provider = None
    if config.provider == "analyst":
        from shopsimrl_core import AnalystCandidateProvider

        checkpoint = checkpoint_registry.get(checkpoint_id)
        provider = AnalystCandidateProvider(base_url=inference_endpoint.base_url_for(checkpoint),
                                            model=config.analyst_model or inference_endpoint.model_for(checkpoint),
                                            api_key_env=inference_endpoint.api_key_env,
                                            timeout=inference_endpoint.timeout_s)
    elif config.provider != "rule_based":
        raise dg.Failure(description=f"skill_candidates.provider: unknown provider {config.provider!r}; "
                         "use rule_based or analyst")
    out_dir = _skills_dir(run_storage, checkpoint_id)
    with as_failure():
        result = mine_candidates(run_dir / "labels.parquet", run_dir / "traces.jsonl", out_dir / "skill_candidates.json",
                                 provider=provider, min_support=config.min_support)
    doc = result.document
    draft_path = bank_path = None
    if result.accepted:
        with as_failure():
            draft, bank = build_draft(doc, active_skill_budget=min(config.active_skill_budget, len(result.accepted)))
            draft_path, bank_path = write_draft(draft, bank, out_dir)
    # Checks recompute their verdict from the files, independently of the miner's own bookkeeping.
    records = {r["episode_id"]: r for r in iter_latest_records(run_dir / "traces.jsonl")}
    firewall = context_from_traces(records.values())
    leaks = {c["candidate_id"]: [f.code for f in check_text(c["content"], firewall)] for c in result.accepted}
    leaks = {k: v for k, v in leaks.items() if v}
    labels = read_labels(run_dir / "labels.parquet")
    split_of = dict(zip(labels.get_column("episode_id").to_list(), labels.get_column("split").to_list()))
    foreign = sorted({e["episode_id"] for c in doc["candidates"] for e in c.get("evidence", [])
                      if split_of.get(e["episode_id"]) != "train"
                      or (records.get(e["episode_id"], {}).get("job") or {}).get("split") != "train"})
    try:
        require_train_only(split_of.values(), str(run_dir))
        train_only = not foreign
    except core.SkillError:
        train_only = False
    table = ["| candidate | label | support | status | reason |", "|---|---|---:|---|---|"]
    for c in doc["candidates"]:
        table.append(f"| `{c['candidate_id']}` | {c['source_label']} | {c['support']} | {c['status']} | {c['reason'] or ''} |")
    metadata: dict[str, Any] = {
        "status": "mined",
        "provider": doc["provider"]["provider"],
        "candidate_count": len(doc["candidates"]),
        "accepted": len(result.accepted),
        "rejected": len(result.rejected),
        "frequent_labels": dg.MetadataValue.json(doc["frequent_labels"]),
        "label_support": dg.MetadataValue.json(doc["label_support"]),
        "candidates": dg.MetadataValue.md("\n".join(table)),
        "candidates_path": dg.MetadataValue.path(str(result.path)),
        "candidates_sha256": doc["candidates_sha256"],
        "evidence_episodes": doc["source"]["episodes"],
    }
    if draft_path is not None:
        metadata["draft_path"] = dg.MetadataValue.path(str(draft_path))
        metadata["draft_skillbank_path"] = dg.MetadataValue.path(str(bank_path))
    return dg.MaterializeResult(metadata=metadata, check_results=[
        check_result(FIREWALL, not leaks, "every accepted candidate is free of instance data" if not leaks
               else f"instance data in {sorted(leaks)}", findings=dg.MetadataValue.json(leaks)),
        check_result(TRAIN_ONLY, train_only, "all evidence is from the train split" if train_only
               else f"non-train evidence: {foreign[:5]}", evidence_episodes=len(split_of)),
    ])


# --------------------------------------------------------------------------- gate and snapshot


@dg.asset(
    group_name=_GROUP,
    deps=[skill_candidates],
    partitions_def=checkpoints,
    pool=ROLLOUT_POOL,
    kinds={"python", "json"},
    check_specs=[dg.AssetCheckSpec(GATE_PAIRED, asset="skill_gate", blocking=True,
                                   description="The masked val run is complete and pairs 1:1 with the checkpoint's "
                                   "bare val run (spec §14.2 checks passed).")],
)
def skill_gate(
    context: dg.AssetExecutionContext, config: GateSettings, run_storage: RunStorage, evaluation_suites: EvaluationSuites
) -> dg.MaterializeResult:
    """Gate A: masked val rollouts paired with the bare val run; OLS per component with task-bootstrap
    intervals; strictly positive chunks up to the budget are selected."""
    settings = evaluation_suites.settings()
    with as_failure():
        settings.suite(config.val_suite)
    checkpoint_id = context.partition_key
    draft_path = _skills_dir(run_storage, checkpoint_id) / "initial_skill_draft.json"
    bare_dir = run_storage.run_dir(config.val_suite, checkpoint_id)
    bare_config = run_storage.root_path / "_configs" / config.val_suite / f"{checkpoint_id}.yaml"
    if not draft_path.is_file():
        return _skipped(f"no cold-start draft for {checkpoint_id} (skill_candidates produced none)", [GATE_PAIRED])
    if not (bare_dir / "manifest.json").is_file() or not bare_config.is_file():
        return _skipped(f"no bare {config.val_suite!r} run for {checkpoint_id}; run job evaluate_{config.val_suite} first",
                        [GATE_PAIRED])
    with as_failure():
        problems = core.gate_config_problems(core.load_config(bare_config))
    if problems:
        # A sampled or repeated val suite is a legitimate evaluation setting, just not a Gate A baseline.
        return _skipped(f"Gate A needs the bare {config.val_suite!r} run on the full val split with repeats 1 "
                        f"(spec §14.1), but {'; '.join(problems)}; set suites.{config.val_suite}.sample_size: null "
                        f"and repeats: 1 in {settings.source}, then rerun evaluate_{config.val_suite}", [GATE_PAIRED])
    out_dir = run_storage.root_path / "gate-a" / checkpoint_id
    with as_failure():
        result = run_gate_a(GateAConfig(output_dir=out_dir, experiment_config=bare_config, bare_run_dir=bare_dir,
                                        draft_path=draft_path, mask_seed=config.mask_seed,
                                        bootstrap_samples=config.bootstrap_samples))
    metadata: dict[str, Any] = {"status": result.status, "gate_dir": dg.MetadataValue.path(str(out_dir)),
                                "bare_run_dir": dg.MetadataValue.path(str(bare_dir))}
    if result.status != "complete":
        return dg.MaterializeResult(metadata=metadata, check_results=[
            check_result(GATE_PAIRED, False, "the masked val run is incomplete; rematerialize to resume it")])
    contrib = result.contributions
    est = contrib["estimates"]
    table = ["| chunk | label | status | rank | β reward | 95% interval | β r_strict | β r_success |",
             "|---|---|---|---:|---:|---|---:|---:|"]
    labels = {c["chunk_id"]: c.get("source_label") for c in json.loads(draft_path.read_text(encoding="utf-8"))["chunks"]}
    for c in contrib["contributions"]:
        ci = c.get("confidence_interval")
        ci_text = f"[{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else "–"
        aux = c["auxiliary_coefficients"]
        table.append(f"| `{c['chunk_id']}` | {labels.get(c['chunk_id'])} | {c['status']} | {c['rank']} | "
                     f"{c['coefficient']:+.4f} | {ci_text} | {aux.get('r_strict', 0.0):+.4f} | {aux.get('r_success', 0.0):+.4f} |")
    metadata.update({
        "observations": contrib["observations"],
        "selected_count": contrib["selected_count"],
        "selected_chunk_ids": dg.MetadataValue.json(contrib["selected_chunk_ids"]),
        "chunks": dg.MetadataValue.md("\n".join(table)),
        "delta_reward_mean": float(est["reward"]["delta_mean"]),
        "masked_reward_mean": float(est["reward"]["masked_mean"]),
        "bare_reward_mean": float(est["reward"]["bare_mean"]),
        "assignment_sha256": contrib["assignment_sha256"],
        "contributions_path": dg.MetadataValue.path(str(out_dir / "contributions.json")),
        "selected_skillbank_path": dg.MetadataValue.path(str(result.selected_skillbank_path)),
    })
    return dg.MaterializeResult(metadata=metadata, check_results=[
        check_result(GATE_PAIRED, True, f"{contrib['observations']} paired val episodes",
               bare_observations_sha256=contrib["bare_baseline"]["observations_sha256"])])


@dg.asset(
    group_name=_GROUP,
    deps=[skill_gate],
    partitions_def=checkpoints,
    kinds={"json"},
    check_specs=[dg.AssetCheckSpec(SNAPSHOT_HASH, asset="skillbank_snapshot", blocking=True,
                                   description="The snapshot file reloads as a valid shopsimrl-skillbank-v1 bank, "
                                   "its name is its bank_sha256, every content_sha256 reproduces, and the "
                                   "firewall finds nothing.")],
)
def skillbank_snapshot(context: dg.AssetExecutionContext, run_storage: RunStorage) -> dg.MaterializeResult:
    """The Gate-A-selected SkillBank frozen as an immutable ``skillbank-<bank_sha256>.json``."""
    checkpoint_id = context.partition_key
    selected = run_storage.root_path / "gate-a" / checkpoint_id / "selected_skillbank.json"
    if not selected.is_file():
        return _skipped(f"Gate A has not selected a bank for {checkpoint_id}", [SNAPSHOT_HASH])
    with as_failure():
        bank = load_skillbank(selected)
        snap = snapshot_skillbank(bank, run_storage.root_path / "skillbanks")
        reloaded = load_skillbank(snap.path)
    content_ok = all(s.get("content_sha256") == core.fingerprint(s["content"]) for s in reloaded["skills"])
    leaks = [s["skill_id"] for s in reloaded["skills"] if check_text(s["content"])]
    ok = core.fingerprint(reloaded) == snap.bank_sha256 and snap.path.name == f"skillbank-{snap.bank_sha256}.json" \
        and content_ok and not leaks
    pointer = core.write_json_atomic(_skills_dir(run_storage, checkpoint_id) / "snapshot.json", {
        "checkpoint_id": checkpoint_id, "path": str(snap.path), "bank_sha256": snap.bank_sha256,
        "bank_version": snap.bank_version, "skill_ids": snap.skill_ids})
    rows = ["| chunk | β reward | 95% interval | rank |", "|---|---:|---|---:|"]
    for s in reloaded["skills"]:
        meta = s.get("metadata") or {}
        ci = meta.get("confidence_interval")
        rows.append(f"| `{s['skill_id']}` | {meta.get('estimated_effect', 0.0):+.4f} | "
                    f"{f'[{ci[0]:+.4f}, {ci[1]:+.4f}]' if ci else '–'} | {meta.get('contribution_rank')} |")
    metadata = {
        "status": "frozen" if reloaded["skills"] else "frozen (Gate A selected no chunk: the bank is empty)",
        "path": dg.MetadataValue.path(str(snap.path)),
        "bank_sha256": snap.bank_sha256,
        "bank_version": snap.bank_version,
        "skills": len(snap.skill_ids),
        "selected_chunks": dg.MetadataValue.md("\n".join(rows)),
        "reused_existing_file": snap.reused,
        "pointer": dg.MetadataValue.path(str(pointer)),
        "inject_with": f"skills.path: {snap.path}",
    }
    return dg.MaterializeResult(metadata=metadata, data_version=dg.DataVersion(snap.bank_sha256[:16]), check_results=[
        check_result(SNAPSHOT_HASH, ok, "snapshot reloads and reproduces its hashes" if ok
               else f"hash or firewall problem (content hashes ok: {content_ok}; leaks: {leaks})")])


skills_job = dg.define_asset_job(
    "build_skills",
    selection=dg.AssetSelection.assets(episode_labels, skill_candidates, skill_gate, skillbank_snapshot),
    description="Labels → candidates → Gate A → SkillBank snapshot for one checkpoint (needs its train and val runs).",
)
