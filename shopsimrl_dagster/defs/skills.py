"""The skills lineage, with explicit edges to the suites it reads (``skills:`` in the settings):

    <train>/eval_summary[ckpt] → episode_labels → skill_candidates ─┐
    <val>/eval_summary[ckpt] ──────────────────────────────────────┴→ skill_gate → skillbank_snapshot

Every asset is partitioned by checkpoint and stays thin: it finds the run directories of the
checkpoint (paths from ``RunStorage``), calls one ``shopsimrl_core`` function and reports paths,
hashes and headline numbers. It runs from its own job ``build_skills`` — never as a side effect of
an evaluation job.

- ``episode_labels`` labels the TRAIN suite's run (``labels.parquet`` next to its ``traces.jsonl``).
- ``skill_candidates`` mines those labelled traces (never val or test) into candidates and the
  cold-start draft; the table shows each candidate's text.
- ``skill_gate`` runs Gate A against the checkpoint's bare VAL run; its masked rollouts use the
  checkpoint's endpoint, so ``build_skills`` runs carry the endpoint tag like evaluation runs.
- ``skillbank_snapshot`` freezes the selected bank as an immutable ``skillbank-<sha256>.json``.

An asset whose input does not exist (no train run for this checkpoint, no draft, no selection)
yields nothing — no materialization and no check verdict — and logs why, instead of recording a
fake "skipped" materialization with "passed" checks.
"""

import json
from collections.abc import Iterator
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
from shopsimrl_core.documents import ChunkContributions

from ..settings import PipelineSettings
from .assets import ROLLOUT_RETRY_POLICY, as_failure, suite_asset_key
from .checks import check_result
from .jobs import partition_config
from .optional import optional_asset
from .resources import CheckpointRegistry, EvaluationSuites, InferenceEndpoint, RunStorage

__all__ = [
    "build_skill_assets",
    "build_skills_job",
    "SkillBuildingConfig",
    "GateSettings",
    "SKILL_ASSET_KEYS",
    "gate_chunk_table",
    "snapshot_skill_table",
    "noise_metadata",
]

_GROUP = "skills"
SKILL_ASSET_KEYS = tuple(
    dg.AssetKey(name) for name in ("episode_labels", "skill_candidates", "skill_gate", "skillbank_snapshot")
)
LABELS, CANDIDATES, GATE, SNAPSHOT = SKILL_ASSET_KEYS

LABELS_COVER = "labels_cover_every_episode"
FIREWALL = "candidates_pass_firewall"
TRAIN_ONLY = "no_val_or_test_evidence"
GATE_PAIRED = "gate_paired_with_bare_val"
SNAPSHOT_HASH = "snapshot_reproduces_hash"


class SkillBuildingConfig(dg.Config):
    """How candidates are proposed (the evidence suite is ``skills.train_suite`` of the settings)."""

    min_support: int = 2
    """A failure label needs at least this many episodes to get a candidate."""
    active_skill_budget: int = 10
    """Chunks Gate A may keep (written into the draft)."""
    provider: str = "rule_based"
    """``rule_based`` (deterministic, offline) or ``analyst`` (the checkpoint's inference endpoint)."""
    analyst_model: str | None = None
    """Served model of the analyst; null uses the checkpoint's served model."""


class GateSettings(dg.Config):
    """Gate A settings (runtime-semantics §16.1; the bootstrap is this project's addition)."""

    mask_seed: int = 20260901
    bootstrap_samples: int = 1000


def _text(value: Any, limit: int = 600) -> str:
    # Skill text is model-derived and untrusted: the UI renders table cells as plain text; cap the length.
    text = str(value or "")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _noise_text(within_noise: Any) -> str:
    return "within noise" if within_noise is True else "above noise bar" if within_noise is False else "–"


def _interval(ci: Any) -> str:
    return f"[{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else "–"


def _p(value: Any) -> Any:
    return None if value is None else round(float(value), 4)


def gate_chunk_table(
    contributions: dict[str, Any], chunks: dict[str, dict[str, Any]]
) -> tuple[list[dg.TableRecord], dg.TableSchema]:
    """Gate A's chunks as table rows: the core's β with its interval, the noise bar and verdict per chunk.

    *contributions* is the gate's ``contributions.json`` (``shopsimrl-chunk-contributions-v2``),
    *chunks* the draft's chunks by id (for the label and the text). ``noise`` reads ``within noise``
    where the core marks ``|β| ≤ noise bar`` (docs/statistics.md), ``adjusted_p`` is the core's max-T
    sign-flip p-value; both ``–`` when the gate ran without a noise bar.
    """
    bar = (contributions["estimates"]["reward"].get("noise_bar") or {}).get("noise_bar")
    rows = []
    for c in contributions["contributions"]:
        aux = c["auxiliary_coefficients"]
        chunk = chunks.get(c["chunk_id"], {})
        rows.append(
            dg.TableRecord(
                {
                    "chunk": c["chunk_id"],
                    "label": str(chunk.get("source_label")),
                    "status": str(c["status"]),
                    "rank": c["rank"],
                    "text": _text(chunk.get("content")),
                    "beta_reward": round(float(c["coefficient"]), 4),
                    "interval_95": _interval(c.get("confidence_interval")),
                    "noise_bar": _p(bar),
                    "noise": _noise_text(c.get("within_noise")),
                    "adjusted_p": _p(c.get("adjusted_p_value")),
                    "beta_r_strict": round(float(aux.get("r_strict", 0.0)), 4),
                    "beta_r_success": round(float(aux.get("r_success", 0.0)), 4),
                }
            )
        )
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("chunk", "string"),
            dg.TableColumn("label", "string"),
            dg.TableColumn("status", "string"),
            dg.TableColumn("rank", "int"),
            dg.TableColumn("text", "string", description="the skill text"),
            dg.TableColumn("beta_reward", "float"),
            dg.TableColumn("interval_95", "string", description="task-bootstrap 95% interval of beta_reward"),
            dg.TableColumn("noise_bar", "float", description="largest |beta| no effect produces (sign-flip, 95%)"),
            dg.TableColumn("noise", "string", description="within noise: |beta_reward| <= noise_bar"),
            dg.TableColumn("adjusted_p", "float", description="max-T sign-flip p-value (family-wise)"),
            dg.TableColumn("beta_r_strict", "float"),
            dg.TableColumn("beta_r_success", "float"),
        ]
    )
    return rows, schema


def snapshot_skill_table(
    skills: list[dict[str, Any]], contributions: dict[str, Any] | None
) -> tuple[list[dg.TableRecord], dg.TableSchema]:
    """The frozen bank's skills as table rows, each with its Gate A chunk's noise verdict when known.

    β, interval and rank come from the skill's metadata (what the bank records); ``noise``,
    ``noise_bar`` and ``adjusted_p`` from the gate's *contributions* that selected it (``–`` without).
    """
    by_chunk = {c["chunk_id"]: c for c in (contributions or {}).get("contributions", [])}
    bar = (((contributions or {}).get("estimates") or {}).get("reward", {}).get("noise_bar") or {}).get("noise_bar")
    rows = []
    for skill in skills:
        meta = skill.get("metadata") or {}
        chunk = by_chunk.get(skill["skill_id"], {})
        rows.append(
            dg.TableRecord(
                {
                    "skill": skill["skill_id"],
                    "text": _text(skill.get("content")),
                    "beta_reward": round(float(meta.get("estimated_effect", 0.0)), 4),
                    "interval_95": _interval(meta.get("confidence_interval")),
                    "noise_bar": _p(bar) if chunk else None,
                    "noise": _noise_text(chunk.get("within_noise")),
                    "adjusted_p": _p(chunk.get("adjusted_p_value")),
                    "rank": meta.get("contribution_rank"),
                }
            )
        )
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn("skill", "string"),
            dg.TableColumn("text", "string", description="the skill text"),
            dg.TableColumn("beta_reward", "float"),
            dg.TableColumn("interval_95", "string"),
            dg.TableColumn("noise_bar", "float", description="largest |beta| no effect produces (sign-flip, 95%)"),
            dg.TableColumn("noise", "string", description="within noise: |beta_reward| <= noise_bar"),
            dg.TableColumn("adjusted_p", "float", description="max-T sign-flip p-value (family-wise)"),
            dg.TableColumn("rank", "int"),
        ]
    )
    return rows, schema


def noise_metadata(contributions: dict[str, Any], *, selected_only: bool = False) -> dict[str, Any]:
    """Gate A's selection rule and noise bar as metadata entries, and how many chunks are within noise.

    ``selection_rule`` is the core's ``estimator.selection_rule``; ``noise_bar`` (and its median,
    ``noise_bar_median_max_abs``) the sign-flip bar of ``estimates.reward``. With *selected_only*
    (the snapshot) the count is over the selected chunks (``skills_within_noise``), otherwise over
    all chunks (``chunks_within_noise``) and the selected ones (``selected_within_noise``);
    ``noise_note`` says it in one sentence.
    """
    bar = contributions["estimates"]["reward"].get("noise_bar")
    rows = contributions["contributions"]
    selected = [c for c in rows if c["status"] == "selected"]
    out: dict[str, Any] = {"selection_rule": str(contributions["estimator"].get("selection_rule"))}
    if not bar:
        out["noise_note"] = "no noise bar: the gate ran without sign-flip samples"
        return out
    noisy_selected = sum(c.get("within_noise") is True for c in selected)
    out.update(
        {
            "noise_bar": float(bar["noise_bar"]),
            "noise_bar_median_max_abs": float(bar["median_max_abs"]),
            "noise_bar_method": dg.MetadataValue.json(bar),
        }
    )
    if selected_only:
        out["skills_within_noise"] = noisy_selected
    else:
        out["chunks_within_noise"] = sum(c.get("within_noise") is True for c in rows)
        out["selected_within_noise"] = noisy_selected
    out["noise_note"] = (
        f"{noisy_selected} of {len(selected)} selected chunks within noise (|beta| <= noise bar "
        f"{bar['noise_bar']:.4f}): indistinguishable from what no effect produces"
        if noisy_selected
        else f"no selected chunk within noise (noise bar {bar['noise_bar']:.4f})"
    )
    return out


def _gate_contributions(gate_dir: Any, bank: dict[str, Any], context: Any) -> dict[str, Any] | None:
    """The Gate A contributions that selected *bank* (same assignment), or None with a log line."""
    path = gate_dir / "contributions.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        doc = ChunkContributions.parse(data, str(path)).to_json()
    except (OSError, json.JSONDecodeError, core.ShopSimRLError) as exc:
        context.log.warning(f"skillbank_snapshot: no noise verdicts ({path}: {exc}); the table shows β only")
        return None
    if doc.get("assignment_sha256") != (bank.get("metadata") or {}).get("assignment_sha256"):
        context.log.warning(f"skillbank_snapshot: {path} is of another gate run; the table shows β only")
        return None
    return doc


def build_skill_assets(settings: PipelineSettings) -> list[dg.AssetsDefinition]:
    """The four skill assets, wired to ``skills.train_suite`` and ``skills.val_suite`` of *settings*."""
    train_suite, val_suite = settings.skills.train_suite, settings.skills.val_suite
    train_summary, val_summary = (
        suite_asset_key(train_suite, "eval_summary"),
        suite_asset_key(val_suite, "eval_summary"),
    )

    @optional_asset(
        LABELS,
        name="episode_labels",
        deps=[train_summary],
        group=_GROUP,
        kinds={"polars", "parquet"},
        description=f"Outcome and behaviour labels (with evidence step indexes) of the {train_suite!r} run of the "
        "checkpoint.",
        checks=[(LABELS_COVER, "Every episode of the labelled run has exactly one label row.")],
    )
    def episode_labels(context: dg.AssetExecutionContext, run_storage: RunStorage) -> Iterator[Any]:
        checkpoint_id = context.partition_key
        run_dir = run_storage.run_dir(train_suite, checkpoint_id)
        if not (run_dir / "traces.jsonl").is_file():
            context.log.info(
                f"episode_labels not materialized: no {train_suite!r} run for {checkpoint_id}; "
                f"run job evaluate_{train_suite} for this checkpoint first"
            )
            return
        with as_failure():
            table = label_run(run_dir)
            episode_ids = {r["episode_id"] for r in iter_latest_records(run_dir / "traces.jsonl")}
            rows = read_labels(table.path).get_column("episode_id").to_list()
        covers = len(set(rows)) == len(rows) and set(rows) == episode_ids
        distribution = table.distribution
        outcome_rows = [
            dg.TableRecord({"outcome": str(k), "episodes": int(v)}) for k, v in sorted(distribution["outcomes"].items())
        ]
        behaviour_rows = []
        for key in (
            "first_buy_incomplete_options",
            "episodes_with_loops",
            "searches_mean",
            "result_pages_mean",
            "steps_to_purchase_mean",
        ):
            value = distribution.get(key)
            behaviour_rows.append(
                dg.TableRecord({"behaviour": key, "value": None if value is None else round(float(value), 3)})
            )
        success = distribution["outcomes"].get("success", 0)
        yield dg.MaterializeResult(
            asset_key=LABELS,
            metadata={
                "suite": train_suite,
                "episodes": table.episodes,
                "labels_path": dg.MetadataValue.path(str(table.path)),
                "labels_sha256": table.sha256,
                "label_distribution": dg.MetadataValue.table(
                    outcome_rows,
                    schema=dg.TableSchema(
                        columns=[dg.TableColumn("outcome", "string"), dg.TableColumn("episodes", "int")]
                    ),
                ),
                "behaviour": dg.MetadataValue.table(
                    behaviour_rows,
                    schema=dg.TableSchema(
                        columns=[dg.TableColumn("behaviour", "string"), dg.TableColumn("value", "float")]
                    ),
                ),
                "invalid_action_reasons": dg.MetadataValue.json(distribution["invalid_action_reasons"]),
                "protocol_error_codes": dg.MetadataValue.json(distribution["protocol_error_codes"]),
                "budget_status": dg.MetadataValue.json(distribution["budget_status"]),
                "success_share": success / table.episodes if table.episodes else 0.0,
            },
            check_results=[
                check_result(
                    LABELS_COVER,
                    covers,
                    "one label row per episode"
                    if covers
                    else f"{len(rows)} label rows for {len(episode_ids)} episodes in {run_dir}",
                    asset_key=LABELS,
                    rows=len(rows),
                )
            ],
        )

    @optional_asset(
        CANDIDATES,
        name="skill_candidates",
        deps=[LABELS],
        group=_GROUP,
        kinds={"json"},
        description=f"Skill candidates mined from the {train_suite!r} suite's labelled traces, plus the cold-start "
        "draft.",
        checks=[
            (
                FIREWALL,
                "No accepted candidate contains a product id, long number, task id, product title, brand or gold "
                "option value of the source traces (leakage firewall).",
            ),
            (TRAIN_ONLY, "Every evidence reference points at a train-split episode; no val or test trace was read."),
        ],
    )
    def skill_candidates(
        context: dg.AssetExecutionContext,
        config: SkillBuildingConfig,
        run_storage: RunStorage,
        checkpoint_registry: CheckpointRegistry,
        inference_endpoint: InferenceEndpoint,
    ) -> Iterator[Any]:
        checkpoint_id = context.partition_key
        run_dir = run_storage.run_dir(train_suite, checkpoint_id)
        if not (run_dir / "labels.parquet").is_file():
            context.log.info(f"skill_candidates not materialized: no labelled {train_suite!r} run for {checkpoint_id}")
            return
        provider = None
        if config.provider == "analyst":
            from shopsimrl_core import AnalystCandidateProvider

            checkpoint = checkpoint_registry.get(checkpoint_id)
            if inference_endpoint.launches(checkpoint):
                raise dg.Failure(
                    description=f"skill_candidates.provider analyst: checkpoint {checkpoint_id} is served only while "
                    "its rollout runs (inference.mode launch); use provider rule_based, or the analyst_skills job "
                    "(the analyst section's endpoint)",
                    allow_retries=False,
                )
            provider = AnalystCandidateProvider(
                base_url=inference_endpoint.base_url_for(checkpoint),
                model=config.analyst_model or inference_endpoint.model_for(checkpoint),
                api_key_env=inference_endpoint.api_key_env,
                timeout=inference_endpoint.timeout,
            )
        elif config.provider != "rule_based":
            raise dg.Failure(
                description=f"skill_candidates.provider: unknown provider {config.provider!r}; "
                "use rule_based or analyst",
                allow_retries=False,
            )
        out_dir = run_storage.skills_dir(checkpoint_id)
        with as_failure():
            result = mine_candidates(
                run_dir / "labels.parquet",
                run_dir / "traces.jsonl",
                out_dir / "skill_candidates.json",
                provider=provider,
                min_support=config.min_support,
            )
        doc = result.document
        draft_path = bank_path = None
        if result.accepted:
            with as_failure():
                draft, bank = build_draft(
                    doc, active_skill_budget=min(config.active_skill_budget, len(result.accepted))
                )
                draft_path, bank_path = write_draft(draft, bank, out_dir)
        # Checks recompute their verdict from the files, independently of the miner's own bookkeeping.
        records = {r["episode_id"]: r for r in iter_latest_records(run_dir / "traces.jsonl")}
        firewall = context_from_traces(records.values())
        leaks = {c["candidate_id"]: [f.code for f in check_text(c["content"], firewall)] for c in result.accepted}
        leaks = {k: v for k, v in leaks.items() if v}
        labels = read_labels(run_dir / "labels.parquet")
        split_of = dict(zip(labels.get_column("episode_id").to_list(), labels.get_column("split").to_list()))
        foreign = sorted(
            {
                e["episode_id"]
                for c in doc["candidates"]
                for e in c.get("evidence", [])
                if split_of.get(e["episode_id"]) != "train"
                or (records.get(e["episode_id"], {}).get("job") or {}).get("split") != "train"
            }
        )
        try:
            require_train_only(split_of.values(), str(run_dir))
            train_only = not foreign
        except core.SkillError:
            train_only = False
        rows = [
            dg.TableRecord(
                {
                    "candidate": c["candidate_id"],
                    "label": str(c["source_label"]),
                    "support": int(c["support"]),
                    "status": str(c["status"]),
                    "text": _text(c.get("content")),
                    "reason": str(c["reason"] or ""),
                }
            )
            for c in doc["candidates"]
        ]
        schema = dg.TableSchema(
            columns=[
                dg.TableColumn("candidate", "string"),
                dg.TableColumn("label", "string"),
                dg.TableColumn("support", "int"),
                dg.TableColumn("status", "string"),
                dg.TableColumn("text", "string", description="the skill text"),
                dg.TableColumn("reason", "string"),
            ]
        )
        metadata: dict[str, Any] = {
            "provider": doc["provider"]["provider"],
            "candidate_count": len(doc["candidates"]),
            "accepted": len(result.accepted),
            "rejected": len(result.rejected),
            "frequent_labels": dg.MetadataValue.json(doc["frequent_labels"]),
            "label_support": dg.MetadataValue.json(doc["label_support"]),
            "candidates": dg.MetadataValue.table(rows, schema=schema),
            "candidates_path": dg.MetadataValue.path(str(result.path)),
            "candidates_sha256": doc["candidates_sha256"],
            "evidence_episodes": doc["source"]["episodes"],
        }
        if draft_path is not None:
            metadata["draft_path"] = dg.MetadataValue.path(str(draft_path))
            metadata["draft_skillbank_path"] = dg.MetadataValue.path(str(bank_path))
        yield dg.MaterializeResult(
            asset_key=CANDIDATES,
            metadata=metadata,
            check_results=[
                check_result(
                    FIREWALL,
                    not leaks,
                    "every accepted candidate is free of instance data"
                    if not leaks
                    else f"instance data in {sorted(leaks)}",
                    asset_key=CANDIDATES,
                    findings=dg.MetadataValue.json(leaks),
                ),
                check_result(
                    TRAIN_ONLY,
                    train_only,
                    "all evidence is from the train split" if train_only else f"non-train evidence: {foreign[:5]}",
                    asset_key=CANDIDATES,
                    evidence_episodes=len(split_of),
                ),
            ],
        )

    @optional_asset(
        GATE,
        name="skill_gate",
        deps=[CANDIDATES, val_summary],
        group=_GROUP,
        kinds={"python", "json"},
        description=f"Gate A: masked {val_suite!r} rollouts paired with the bare {val_suite!r} run; OLS per component "
        "with task-bootstrap intervals and a sign-flip noise bar; chunks are selected by the gate's selection rule "
        "(default: strictly positive, up to the budget), and the table marks those within noise.",
        checks=[
            (
                GATE_PAIRED,
                "The masked val run is complete and pairs 1:1 with the checkpoint's bare val run (runtime-semantics "
                "§14.2 checks passed).",
            )
        ],
        retry_policy=ROLLOUT_RETRY_POLICY,
    )
    def skill_gate(
        context: dg.AssetExecutionContext,
        config: GateSettings,
        run_storage: RunStorage,
        evaluation_suites: EvaluationSuites,
    ) -> Iterator[Any]:
        current = evaluation_suites.settings()
        checkpoint_id = context.partition_key
        draft_path = run_storage.skills_dir(checkpoint_id) / "initial_skill_draft.json"
        bare_dir = run_storage.run_dir(val_suite, checkpoint_id)
        bare_config = run_storage.eval_config_path(val_suite, checkpoint_id)
        if not draft_path.is_file():
            context.log.info(f"skill_gate not materialized: no cold-start draft for {checkpoint_id}")
            return
        if not (bare_dir / "manifest.json").is_file() or not bare_config.is_file():
            context.log.info(
                f"skill_gate not materialized: no bare {val_suite!r} run for {checkpoint_id}; "
                f"run job evaluate_{val_suite} first"
            )
            return
        with as_failure():
            problems = core.gate_config_problems(core.load_config(bare_config))
        if problems:
            # A sampled or repeated val suite is a legitimate evaluation setting, just not a Gate A baseline.
            context.log.warning(
                f"skill_gate not materialized: Gate A needs the bare {val_suite!r} run on the full val split with "
                f"repeats 1 "
                f"(runtime-semantics §14.1), but {'; '.join(problems)}; set suites.{val_suite}.sample_size: null "
                f"and repeats: 1 in "
                f"{current.source}, then rerun evaluate_{val_suite}"
            )
            return
        out_dir = run_storage.gate_dir(checkpoint_id)
        with as_failure():
            result = run_gate_a(
                GateAConfig(
                    output_dir=out_dir,
                    experiment_config=bare_config,
                    bare_run_dir=bare_dir,
                    draft_path=draft_path,
                    mask_seed=config.mask_seed,
                    bootstrap_samples=config.bootstrap_samples,
                )
            )
        metadata: dict[str, Any] = {
            "status": result.status,
            "gate_dir": dg.MetadataValue.path(str(out_dir)),
            "bare_run_dir": dg.MetadataValue.path(str(bare_dir)),
        }
        if result.status != "complete":
            yield dg.MaterializeResult(
                asset_key=GATE,
                metadata=metadata,
                check_results=[
                    check_result(
                        GATE_PAIRED,
                        False,
                        "the masked val run is incomplete; rematerialize to resume it",
                        asset_key=GATE,
                    )
                ],
            )
            return
        contrib = result.contributions
        if contrib is None:  # a complete gate always wrote its contributions; say so rather than guess
            raise dg.Failure(description=f"Gate A reported complete without contributions in {out_dir}")
        est = contrib["estimates"]
        chunks = {c["chunk_id"]: c for c in json.loads(draft_path.read_text(encoding="utf-8"))["chunks"]}
        metadata.update(
            {
                "observations": contrib["observations"],
                "selected_count": contrib["selected_count"],
                "selected_chunk_ids": dg.MetadataValue.json(contrib["selected_chunk_ids"]),
                "chunks": dg.MetadataValue.table(*gate_chunk_table(contrib, chunks)),
                **noise_metadata(contrib),
                "delta_reward_mean": float(est["reward"]["delta_mean"]),
                "masked_reward_mean": float(est["reward"]["masked_mean"]),
                "bare_reward_mean": float(est["reward"]["bare_mean"]),
                "assignment_sha256": contrib["assignment_sha256"],
                "contributions_path": dg.MetadataValue.path(str(out_dir / "contributions.json")),
                "selected_skillbank_path": dg.MetadataValue.path(str(result.selected_skillbank_path)),
            }
        )
        yield dg.MaterializeResult(
            asset_key=GATE,
            metadata=metadata,
            check_results=[
                check_result(
                    GATE_PAIRED,
                    True,
                    f"{contrib['observations']} paired val episodes",
                    asset_key=GATE,
                    bare_observations_sha256=contrib["bare_baseline"]["observations_sha256"],
                )
            ],
        )

    @optional_asset(
        SNAPSHOT,
        name="skillbank_snapshot",
        deps=[GATE],
        group=_GROUP,
        kinds={"json"},
        description="The Gate-A-selected SkillBank frozen as an immutable skillbank-<bank_sha256>.json.",
        checks=[
            (
                SNAPSHOT_HASH,
                "The snapshot file reloads as a valid shopsimrl-skillbank-v1 bank, its name is its bank_sha256, "
                "every content_sha256 reproduces, and the firewall finds nothing.",
            )
        ],
    )
    def skillbank_snapshot(
        context: dg.AssetExecutionContext, run_storage: RunStorage, evaluation_suites: EvaluationSuites
    ) -> Iterator[Any]:
        checkpoint_id = context.partition_key
        selected = run_storage.gate_dir(checkpoint_id) / "selected_skillbank.json"
        if not selected.is_file():
            context.log.info(f"skillbank_snapshot not materialized: Gate A has not selected a bank for {checkpoint_id}")
            return
        with as_failure():
            bank = load_skillbank(selected)
            snap = snapshot_skillbank(bank, run_storage.skillbanks_dir())
            reloaded = load_skillbank(snap.path)
        content_ok = all(s.get("content_sha256") == core.fingerprint(s["content"]) for s in reloaded["skills"])
        leaks = [s["skill_id"] for s in reloaded["skills"] if check_text(s["content"])]
        ok = (
            core.fingerprint(reloaded) == snap.bank_sha256
            and snap.path.name == f"skillbank-{snap.bank_sha256}.json"
            and content_ok
            and not leaks
        )
        pointer = core.write_json_atomic(
            run_storage.skills_dir(checkpoint_id) / "snapshot.json",
            {
                "checkpoint_id": checkpoint_id,
                "path": str(snap.path),
                "bank_sha256": snap.bank_sha256,
                "bank_version": snap.bank_version,
                "skill_ids": snap.skill_ids,
            },
        )
        contributions = _gate_contributions(run_storage.gate_dir(checkpoint_id), reloaded, context)
        rows, schema = snapshot_skill_table(reloaded["skills"], contributions)
        rel = (
            snap.path.relative_to(run_storage.root_path)
            if snap.path.is_relative_to(run_storage.root_path)
            else snap.path
        )
        settings = evaluation_suites.settings()
        yield dg.MaterializeResult(
            asset_key=SNAPSHOT,
            metadata={
                "status": "frozen" if reloaded["skills"] else "frozen (Gate A selected no chunk: the bank is empty)",
                "path": dg.MetadataValue.path(str(snap.path)),
                "bank_sha256": snap.bank_sha256,
                "bank_version": snap.bank_version,
                "skills": len(snap.skill_ids),
                "selected_skills": dg.MetadataValue.table(rows, schema=schema),
                **(noise_metadata(contributions, selected_only=True) if contributions else {}),
                "reused_existing_file": snap.reused,
                "pointer": dg.MetadataValue.path(str(pointer)),
                "inject_with": f"skills.path: {snap.path}",
                "skillbank_in_viewer": dg.MetadataValue.url(
                    f"{settings.viewer.base_url.rstrip('/')}/skillbank?path={rel}"
                ),
            },
            data_version=dg.DataVersion(snap.bank_sha256[:16]),
            check_results=[
                check_result(
                    SNAPSHOT_HASH,
                    ok,
                    "snapshot reloads and reproduces its hashes"
                    if ok
                    else f"hash or firewall problem (content hashes ok: {content_ok}; leaks: {leaks})",
                    asset_key=SNAPSHOT,
                )
            ],
        )

    return [episode_labels, skill_candidates, skill_gate, skillbank_snapshot]


def build_skills_job(settings: PipelineSettings) -> "dg.UnresolvedAssetJobDefinition":
    """``build_skills``: the four skill assets for one checkpoint partition (nothing else)."""
    return dg.define_asset_job(
        "build_skills",
        selection=dg.AssetSelection.assets(*SKILL_ASSET_KEYS),
        config=partition_config(settings),
        executor_def=dg.in_process_executor,
        description=f"Labels → candidates → Gate A → SkillBank snapshot for one checkpoint (reads its "
        f"{settings.skills.train_suite!r} and {settings.skills.val_suite!r} runs).",
    )
