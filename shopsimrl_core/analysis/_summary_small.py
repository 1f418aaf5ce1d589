"""The summary of a small run in plain Python, the same document to the bit as the polars path (issue 33).

``_summary.py`` computes every summary with polars; importing polars costs about as much CPU as the rest
of a one-episode ``shopsimrl run``. For a run whose index is read without polars
(``runs/storage/_small_index.py``) this module builds the same dict, step by step in the order of
``_summary._summary_from_frame``, from the same rows. Every number there is either exact (integer
sums, ``math.fsum``, ``statistics``, the interval functions the polars path calls with the same lists)
or a polars group mean, which is only reproduced to the bit for groups of one or two values (a single
rounding); :func:`small_summary` returns None — the caller takes the polars path — for anything
else it cannot promise identical: a category of three or more values, category intervals (runs with
repeats), a null or non-finite value where the polars path would group or compare it, a run of
:data:`~shopsimrl_core.analysis._exact._EXACT_MIN_N` episodes or more. ``tests/core/test_summary_small.py``
compares both paths on generated runs.
"""

from __future__ import annotations

import math
from typing import Any

from shopsimrl_core._versions import SUMMARY_SCHEMA
from shopsimrl_core.analysis._exact import _EXACT_MIN_N, _stdev
from shopsimrl_core.analysis._intervals import _BOOTSTRAP_MAX_N, _BOOTSTRAP_SAMPLES, _BOOTSTRAP_SEED, _ci_dict

__all__ = ["small_summary"]


class _Unsupported(Exception):
    """A run this module cannot summarise to the bit: the polars path does it."""


def _fmean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _present(rows: list[dict[str, Any]], column: str) -> list[Any]:
    return [row[column] for row in rows if row.get(column) is not None]


def small_summary(
    rows: list[dict[str, Any]],
    requested: int,
    *,
    planned: set[str] | None,
    duplicate_completed: int | None,
    endpoint_faults: int | None,
    created_at: str | None,
) -> Any:
    """The ``EvalSummary`` ``summary_from_index`` gives for these index rows (sorted by id), or None."""
    if len(rows) >= _EXACT_MIN_N:
        return None
    try:
        return _summary(rows, requested, planned, duplicate_completed, endpoint_faults, created_at)
    except _Unsupported:
        return None


def _finite(values: list[Any]) -> list[Any]:
    if any(isinstance(v, float) and not math.isfinite(v) for v in values):
        raise _Unsupported
    return values


def _summary(
    rows: list[dict[str, Any]],
    requested: int,
    planned: set[str] | None,
    duplicate_completed: int | None,
    endpoint_faults: int | None,
    created_at: str | None,
) -> Any:
    from shopsimrl_core.documents._runs import EvalSummary
    from shopsimrl_core.runs.storage._store import utc_now

    unplanned = 0
    if planned is not None:
        kept = [row for row in rows if row["episode_id"] in planned]
        unplanned, rows = len(rows) - len(kept), kept
    component_keys = sorted({k[3:] for row in rows for k, v in row.items() if k.startswith("c::") and v is not None})
    token_keys = sorted({k[3:] for row in rows for k, v in row.items() if k.startswith("t::") and v is not None})
    done = [row for row in rows if row["complete"]]
    failed = [row for row in rows if not row["complete"]]
    completed_n = len(done)
    scored = _finite(_present(done, "reward"))
    reward_mean = _fmean(scored)
    reward_sem = None if len(scored) < 2 else _stdev(scored) / math.sqrt(len(scored))
    success = _finite(_present(done, "r_success"))
    success_rate = _fmean(success)
    counts: dict[str, Any] = {
        "requested": requested,
        "trace_files": len(rows),
        "completed": completed_n,
        "failed": len(failed),
        "scored": len(scored),
        "coverage": (completed_n / requested) if requested else 0.0,
    }
    if endpoint_faults is not None:
        counts["endpoint_faults"] = endpoint_faults
    if duplicate_completed is not None:
        counts["duplicate_completed"] = duplicate_completed
    if planned is not None:
        counts["unplanned_episodes"] = unplanned

    primary: dict[str, Any] = {"reward_mean": reward_mean, "reward_sem": reward_sem, "success_rate": success_rate}
    tasks = _present(done, "task_id")
    clustered = len(tasks) > len(set(tasks))
    binary_success = len(success) > 0 and all(v in (0.0, 1.0) for v in success)
    if not clustered:
        if binary_success:
            from shopsimrl_core.analysis._stats import wilson_interval

            primary["success_ci"] = _ci_dict(
                wilson_interval(int(sum(success)), len(success)), method="wilson", confidence_level=0.95,
                n=len(success),
            )
        if len(scored) >= 2:
            primary["reward_ci"] = _reward_ci(scored, reward_mean, reward_sem)
        _add_pass_at_k(primary, done)
    else:
        from shopsimrl_core.analysis._intervals import _clustered_reward_ci, _clustered_success_ci, _sampling_design

        reward_clusters = _task_clusters(done, "reward")
        success_clusters = _task_clusters(done, "r_success")
        if binary_success:
            primary["success_ci"] = _clustered_success_ci(success_clusters)
        if len(scored) >= 2:
            primary["reward_ci"] = _clustered_reward_ci(reward_clusters, "reward")
        _add_pass_at_k(primary, done)
        primary["sampling_design"] = _sampling_design(reward_clusters, success_clusters, binary_success)

    reward_components = {key: _fmean(_finite(_present(done, f"c::{key}"))) for key in component_keys}
    reward_components = {key: value for key, value in reward_components.items() if value is not None}
    model_steps = sum(_present(done, "n_steps"))
    protocol_errors = sum(_present(done, "protocol_errors"))
    policy_failures = sum(_present(done, "policy_failures"))
    total_actions = sum(_present(done, "total_actions"))
    invalid_actions = sum(_present(done, "invalid_actions"))
    behavior = {
        "steps_mean": _fmean([float(v) for v in _present(done, "n_steps")]) if completed_n else None,
        "model_steps": model_steps,
        "protocol_errors": protocol_errors,
        "protocol_error_rate": (protocol_errors / model_steps) if model_steps else None,
        "policy_failures": policy_failures,
        "policy_failure_rate": (policy_failures / model_steps) if model_steps else None,
        "invalid_action_rate": (invalid_actions / total_actions) if total_actions else None,
        "invalid_actions": invalid_actions,
        "total_actions": total_actions,
        "termination_reasons": _counts(done, "termination_reason"),
    }
    tokens = {key: sum(values) for key in token_keys if (values := _present(done, f"t::{key}"))}
    cost = {
        "duration_ms_mean": _fmean(_finite(_present(done, "duration_ms"))) if completed_n else None,
        "tokens": dict(sorted(tokens.items())),
    }
    summary: dict[str, Any] = {
        "schema_version": SUMMARY_SCHEMA,
        "created_at": created_at or utc_now(),
        "counts": counts,
        "primary": primary,
        "reward_components": reward_components,
        "behavior": behavior,
        "cost": cost,
        "errors": _counts(failed, "error_type"),
    }
    component_sem: dict[str, float | None] = {}
    for key in reward_components:
        values = _present(done, f"c::{key}")
        component_sem[key] = _stdev(values) / math.sqrt(len(values)) if len(values) >= 2 else None
    if component_sem:
        summary["reward_components_sem"] = component_sem
    breakdowns = _category_rows(done, clustered)
    if breakdowns:
        summary["breakdowns"] = {"category": breakdowns}
    return EvalSummary.model_validate(summary)


def _counts(rows: list[dict[str, Any]], column: str) -> dict[str, int]:
    """Rows per value of *column*, sorted by value (a polars group count; a null value is not reproduced)."""
    out: dict[str, int] = {}
    for row in rows:
        value = row.get(column)
        if not isinstance(value, str):
            raise _Unsupported
        out[value] = out.get(value, 0) + 1
    return {key: out[key] for key in _sorted_text(out)}


def _sorted_text(values: Any) -> list[str]:
    try:  # polars orders text by its UTF-8 bytes: the code point order of text that encodes
        return sorted(values, key=lambda text: text.encode("utf-8"))
    except UnicodeEncodeError:
        raise _Unsupported from None


def _reward_ci(values: list[float], mean: float | None, sem: float | None) -> dict[str, Any] | None:
    from shopsimrl_core.analysis._stats import bootstrap_mean_ci

    if len(values) <= _BOOTSTRAP_MAX_N:
        return bootstrap_mean_ci(values, metric="reward", seed=_BOOTSTRAP_SEED, samples=_BOOTSTRAP_SAMPLES)
    raise _Unsupported


def _add_pass_at_k(primary: dict[str, Any], done: list[dict[str, Any]]) -> None:
    from shopsimrl_core.analysis._stats import pass_at_k, pass_hat_k

    usable = [row for row in done if row.get("r_success") is not None and row.get("task_id") is not None]
    if not usable or len({row["task_id"] for row in usable}) == len(usable):
        return
    per_task: dict[int, list[int]] = {}
    for row in usable:
        n_c = per_task.setdefault(row["task_id"], [0, 0])
        n_c[0] += 1
        n_c[1] += int(row["r_success"] >= 1.0)
    tasks = [(n, c) for _, (n, c) in sorted(per_task.items())]
    k_max = min(n for n, _ in tasks)
    if max(n for n, _ in tasks) < 2 or k_max < 2:
        return
    primary["pass_at_k"] = {str(k): sum(pass_at_k(n, c, k) for n, c in tasks) / len(tasks) for k in range(1, k_max + 1)}
    primary["pass_hat_k"] = {
        str(k): sum(pass_hat_k(n, c, k) for n, c in tasks) / len(tasks) for k in range(1, k_max + 1)
    }


def _task_clusters(rows: list[dict[str, Any]], column: str) -> Any:
    """As ``_intervals._task_clusters``: per-task totals (tasks sorted), then tasks of one episode by id."""
    from shopsimrl_core.analysis._design import TaskClusters

    with_value = [row for row in rows if row.get(column) is not None]
    groups: dict[int, list[float]] = {}
    alone: list[tuple[str, float]] = []
    for row in with_value:
        value = float(row[column])
        if row.get("task_id") is None:
            alone.append((row["episode_id"], value))
        else:
            groups.setdefault(row["task_id"], []).append(value)
    values = _finite([float(row[column]) for row in with_value])
    variance = None
    if len(values) >= 2:
        mean = math.fsum(values) / len(values)
        variance = math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)
    ordered = [groups[task] for task in sorted(groups)]
    lone = [value for _, value in sorted(alone, key=lambda pair: pair[0].encode("utf-8"))]
    return TaskClusters(
        totals=tuple(math.fsum(group) for group in ordered) + tuple(lone),
        sizes=tuple(len(group) for group in ordered) + (1,) * len(lone),
        episode_variance=variance,
    )


def _category_rows(done: list[dict[str, Any]], clustered: bool) -> dict[str, Any]:
    """As ``_category_rows.category_breakdown``: rows of one or two values per mean; no intervals (else unsupported)."""
    with_cat = [row for row in done if row.get("category") is not None]
    if not with_cat:
        return {}
    if clustered:
        raise _Unsupported  # category intervals of runs with repeats: the polars path
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in with_cat:
        groups.setdefault(row["category"], []).append(row)
    out: dict[str, Any] = {}
    for name in _sorted_text(groups):
        members = groups[name]
        out[name] = {
            "episodes": len(members),
            "reward_mean": _group_mean(_present(members, "reward")),
            "success_rate": _group_mean(_present(members, "r_success")),
        }
    return out


def _group_mean(values: list[float]) -> float | None:
    """A polars group mean, to the bit: of one value it is the value, of two their (once rounded) sum halved."""
    values = _finite(values)
    if len(values) > 2:
        raise _Unsupported
    return sum(values) / len(values) if values else None
