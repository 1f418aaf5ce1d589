"""Documents the Dagster layer writes (``shopsimrl_dagster``): plans, progress, selection, pointers, registry.

- ``<runs_root>/_plans/<suite>.json``: the suite's job plan (``job_plan``).
- ``<runs_root>/_progress/<suite>/progress.json``: every checkpoint's headline numbers by training step.
- ``<runs_root>/_progress/<suite>/best_checkpoint.json``: the best checkpoint and its runner-up.
- ``<runs_root>/skills/<checkpoint_id>/snapshot.json``: which frozen SkillBank the checkpoint's gate selected.
- ``<checkpoint_registry>/<checkpoint_id>.json``: one registered checkpoint.

``<suite>/<checkpoint_id>/comparison_vs_<baseline>.json`` is a ``CheckpointComparison`` (``_comparisons.py``).

The job plan carried its ``schema_version`` from the start. The other files gained it as an additive
first key: every reader here accepts a file written before (the field defaults to the one version),
and a file read and written again keeps its keys and their order. Registry entries are also written
by hand or by training jobs, so there ``schema_version`` stays optional for good.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from shopsimrl_core._versions import (
    BEST_CHECKPOINT_SCHEMA,
    CHECKPOINT_ENTRY_SCHEMA,
    JOB_PLAN_SCHEMA,
    SKILLBANK_POINTER_SCHEMA,
    SUITE_PROGRESS_SCHEMA,
)
from shopsimrl_core.documents._base import Bool, Document, Int, Number, Part, Str
from shopsimrl_core.documents._runs import Job, SummaryInterval

__all__ = [
    "PlanSplit",
    "SuiteJobPlan",
    "MetricChange",
    "PointComparison",
    "ProgressPoint",
    "SuiteProgress",
    "CheckpointHeadline",
    "PairedDifference",
    "BestCheckpoint",
    "SkillBankPointer",
    "CheckpointEntry",
]


class PlanSplit(Part):
    """The split a plan draws from: the core's split identity (name, version, hash, role, size)."""

    name: Str
    split_version: Str | None
    task_ids_sha256: Str
    role: Str | None
    task_count: Int


class SuiteJobPlan(Document):
    """``_plans/<suite>.json``: the deterministic job list of one suite (``shopsimrl-suite-job-plan-v1``).

    ``jobs`` is what every run of the suite must plan; ``jobs_fingerprint`` is its fingerprint, which
    the rollout's ``plan_matches_job_plan`` check compares with the run manifest's jobs.
    """

    SCHEMA: ClassVar[str] = JOB_PLAN_SCHEMA
    KIND: ClassVar[str] = "suite job plan"

    schema_version: Literal["shopsimrl-suite-job-plan-v1"]
    suite: Str
    split: PlanSplit
    guarded: Bool
    """Runs of this split need the per-launch test opt-in."""
    seed: Int
    sample_size: Int | None
    """Tasks drawn; null: the whole split."""
    repeats: Int
    episodes: Int
    jobs_fingerprint: Str
    jobs: list[Job]


class MetricChange(Part):
    """One metric of a progress point's comparison with the point before it (from ``paired.metrics``)."""

    delta: Number | None
    low: Number | None
    high: Number | None
    minimum_detectable_difference: Number | None
    sd_difference: Number | None
    within_noise: Bool | None
    verdict: Str


class PointComparison(Part):
    """``vs_previous`` of a progress point: the ``comparison_vs_<baseline>.json`` of the checkpoint."""

    baseline: Str
    pairs: Int | None
    reward: MetricChange | None = None
    r_success: MetricChange | None = None


class ProgressPoint(Part):
    """One checkpoint of a suite's progress: headline numbers of its summary with their 95 % intervals."""

    checkpoint_id: Str
    step: Int
    episodes: Int
    reward: Number | None
    reward_low: Number | None
    reward_high: Number | None
    success_rate: Number | None
    success_low: Number | None
    success_high: Number | None
    tasks: Int | None
    """Tasks of the sampling design (runs with repeats); null with one episode per task."""
    design: Str
    reward_interval: Str | None
    success_interval: Str | None
    vs_previous: PointComparison | None


class SuiteProgress(Document):
    """``_progress/<suite>/progress.json``: every checkpoint with a summary, by training step."""

    SCHEMA: ClassVar[str] = SUITE_PROGRESS_SCHEMA
    KIND: ClassVar[str] = "suite progress"

    schema_version: Literal["shopsimrl-suite-progress-v1"] = "shopsimrl-suite-progress-v1"
    suite: Str
    points: list[ProgressPoint]


class CheckpointHeadline(Part):
    """One checkpoint's summary headline as ``best_checkpoint`` ranks it."""

    checkpoint_id: Str
    step: Int
    reward_mean: Number | None
    reward_ci: SummaryInterval | None
    success_rate: Number | None
    success_ci: SummaryInterval | None


class PairedDifference(Part):
    """The paired comparison of best minus runner-up (task-level bootstrap, docs/statistics.md)."""

    mean_difference: Number | None
    confidence_interval: list[Number] | None
    minimum_detectable_difference: Number | None
    within_noise: Bool | None


class BestCheckpoint(Document):
    """``_progress/<suite>/best_checkpoint.json``: the best checkpoint by mean reward and whether it stands out."""

    SCHEMA: ClassVar[str] = BEST_CHECKPOINT_SCHEMA
    KIND: ClassVar[str] = "best checkpoint"

    schema_version: Literal["shopsimrl-best-checkpoint-v1"] = "shopsimrl-best-checkpoint-v1"
    metric: Str
    best: CheckpointHeadline
    runner_up: CheckpointHeadline | None
    difference: PairedDifference | None
    distinguishable: Bool | None
    """The paired interval of best minus runner-up lies above 0; null with one checkpoint."""
    ranking: list[CheckpointHeadline]


class SkillBankPointer(Document):
    """``skills/<checkpoint_id>/snapshot.json``: the frozen ``skillbank-<sha256>.json`` of a checkpoint's gate."""

    SCHEMA: ClassVar[str] = SKILLBANK_POINTER_SCHEMA
    KIND: ClassVar[str] = "SkillBank pointer"

    schema_version: Literal["shopsimrl-skillbank-pointer-v1"] = "shopsimrl-skillbank-pointer-v1"
    checkpoint_id: Str
    path: Str
    bank_sha256: Str
    bank_version: Str
    skill_ids: list[Str]


class CheckpointEntry(Document):
    """``<checkpoint_registry>/<checkpoint_id>.json``: one registered checkpoint (docs/pipeline.md).

    The types only; the registry's own rules (id pattern, endpoint URL, adapter with base_model) are
    checked by ``shopsimrl_dagster.registry``, which names the key and the fix.
    """

    SCHEMA: ClassVar[str] = CHECKPOINT_ENTRY_SCHEMA
    KIND: ClassVar[str] = "checkpoint registry entry"

    schema_version: Literal["shopsimrl-checkpoint-entry-v1"] = "shopsimrl-checkpoint-entry-v1"
    checkpoint_id: Str
    step: Int
    served_model: Str | None = None
    endpoint: Str | None = None
    weights: Str | None = None
    adapter: Str | None = None
    base_model: Str | None = None
    registered_at: Str | None = None
