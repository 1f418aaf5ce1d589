"""Episode labels: why an episode ended the way it did, read from frozen traces only.

Labels are a pure function of one stored trace record (no model call, no environment call), so a
labels table can be rebuilt bit for bit from ``traces.jsonl`` at any time. Each label carries the
1-based ``step_index`` values that justify it, so a reader can jump from a count to the evidence.

Outcome classes (one per episode, first match wins, in this order):

    failed               the latest record is not complete (runtime spec §6.6)
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

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import TraceFormatError
from shopsimrl_core._hashing import canonical_json, sha256_file
from shopsimrl_core.runs._store import iter_trace_lines
from shopsimrl_core.episode._trace import is_complete
from shopsimrl_core._versions import EPISODE_LABELS_SCHEMA

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

_CATEGORY_SPLIT = re.compile(r"\s*[›>/\\]\s*")
_BUDGET_KEY = re.compile(r"预算|budget|价位|价格", re.IGNORECASE)


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
            yield json.loads(handle.readline())


# --------------------------------------------------------------------------- one episode


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _category_key(category: Any) -> str | None:
    if not isinstance(category, str) or not category.strip():
        return None
    parts = [p.strip() for p in _CATEGORY_SPLIT.split(category) if p.strip()]
    return " > ".join(parts[:2]) if parts else None


def _state_key(state: dict[str, Any]) -> tuple[Any, ...]:
    page = state.get("page_type")
    if page == "search_results":
        return (page, state.get("search_text"), state.get("page"))
    if page == "product_detail":
        product = state.get("product") if isinstance(state.get("product"), dict) else {}
        return (page, product.get("asin"))
    return (page,)


def _outcome(record: dict[str, Any], detail: dict[str, Any], termination: str | None) -> tuple[str, list[str]]:
    if not is_complete(record):
        return "failed", []
    components = [k for k in ("r_type", "r_att", "r_option", "r_price") if (_num(detail.get(k)) or 0.0) < 1.0]
    if termination == "generation_length":
        return "generation_length", components
    if termination == "action_limit":
        return "action_limit", components
    if termination != "purchase":
        return "other", components
    if detail.get("r_success") == 1:
        return "success", []
    if "r_type" in components:
        return "wrong_type", components
    if "r_att" in components:
        return "missing_attributes", components
    if "r_option" in components:
        return "wrong_option", components
    if "r_price" in components:
        return ("over_budget" if detail.get("price_verifiable") is True else "price_unverifiable"), components
    return "other", components


def label_episode(record: dict[str, Any]) -> dict[str, Any]:
    """Return the label row of one trace record (a dict of plain values, one key per column).

    Deterministic and total: any record with an ``episode_id`` gets a row; missing parts of a
    failed or evaluator-boundary record give empty evidence, never an exception.

    Raises:
        TraceFormatError: the record has no ``episode_id``.
    """
    eid = record.get("episode_id")
    if not isinstance(eid, str) or not eid:
        raise TraceFormatError("trace record has no episode_id; it cannot be labelled")
    job = record.get("job") if isinstance(record.get("job"), dict) else {}
    provenance = record.get("provenance") if isinstance(record.get("provenance"), dict) else {}
    model_prov = provenance.get("model") if isinstance(provenance.get("model"), dict) else {}
    skills_prov = provenance.get("skills") if isinstance(provenance.get("skills"), dict) else {}
    final = record.get("final") if isinstance(record.get("final"), dict) else {}
    detail = final.get("reward_detail") if isinstance(final.get("reward_detail"), dict) else {}
    goal = final.get("goal") if isinstance(final.get("goal"), dict) else {}
    purchase = final.get("purchase") if isinstance(final.get("purchase"), dict) else {}
    reset = record.get("reset") if isinstance(record.get("reset"), dict) else {}
    steps = [s for s in record.get("steps") or [] if isinstance(s, dict)]

    termination = final.get("termination_reason") or detail.get("termination_reason")
    termination = str(termination) if termination is not None else None
    outcome, components = _outcome(record, detail, termination)

    evidence: dict[str, list[int]] = {}

    def add(label: str, step_index: int) -> None:
        evidence.setdefault(label, [])
        if step_index not in evidence[label]:
            evidence[label].append(step_index)

    search_steps: list[int] = []
    page_steps: list[int] = []
    pages_seen: set[tuple[Any, ...]] = set()
    products_seen: list[Any] = []
    loop_steps: list[int] = []
    invalid_steps: list[int] = []
    invalid_reasons: list[str] = []
    protocol_steps: list[int] = []
    protocol_codes: list[str] = []
    premature_steps: list[int] = []
    buy_attempts = 0
    first_buy_incomplete: bool | None = None
    purchase_step: int | None = None
    purchased_view_step: int | None = None
    option_steps_on_purchased: list[int] = []
    option_steps: list[int] = []
    policy_code: str | None = None
    queries: list[str] = []
    key_history: list[tuple[Any, ...]] = []
    reset_state = reset.get("observation_state")
    if isinstance(reset_state, dict):
        key_history.append(_state_key(reset_state))
    last_product: Any = None
    purchased_asin = purchase.get("asin")

    for position, step in enumerate(steps, start=1):
        index = step.get("step_index") if isinstance(step.get("step_index"), int) else position
        if isinstance(step.get("protocol_error"), dict):
            protocol_steps.append(index)
            protocol_codes.append(str(step["protocol_error"].get("code", "unknown")))
        if isinstance(step.get("policy_failure"), dict):
            policy_code = str(step["policy_failure"].get("code", "unknown"))
        env = step.get("environment")
        if not isinstance(env, dict):
            continue
        action = step.get("action") if isinstance(step.get("action"), str) else ""
        feedback = env.get("action_feedback") if isinstance(env.get("action_feedback"), dict) else {}
        valid = feedback.get("valid")
        reason = feedback.get("reason")
        if feedback and valid is False:
            invalid_steps.append(index)
            invalid_reasons.append(str(reason or "unknown"))
        if action.startswith("search[") and valid is not False:
            search_steps.append(index)
            query = " ".join(action[len("search[") : -1].split()).casefold()
            if query in queries:
                loop_steps.append(index)
            queries.append(query)
        if action == "click[buy now]":
            buy_attempts += 1
            incomplete = reason == "incomplete_options"
            if first_buy_incomplete is None:
                first_buy_incomplete = incomplete
            if incomplete:
                premature_steps.append(index)
        if env.get("done") is True and termination == "purchase" and valid is not False:
            purchase_step = index
        state = env.get("observation_state") if isinstance(env.get("observation_state"), dict) else {}
        key = _state_key(state) if state else None
        if state.get("page_type") == "search_results" and key not in pages_seen and key is not None:
            pages_seen.add(key)
            page_steps.append(index)
        if state.get("page_type") == "product_detail":
            product = state.get("product") if isinstance(state.get("product"), dict) else {}
            asin = product.get("asin")
            if asin != last_product:
                if asin in products_seen:
                    loop_steps.append(index)  # re-entered a product page already left once
                products_seen.append(asin)
            if action.startswith("click[") and "=" in action and valid is not False:
                option_steps.append(index)
            if asin is not None and asin == purchased_asin:
                if purchased_view_step is None:
                    purchased_view_step = index
                if action.startswith("click[") and "=" in action and valid is not False:
                    option_steps_on_purchased.append(index)
            last_product = asin
        elif state:
            last_product = None
        if key is not None:
            # A-B-A-B oscillation between two page states counts even without a product page.
            if len(key_history) >= 3 and key == key_history[-2] and key_history[-1] == key_history[-3] and key != key_history[-1]:
                if index not in loop_steps:
                    loop_steps.append(index)
            key_history.append(key)

    last_index = steps[-1].get("step_index", len(steps)) if steps else None
    if outcome in ("action_limit", "generation_length") and isinstance(last_index, int):
        add("outcome:" + outcome, last_index)
    elif outcome == "wrong_option":
        for i in option_steps_on_purchased:
            add("outcome:wrong_option", i)
        if purchase_step is not None:
            add("outcome:wrong_option", purchase_step)
    elif outcome in ("wrong_type", "missing_attributes"):
        if purchased_view_step is not None:
            add("outcome:" + outcome, purchased_view_step)
        if purchase_step is not None:
            add("outcome:" + outcome, purchase_step)
    elif outcome != "failed" and purchase_step is not None:
        add("outcome:" + outcome, purchase_step)
    evidence.setdefault("outcome:" + outcome, [])

    for i in search_steps:
        add("behaviour:search", i)
    for i in page_steps:
        add("behaviour:result_page", i)
    for i in sorted(loop_steps):
        add("behaviour:loop", i)
    for i in premature_steps:
        add("behaviour:premature_buy", i)
    for i, r in zip(invalid_steps, invalid_reasons):
        add("invalid_action:" + r, i)
    for i, c in zip(protocol_steps, protocol_codes):
        add("protocol_error:" + c, i)

    price_upper = _num(detail.get("price_upper"))
    if price_upper is None:
        price_upper = _num(goal.get("price_upper"))
    resolution = detail.get("price_resolution") if isinstance(detail.get("price_resolution"), dict) else {}
    purchase_price = _num(resolution.get("price"))
    if purchase_price is None:
        purchase_price = _num(purchase.get("price"))
    if termination != "purchase":
        budget_status = "no_purchase"
    elif price_upper is None:
        budget_status = "no_budget"
    elif detail.get("price_verifiable") is not True or purchase_price is None:
        budget_status = "unverifiable"
    else:
        budget_status = "respected" if purchase_price <= price_upper else "ignored"
    if budget_status == "ignored" and purchase_step is not None:
        add("budget:ignored", purchase_step)
    persona = reset.get("user_persona") if isinstance(reset.get("user_persona"), dict) else {}
    hints = {k: v for k, v in persona.items() if isinstance(k, str) and _BUDGET_KEY.search(k)}
    persona_budget_hint = canonical_json(hints) if hints else None

    labels = sorted(label for label in evidence)
    if first_buy_incomplete:
        labels.append("behaviour:first_buy_incomplete_options")
    if budget_status in ("respected", "ignored", "unverifiable"):
        labels.append("budget:" + budget_status)
    labels = sorted(set(labels))

    r = {k: _num(detail.get(k)) for k in ("r_type", "r_att", "r_option", "r_price", "r_strict", "r_loose")}
    return {
        "schema_version": EPISODE_LABELS_SCHEMA,
        "episode_id": eid,
        "task_id": job.get("task_id") if isinstance(job.get("task_id"), int) else None,
        "sample_id": job.get("sample_id") if isinstance(job.get("sample_id"), int) else None,
        "split": str(job.get("split")) if job.get("split") is not None else None,
        "status": str(record.get("status")),
        "checkpoint_id": model_prov.get("checkpoint_id"),
        "skills_provider": skills_prov.get("provider"),
        "skills_bank_sha256": skills_prov.get("bank_sha256"),
        "selected_skill_ids": [s.get("skill_id") for s in record.get("selected_skills") or [] if isinstance(s, dict)],
        "outcome": outcome,
        "failed_components": components,
        "termination_reason": termination,
        "reward": _num(final.get("reward")),
        **r,
        "r_success": int(detail["r_success"]) if _num(detail.get("r_success")) is not None else None,
        "category": _category_key(goal.get("category")),
        "task_mode": reset.get("task_mode"),
        "goal_option_count": len(goal.get("goal_options") or []) if isinstance(goal.get("goal_options"), list) else None,
        "n_steps": len(steps),
        "n_actions": sum(1 for s in steps if isinstance(s.get("environment"), dict)),
        "purchase_step": purchase_step,
        "steps_to_purchase": purchase_step,
        "n_searches": len(search_steps),
        "search_steps": search_steps,
        "result_pages_viewed": len(page_steps),
        "result_page_steps": page_steps,
        "products_viewed": len(set(p for p in products_seen if p is not None)),
        "buy_attempts": buy_attempts,
        "first_buy_incomplete_options": bool(first_buy_incomplete),
        "premature_buy_steps": premature_steps,
        "option_steps": option_steps,
        "loops": len(loop_steps),
        "loop_steps": sorted(loop_steps),
        "invalid_actions": len(invalid_steps),
        "invalid_action_reasons": invalid_reasons,
        "invalid_action_steps": invalid_steps,
        "protocol_errors": len(protocol_steps),
        "protocol_error_codes": protocol_codes,
        "protocol_error_steps": protocol_steps,
        "policy_failure_code": policy_code,
        "budget_status": budget_status,
        "price_upper": price_upper,
        "purchase_price": purchase_price,
        "persona_budget_hint": persona_budget_hint,
        "labels": labels,
        "evidence_json": canonical_json({k: evidence[k] for k in sorted(evidence)}),
    }


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


def label_records(records: Iterable[dict[str, Any]]) -> "Any":
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
    from shopsimrl_core.runs._store import RunStore

    run = Path(run_dir)
    traces = run / "traces.jsonl"
    if not traces.is_file():
        raise TraceFormatError(f"{traces}: traces file not found; run the evaluation first", path=str(traces))
    target = Path(out_path) if out_path is not None else run / "labels.parquet"
    store = RunStore(run)
    # Writing into the run directory makes this a writer (spec §22.4): never label a run mid-flight.
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
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{os.getpid()}.tmp"
    try:
        df.write_parquet(tmp, metadata=metadata)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def read_labels(path: str | os.PathLike[str]) -> "Any":
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
