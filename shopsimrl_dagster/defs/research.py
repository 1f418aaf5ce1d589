"""The research loop in Dagster: the analyst path, training rounds and the offline judge.

Thin assets over ``shopsimrl_core`` (no logic here, paths from ``RunStorage``):

    episode_labels[ckpt] → trace2skill_draft[ckpt]            (analyst-path SkillBank draft, §18)
    round_candidate_pool[round] → round_online_gate[round] → round_selected_bank[round] → round_curriculum[round]
    <val>/eval_summary[ckpt] → judge_verdicts[ckpt]           (offline judge, never inside a rollout)

``trace2skill_draft`` runs Trace2Skill (success cards, live failure audits against the
environment, consolidation, compiler) on the train suite's run of the checkpoint with the
``analyst`` endpoint resource; it is resumable by input fingerprint, so a re-materialization
costs no model call. The round assets are partitioned by round id (dynamic partitions
``training_rounds``); their inputs are given in ``RoundAssetConfig`` and a round is one backfill
of the four assets for one key. The judge asset reports agreement with the environment's reward.
"""



import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg

import shopsimrl_core as core
from shopsimrl_core.documents import OnlineContributions

from ..settings import AnalystSettings, PipelineSettings
from .assets import suite_asset_key
from .failures import as_failure
from .optional import optional_asset
from .resources import RunStorage, unavailable
from .skill_tables import noise_metadata

__all__ = ["AnalystEndpoint", "RoundAssetConfig", "build_research_assets", "build_research_jobs", "training_rounds",
           "RESEARCH_ASSET_KEYS"]

_GROUP = "research"
training_rounds = dg.DynamicPartitionsDefinition(name="training_rounds")
RESEARCH_ASSET_KEYS = tuple(dg.AssetKey(n) for n in (
    "trace2skill_draft", "round_candidate_pool", "round_online_gate", "round_selected_bank", "round_curriculum",
    "judge_verdicts"))
DRAFT, POOL, GATE, BANK, CURRICULUM, JUDGE = RESEARCH_ASSET_KEYS


class AnalystEndpoint(dg.ConfigurableResource):
    """The analyst model: the pipeline's ``analyst`` section (the core's ``model`` keys), passed through as given.

    The key is read only via ``api_key_env``, when a request needs it.
    """

    section: str = "{}"
    """The ``analyst`` section of the pipeline settings, as JSON."""

    @classmethod
    def of(cls, **section: Any) -> "AnalystEndpoint":
        """The resource for an ``analyst`` section given as keyword arguments (validated at once)."""
        AnalystSettings.model_validate(section)
        return cls(section=json.dumps(section))

    def settings(self) -> AnalystSettings:
        """The section, validated by the core's ``ModelConfig``."""
        return AnalystSettings.model_validate(json.loads(self.section))

    @property
    def base_url(self) -> str:
        """The analyst's OpenAI base URL."""
        return self.settings().base_url

    def health_check(self) -> list[str]:
        """Check that the endpoint answers ``GET /models`` and serves the analyst model; return the served names.

        Raises:
            EndpointUnavailable: unreachable, non-200, a missing API key, or the model is not served.
        """
        settings = self.settings()
        model = settings.core()
        try:
            return core.check_model(
                model.base_url,
                model.name,
                auth=model.auth(),
                timeout=settings.health_timeout_s,
                what="analyst endpoint",
                http_transport=model.http_transport,
                trust_env=model.trust_env,
            )
        except core.PreflightError as exc:
            fixes = {
                "api-key-missing": "export it or set analyst.api_key_env: null",
                "model-unauthorized": "export a valid API key in the variable analyst.api_key_env names",
                "model-not-served": "fix analyst.name in the pipeline settings",
            }
            fix = (
                "start it (e.g. `shopsim-sandbox serve --analyst-port 0`) or fix analyst.base_url in the pipeline "
                "settings"
            )
            raise unavailable(exc, fixes, fix) from None

    def model(self) -> Any:
        """A fresh ``AnalystModel`` for one materialization."""
        from shopsimrl_core import AnalystModel

        settings = self.settings()
        core_model = settings.core()
        return AnalystModel(base_url=core_model.base_url, model=core_model.name, auth=core_model.auth(),
                            timeout=core_model.timeout, max_retries=core_model.max_retries,
                            identity_name=settings.identity)


class Trace2SkillAssetConfig(dg.Config):
    """Trace2Skill knobs (runtime-semantics §18.1)."""

    batch_size: int = 40
    max_failure_steps: int = 12
    max_cards_per_trajectory: int = 2
    validation_dimension_cap: int = 16
    active_skill_budget: int = 10
    concurrency: int = 4


class RoundAssetConfig(dg.Config):
    """Inputs of one training round (paths relative to the runs root or absolute)."""

    active_skillbank: str
    candidates: str
    experiment_config: str
    bare_run_dir: str
    proposal_checkpoint: str
    max_candidates: int = 6
    mask_seed: int = 20260901
    active_skill_budget: int = 10
    selection_rule: str = "published"
    """The online gate's selection rule: ``published`` (§17.3) or ``above_noise`` (docs/statistics.md)."""
    skill_free_probability: float = 0.2
    rho_min: float = 0.2
    rho_max: float = 0.9
    curriculum_seed: int = 20260901


def _path(run_storage: RunStorage, value: str) -> Path:
    path = Path(value)
    return path if path.is_absolute() else run_storage.root_path / path


def build_research_assets(settings: PipelineSettings) -> list[dg.AssetsDefinition]:
    """The research assets, wired to ``skills.train_suite`` / ``skills.val_suite`` of *settings*."""
    train_suite, val_suite = settings.skills.train_suite, settings.skills.val_suite
    env = settings.environment

    @optional_asset(DRAFT, name="trace2skill_draft", deps=[dg.AssetKey("episode_labels")], group=_GROUP,
                    kinds={"json"}, description=f"Trace2Skill draft from the {train_suite!r} run (analyst path).")
    def trace2skill_draft(context: dg.AssetExecutionContext, config: Trace2SkillAssetConfig, run_storage: RunStorage,
                          analyst: AnalystEndpoint) -> Iterator[Any]:
        from shopsimrl_core import Trace2SkillConfig, run_trace2skill

        run_dir = run_storage.run_dir(train_suite, context.partition_key)
        out = run_dir / "trace2skill"
        if not (run_dir / "traces.jsonl").is_file():
            context.log.info(f"trace2skill_draft not materialized: no {train_suite!r} run for {context.partition_key}; "
                             f"run job evaluate_{train_suite} for this checkpoint first")
            return
        analyst.health_check()
        with as_failure():
            result = run_trace2skill(Trace2SkillConfig(
                traces=run_dir / "traces.jsonl", output_dir=out, analyst=analyst.model(),
                environment_url=env.base_url, environment_timeout=env.timeout_s,
                persona=env.persona if env.persona is not None else True, batch_size=config.batch_size,
                max_failure_steps=config.max_failure_steps, max_cards_per_trajectory=config.max_cards_per_trajectory,
                validation_dimension_cap=config.validation_dimension_cap,
                active_skill_budget=config.active_skill_budget, concurrency=config.concurrency))
        counts = result.manifest["counts"]
        yield dg.MaterializeResult(asset_key=DRAFT, metadata={
            "draft": dg.MetadataValue.path(str(result.draft_path)),
            "draft_sha256": result.manifest["draft_sha256"], "chunks": counts["chunks"],
            "evidence_cards": counts["evidence_cards"], "clusters": counts["clusters"],
            "model_calls_this_run": counts["model_calls_this_run"],
            "prompts_sha256": result.manifest["identity"]["prompts_sha256"],
            "analyst_model": result.manifest["identity"]["analyst_model"]["model"]})

    def _round(cfg: RoundAssetConfig, run_storage: RunStorage, round_id: str) -> Any:
        from shopsimrl_core import RoundConfig

        return RoundConfig(round_id=round_id, round_dir=run_storage.root_path / "rounds" / round_id,
                           active_skillbank_path=_path(run_storage, cfg.active_skillbank),
                           candidates_path=_path(run_storage, cfg.candidates),
                           experiment_config=_path(run_storage, cfg.experiment_config),
                           bare_run_dir=_path(run_storage, cfg.bare_run_dir),
                           proposal_checkpoint=cfg.proposal_checkpoint, max_candidates=cfg.max_candidates,
                           mask_seed=cfg.mask_seed, active_skill_budget=cfg.active_skill_budget,
                           selection_rule=cfg.selection_rule,
                           curriculum={"seed": cfg.curriculum_seed,
                                       "skill_free_probability": cfg.skill_free_probability,
                                       "rho_min": cfg.rho_min, "rho_max": cfg.rho_max})

    # with a training section, the pool follows the round's online analysis (defs/training_round.py)
    pool_deps = [dg.AssetKey("round_online_analysis")] if settings.training is not None else []

    @dg.asset(key=POOL, deps=pool_deps, group_name=_GROUP, partitions_def=training_rounds, kinds={"json"},
              description="The round's candidate pool (active bank + the round's failure proposals).")
    def round_candidate_pool(context: dg.AssetExecutionContext, config: RoundAssetConfig,
                             run_storage: RunStorage) -> dg.MaterializeResult:
        from shopsimrl_core import build_round_pool

        with as_failure():
            path, pool = build_round_pool(_round(config, run_storage, context.partition_key))
        return dg.MaterializeResult(metadata={"pool": dg.MetadataValue.path(str(path)),
                                              "pool_sha256": pool["pool_sha256"],
                                              "candidates": len(pool["candidates"])})

    @dg.asset(key=GATE, deps=[POOL], group_name=_GROUP, partitions_def=training_rounds, kinds={"python", "json"},
              description="The online gate of the round: ADD/REWRITE slots, masked val rollouts, paired OLS (§17).")
    def round_online_gate(context: dg.AssetExecutionContext, config: RoundAssetConfig,
                          run_storage: RunStorage) -> dg.MaterializeResult:
        from shopsimrl_core import run_round_gate

        with as_failure():
            result = run_round_gate(_round(config, run_storage, context.partition_key))
        contributions = result.gate.contributions
        winners = contributions.replacement_winners if isinstance(contributions, OnlineContributions) else {}
        return dg.MaterializeResult(metadata={
            "status": result.status, "pool_sha256": result.pool_sha256,
            "selected": list(result.gate.selected_chunk_ids or []),
            "replacement_winners": dg.MetadataValue.json(winners),
            # the rule in use and the noise verdicts, as skill_gate shows Gate A's
            **(noise_metadata(contributions) if contributions is not None else {}),
            "manifest": dg.MetadataValue.path(str(result.gate.manifest_path or ""))})

    @optional_asset(BANK, name="round_selected_bank", deps=[GATE], group=_GROUP, partitions_def=training_rounds,
                    kinds={"json"},
                    description="The round's selected SkillBank, frozen as an immutable skillbank-<sha256>.json.")
    def round_selected_bank(context: dg.AssetExecutionContext, run_storage: RunStorage) -> Iterator[Any]:
        from shopsimrl_core import freeze_round_bank

        with as_failure():
            snap = freeze_round_bank(run_storage.root_path / "rounds" / context.partition_key)
        if snap is None:
            context.log.info("round_selected_bank not materialized: the round's gate is not complete or selected "
                             "nothing; materialize round_online_gate first")
            return
        yield dg.MaterializeResult(asset_key=BANK, metadata={"bank_sha256": snap.bank_sha256,
                                             "skillbank": dg.MetadataValue.path(str(snap.path)),
                                             "chunks": list(snap.skill_ids)})

    @optional_asset(CURRICULUM, name="round_curriculum", deps=[BANK], group=_GROUP, partitions_def=training_rounds,
                    kinds={"json"},
                    description="The frozen curriculum state (shopsimrl-skill-curriculum-v1) that drives training.")
    def round_curriculum(context: dg.AssetExecutionContext, config: RoundAssetConfig,
                         run_storage: RunStorage) -> Iterator[Any]:
        from shopsimrl_core import freeze_round_bank, freeze_round_curriculum

        round_dir = run_storage.root_path / "rounds" / context.partition_key
        with as_failure():
            snap = freeze_round_bank(round_dir)  # reuses the existing snapshot (same hash, same file)
            if snap is None:
                context.log.info("round_curriculum not materialized: no selected bank for this round")
                return
            path, state = freeze_round_curriculum(round_dir, context.partition_key, snap.path,
                                                  **_round(config, run_storage, context.partition_key).curriculum)
        yield dg.MaterializeResult(asset_key=CURRICULUM, metadata={
            "curriculum": dg.MetadataValue.path(str(path)), "state_id": state["state_id"],
            "q": state["skill_free_probability"], "bank_sha256": state["source"]["skillbank_sha256"],
            "rho": dg.MetadataValue.json({c["skill_id"]: c["inclusion_probability"] for c in state["chunks"]})})

    @optional_asset(JUDGE, name="judge_verdicts", deps=[suite_asset_key(val_suite, "eval_summary")], group=_GROUP,
                    kinds={"json"},
                    description=f"Offline LLM judge over the frozen {val_suite!r} traces; agreement with the reward.")
    def judge_verdicts(context: dg.AssetExecutionContext, run_storage: RunStorage,
                       analyst: AnalystEndpoint) -> Iterator[Any]:
        from shopsimrl_core import judge_run

        run_dir = run_storage.run_dir(val_suite, context.partition_key)
        if not (run_dir / "traces.jsonl").is_file():
            context.log.info(f"judge_verdicts not materialized: no {val_suite!r} run for {context.partition_key}")
            return
        analyst.health_check()
        with as_failure():
            summary = judge_run(run_dir, run_dir / "judge", analyst.model())
        agreement = summary["agreement"]
        yield dg.MaterializeResult(asset_key=JUDGE, metadata={
            "rubric": f"{summary['rubric']['rubric_id']}@{summary['rubric']['version']}",
            "judged": summary["judged"],
            "accuracy": agreement["accuracy"] if agreement["accuracy"] is not None else 0.0,
            "cohen_kappa": agreement["cohen_kappa"] if agreement["cohen_kappa"] is not None else 0.0,
            "confusion": dg.MetadataValue.json(agreement["confusion"])})

    return [trace2skill_draft, round_candidate_pool, round_online_gate, round_selected_bank, round_curriculum,
            judge_verdicts]


def build_research_jobs() -> list[Any]:
    """The research jobs: ``analyst_skills``, ``training_round`` and ``judge_traces``.

    ``training_round`` selects the four round assets, so one run of it for a round key is that round's backfill.
    """
    return [
        dg.define_asset_job("analyst_skills", selection=dg.AssetSelection.assets(DRAFT),
                            description="Trace2Skill draft of a checkpoint's train run, with the analyst endpoint."),
        dg.define_asset_job("training_round", selection=dg.AssetSelection.assets(POOL, GATE, BANK, CURRICULUM),
                            description="One training round: pool, online gate, selected bank, curriculum."),
        dg.define_asset_job("judge_traces", selection=dg.AssetSelection.assets(JUDGE),
                            description="Offline LLM judge over a checkpoint's frozen val traces."),
    ]
