"""The per-episode metrics of ``episode/_metrics.py`` over one run, read from its run index."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from shopsimrl_core.episode import _metrics as registry

__all__ = ["episode_metrics"]


def episode_metrics(run: str | Path | Any) -> list[dict[str, Any]]:
    """Every metric of ``EPISODE_METRICS`` (``episode/_metrics.py``) over a run's latest completed episodes.

    *run* is a run directory or an opened ``RunIndex``. Each row holds ``name``, ``label``,
    ``column``, ``description``, ``episodes`` (completed episodes with a value), ``mean`` (an exactly
    rounded mean, None without episodes), ``min`` and ``max``. Reads the index only; writes nothing.
    """
    if isinstance(run, (str, Path)):
        from shopsimrl_core.runs.storage._index import open_run_index

        index = open_run_index(Path(run), persist=False)
    else:
        index = run
    episodes = index.episodes
    completed = episodes.filter(episodes.get_column("complete").fill_null(False)) if episodes.height else episodes
    rows: list[dict[str, Any]] = []
    for metric in registry.EPISODE_METRICS:
        values: list[float] = []
        if metric.column in completed.columns:
            values = [float(v) for v in completed.get_column(metric.column).drop_nulls().to_list()]
        rows.append(
            {
                "name": metric.name,
                "label": metric.label,
                "column": metric.column,
                "description": metric.description,
                "episodes": len(values),
                "mean": math.fsum(values) / len(values) if values else None,
                "min": min(values) if values else None,
                "max": max(values) if values else None,
            }
        )
    return rows
