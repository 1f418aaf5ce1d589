"""Summary ``shopsimrl-eval-summary-v2`` (runtime-semantics §13, with §22.4/§22.5 and §23 additive keys).

One pass over the latest records turns each episode into one flat row; polars does every
aggregation. The legacy keys keep their exact definitions (pooled ``invalid_action_rate``,
``reasoning_tokens`` only when seen, ``generation_length`` episodes scored). Additive keys:
``counts.duplicate_completed`` / ``counts.unplanned_episodes`` / ``counts.endpoint_faults`` (failed
attempts of type ``ModelEndpointFault``, every line counted), ``primary.success_ci`` (Wilson),
``primary.reward_ci`` (bootstrap), ``reward_components_sem``, ``primary.pass_at_k`` /
``primary.pass_hat_k`` (repeats > 1) and ``breakdowns.category``.

The intervals follow the sampling design (issue 23, docs/statistics.md): with one episode per task
they are the episode-level ones above, bit for bit; when a task has several episodes they resample
tasks (``_design``: a task-cluster bootstrap for reward, Wilson at the design-effect sample size for
success) and ``primary.sampling_design`` says so; the category rows (``_categories``) then carry their
own intervals, ``tasks`` and a ``small_n`` flag. A one-repeat summary is the published document byte for
byte, category rows included (three keys each); where those rows are shown their intervals come from
``_categories.category_intervals``.

Why one module: every key of the summary document is derived from the same per-episode frame in one
pass, and the published definitions (§13) are easiest to audit side by side; the statistics themselves
live in ``_stats`` and ``_design``, the planned-episode bookkeeping in ``runs``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from shopsimrl_core._versions import SUMMARY_SCHEMA
from shopsimrl_core.analysis._exact import _fmean, _stdev
from shopsimrl_core.analysis._intervals import (
    _BOOTSTRAP_MAX_N,
    _BOOTSTRAP_SAMPLES,
    _BOOTSTRAP_SEED,
    _ci_dict,
    _clustered_reward_ci,
    _clustered_success_ci,
    _has_repeats,
    _sampling_design,
    _task_clusters,
)
from shopsimrl_core.analysis._summary_witness import stored_summary_bytes, witness_key, write_witness
from shopsimrl_core.documents._runs import EvalSummary
from shopsimrl_core.runs.storage._index import episode_row
from shopsimrl_core.runs.storage._index_rows import EpisodeRow
from shopsimrl_core.runs.storage._store import RunStore, utc_now
from shopsimrl_core.runs.storage._trace_index import TraceIndex

__all__ = ["build_summary", "summary_from_index", "summarize_run", "episode_row"]

_TOKEN_KEYS = ("completion_tokens", "prompt_tokens", "reasoning_tokens", "total_tokens")


def _mean(frame: Any, column: str) -> float | None:
    return _fmean(frame.get_column(column))


def build_summary(
    records: Iterable[dict[str, Any]],
    requested: int,
    *,
    planned: set[str] | None = None,
    duplicate_completed: int | None = None,
    endpoint_faults: int | None = None,
    created_at: str | None = None,
) -> EvalSummary:
    """Build the v2 summary from the latest record of each episode, as the typed document.

    With *planned* (the manifest's episode ids, §22.5) only planned episodes enter counts and
    metrics, ``coverage`` stays within [0, 1] and other ids are counted in
    ``counts.unplanned_episodes``. Without it, the legacy definitions apply unchanged. The counts
    that need every line, not only the latest (*duplicate_completed*, *endpoint_faults*), are given
    by the caller and published when not None. ``to_json()`` of the result is the document as
    ``summary.json`` holds it, key for key.
    """
    import polars as pl

    rows: list[EpisodeRow] = []
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
    columns: dict[str, list[Any]] = {name: [row.get(name) for row in rows] for name in schema}
    for key in component_keys:
        schema[f"c::{key}"] = pl.Float64
        columns[f"c::{key}"] = [row["components"].get(key) for row in rows]
    for key in token_keys:
        schema[f"t::{key}"] = pl.Int64
        columns[f"t::{key}"] = [row["tokens"].get(key) for row in rows]
    frame = pl.DataFrame(columns, schema=schema)
    return _summary_from_frame(frame, component_keys, token_keys, requested, planned=planned is not None,
                               unplanned=unplanned, duplicate_completed=duplicate_completed,
                               endpoint_faults=endpoint_faults, created_at=created_at)


_BASE_COLUMNS = ("episode_id", "task_id", "sample_id", "complete", "error_type", "reward", "r_success", "duration_ms",
                 "n_steps", "protocol_errors", "policy_failures", "total_actions", "invalid_actions",
                 "termination_reason", "category")


def summary_from_index(
    run_index: Any,
    requested: int,
    *,
    planned: Any = None,
    duplicate_completed: int | None = None,
    endpoint_faults: int | None = None,
    created_at: str | None = None,
) -> EvalSummary:
    """Build the v2 summary from a :class:`~shopsimrl_core.runs.storage._index.RunIndex` without reading traces.

    *planned* is a set of episode ids or a polars Series of unique ids.

    Same promises and the same bytes as :func:`build_summary` over the latest records of the run.
    """
    import polars as pl

    episodes, unplanned = _planned_episodes(run_index.episodes, planned)
    dynamic = [c for c in episodes.columns if c.startswith(("c::", "t::"))]
    present = set()
    if dynamic and episodes.height:
        counts = episodes.select([pl.col(c).is_not_null().any().alias(c) for c in dynamic]).row(0, named=True)
        present = {c for c, seen in counts.items() if seen}
    component_keys = sorted(c[3:] for c in present if c.startswith("c::"))
    token_keys = sorted(c[3:] for c in present if c.startswith("t::"))
    frame = episodes.select([*_BASE_COLUMNS, *[f"c::{k}" for k in component_keys], *[f"t::{k}" for k in token_keys]])
    return _summary_from_frame(
        frame,
        component_keys,
        token_keys,
        requested,
        planned=planned is not None,
        unplanned=unplanned,
        duplicate_completed=duplicate_completed,
        endpoint_faults=endpoint_faults,
        created_at=created_at,
        presorted=True,
    )


def _planned_episodes(episodes: Any, planned: Any) -> tuple[Any, int]:
    """The rows of planned episodes (all rows when *planned* is None) and how many others there were."""
    import polars as pl

    unplanned = 0
    if planned is None:
        return episodes, unplanned
    total = episodes.height
    ids = episodes.get_column("episode_id")
    presorted = isinstance(planned, pl.Series) and planned.flags["SORTED_ASC"]
    if presorted and planned.len() == ids.len() and planned.equals(ids):
        pass  # every planned episode and nothing else: the common case, one linear comparison
    elif presorted:
        # Both sides sorted: a binary search per episode instead of hashing two million strings.
        at = planned.search_sorted(ids).clip(0, max(planned.len() - 1, 0))
        episodes = episodes.filter(planned.gather(at) == ids) if planned.len() else episodes.head(0)
    else:
        wanted = (
            planned.to_frame("episode_id")
            if isinstance(planned, pl.Series)
            else pl.DataFrame({"episode_id": list(planned)}, schema={"episode_id": pl.Utf8})
        )
        episodes = episodes.join(wanted, on="episode_id", how="semi", maintain_order="left")
    unplanned = total - episodes.height
    return episodes, unplanned


def _endpoint_fault_attempts(run_index: Any, planned: Any = None) -> int:
    """Failed attempts of (planned) episodes whose error type is ``ModelEndpointFault``, over every line.

    The summary's ``counts.endpoint_faults`` (issue 24): a model endpoint that answered 2xx bodies that
    are no chat completion, attempt after attempt, is a fault of the serving stack, not the checkpoint's.
    """
    episodes, _ = _planned_episodes(run_index.episodes, planned)
    if "endpoint_faults" not in episodes.columns or episodes.height == 0:
        return 0
    return int(episodes.get_column("endpoint_faults").sum())


def _summary_from_frame(
    frame: Any,
    component_keys: list[str],
    token_keys: list[str],
    requested: int,
    *,
    planned: bool,
    unplanned: int,
    duplicate_completed: int | None,
    created_at: str | None,
    endpoint_faults: int | None = None,
    presorted: bool = False,
) -> EvalSummary:
    import polars as pl

    # Sorted by episode_id (as §6.5 iterates), so every float sum and the bootstrap are order-free.
    # The run index keeps its episodes sorted already: a million-row string sort is skipped then.
    if not presorted:
        frame = frame.sort("episode_id")
    done = frame.filter(pl.col("complete"))
    failed = frame.filter(~pl.col("complete"))

    completed_n = done.height
    scored = done.get_column("reward").drop_nulls()
    reward_mean = _fmean(scored)
    reward_sem = None if scored.len() < 2 else _stdev(scored) / math.sqrt(scored.len())
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
    if endpoint_faults is not None:
        counts["endpoint_faults"] = endpoint_faults
    if duplicate_completed is not None:
        counts["duplicate_completed"] = duplicate_completed
    if planned:
        counts["unplanned_episodes"] = unplanned

    primary: dict[str, Any] = {"reward_mean": reward_mean, "reward_sem": reward_sem, "success_rate": success_rate}
    clustered = _has_repeats(done)
    binary_success = success.len() > 0 and success.is_in([0.0, 1.0]).all()
    if not clustered:
        # One episode per task: today's intervals, bit for bit (episodes are the sampling unit).
        if binary_success:
            from shopsimrl_core.analysis._stats import wilson_interval

            primary["success_ci"] = _ci_dict(
                wilson_interval(int(success.sum()), success.len()),
                method="wilson",
                confidence_level=0.95,
                n=success.len(),
            )
        if scored.len() >= 2:
            primary["reward_ci"] = _reward_ci(scored, reward_mean, reward_sem)
        _add_pass_at_k(primary, done)
    else:
        reward_clusters = _task_clusters(done, "reward")
        success_clusters = _task_clusters(done, "r_success")
        if binary_success:
            primary["success_ci"] = _clustered_success_ci(success_clusters)
        if scored.len() >= 2:
            primary["reward_ci"] = _clustered_reward_ci(reward_clusters, "reward")
        _add_pass_at_k(primary, done)
        primary["sampling_design"] = _sampling_design(reward_clusters, success_clusters, binary_success)

    reward_components = {key: _mean(done, f"c::{key}") for key in component_keys}
    reward_components = {key: value for key, value in reward_components.items() if value is not None}

    model_steps = int(done.get_column("n_steps").sum()) if completed_n else 0
    protocol_errors = int(done.get_column("protocol_errors").sum()) if completed_n else 0
    policy_failures = int(done.get_column("policy_failures").sum()) if completed_n else 0
    total_actions = int(done.get_column("total_actions").sum()) if completed_n else 0
    invalid_actions = int(done.get_column("invalid_actions").sum()) if completed_n else 0
    reasons = (
        done.group_by("termination_reason").agg(pl.len().alias("n")).sort("termination_reason") if completed_n else None
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
    cost = {
        "duration_ms_mean": _mean(done, "duration_ms") if completed_n else None,
        "tokens": dict(sorted(tokens.items())),
    }
    error_counts = failed.group_by("error_type").agg(pl.len().alias("n")).sort("error_type") if failed.height else None
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
        values = done.get_column(f"c::{key}").drop_nulls()
        component_sem[key] = _stdev(values) / math.sqrt(values.len()) if values.len() >= 2 else None
    if component_sem:
        summary["reward_components_sem"] = component_sem
    # With one episode per task the rows keep the published three keys, so the file stays byte for
    # byte the published format; their intervals are computed where shown (_categories.category_intervals).
    from shopsimrl_core.analysis._category_rows import category_breakdown

    breakdowns = category_breakdown(done, intervals=clustered)
    if breakdowns:
        summary["breakdowns"] = {"category": breakdowns}
    # The dict is built in the format's key order; the model keeps exactly those keys (to_json).
    return EvalSummary.model_validate(summary)


def _reward_ci(values: Any, mean: float | None, sem: float | None) -> dict[str, Any] | None:
    from shopsimrl_core.analysis._stats import bootstrap_mean_ci

    if len(values) <= _BOOTSTRAP_MAX_N:
        return bootstrap_mean_ci(
            values.to_list() if hasattr(values, "to_list") else values,
            metric="reward",
            seed=_BOOTSTRAP_SEED,
            samples=_BOOTSTRAP_SAMPLES,
        )
    if mean is None or sem is None:
        return None
    return {
        "method": "normal_approximation",
        "confidence_level": 0.95,
        "low": mean - 1.959963984540054 * sem,
        "high": mean + 1.959963984540054 * sem,
    }


def _add_pass_at_k(primary: dict[str, Any], done: Any) -> None:
    import polars as pl

    from shopsimrl_core.analysis._stats import pass_at_k, pass_hat_k

    usable = done.filter(pl.col("r_success").is_not_null() & pl.col("task_id").is_not_null())
    if usable.height == 0:
        return
    if usable.get_column("task_id").n_unique() == usable.height:
        return  # one sample per task: no k ≥ 2 (and no per-task group-by over a million tasks)
    per_task = (
        usable.group_by("task_id")
        .agg(pl.len().alias("n"), (pl.col("r_success") >= 1.0).sum().alias("c"))
        .sort("task_id")
    )
    if int(per_task.get_column("n").max()) < 2:
        return
    k_max = int(per_task.get_column("n").min())
    if k_max < 2:
        return
    tasks = [(int(n), int(c)) for n, c in per_task.select("n", "c").iter_rows()]
    # Tasks share few (n, c) pairs (n is the repeats; c at most n + 1 values), so each estimate is
    # computed once per pair and k; the sum still adds every task's value in task order, the same
    # float additions as one call per task (5,000 tasks × 200 repeats: 2 M calls before, issue 33).
    pairs = sorted(set(tasks))
    slot = {pair: at for at, pair in enumerate(pairs)}
    order = [slot[pair] for pair in tasks]

    def mean_over_tasks(estimate: Callable[[int, int, int], float], k: int) -> float:
        values = [estimate(n, c, k) for n, c in pairs]
        return sum(map(values.__getitem__, order)) / len(tasks)

    primary["pass_at_k"] = {str(k): mean_over_tasks(pass_at_k, k) for k in range(1, k_max + 1)}
    primary["pass_hat_k"] = {str(k): mean_over_tasks(pass_hat_k, k) for k in range(1, k_max + 1)}


def _planned_ids(jobs: list[Any]) -> Any:
    """The planned episode ids of a manifest's jobs: a set, or for long plans a sorted unique Series.

    The Series holds exactly the ids ``EpisodeJob.from_dict(job).episode_id`` gives (vectorised).
    """
    from shopsimrl_core.runs.planning._jobs import EpisodeJob

    if len(jobs) >= _VECTOR_MIN_JOBS and all(isinstance(j, dict) for j in jobs[:1]):
        import polars as pl

        try:
            frame = pl.DataFrame(
                {"t": [j["task_id"] for j in jobs], "s": [j["sample_id"] for j in jobs]},
                schema={"t": pl.Int64, "s": pl.Int64},
                strict=True,
            )
        except (KeyError, TypeError, ValueError, pl.exceptions.PolarsError):
            frame = None
        bounds = (
            frame.select(
                pl.col("t").min().alias("t0"),
                pl.col("t").max().alias("t1"),
                pl.col("s").min().alias("s0"),
                pl.col("s").max().alias("s1"),
            ).row(0)
            if frame is not None and frame.height
            else None
        )
        in_range = bounds is not None and bounds[0] >= 0 and bounds[2] >= 0 and bounds[1] < 10**6 and bounds[3] < 10**3
        if frame is not None and in_range:
            # Fixed-width ids sort like their (task, sample) numbers: sort and dedupe integers, then
            # format, and the Series comes out sorted (summary_from_index relies on that).
            frame = frame.unique().sort("t", "s")
            ids = frame.select(
                pl.format(
                    "task-{}__sample-{}", pl.col("t").cast(pl.Utf8).str.zfill(6), pl.col("s").cast(pl.Utf8).str.zfill(3)
                ).alias("episode_id")
            )
            return ids.get_column("episode_id").set_sorted()
    return {EpisodeJob.from_dict(job).episode_id for job in jobs}


PLANNED_CACHE_NAME = "traces.index.planned.parquet"
_VECTOR_MIN_JOBS = 50_000  # plans this long get their ids formatted by polars, not one by one
_PLANNED_CACHE_MIN_BYTES = 4 << 20  # only plans this large (~50,000 jobs) are worth a cache file


def _planned_of(store: RunStore, *, write: bool = True) -> Any:
    """The manifest's planned episode ids (None without a manifest or a job list).

    A large manifest (a million jobs is ~70 MB of JSON) is parsed once: its sorted ids are kept in
    ``traces.index.planned.parquet``, keyed by the manifest's size, mtime and inode (the manifest is
    written once and never rewritten on resume), and written only by a process that may write (never
    with *write* False: readers such as the viewer).
    """
    from shopsimrl_core.runs.storage._index import _writer

    try:
        stat = store.manifest_path.stat()
    except FileNotFoundError:
        return None
    key = f"{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}"
    cache = store.run_dir / PLANNED_CACHE_NAME
    big = stat.st_size >= _PLANNED_CACHE_MIN_BYTES
    if big:
        import polars as pl  # only here: a small run's summary may be computed without polars (_summary_small.py)

        try:
            if pl.read_parquet_metadata(cache).get("manifest_key") == key:
                return pl.read_parquet(cache).get_column("episode_id").set_sorted()
        except Exception:  # missing, foreign or broken: rebuilt below
            pass
    manifest = store.read_manifest()
    if manifest is None or not isinstance(manifest["plan"].get("jobs"), list):
        return None
    planned = _planned_ids(manifest["plan"]["jobs"])
    if write and big and not isinstance(planned, set):  # a polars Series
        with _writer(store.run_dir, store.locked) as allowed:
            if allowed:
                tmp = store.run_dir / f".{PLANNED_CACHE_NAME}.{os.getpid()}.tmp"
                try:
                    planned.to_frame("episode_id").write_parquet(tmp, metadata={"manifest_key": key})
                    os.replace(tmp, cache)
                except OSError:
                    pass  # a cache that cannot be written is only a slower next summary
                finally:
                    tmp.unlink(missing_ok=True)
    return planned


def _small_run_summary(store: RunStore, requested: int | None, created_at: str | None) -> EvalSummary | None:
    """The summary of a small run without polars (``_summary_small.py``), or None: the polars path computes it."""
    from shopsimrl_core.analysis._summary_small import small_summary
    from shopsimrl_core.runs.storage._small_index import open_small_index

    index = open_small_index(store.run_dir)
    if index is None:
        return None
    planned: set[str] | None = None
    try:
        if store.manifest_path.stat().st_size >= _PLANNED_CACHE_MIN_BYTES:
            return None
        manifest = store.read_manifest()
    except FileNotFoundError:
        manifest = None
    if manifest is not None and isinstance(manifest["plan"].get("jobs"), list):
        jobs = manifest["plan"]["jobs"]
        if len(jobs) >= _VECTOR_MIN_JOBS:
            return None
        planned = _planned_ids(jobs)
    if requested is None:
        requested = len(planned) if planned is not None else len(index.rows)
    summary: EvalSummary | None = small_summary(
        index.rows,
        requested,
        planned=planned,
        duplicate_completed=index.duplicate_completed,
        endpoint_faults=index.endpoint_faults(planned),
        created_at=created_at,
    )
    return summary


def summarize_run(
    run_dir: str | Path,
    requested: int | None = None,
    write: bool = True,
    *,
    store: RunStore | None = None,
    created_at: str | None = None,
    index: TraceIndex | None = None,
) -> EvalSummary:
    """Rebuild ``summary.json`` from the run index of ``traces.jsonl`` (the ``summarize`` verb, §5.1).

    ``requested`` = the given N, else the number of manifest jobs, else the number of distinct
    episode ids. With a manifest only planned episodes count (§22.5). Writing takes the run lock
    unless *store* already holds it. The file written is ``to_json()`` of the returned document.

    *index*: the run's index as the caller opened it under the lock it still holds, with nothing
    appended since (a resume that attempted nothing). Then a ``summary.json`` whose witness
    (``_summary_witness.py``) names exactly these inputs is returned as stored and not rewritten.

    Raises:
        RunLockedError: *write* and another process holds the run directory.
        TraceFormatError: the manifest is unreadable or of an unknown schema.
    """
    store = store if store is not None else RunStore(run_dir)
    own_lock = write and not store.locked
    if own_lock:
        import uuid

        store.acquire_lock(f"summarize-{uuid.uuid4().hex[:12]}")
    try:
        if index is not None and write and created_at is None:
            key = witness_key(index.run_index, store.manifest_path, requested)
            stored = stored_summary_bytes(store.run_dir, store.summary_path, key)
            if stored is not None:
                return EvalSummary.model_validate(json.loads(stored))
        small = _small_run_summary(store, requested, created_at) if index is None else None
        if small is not None:
            if write:
                from shopsimrl_core._hashing import write_json_atomic

                write_json_atomic(store.summary_path, small.to_json())
                write_witness(store.run_dir, store.summary_path, None)
            return small
        planned = _planned_of(store)
        # The run index answers everything the summary needs: no trace line is re-read (issue 11).
        given = requested
        index = index if index is not None else store.index()
        if requested is None:
            requested = (
                (planned.len() if hasattr(planned, "len") else len(planned))
                if planned is not None
                else len(index.entries)
            )
        summary = summary_from_index(
            index.run_index,
            requested,
            planned=planned,
            duplicate_completed=index.duplicate_completed,
            endpoint_faults=_endpoint_fault_attempts(index.run_index, planned),
            created_at=created_at,
        )
        if write:
            from shopsimrl_core._hashing import write_json_atomic

            write_json_atomic(store.summary_path, summary.to_json())
            write_witness(store.run_dir, store.summary_path, witness_key(index.run_index, store.manifest_path, given))
        return summary
    finally:
        if own_lock:
            store.release_lock()
