"""``skill_candidates[ckpt]``: skill candidates mined from the labelled train traces, and the cold-start draft.

Only the train suite's run is read (never val or test). Two blocking checks recompute their verdict
from the files: the leakage firewall over every accepted candidate and the train-only evidence rule.
"""

from collections.abc import Iterator
from typing import Any

import dagster as dg

import shopsimrl_core as core
from shopsimrl_core import (
    build_draft,
    check_text,
    context_from_traces,
    iter_latest_records,
    mine_candidates,
    read_labels,
    require_train_only,
    write_draft,
)

from .checks import check_result
from .failures import as_failure
from .labels import LABELS
from .optional import optional_asset
from .resources import CheckpointRegistry, InferenceEndpoint, RunStorage
from .skill_tables import skill_text

__all__ = ["CANDIDATES", "FIREWALL", "TRAIN_ONLY", "SkillBuildingConfig", "build_skill_candidates"]

CANDIDATES = dg.AssetKey("skill_candidates")
FIREWALL = "candidates_pass_firewall"
TRAIN_ONLY = "no_val_or_test_evidence"


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


def build_skill_candidates(train_suite: str, group: str) -> dg.AssetsDefinition:
    """``skill_candidates``, downstream of ``episode_labels``; *train_suite* is where its evidence lives."""

    @optional_asset(
        CANDIDATES,
        name="skill_candidates",
        deps=[LABELS],
        group=group,
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
                auth=inference_endpoint.auth(),
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
                    "text": skill_text(c.get("content")),
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

    return skill_candidates
