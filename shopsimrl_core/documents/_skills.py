"""Documents of the skills layer: SkillBank, candidates, draft, pool and the gates' files.

The gates' files are their assignments, contributions and manifests; the formats are
runtime-semantics §11 and §16–§18.

Field order is the order the writers produce (and the format sections list); estimator blocks,
run summaries and provenance digests nested inside gate documents stay plain objects.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from shopsimrl_core._versions import (
    CANDIDATE_POOL_SCHEMA,
    CHUNK_CONTRIBUTIONS_SCHEMA,
    GATE_A_MANIFEST_SCHEMA,
    INITIAL_DRAFT_SCHEMA,
    MASK_ASSIGNMENTS_SCHEMA,
    ONLINE_ASSIGNMENTS_SCHEMA,
    ONLINE_CONTRIBUTIONS_SCHEMA,
    ONLINE_GATE_MANIFEST_SCHEMA,
    SKILL_CANDIDATES_SCHEMA,
    SKILLBANK_SCHEMA,
)
from shopsimrl_core.documents._base import Bool, Document, Field, Int, Number, Part, Str

__all__ = [
    "SkillRecord",
    "SkillBank",
    "SkillCandidates",
    "DraftChunk",
    "InitialDraft",
    "PoolSkill",
    "PoolCandidate",
    "CandidatePool",
    "MaskAssignment",
    "MaskAssignments",
    "OnlineSlot",
    "OnlineAssignment",
    "OnlineAssignments",
    "NoiseBar",
    "GateEstimate",
    "ChunkContribution",
    "ChunkContributions",
    "OnlineContribution",
    "OnlineContributions",
    "GateAManifest",
    "OnlineGateManifest",
]


class SkillRecord(Part):
    """One record of a SkillBank file (runtime-semantics §11.2).

    ``version`` and ``metadata`` may be null in a file (read as ``"1"`` and no metadata); the §11.2
    rules the model does not express (non-blank content, the messages naming ``skills[i].field``) are
    ``validate_skillbank``'s.
    """

    skill_id: Str = Field(min_length=1)
    version: Str | Int | None = "1"
    enabled: Bool | None = None
    """``false`` leaves the record out of every selection."""
    task_ids: list[Int] | None = None
    """The tasks the record is injected into; null: every task."""
    content: Str
    metadata: dict[str, Any] | None = {}
    content_sha256: Str | None = None


class SkillBank(Document):
    """A SkillBank file (``shopsimrl-skillbank-v1``, runtime-semantics §11.2)."""

    SCHEMA: ClassVar[str] = SKILLBANK_SCHEMA
    KIND: ClassVar[str] = "SkillBank"

    schema_version: Literal["shopsimrl-skillbank-v1"] = "shopsimrl-skillbank-v1"
    bank_version: Str | Int | None = "1"
    metadata: dict[str, Any] | None = {}
    skills: list[SkillRecord]


class SkillCandidates(Document):
    """``skill_candidates.json``: mined candidates with their evidence (runtime-semantics §18)."""

    SCHEMA: ClassVar[str] = SKILL_CANDIDATES_SCHEMA
    KIND: ClassVar[str] = "skill candidates"

    schema_version: Literal["shopsimrl-skill-candidates-v1"]
    created_at: Str
    provider: dict[str, Any]
    source: dict[str, Any]
    min_support: Int
    max_accepted: Int | None = None
    label_support: dict[str, Int]
    frequent_labels: list[Str]
    accepted_count: Int
    rejected_count: Int
    candidates: list[dict[str, Any]]
    candidates_sha256: Str


class DraftChunk(Part):
    """One chunk of the cold-start draft (runtime-semantics §18.5)."""

    chunk_id: Str = Field(min_length=1)
    order: Int
    title: Str | None = None
    workflow_stage: Str | None = None
    applicable_when: Str | None = None
    procedure: list[Str] | None = None
    verification: Str | None = None
    common_failure: Str | None = None
    evidence_cluster_ids: list[Str] = []
    source_label: Str | None = None
    content: Str


class InitialDraft(Document):
    """``initial_skill_draft.json`` (``shopsimrl-initial-skill-draft-v2``): 1–16 ordered chunks."""

    SCHEMA: ClassVar[str] = INITIAL_DRAFT_SCHEMA
    KIND: ClassVar[str] = "initial skill draft"

    schema_version: Literal["shopsimrl-initial-skill-draft-v2"]
    stage: Str | None = None
    gate_status: dict[str, Any] | None = None
    validation_dimension_cap: Int | None = None
    active_skill_budget: Int | None = None
    skill_title: Str | None = None
    chunks: list[DraftChunk]
    """1–16 chunks, ``order`` 1..n (checked by Gate A with the spec's messages)."""
    evidence_only_cluster_ids: list[Str] = []
    conflicts_resolved: list[Any] = []
    candidates_sha256: Str | None = None


class PoolSkill(Part):
    """An active chunk of a candidate pool."""

    skill_id: Str = Field(min_length=1)
    version: Str
    content: Str
    metadata: dict[str, Any] = {}


class PoolCandidate(Part):
    """A proposal of a candidate pool: ``ADD`` (no target) or ``REWRITE`` of an active chunk."""

    candidate_id: Str = Field(min_length=1)
    operation: Str
    """``ADD`` or ``REWRITE`` (checked by the pool validator with the spec's messages)."""
    target_chunk_id: Str | None = None
    content: Str
    version: Str = "candidate"
    metadata: dict[str, Any] = {}


class CandidatePool(Document):
    """An online-gate candidate pool (``shopsimrl-skill-candidate-pool-v1``, runtime-semantics §17.1)."""

    SCHEMA: ClassVar[str] = CANDIDATE_POOL_SCHEMA
    KIND: ClassVar[str] = "candidate pool"

    schema_version: Literal["shopsimrl-skill-candidate-pool-v1"]
    round_id: Str | None = None
    proposal_checkpoint: Str | None = None
    current_skillbank_sha256: Str | None = None
    current_skills: list[PoolSkill]
    candidates: list[PoolCandidate]
    created_at: Str | None = None
    pool_sha256: Str


class MaskAssignment(Part):
    """One episode's Gate A mask: the 0/1 row and the chunks it includes (runtime-semantics §16.2)."""

    episode_id: Str
    task_id: Int
    sample_id: Int
    seed: Int | None = None
    split: Str
    mask: list[Int]
    included_chunk_ids: list[Str]


class MaskAssignments(Document):
    """``mask_assignments.json`` of Gate A (``shopsimrl-chunk-mask-assignments-v1``)."""

    SCHEMA: ClassVar[str] = MASK_ASSIGNMENTS_SCHEMA
    KIND: ClassVar[str] = "mask assignments"

    schema_version: Literal["shopsimrl-chunk-mask-assignments-v1"]
    created_at: Str
    mask_seed: Int
    mask_probability: Number
    draft_sha256: Str
    chunk_ids: list[Str]
    assignments: list[MaskAssignment]
    assignment_sha256: Str


class OnlineSlot(Part):
    """A logical slot of the online gate: the old version (if any) and its rewrites (§17.2)."""

    slot_id: Str
    old_version_id: Str | None
    versions: list[Str]


class OnlineAssignment(MaskAssignment):
    """One episode's online assignment: the mask over columns plus the state of every slot."""

    slot_states: dict[str, Str | None]


class OnlineAssignments(Document):
    """``mask_assignments.json`` of the online gate (``shopsimrl-online-skill-assignments-v1``)."""

    SCHEMA: ClassVar[str] = ONLINE_ASSIGNMENTS_SCHEMA
    KIND: ClassVar[str] = "online assignments"

    schema_version: Literal["shopsimrl-online-skill-assignments-v1"]
    created_at: Str
    mask_seed: Int
    pool_sha256: Str
    columns: list[Str]
    slots: list[OnlineSlot]
    assignments: list[OnlineAssignment]
    assignment_sha256: Str


class NoiseBar(Part):
    """``estimates.reward.noise_bar``: the sign-flip bar no effect exceeds (docs/statistics.md)."""

    method: Str
    samples: Int
    seed: Int
    metric_seed: Int
    seed_derivation: Str
    quantile: Number
    noise_bar: Number
    """The *quantile* of the largest ``|β|`` over sign-flipped outcomes."""
    median_max_abs: Number


class GateEstimate(Part):
    """One metric of a gate's ``estimates`` (§15): coefficients, observation means and the additive keys.

    The additive keys are the bootstrap intervals and, for reward, the noise bar with each
    coefficient's verdict and adjusted p-value.
    """

    intercept: Number
    coefficients: dict[str, Number]
    """β per chunk (Gate A) or intervention (online gate), in column order."""
    observations: Int
    masked_mean: Number
    bare_mean: Number
    delta_mean: Number
    confidence_intervals: dict[str, list[Number] | None] | None = None
    bootstrap: dict[str, Any] | None = None
    noise_bar: NoiseBar | None = None
    within_noise: dict[str, Bool] | None = None
    adjusted_p_values: dict[str, Number] | None = None


class ChunkContribution(Part):
    """One chunk's estimate and decision in Gate A's ``contributions.json``."""

    chunk_id: Str
    draft_order: Int
    title: Str | None
    coefficient: Number
    rank: Int
    status: Literal["selected", "budget_excluded", "non_positive", "within_noise"]
    auxiliary_coefficients: dict[str, Number]
    confidence_interval: list[Number] | None
    within_noise: Bool | None = None
    """Additive: ``|coefficient|`` is at most the sign-flip noise bar (``estimates.reward.noise_bar``):
    indistinguishable from what no effect produces (docs/statistics.md)."""
    adjusted_p_value: Number | None = None
    """Additive: single-step max-T sign-flip p-value of the coefficient (multiplicity-adjusted)."""


class ChunkContributions(Document):
    """Gate A's ``contributions.json`` (``shopsimrl-chunk-contributions-v2``, runtime-semantics §16.4)."""

    SCHEMA: ClassVar[str] = CHUNK_CONTRIBUTIONS_SCHEMA
    KIND: ClassVar[str] = "chunk contributions"

    schema_version: Literal["shopsimrl-chunk-contributions-v2"]
    created_at: Str
    estimator: dict[str, Any]
    draft_sha256: Str
    assignment_sha256: Str
    mask_seed: Int
    mask_probability: Number
    observations: Int
    active_skill_budget: Int
    selected_count: Int
    selected_chunk_ids: list[Str]
    estimates: dict[str, GateEstimate]
    contributions: list[ChunkContribution]
    observations_table: list[dict[str, Any]]
    bare_baseline: dict[str, Any]


class OnlineContribution(Part):
    """One intervention's estimate and decision in the online gate's ``contributions.json``."""

    intervention_id: Str
    kind: Literal["current", "candidate"]
    logical_chunk_id: Str
    operation: Literal["KEEP", "ADD", "REWRITE"]
    order: Int
    coefficient: Number
    rank: Int | None
    status: Literal["selected", "retired", "non_positive", "budget_excluded", "rewrite_loser", "within_noise"]
    auxiliary_coefficients: dict[str, Number]
    confidence_interval: list[Number] | None
    within_noise: Bool | None = None
    """Additive: ``|coefficient|`` is at most the sign-flip noise bar (``estimates.reward.noise_bar``):
    indistinguishable from what no effect produces (docs/statistics.md)."""
    adjusted_p_value: Number | None = None
    """Additive: single-step max-T sign-flip p-value of the coefficient (multiplicity-adjusted)."""


class OnlineContributions(Document):
    """The online gate's ``contributions.json`` (``shopsimrl-online-chunk-contributions-v2``, §17.3)."""

    SCHEMA: ClassVar[str] = ONLINE_CONTRIBUTIONS_SCHEMA
    KIND: ClassVar[str] = "online contributions"

    schema_version: Literal["shopsimrl-online-chunk-contributions-v2"]
    created_at: Str
    estimator: dict[str, Any]
    pool_sha256: Str
    assignment_sha256: Str
    observations: Int
    active_skill_budget: Int
    selected_intervention_ids: list[Str]
    selected_count: Int
    replacement_winners: dict[str, Str]
    estimates: dict[str, GateEstimate]
    contributions: list[OnlineContribution]
    observations_table: list[dict[str, Any]]
    bare_baseline: dict[str, Any]


class _GateManifest(Document):
    """The shape both gate manifests share: status, settings, protocol, inputs, run summary, outputs."""

    SCHEMA: ClassVar[str] = ""
    KIND: ClassVar[str] = ""

    schema_version: Str
    created_at: Str
    status: Literal["incomplete", "complete"]
    config: dict[str, Any]
    protocol: dict[str, Any]
    input: dict[str, Any]
    summary: dict[str, Any]
    output: dict[str, Any]


class GateAManifest(_GateManifest):
    """``gate_a_manifest.json`` (``shopsimrl-trace2skill-gate-a-v2``, runtime-semantics §16.4)."""

    SCHEMA: ClassVar[str] = GATE_A_MANIFEST_SCHEMA
    KIND: ClassVar[str] = "Gate A manifest"

    schema_version: Literal["shopsimrl-trace2skill-gate-a-v2"]


class OnlineGateManifest(_GateManifest):
    """``online_gate_manifest.json`` (``shopsimrl-online-validation-gate-v2``, runtime-semantics §17)."""

    SCHEMA: ClassVar[str] = ONLINE_GATE_MANIFEST_SCHEMA
    KIND: ClassVar[str] = "online gate manifest"

    schema_version: Literal["shopsimrl-online-validation-gate-v2"]
