"""``skill_gate[ckpt]``: Gate A, masked val rollouts paired with the checkpoint's bare val run.

Its masked rollouts use the checkpoint's endpoint (so ``build_skills`` runs carry the endpoint tag
like evaluation runs) and retry like rollouts. The table shows each chunk's β, interval and noise
verdict; the blocking check ``gate_paired_with_bare_val`` says whether the pairing is complete.
"""

import json
from collections.abc import Iterator
from typing import Any

import dagster as dg

import shopsimrl_core as core
from shopsimrl_core import GateAConfig, run_gate_a
from shopsimrl_core.documents import ChunkContributions

from .assets import suite_asset_key
from .candidates import CANDIDATES
from .checks import check_result
from .failures import as_failure
from .optional import optional_asset
from .resources import EvaluationSuites, RunStorage
from .rollouts import ROLLOUT_RETRY_POLICY
from .skill_tables import gate_chunk_table, noise_metadata

__all__ = ["GATE", "GATE_PAIRED", "GateSettings", "build_skill_gate"]

GATE = dg.AssetKey("skill_gate")
GATE_PAIRED = "gate_paired_with_bare_val"


class GateSettings(dg.Config):
    """Gate A settings (runtime-semantics §16.1; the bootstrap is this project's addition)."""

    mask_seed: int = 20260901
    bootstrap_samples: int = 1000


def build_skill_gate(val_suite: str, group: str) -> dg.AssetsDefinition:
    """``skill_gate``, downstream of ``skill_candidates`` and ``<val_suite>/eval_summary``."""
    val_summary = suite_asset_key(val_suite, "eval_summary")

    @optional_asset(
        GATE,
        name="skill_gate",
        deps=[CANDIDATES, val_summary],
        group=group,
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
        if not isinstance(contrib, ChunkContributions):
            raise dg.Failure(description=f"Gate A wrote {contrib.KIND}, not chunk contributions, in {out_dir}")
        reward = contrib.estimates["reward"]
        chunks = {c["chunk_id"]: c for c in json.loads(draft_path.read_text(encoding="utf-8"))["chunks"]}
        metadata.update(
            {
                "observations": contrib.observations,
                "selected_count": contrib.selected_count,
                "selected_chunk_ids": dg.MetadataValue.json(contrib.selected_chunk_ids),
                "chunks": dg.MetadataValue.table(*gate_chunk_table(contrib, chunks)),
                **noise_metadata(contrib),
                "delta_reward_mean": float(reward.delta_mean),
                "masked_reward_mean": float(reward.masked_mean),
                "bare_reward_mean": float(reward.bare_mean),
                "assignment_sha256": contrib.assignment_sha256,
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
                    f"{contrib.observations} paired val episodes",
                    asset_key=GATE,
                    bare_observations_sha256=contrib.bare_baseline["observations_sha256"],
                )
            ],
        )

    return skill_gate
