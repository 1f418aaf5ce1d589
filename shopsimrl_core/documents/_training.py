"""Documents of training with the runtime that evaluates (``shopsimrl_core/training``, docs/training.md).

- ``record["training"]`` — :class:`TrainingBlock` (``shopsimrl-training-block-v1``): the additive block of a
  training episode's trace record. The rest of the record is the evaluation trace, field for field; token arrays
  never enter it (they go to the sidecar below).
- ``<out_dir>/samples.jsonl`` — one :class:`TokenSampleLine` (``shopsimrl-token-samples-v1``) per token sample:
  the exact token ids, the loss mask and the rollout log-probabilities a trainer consumes.
- ``<out_dir>/triage/<group_key>.json`` — :class:`GroupTriage` (``shopsimrl-grpo-triage-v1``): one finished GRPO
  group, its rewards, the diagnostic retry and the classification. The analysts read these documents (the
  "pending analysis" failures) without importing ``training/``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from shopsimrl_core._versions import GROUP_TRIAGE_SCHEMA, TOKEN_SAMPLES_SCHEMA, TRAINING_BLOCK_SCHEMA
from shopsimrl_core.documents._base import Bool, Document, Int, Number, Part, Str

__all__ = [
    "TRIAGE_CLASSES",
    "TriageClass",
    "SampleBoundary",
    "ExactTokenChecks",
    "TrainingBlock",
    "TokenSampleLine",
    "GroupMember",
    "DiagnosticRetry",
    "GroupTriage",
]

TriageClass = Literal[
    "environment_or_runtime_error",
    "not_on_frontier",
    "not_internalized",
    "full_skill_failure_pending_analysis",
    "retry_disabled",
]
"""What a finished group says about the round (docs/training.md#triage)."""

TRIAGE_CLASSES: tuple[str, ...] = (
    "environment_or_runtime_error",
    "not_on_frontier",
    "not_internalized",
    "full_skill_failure_pending_analysis",
    "retry_disabled",
)


class SampleBoundary(Part):
    """Where one token sample of the episode starts and what it covers."""

    sample_index: Int
    """0-based position of the sample within the episode."""
    turns: list[Int]
    """The model turns (``step_index``, 1-based) whose sampled tokens this sample trains on."""
    prompt_tokens: Int
    """Length of the sample's first prompt (never trained on)."""
    response_tokens: Int
    """Length of everything after it: sampled tokens and observation/tool tokens."""
    sampled_tokens: Int
    """Tokens with loss mask 1."""
    reason: Str
    """``first_turn``, ``template_drift`` (the turn's prompt did not extend the previous tokens) or ``aborted``."""


class ExactTokenChecks(Part):
    """The exact-token checks the episode passed (a failure aborts the episode instead)."""

    logprobs_finite: Bool
    lengths_match: Bool
    """Every turn returned one log-probability per sampled token."""
    drift_forks: Int
    """Turns whose prompt did not extend the previous tokens (each started a new sample)."""


class TrainingBlock(Part):
    """``record["training"]`` of a training episode: adapter identity, token counts, sample boundaries."""

    SCHEMA: ClassVar[str] = TRAINING_BLOCK_SCHEMA

    schema_version: Str = TRAINING_BLOCK_SCHEMA
    backend: dict[str, object]
    """The token backend's identity (kind, base URL or model name, tokenizer)."""
    adapter: Str | None = None
    """The trainer adapter that asked for the episode (``slime``, ``trl``, ``verifiers``) or None."""
    sampling: dict[str, object]
    """``{temperature, top_p, top_k, max_tokens}`` the tokens were sampled with."""
    group_key: Str
    """The GRPO group (the task's prompt id): every sample of a group shares one curriculum assignment."""
    sample_in_group: Int
    """This episode's index within its group (``diagnostic`` retries use -1)."""
    assignment: dict[str, object]
    """The curriculum assignment of the group: ``{state_id, mode, included_chunk_ids}`` (or ``mode: none``)."""
    diagnostic_retry: Bool = False
    """True for the group's one diagnostic retry with every active skill (never trained on)."""
    aborted: Bool
    """An environment or runtime error ended the episode: its sample is a zero-loss placeholder."""
    token_counts: dict[str, Int]
    """``{prompt, sampled, observation, total}`` over the episode's samples."""
    samples: list[SampleBoundary]
    checks: ExactTokenChecks
    sidecar: Str
    """The file holding the token arrays, relative to the output folder (``samples.jsonl``)."""


class TokenSampleLine(Document):
    """One line of ``samples.jsonl``: one contiguous token sequence a trainer trains on."""

    SCHEMA: ClassVar[str] = TOKEN_SAMPLES_SCHEMA
    KIND: ClassVar[str] = "token sample"

    schema_version: Str = TOKEN_SAMPLES_SCHEMA
    episode_id: Str
    attempt_key: Str
    """``<episode_id>#<sample_in_group>`` plus the retry marker: which trace line this sample belongs to."""
    sample_index: Int
    group_key: Str
    reward: Number
    aborted: Bool
    prompt_ids: list[Int]
    response_ids: list[Int]
    loss_mask: list[Int]
    rollout_logprobs: list[Number]


class GroupMember(Part):
    """One sample of a finished group as the triage sees it."""

    episode_id: Str
    sample_in_group: Int
    reward: Number | None
    success: Bool | None
    scored: Bool
    """The environment scored the episode (it ended without an environment or runtime error)."""


class DiagnosticRetry(Part):
    """The group's one retry with every active skill (only when every sample was scored and failed)."""

    episode_id: Str
    included_chunk_ids: list[Str]
    reward: Number | None
    success: Bool | None
    scored: Bool


class GroupTriage(Document):
    """``triage/<group_key>.json``: one finished GRPO group and what it says about the round."""

    SCHEMA: ClassVar[str] = GROUP_TRIAGE_SCHEMA
    KIND: ClassVar[str] = "group triage"

    schema_version: Str = GROUP_TRIAGE_SCHEMA
    group_key: Str
    task_id: Int
    round_id: Str | None
    assignment: dict[str, object]
    members: list[GroupMember]
    rewards: list[Number | None]
    classification: TriageClass
    diagnostic_retry: DiagnosticRetry | None = None
    pending_analysis_episode_ids: list[Str]
    """Episodes the analysts take as input (the group's samples when the full skill text could not fix it)."""
    finished_at: Str
