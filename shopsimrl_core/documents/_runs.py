"""Documents of a run directory: trace record, manifest, summary (the comparison: ``_comparisons.py``).

The formats are runtime-semantics §6, §12 and §13.

Field order is the format's: §12.1 for the trace record, §12.2 for a step, §6.2 for the manifest,
§13.1 for the summary. Environment payloads (``reset``, ``final``, ``steps[].environment``) are the
server's objects in the server's key order and stay plain objects.
"""

# No ``from __future__ import annotations`` here: pydantic would then evaluate each field's annotation
# string when the class is created, about 45 % of importing these models (docs/benchmarks.md, start-up).

from typing import Any, ClassVar, Literal

from shopsimrl_core._versions import MANIFEST_SCHEMA, SUMMARY_SCHEMA, TRACE_SCHEMA
from shopsimrl_core.documents._base import Bool, Document, Int, Number, Part, Str

__all__ = [
    "Job",
    "Provenance",
    "SelectedSkill",
    "StepRecord",
    "TraceRecord",
    "RunManifest",
    "SemanticPlan",
    "SummaryCounts",
    "SummaryInterval",
    "SamplingDesign",
    "SummaryPrimary",
    "SummaryBehavior",
    "SummaryCost",
    "CategoryRow",
    "SummaryBreakdowns",
    "EvalSummary",
]

class Job(Part):
    """One planned episode: ``{task_id, sample_id, seed, split}`` in that order (runtime-semantics §4.2)."""

    task_id: Int
    sample_id: Int
    seed: Int | None = None
    split: Str


class Provenance(Part):
    """``{model, environment, prompt, skills, runtime}`` of one attempt (§12.1); empty for a boundary record."""

    model: dict[str, Any] | None = None
    environment: dict[str, Any] | None = None
    prompt: dict[str, Any] | None = None
    skills: dict[str, Any] | None = None
    runtime: dict[str, Any] | None = None


class SelectedSkill(Part):
    """A skill record as stored in ``selected_skills`` (runtime-semantics §11.1)."""

    skill_id: Str
    content: Str
    version: Str = "1"
    metadata: dict[str, Any] = {}
    content_sha256: Str | None = None


class StepRecord(Part):
    """One model turn (runtime-semantics §12.2) plus this project's additive ``request_seed`` and ``timing``."""

    step_index: Int
    observation: Str | None = None
    tools: list[Any] = []
    """The tool schemas offered in this turn (objects; the published example abbreviates them)."""
    model: dict[str, Any] | None = None
    policy_failure: dict[str, Any] | None = None
    protocol_error: dict[str, Any] | None = None
    protocol_feedback: dict[str, Any] | None = None
    action: Str | None = None
    environment: dict[str, Any] | None = None
    request_seed: Int | None = None
    timing: dict[str, Number] | None = None


class TraceRecord(Document):
    """One attempt of one episode, a line of ``traces.jsonl`` (``shopsimrl-episode-v4``, runtime-semantics §12)."""

    SCHEMA: ClassVar[str] = TRACE_SCHEMA
    KIND: ClassVar[str] = "trace record"

    schema_version: Literal["shopsimrl-episode-v4"]
    episode_id: Str
    status: Literal["completed", "failed"]
    job: Job
    provenance: Provenance
    started_at: Str | None = None
    ended_at: Str | None = None
    duration_ms: Number | None = None
    reset: dict[str, Any] | None = None
    selected_skills: list[SelectedSkill] = []
    conversation: list[dict[str, Any]] = []
    steps: list[StepRecord] = []
    final: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    """Additive: the attempt's time split (model, environment, harness)."""
    attempt: dict[str, Any] | None = None
    """Additive: ``{number, …}`` of this attempt in the run directory."""


class SemanticPlan(Part):
    """The plan stored in a manifest (runtime-semantics §6.2), keys in that order."""

    pipeline_version: Str
    experiment: Str
    model_id: Str
    model: dict[str, Any]
    task_split: dict[str, Any]
    task_ids_sha256: Str | None = None
    jobs: list[Job]
    environment: dict[str, Any]
    runtime: dict[str, Any]
    prompt: dict[str, Any]
    skills: dict[str, Any]


class RunManifest(Document):
    """``manifest.json`` of a run directory (``shopsimrl-run-manifest-v1``, runtime-semantics §6.2)."""

    SCHEMA: ClassVar[str] = MANIFEST_SCHEMA
    KIND: ClassVar[str] = "run manifest"

    schema_version: Literal["shopsimrl-run-manifest-v1"]
    created_at: Str | None = None
    plan_fingerprint: Str
    fingerprint_scheme: Str | None = None
    """Additive (§22.1): how ``plan_fingerprint`` was computed."""
    plan: SemanticPlan
    execution: dict[str, Any] | None = None
    """Additive: the execution settings of the invocation that created the run (not fingerprinted)."""


class SummaryCounts(Part):
    """``counts`` of a summary (runtime-semantics §13.1)."""

    requested: Int
    trace_files: Int
    completed: Int
    failed: Int
    scored: Int
    coverage: Number
    endpoint_faults: Int | None = None
    """Additive (issue 24): failed attempts of planned episodes whose ``error.type`` is
    ``ModelEndpointFault`` — the model endpoint answered 2xx bodies that are no chat completion — over
    every trace line, not only the latest; absent in summaries built without the run index."""
    duplicate_completed: Int | None = None
    """Additive (§22.4): completed lines of episodes that were already complete; absent without the run index."""
    unplanned_episodes: Int | None = None
    """Additive (§22.5): episode ids in the traces that the manifest does not plan; absent without a manifest."""


class SummaryInterval(Part):
    """A 95 % interval of a summary (``primary.success_ci``, ``primary.reward_ci``, a category row's).

    Which keys are present depends on the ``method`` (``wilson``, ``percentile_bootstrap``,
    ``wilson_design_effect``, ``task_cluster_percentile_bootstrap``, the normal approximations); every
    producer writes them in the order declared here, so a read interval is written back byte for byte.
    """

    method: Str
    rng: Str | None = None
    seed: Int | None = None
    seed_derivation: Str | None = None
    metric: Str | None = None
    samples: Int | None = None
    confidence_level: Number | None = None
    n: Int | None = None
    """Episodes (Wilson intervals)."""
    tasks: Int | None = None
    """Tasks resampled (task-cluster intervals)."""
    design_effect: Number | None = None
    """The design effect the interval used (``wilson_design_effect``)."""
    effective_n: Number | None = None
    low: Number | None = None
    high: Number | None = None


class SamplingDesign(Part):
    """``primary.sampling_design``: present when some task has several episodes (docs/statistics.md).

    The summary's intervals then resample tasks, not episodes; a one-repeat summary has no such block.
    """

    unit: Literal["task"]
    """The sampling unit the intervals resample."""
    tasks: Int
    """Tasks with a scored episode."""
    episodes: Int
    """Scored episodes over those tasks."""
    repeats_min: Int | None
    """Fewest scored episodes of a task."""
    repeats_max: Int | None
    """Most scored episodes of a task."""
    ci_method: dict[str, Str | None]
    """Interval method per metric (``reward``, ``success``)."""
    design_effect: dict[str, Number | None]
    """Per metric: variance of the mean under the task design over the variance of as many independent
    episodes (Kish's deff); None when the episodes do not vary."""
    reward_sem: Number | None
    """Task-level (cluster) standard error of the reward mean; ``primary.reward_sem`` stays the §13
    episode-level one."""


class SummaryPrimary(Part):
    """``primary`` of a summary: reward mean and SEM, success rate, then this project's additive keys."""

    reward_mean: Number | None
    reward_sem: Number | None
    success_rate: Number | None
    success_ci: SummaryInterval | None = None
    """Additive: interval of ``success_rate`` (``method`` ``wilson``, or ``wilson_design_effect`` with repeats)."""
    reward_ci: SummaryInterval | None = None
    """Additive: interval of ``reward_mean`` (``method`` ``percentile_bootstrap``, or
    ``task_cluster_percentile_bootstrap`` with repeats; a normal approximation for very large runs)."""
    pass_at_k: dict[str, Number] | None = None
    """Additive (repeats > 1): unbiased pass@k per k."""
    pass_hat_k: dict[str, Number] | None = None
    """Additive (repeats > 1): unbiased pass^k per k."""
    sampling_design: SamplingDesign | None = None
    """Additive (repeats > 1): the task design the intervals follow."""


class SummaryBehavior(Part):
    """``behavior`` of a summary, in the key order of runtime-semantics §13.1."""

    steps_mean: Number | None
    model_steps: Int
    protocol_errors: Int
    protocol_error_rate: Number | None
    policy_failures: Int
    policy_failure_rate: Number | None
    invalid_action_rate: Number | None
    invalid_actions: Int
    total_actions: Int
    termination_reasons: dict[str, Int]


class SummaryCost(Part):
    """``cost`` of a summary: mean duration and token sums."""

    duration_ms_mean: Number | None
    tokens: dict[str, Int]


class CategoryRow(Part):
    """One row of ``breakdowns.category``: the published three keys, then the units, ``small_n`` and intervals.

    The additive keys are in ``summary.json`` for runs with repeats, and computed where shown for
    one-repeat runs (``category_intervals``, docs/statistics.md).
    """

    episodes: Int
    reward_mean: Number | None
    success_rate: Number | None
    tasks: Int | None = None
    small_n: Bool | None = None
    """Fewer than 10 sampling units: read the intervals as a rough range."""
    success_ci: SummaryInterval | None = None
    reward_ci: SummaryInterval | None = None


class SummaryBreakdowns(Part):
    """``breakdowns`` of a summary (additive): per-category rows, sorted by category."""

    category: dict[str, CategoryRow] = {}


class EvalSummary(Document):
    """``summary.json`` (``shopsimrl-eval-summary-v2``, runtime-semantics §13) plus additive blocks."""

    SCHEMA: ClassVar[str] = SUMMARY_SCHEMA
    KIND: ClassVar[str] = "run summary"

    schema_version: Literal["shopsimrl-eval-summary-v2"]
    created_at: Str
    counts: SummaryCounts
    primary: SummaryPrimary
    reward_components: dict[str, Number]
    behavior: SummaryBehavior
    cost: SummaryCost
    errors: dict[str, Int]
    reward_components_sem: dict[str, Number | None] | None = None
    """Additive: SEM of each reward component's mean (None with fewer than two values)."""
    breakdowns: SummaryBreakdowns | None = None
    """Additive: per-category rows (absent when no episode has a category)."""
