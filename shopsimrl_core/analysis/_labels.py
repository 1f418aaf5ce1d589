"""Episode labels: why an episode ended the way it did, read from frozen traces only.

Labels are a pure function of one stored trace record (no model call, no environment call), so a
labels table can be rebuilt bit for bit from ``traces.jsonl`` at any time. Each label carries the
1-based ``step_index`` values that justify it, so a reader can jump from a count to the evidence.

Outcome classes (one per episode, first match wins, in this order):

    failed               the latest record is not complete (runtime-semantics §6.6)
    generation_length    policy failure; zero reward (§12.3)
    action_limit         no purchase before the step / action limit
    success              purchase with r_success = 1
    wrong_type           purchase, r_type < 1 (category / title ladder)
    missing_attributes   purchase, r_att < 1
    wrong_option         purchase, r_option < 1
    price_unverifiable   purchase, r_price < 1 and the SKU price did not resolve
    over_budget          purchase, r_price < 1 with a verified price above the budget
    other                a terminal state none of the above explains (``environment_done``)

The table is written as parquet with one row per episode; ``schema_version`` is both a column and a
key of the parquet file metadata (``shopsimrl-episode-labels-v1``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import TraceFormatError
from shopsimrl_core._hashing import atomic_output, canonical_json, sha256_file
from shopsimrl_core._versions import EPISODE_LABELS_SCHEMA
from shopsimrl_core.adapters._json import loads
from shopsimrl_core.analysis._episode_features import (
    BudgetFeatures,
    BuyFeatures,
    EpisodeView,
    ErrorFeatures,
    ProductFeatures,
    budget_features,
    buy_features,
    category_key,
    error_features,
    loop_steps,
    num,
    outcome_of,
    product_features,
    result_page_steps,
    search_features,
)
from shopsimrl_core.episode._trace import is_complete
from shopsimrl_core.runs.storage._jsonl import iter_trace_lines

__all__ = [
    "OUTCOME_CLASSES",
    "FAILURE_OUTCOMES",
    "LABELER_VERSION",
    "LabelTable",
    "label_episode",
    "label_records",
    "label_run",
    "read_labels",
    "label_distribution",
    "iter_latest_records",
    "is_complete",
]

LABELER_VERSION = "shopsimrl-episode-labeler-v1"

OUTCOME_CLASSES: tuple[str, ...] = (
    "success",
    "wrong_type",
    "missing_attributes",
    "wrong_option",
    "over_budget",
    "price_unverifiable",
    "action_limit",
    "generation_length",
    "failed",
    "other",
)
FAILURE_OUTCOMES: frozenset[str] = frozenset(OUTCOME_CLASSES) - {"success"}



# --------------------------------------------------------------------------- trace reading


def iter_latest_records(traces_path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield the latest record of every ``episode_id`` in a traces file, sorted by episode id.

    Follows the trace-store rule (§6.5): lines that do not parse, or have no string ``episode_id``,
    are skipped and the last counted line of an episode wins. Streams the file twice (offsets first,
    then only the winning lines) so memory holds one record at a time.

    Raises:
        TraceFormatError: the file does not exist.
    """
    path = Path(traces_path)
    if not path.is_file():
        raise TraceFormatError(f"{path}: traces file not found; run the evaluation first", path=str(path))
    latest: dict[str, int] = {}
    for line in iter_trace_lines(path):
        eid = line.value.get("episode_id") if isinstance(line.value, dict) else None
        if isinstance(eid, str) and eid:
            latest[eid] = line.offset
    with open(path, "rb") as handle:
        for eid in sorted(latest):
            handle.seek(latest[eid])
            yield loads(handle.readline())


# --------------------------------------------------------------------------- one episode


def label_episode(record: dict[str, Any]) -> dict[str, Any]:
    """Return the label row of one trace record (a dict of plain values, one key per column).

    Deterministic and total: any record with an ``episode_id`` gets a row; missing or malformed
    parts of a record give empty evidence, never an exception. The row is assembled from the
    feature extractors of ``_episode_features``, each a pure function of one typed view.

    Raises:
        TraceFormatError: the record has no ``episode_id``.
    """
    eid = record.get("episode_id")
    if not isinstance(eid, str) or not eid:
        raise TraceFormatError("trace record has no episode_id; it cannot be labelled")
    view = EpisodeView.from_record(record, eid)
    outcome, components = outcome_of(view)
    search = search_features(view)
    pages = result_page_steps(view)
    products = product_features(view)
    loops = loop_steps(view, search, products)
    buys = buy_features(view)
    errors = error_features(view)
    budget = budget_features(view)
    evidence = _evidence(view, outcome, search.steps, pages, loops, products, buys, errors, budget)

    labels = sorted(evidence)
    if buys.first_incomplete:
        labels.append("behaviour:first_buy_incomplete_options")
    if budget.status in ("respected", "ignored", "unverifiable"):
        labels.append("budget:" + budget.status)
    job, detail, goal = view.job, view.detail, view.goal
    r = {k: num(detail.get(k)) for k in ("r_type", "r_att", "r_option", "r_price", "r_strict", "r_loose")}
    goal_options = goal.get("goal_options")
    return {
        "schema_version": EPISODE_LABELS_SCHEMA,
        "episode_id": eid,
        "task_id": job.get("task_id") if isinstance(job.get("task_id"), int) else None,
        "sample_id": job.get("sample_id") if isinstance(job.get("sample_id"), int) else None,
        "split": str(job.get("split")) if job.get("split") is not None else None,
        "status": str(record.get("status")),
        "checkpoint_id": view.model_provenance.get("checkpoint_id"),
        "skills_provider": view.skills_provenance.get("provider"),
        "skills_bank_sha256": view.skills_provenance.get("bank_sha256"),
        "selected_skill_ids": view.selected_skill_ids,
        "outcome": outcome,
        "failed_components": components,
        "termination_reason": view.termination,
        "reward": num(view.final.get("reward")),
        **r,
        "r_success": int(detail["r_success"]) if num(detail.get("r_success")) is not None else None,
        "category": category_key(goal.get("category")),
        "task_mode": view.reset.get("task_mode"),
        "goal_option_count": len(goal_options or []) if isinstance(goal_options, list) else None,
        "n_steps": len(view.steps),
        "n_actions": len(view.acted_steps),
        "purchase_step": buys.purchase_step,
        "steps_to_purchase": buys.purchase_step,
        "n_searches": len(search.steps),
        "search_steps": search.steps,
        "result_pages_viewed": len(pages),
        "result_page_steps": pages,
        "products_viewed": len({p for p in products.seen if p is not None}),
        "buy_attempts": buys.attempts,
        "first_buy_incomplete_options": bool(buys.first_incomplete),
        "premature_buy_steps": buys.premature_steps,
        "option_steps": products.option_steps,
        "loops": len(loops),
        "loop_steps": sorted(loops),
        "invalid_actions": len(errors.invalid_steps),
        "invalid_action_reasons": errors.invalid_reasons,
        "invalid_action_steps": errors.invalid_steps,
        "protocol_errors": len(errors.protocol_steps),
        "protocol_error_codes": errors.protocol_codes,
        "protocol_error_steps": errors.protocol_steps,
        "policy_failure_code": errors.policy_code,
        "budget_status": budget.status,
        "price_upper": budget.price_upper,
        "purchase_price": budget.purchase_price,
        "persona_budget_hint": budget.persona_hint,
        "labels": sorted(set(labels)),
        "evidence_json": canonical_json({k: evidence[k] for k in sorted(evidence)}),
    }


def _evidence(
    view: EpisodeView, outcome: str, searches: list[int], pages: list[int], loops: list[int],
    products: ProductFeatures, buys: BuyFeatures, errors: ErrorFeatures, budget: BudgetFeatures,
) -> dict[str, list[int]]:
    # label -> the step indices that justify it, each index once, in the order found
    evidence: dict[str, list[int]] = {}

    def add(label: str, step_index: int) -> None:
        steps = evidence.setdefault(label, [])
        if step_index not in steps:
            steps.append(step_index)

    purchase = buys.purchase_step
    if outcome in ("action_limit", "generation_length") and isinstance(view.last_step_index, int):
        add("outcome:" + outcome, view.last_step_index)
    elif outcome == "wrong_option":
        for i in products.purchased_option_steps + ([purchase] if purchase is not None else []):
            add("outcome:wrong_option", i)
    elif outcome in ("wrong_type", "missing_attributes"):
        for j in (products.purchased_view_step, purchase):
            if j is not None:
                add("outcome:" + outcome, j)
    elif outcome != "failed" and purchase is not None:
        add("outcome:" + outcome, purchase)
    evidence.setdefault("outcome:" + outcome, [])
    for label, steps in (("behaviour:search", searches), ("behaviour:result_page", pages),
                         ("behaviour:loop", sorted(loops)), ("behaviour:premature_buy", buys.premature_steps)):
        for i in steps:
            add(label, i)
    for i, reason in zip(errors.invalid_steps, errors.invalid_reasons):
        add("invalid_action:" + reason, i)
    for i, code in zip(errors.protocol_steps, errors.protocol_codes):
        add("protocol_error:" + code, i)
    if budget.status == "ignored" and purchase is not None:
        add("budget:ignored", purchase)
    return evidence


# --------------------------------------------------------------------------- tables


def _schema() -> dict[str, Any]:
    import polars as pl

    ints = pl.List(pl.Int64)
    strs = pl.List(pl.String)
    return {
        "schema_version": pl.String, "episode_id": pl.String, "task_id": pl.Int64, "sample_id": pl.Int64,
        "split": pl.String, "status": pl.String, "checkpoint_id": pl.String, "skills_provider": pl.String,
        "skills_bank_sha256": pl.String, "selected_skill_ids": strs, "outcome": pl.String,
        "failed_components": strs, "termination_reason": pl.String, "reward": pl.Float64,
        "r_type": pl.Float64, "r_att": pl.Float64, "r_option": pl.Float64, "r_price": pl.Float64,
        "r_strict": pl.Float64, "r_loose": pl.Float64, "r_success": pl.Int64, "category": pl.String,
        "task_mode": pl.String, "goal_option_count": pl.Int64, "n_steps": pl.Int64, "n_actions": pl.Int64,
        "purchase_step": pl.Int64, "steps_to_purchase": pl.Int64, "n_searches": pl.Int64, "search_steps": ints,
        "result_pages_viewed": pl.Int64, "result_page_steps": ints, "products_viewed": pl.Int64,
        "buy_attempts": pl.Int64, "first_buy_incomplete_options": pl.Boolean, "premature_buy_steps": ints,
        "option_steps": ints,
        "loops": pl.Int64, "loop_steps": ints, "invalid_actions": pl.Int64, "invalid_action_reasons": strs,
        "invalid_action_steps": ints, "protocol_errors": pl.Int64, "protocol_error_codes": strs,
        "protocol_error_steps": ints, "policy_failure_code": pl.String, "budget_status": pl.String,
        "price_upper": pl.Float64, "purchase_price": pl.Float64, "persona_budget_hint": pl.String,
        "labels": strs, "evidence_json": pl.String,
    }


def label_records(records: Iterable[dict[str, Any]]) -> Any:
    """Label every record and return a polars DataFrame (one row per record, fixed column types)."""
    import polars as pl

    rows = [label_episode(r) for r in records]
    return pl.DataFrame(rows, schema=_schema())


@dataclass(frozen=True)
class LabelTable:
    """A written labels table: where it is, its hash, and headline counts."""

    path: Path
    sha256: str
    episodes: int
    traces_sha256: str
    distribution: dict[str, Any] = field(default_factory=dict)


def label_run(run_dir: str | os.PathLike[str], *, out_path: str | os.PathLike[str] | None = None) -> LabelTable:
    """Label the latest record of every episode of a run directory and write ``labels.parquet``.

    Reads only ``<run_dir>/traces.jsonl`` (frozen traces); the write is atomic (temporary file, then
    rename), so readers never see a half-written table. Rebuilding from the same traces gives the same
    rows.

    Raises:
        TraceFormatError: no traces file in the run directory.
        RunLockedError: another process (a running evaluation) holds the run directory.
    """
    from shopsimrl_core.runs.storage._store import RunStore

    run = Path(run_dir)
    traces = run / "traces.jsonl"
    if not traces.is_file():
        raise TraceFormatError(f"{traces}: traces file not found; run the evaluation first", path=str(traces))
    target = Path(out_path) if out_path is not None else run / "labels.parquet"
    store = RunStore(run)
    # Writing into the run directory makes this a writer (runtime-semantics §22.4): never label a run mid-flight.
    inside = target.resolve().parent == run.resolve()
    if inside:
        store.acquire_lock(f"labels-{os.getpid()}")
    try:
        df = label_records(iter_latest_records(traces))
        traces_sha = sha256_file(traces)
        _write_parquet_atomic(df, target, {"schema_version": EPISODE_LABELS_SCHEMA, "labeler_version": LABELER_VERSION,
                                            "traces_sha256": traces_sha})
    finally:
        if inside:
            store.release_lock()
    return LabelTable(path=target, sha256=sha256_file(target), episodes=df.height, traces_sha256=traces_sha,
                      distribution=label_distribution(df))


def _write_parquet_atomic(df: Any, target: Path, metadata: dict[str, str]) -> None:
    with atomic_output(target, binary=True) as handle:
        df.write_parquet(handle, metadata=metadata)


def read_labels(path: str | os.PathLike[str]) -> Any:
    """Read a labels table, refusing files of another schema version.

    Raises:
        TraceFormatError: missing file, or ``schema_version`` is not ``shopsimrl-episode-labels-v1``.
    """
    import polars as pl

    p = Path(path)
    if not p.is_file():
        raise TraceFormatError(f"{p}: labels table not found; materialize episode_labels first", path=str(p))
    df = pl.read_parquet(p)
    versions = set(df.get_column("schema_version").unique().to_list()) if "schema_version" in df.columns else {None}
    if versions - {EPISODE_LABELS_SCHEMA}:
        raise TraceFormatError(
            f"{p}: schema_version {sorted(map(str, versions))} is not supported; accepted: {EPISODE_LABELS_SCHEMA}",
            path=str(p),
        )
    return df


def label_distribution(df: Any) -> dict[str, Any]:
    """Headline counts of a labels table: outcomes, behaviour flags, invalid reasons, protocol codes."""
    n = df.height
    outcomes = {k: v for k, v in sorted(Counter(df.get_column("outcome").to_list()).items())}
    reasons = Counter(r for rs in df.get_column("invalid_action_reasons").to_list() for r in rs)
    codes = Counter(c for cs in df.get_column("protocol_error_codes").to_list() for c in cs)
    budget = Counter(df.get_column("budget_status").to_list())
    steps = df.get_column("steps_to_purchase").drop_nulls()
    return {
        "episodes": n,
        "outcomes": outcomes,
        "first_buy_incomplete_options": int(df.get_column("first_buy_incomplete_options").sum()) if n else 0,
        "episodes_with_loops": int((df.get_column("loops") > 0).sum()) if n else 0,
        "searches_mean": float(df.get_column("n_searches").mean()) if n else None,
        "result_pages_mean": float(df.get_column("result_pages_viewed").mean()) if n else None,
        "steps_to_purchase_mean": float(steps.mean()) if steps.len() else None,
        "invalid_action_reasons": dict(sorted(reasons.items())),
        "protocol_error_codes": dict(sorted(codes.items())),
        "budget_status": dict(sorted(budget.items())),
        "splits": dict(sorted(Counter(str(s) for s in df.get_column("split").to_list()).items())),
    }
