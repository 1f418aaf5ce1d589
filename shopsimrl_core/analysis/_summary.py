"""Summary ``shopsimrl-eval-summary-v2`` (runtime spec §13, with §22.4/§22.5 and §23 additive keys).

One pass over the latest records turns each episode into one flat row; polars does every
aggregation. The legacy keys keep their exact definitions (pooled ``invalid_action_rate``,
``reasoning_tokens`` only when seen, ``generation_length`` episodes scored). Additive keys:
``counts.duplicate_completed`` / ``counts.unplanned_episodes``, ``primary.success_ci`` (Wilson),
``primary.reward_ci`` (bootstrap), ``reward_components_sem``, ``primary.pass_at_k`` / ``primary.pass_hat_k`` (repeats > 1) and
``breakdowns.category``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from shopsimrl_core.runs._store import RunStore, is_complete, utc_now
from shopsimrl_core._versions import SUMMARY_SCHEMA

__all__ = ["build_summary", "summarize_run", "episode_row"]

_TOKEN_KEYS = ("completion_tokens", "prompt_tokens", "reasoning_tokens", "total_tokens")
_BOOTSTRAP_SEED = 20260901
_BOOTSTRAP_SAMPLES = 2000
_BOOTSTRAP_MAX_N = 200_000  # above this the reward interval uses the normal approximation


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def episode_row(record: dict[str, Any]) -> dict[str, Any]:
    """Flatten one latest record into the per-episode row the summary aggregates."""
    complete = is_complete(record)
    job = record.get("job") if isinstance(record.get("job"), dict) else {}
    row: dict[str, Any] = {
        "episode_id": record["episode_id"],
        "task_id": job.get("task_id") if _int(job.get("task_id")) else None,
        "sample_id": job.get("sample_id") if _int(job.get("sample_id")) else None,
        "complete": complete,
        "error_type": None,
        "reward": None,
        "r_success": None,
        "duration_ms": None,
        "n_steps": 0,
        "protocol_errors": 0,
        "policy_failures": 0,
        "total_actions": 0,
        "invalid_actions": 0,
        "termination_reason": None,
        "category": None,
        "components": {},
        "tokens": {},
    }
    if not complete:
        error = record.get("error")
        etype = error.get("type") if isinstance(error, dict) else None
        row["error_type"] = str(etype) if etype is not None else "unknown"
        return row
    final = record["final"]
    if _number(final.get("reward")):
        row["reward"] = float(final["reward"])
    detail = final.get("reward_detail")
    if isinstance(detail, dict):
        row["components"] = {k: float(v) for k, v in detail.items() if isinstance(k, str) and k.startswith("r_") and _number(v)}
        if _number(detail.get("r_success")):
            row["r_success"] = float(detail["r_success"])
    reason = final.get("termination_reason")
    row["termination_reason"] = "unknown" if reason is None else str(reason)
    for source in ("goal", "purchase"):
        block = final.get(source)
        if isinstance(block, dict) and isinstance(block.get("category"), str) and block["category"]:
            row["category"] = block["category"]
            break
    if _number(record.get("duration_ms")):
        row["duration_ms"] = float(record["duration_ms"])
    steps = record.get("steps") if isinstance(record.get("steps"), list) else []
    row["n_steps"] = len(steps)
    tokens: dict[str, int] = {}
    for step in steps:
        if not isinstance(step, dict):
            continue
        if isinstance(step.get("protocol_error"), dict):
            row["protocol_errors"] += 1
        if isinstance(step.get("policy_failure"), dict):
            row["policy_failures"] += 1
        environment = step.get("environment")
        if isinstance(environment, dict):
            row["total_actions"] += 1
            feedback = environment.get("action_feedback")
            if isinstance(feedback, dict) and feedback and feedback.get("valid") is False:
                row["invalid_actions"] += 1
        model = step.get("model")
        usage = model.get("usage") if isinstance(model, dict) else None
        if isinstance(usage, dict):
            for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
                if _int(usage.get(key)):
                    tokens[key] = tokens.get(key, 0) + usage[key]
            details = usage.get("completion_tokens_details")
            if isinstance(details, dict) and _int(details.get("reasoning_tokens")):
                tokens["reasoning_tokens"] = tokens.get("reasoning_tokens", 0) + details["reasoning_tokens"]
    row["tokens"] = tokens
    return row


def _fmean(series: Any) -> float | None:
    # Polars selects the values; the mean itself is an exactly rounded sum (math.fsum) divided by n,
    # which agrees with Python's own float means, not with a summation-order-dependent result.
    values = series.drop_nulls().to_list()
    return None if not values else math.fsum(values) / len(values)


def _mean(frame: Any, column: str) -> float | None:
    return _fmean(frame.get_column(column))


def _ci_dict(low_high: tuple[float, float] | None, **meta: Any) -> dict[str, Any] | None:
    if low_high is None:
        return None
    return {**meta, "low": low_high[0], "high": low_high[1]}


def build_summary(
    records: Iterable[dict[str, Any]],
    requested: int,
    *,
    planned: set[str] | None = None,
    duplicate_completed: int | None = None,
    created_at: str | None = None,
) -> dict[str, Any]:
    """Build the v2 summary from the latest record of each episode.

    With *planned* (the manifest's episode ids, §22.5) only planned episodes enter counts and
    metrics, ``coverage`` stays within [0, 1] and other ids are counted in
    ``counts.unplanned_episodes``. Without it, the legacy definitions apply unchanged.
    """
    import polars as pl

    rows: list[dict[str, Any]] = []
    unplanned = 0
    seen: set[str] = set()
    for record in records:
        eid = record.get("episode_id")
        if not isinstance(eid, str) or eid in seen:
            continue
        seen.add(eid)
        if planned is not None and eid not in planned:
            unplanned += 1
            continue
        rows.append(episode_row(record))

    component_keys = sorted({key for row in rows for key in row["components"]})
    token_keys = sorted({key for row in rows for key in row["tokens"]})
    schema: dict[str, Any] = {
        "episode_id": pl.Utf8,
        "task_id": pl.Int64,
        "sample_id": pl.Int64,
        "complete": pl.Boolean,
        "error_type": pl.Utf8,
        "reward": pl.Float64,
        "r_success": pl.Float64,
        "duration_ms": pl.Float64,
        "n_steps": pl.Int64,
        "protocol_errors": pl.Int64,
        "policy_failures": pl.Int64,
        "total_actions": pl.Int64,
        "invalid_actions": pl.Int64,
        "termination_reason": pl.Utf8,
        "category": pl.Utf8,
    }
    columns: dict[str, list[Any]] = {name: [row[name] for row in rows] for name in schema}
    for key in component_keys:
        schema[f"c::{key}"] = pl.Float64
        columns[f"c::{key}"] = [row["components"].get(key) for row in rows]
    for key in token_keys:
        schema[f"t::{key}"] = pl.Int64
        columns[f"t::{key}"] = [row["tokens"].get(key) for row in rows]
    # Sorted by episode_id (as §6.5 iterates), so every float sum and the bootstrap are order-free.
    frame = pl.DataFrame(columns, schema=schema).sort("episode_id")
    done = frame.filter(pl.col("complete"))
    failed = frame.filter(~pl.col("complete"))

    completed_n = done.height
    scored = done.get_column("reward").drop_nulls()
    reward_mean = _fmean(scored)
    reward_sem = None if scored.len() < 2 else statistics.stdev(scored.to_list()) / math.sqrt(scored.len())
    success = done.get_column("r_success").drop_nulls()
    success_rate = _fmean(success)

    counts: dict[str, Any] = {
        "requested": requested,
        "trace_files": frame.height,
        "completed": completed_n,
        "failed": failed.height,
        "scored": scored.len(),
        "coverage": (completed_n / requested) if requested else 0.0,
    }
    if duplicate_completed is not None:
        counts["duplicate_completed"] = duplicate_completed
    if planned is not None:
        counts["unplanned_episodes"] = unplanned

    primary: dict[str, Any] = {"reward_mean": reward_mean, "reward_sem": reward_sem, "success_rate": success_rate}
    if success.len() > 0 and success.is_in([0.0, 1.0]).all():
        from shopsimrl_core.analysis._stats import wilson_interval

        primary["success_ci"] = _ci_dict(
            wilson_interval(int(success.sum()), success.len()), method="wilson", confidence_level=0.95, n=success.len()
        )
    if scored.len() >= 2:
        primary["reward_ci"] = _reward_ci(scored.to_list(), reward_mean, reward_sem)
    _add_pass_at_k(primary, done)

    reward_components = {key: _mean(done, f"c::{key}") for key in component_keys}
    reward_components = {key: value for key, value in reward_components.items() if value is not None}

    model_steps = int(done.get_column("n_steps").sum()) if completed_n else 0
    protocol_errors = int(done.get_column("protocol_errors").sum()) if completed_n else 0
    policy_failures = int(done.get_column("policy_failures").sum()) if completed_n else 0
    total_actions = int(done.get_column("total_actions").sum()) if completed_n else 0
    invalid_actions = int(done.get_column("invalid_actions").sum()) if completed_n else 0
    reasons = (
        done.group_by("termination_reason").agg(pl.len().alias("n")).sort("termination_reason")
        if completed_n
        else None
    )
    behavior = {
        "steps_mean": _fmean(done.get_column("n_steps").cast(pl.Float64)) if completed_n else None,
        "model_steps": model_steps,
        "protocol_errors": protocol_errors,
        "protocol_error_rate": (protocol_errors / model_steps) if model_steps else None,
        "policy_failures": policy_failures,
        "policy_failure_rate": (policy_failures / model_steps) if model_steps else None,
        "invalid_action_rate": (invalid_actions / total_actions) if total_actions else None,
        "invalid_actions": invalid_actions,
        "total_actions": total_actions,
        "termination_reasons": {} if reasons is None else {r: int(n) for r, n in reasons.iter_rows()},
    }
    tokens: dict[str, int] = {}
    for key in token_keys:
        series = done.get_column(f"t::{key}").drop_nulls()
        if series.len() > 0:
            tokens[key] = int(series.sum())
    cost = {"duration_ms_mean": _mean(done, "duration_ms") if completed_n else None, "tokens": dict(sorted(tokens.items()))}
    error_counts = (
        failed.group_by("error_type").agg(pl.len().alias("n")).sort("error_type") if failed.height else None
    )
    errors = {} if error_counts is None else {t: int(n) for t, n in error_counts.iter_rows()}

    summary: dict[str, Any] = {
        "schema_version": SUMMARY_SCHEMA,
        "created_at": created_at or utc_now(),
        "counts": counts,
        "primary": primary,
        "reward_components": reward_components,
        "behavior": behavior,
        "cost": cost,
        "errors": errors,
    }
    component_sem: dict[str, float | None] = {}
    for key in reward_components:
        values = done.get_column(f"c::{key}").drop_nulls().to_list()
        component_sem[key] = statistics.stdev(values) / math.sqrt(len(values)) if len(values) >= 2 else None
    if component_sem:
        summary["reward_components_sem"] = component_sem
    breakdowns = _category_breakdown(done)
    if breakdowns:
        summary["breakdowns"] = {"category": breakdowns}
    return summary


def _reward_ci(values: list[float], mean: float | None, sem: float | None) -> dict[str, Any] | None:
    from shopsimrl_core.analysis._stats import bootstrap_mean_ci

    if len(values) <= _BOOTSTRAP_MAX_N:
        return bootstrap_mean_ci(values, metric="reward", seed=_BOOTSTRAP_SEED, samples=_BOOTSTRAP_SAMPLES)
    if mean is None or sem is None:
        return None
    return {"method": "normal_approximation", "confidence_level": 0.95, "low": mean - 1.959963984540054 * sem, "high": mean + 1.959963984540054 * sem}


def _add_pass_at_k(primary: dict[str, Any], done: Any) -> None:
    import polars as pl

    from shopsimrl_core.analysis._stats import pass_at_k, pass_hat_k

    usable = done.filter(pl.col("r_success").is_not_null() & pl.col("task_id").is_not_null())
    if usable.height == 0:
        return
    per_task = usable.group_by("task_id").agg(
        pl.len().alias("n"), (pl.col("r_success") >= 1.0).sum().alias("c")
    ).sort("task_id")
    if int(per_task.get_column("n").max()) < 2:
        return
    k_max = int(per_task.get_column("n").min())
    if k_max < 2:
        return
    tasks = [(int(n), int(c)) for n, c in per_task.select("n", "c").iter_rows()]
    primary["pass_at_k"] = {str(k): sum(pass_at_k(n, c, k) for n, c in tasks) / len(tasks) for k in range(1, k_max + 1)}
    primary["pass_hat_k"] = {str(k): sum(pass_hat_k(n, c, k) for n, c in tasks) / len(tasks) for k in range(1, k_max + 1)}


def _category_breakdown(done: Any) -> dict[str, Any]:
    import polars as pl

    with_cat = done.filter(pl.col("category").is_not_null())
    if with_cat.height == 0:
        return {}
    grouped = with_cat.group_by("category").agg(
        pl.len().alias("episodes"),
        pl.col("reward").mean().alias("reward_mean"),
        pl.col("r_success").mean().alias("success_rate"),
    ).sort("category")
    return {
        row["category"]: {"episodes": int(row["episodes"]), "reward_mean": row["reward_mean"], "success_rate": row["success_rate"]}
        for row in grouped.iter_rows(named=True)
    }


def summarize_run(
    run_dir: str | Path,
    requested: int | None = None,
    write: bool = True,
    *,
    store: RunStore | None = None,
    created_at: str | None = None,
) -> dict[str, Any]:
    """Rebuild ``summary.json`` from ``traces.jsonl`` (the ``summarize`` verb, §5.1).

    ``requested`` = the given N, else the number of manifest jobs, else the number of distinct
    episode ids. With a manifest only planned episodes count (§22.5). Writing takes the run lock
    unless *store* already holds it.

    Raises:
        RunLockedError: *write* and another process holds the run directory.
        TraceFormatError: the manifest is unreadable or of an unknown schema.
    """
    from shopsimrl_core.runs._jobs import EpisodeJob

    store = store if store is not None else RunStore(run_dir)
    own_lock = write and not store.locked
    if own_lock:
        import uuid

        store.acquire_lock(f"summarize-{uuid.uuid4().hex[:12]}")
    try:
        manifest = store.read_manifest()
        planned: set[str] | None = None
        if manifest is not None and isinstance(manifest["plan"].get("jobs"), list):
            planned = {EpisodeJob.from_dict(job).episode_id for job in manifest["plan"]["jobs"]}
        index = store.index()
        if requested is None:
            requested = len(planned) if planned is not None else len(index.entries)
        summary = build_summary(
            store.latest_records(index),
            requested,
            planned=planned,
            duplicate_completed=index.duplicate_completed,
            created_at=created_at,
        )
        if write:
            from shopsimrl_core._hashing import write_json_atomic

            write_json_atomic(store.summary_path, summary)
        return summary
    finally:
        if own_lock:
            store.release_lock()
