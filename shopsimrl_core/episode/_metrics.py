"""Per-episode metrics beyond the published summary: one entry each, shown everywhere from the run index.

The published ``summary.json`` fixes its fields (runtime-semantics §13), so a new number per episode
does not go there. Instead each :class:`EpisodeMetric` here is computed once per completed trace line
into the run index (column ``m::<name>``), and every place that shows episodes reads it from there:
the viewer's run page (a column per metric, sortable, and their means), ``shopsimrl summarize
--metrics`` and the Dagster ``eval_summary`` metadata (``episode_metrics``). The index schema is
derived from this list, so adding a metric rebuilds older runs' indexes once instead of showing
nulls for them.

Adding a metric is one entry in :data:`EPISODE_METRICS` (and a line in docs/runs.md): a name, a
label, ``int`` or ``float``, and a function of one completed trace record that never raises on a
malformed trace (return None to leave the episode out of the metric).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["EPISODE_METRICS", "EpisodeMetric", "metric_values"]


@dataclass(frozen=True)
class EpisodeMetric:
    """One number per completed episode, computed from its trace record."""

    name: str
    """Column ``m::<name>`` in the run index; a lower-case identifier."""
    label: str
    """What the viewer and the Dagster UI call it."""
    kind: Literal["int", "float"]
    extract: Callable[[Mapping[str, Any]], int | float | None]
    """The value of one completed record; None leaves the episode out. Must not raise on any record."""
    description: str = ""

    @property
    def column(self) -> str:
        """The run-index column holding it."""
        return f"m::{self.name}"


def _actions(record: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(action, environment block)`` of every step the environment answered."""
    steps = record.get("steps")
    for step in steps if isinstance(steps, list) else []:
        if not isinstance(step, dict) or not isinstance(step.get("environment"), dict):
            continue
        action = step.get("action")
        yield (action if isinstance(action, str) else ""), step["environment"]


def _accepted(environment: Mapping[str, Any]) -> bool:
    feedback = environment.get("action_feedback")
    return not (isinstance(feedback, dict) and feedback.get("valid") is False)


def _searches(record: Mapping[str, Any]) -> int:
    return sum(1 for action, env in _actions(record) if action.startswith("search[") and _accepted(env))


def _products_viewed(record: Mapping[str, Any]) -> int:
    seen: set[str] = set()
    for _, env in _actions(record):
        state = env.get("observation_state")
        if isinstance(state, dict) and state.get("page_type") == "product_detail":
            product = state.get("product")
            asin = product.get("asin") if isinstance(product, dict) else None
            if isinstance(asin, str | int) and not isinstance(asin, bool):
                seen.add(str(asin))
    return len(seen)


EPISODE_METRICS: tuple[EpisodeMetric, ...] = (
    EpisodeMetric("searches", "searches", "int", _searches, "accepted search[...] actions"),
    EpisodeMetric("products_viewed", "products viewed", "int", _products_viewed, "distinct products opened"),
)
"""The metrics every completed episode gets, in display order."""


def metric_values(record: Mapping[str, Any]) -> dict[str, int | float]:
    """``{column: value}`` of every metric of one completed record (metrics that return None left out)."""
    values: dict[str, int | float] = {}
    for metric in EPISODE_METRICS:
        try:
            value = metric.extract(record)
        except Exception:  # a metric must not break indexing; the episode is left out of it
            value = None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        values[metric.column] = int(value) if metric.kind == "int" else float(value)
    return values
