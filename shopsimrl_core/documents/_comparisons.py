"""The checkpoint comparison document: two runs of one suite, aligned and paired (runtime-semantics §20).

Apart from the run's own documents (``_runs.py``) because nothing a run writes needs it: a one-episode
``shopsimrl run`` does not pay for building these models.
"""

from typing import Any, ClassVar, Literal

from shopsimrl_core.documents._base import Bool, Document, Int, Number, Part, Str

__all__ = [
    "ComparisonAlignment",
    "MetricVarianceComponents",
    "ComparisonMetric",
    "PairedFlips",
    "ComparisonPaired",
    "CheckpointComparison",
    "CHECKPOINT_COMPARISON_SCHEMA",
]

CHECKPOINT_COMPARISON_SCHEMA = "shopsimrl-checkpoint-comparison-v1"


class ComparisonAlignment(Part):
    """How the two runs of a comparison line up."""

    status: Literal["matched", "mismatched"]
    checked_fields: list[Str]
    differences: list[Str]
    paired_tasks: Int
    paired_episodes: Int
    incomplete: dict[str, Int]
    unpaired_tasks: dict[str, Int]
    intended: list[Str] | None = None
    """Additive: the plan fields the caller named as intended differences (``--intended``)."""
    unintended_differences: list[Str] | None = None
    """Additive: the differences outside ``intended`` (empty for a comparison that was allowed)."""


class MetricVarianceComponents(Part):
    """``variance_components`` of a compared metric (runs with repeats): how the differences vary."""

    between_task: Number | None
    """Variance of the task means of the episode-level differences beyond what the repeats explain."""
    within_task: Number | None
    """Variance of the episode-level differences inside a task."""
    repeats: Number | None
    """Observed repeats per task (mean)."""


class ComparisonMetric(Part):
    """One metric of a comparison: both means, the task-level difference and its interval."""

    a_mean: Number
    b_mean: Number
    mean_difference: Number
    confidence_interval: list[Number] | None
    pairs: Int
    sd_difference: Number | None = None
    """Additive: sample SD (n − 1) of the task-level differences."""
    minimum_detectable_difference: Number | None = None
    """Additive: smallest true difference this design detects with ``paired.power.power`` at level
    ``paired.power.alpha``: ``z · sd_difference / √pairs`` (docs/statistics.md)."""
    within_noise: Bool | None = None
    """Additive: the confidence interval covers 0 (the difference is indistinguishable from noise)."""
    variance_components: MetricVarianceComponents | None = None
    """Additive, with repeats: ``between_task`` and ``within_task`` variance of the episode-level
    differences and the observed ``repeats``, so another number of repeats can be planned."""


class PairedFlips(Part):
    """``paired.flips``: tasks whose success (``r_success`` mean ≥ 0.5) changed, and those that did not."""

    gained: Int
    lost: Int
    both_success: Int
    both_failure: Int
    net: Int
    """``gained − lost``."""


class ComparisonPaired(Part):
    """The paired part of a comparison: direction, bootstrap settings, metrics, success flips."""

    pairs: Int
    difference_direction: Literal["b_minus_a"]
    metric_aggregation: Str
    bootstrap: dict[str, Any]
    metrics: dict[str, ComparisonMetric]
    flips: PairedFlips | None
    power: dict[str, Any] | None = None
    """Additive: how ``minimum_detectable_difference`` and ``within_noise`` were computed (method, alpha,
    power, z)."""


class CheckpointComparison(Document):
    """``comparison.json``: paired comparison of two runs (``shopsimrl-checkpoint-comparison-v1``, §20)."""

    SCHEMA: ClassVar[str] = CHECKPOINT_COMPARISON_SCHEMA
    KIND: ClassVar[str] = "checkpoint comparison"

    schema_version: Literal["shopsimrl-checkpoint-comparison-v1"]
    created_at: Str
    runs: dict[str, Str]
    models: dict[str, dict[str, Any]]
    alignment: ComparisonAlignment
    paired: ComparisonPaired


