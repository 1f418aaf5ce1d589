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

One module per asset, named after its step: ``labels.py``, ``candidates.py``, ``skill_gate.py``,
``skillbank.py``; ``skill_tables.py`` holds the tables and noise metadata they show.
"""

import dagster as dg

from ..settings import PipelineSettings
from .candidates import CANDIDATES, FIREWALL, TRAIN_ONLY, SkillBuildingConfig, build_skill_candidates
from .jobs import partition_config
from .labels import LABELS, LABELS_COVER, build_episode_labels
from .skill_gate import GATE, GATE_PAIRED, GateSettings, build_skill_gate
from .skill_tables import gate_chunk_table, noise_metadata, snapshot_skill_table
from .skillbank import SNAPSHOT, SNAPSHOT_HASH, build_skillbank_snapshot

__all__ = [
    "build_skill_assets",
    "build_skills_job",
    "SkillBuildingConfig",
    "GateSettings",
    "SKILL_ASSET_KEYS",
    "SKILL_CHECK_NAMES",
    "SKILLS_GROUP",
    "gate_chunk_table",
    "snapshot_skill_table",
    "noise_metadata",
]

SKILLS_GROUP = "skills"
SKILL_ASSET_KEYS = (LABELS, CANDIDATES, GATE, SNAPSHOT)
SKILL_CHECK_NAMES = (LABELS_COVER, FIREWALL, TRAIN_ONLY, GATE_PAIRED, SNAPSHOT_HASH)


def build_skill_assets(settings: PipelineSettings) -> list[dg.AssetsDefinition]:
    """The four skill assets, wired to ``skills.train_suite`` and ``skills.val_suite`` of *settings*."""
    train_suite, val_suite = settings.skills.train_suite, settings.skills.val_suite
    return [
        build_episode_labels(train_suite, SKILLS_GROUP),
        build_skill_candidates(train_suite, SKILLS_GROUP),
        build_skill_gate(val_suite, SKILLS_GROUP),
        build_skillbank_snapshot(SKILLS_GROUP),
    ]


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
