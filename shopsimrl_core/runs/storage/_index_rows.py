"""Rows of the run index: one trace line's row, the summary's episode row, frames, streaming.

``index_row`` is what one trace line contributes, ``episode_row`` the summary's per-episode row;
``_frame`` types rows as polars frames and ``_scan_traces`` streams a traces file into rows.

Why rows are dicts, not document models: a row is built for every trace line (a million per index
build) and goes straight into polars columns, where the index's typed schema (``_FIXED``) applies. A
pydantic model per row would cost more CPU than building the row itself (measured: ``index_row``
2.3 µs per line, ``model_validate`` + ``model_dump`` of the same row 3.9 µs more) for no reader: nobody
holds a row, the summary and the viewer read the polars frame. ``EpisodeRow`` types the per-episode row
for mypy at no runtime cost.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypedDict

from shopsimrl_core._hashing import json_list, json_object
from shopsimrl_core.adapters._json import loads
from shopsimrl_core.episode import _metrics
from shopsimrl_core.episode._trace import is_complete

__all__ = ["INDEX_STATS", "RUN_INDEX_SCHEMA", "EpisodeRow", "episode_row", "index_row", "index_schema"]

# Fixed columns of one index row; ``c::<r_key>`` (Float64) and ``t::<token key>`` (Int64) are added
# for every reward component and token count seen.
_FIXED: tuple[tuple[str, str], ...] = (
    ("offset", "int"),
    ("length", "int"),
    ("line", "int"),
    ("episode_id", "str"),
    ("blank", "bool"),
    ("exported", "bool"),
    ("status", "str"),
    ("attempt", "int"),
    ("complete", "bool"),
    ("split", "str"),
    ("error_stage", "str"),
    ("task_id", "int"),
    ("sample_id", "int"),
    ("error_type", "str"),
    ("reward", "float"),
    ("r_success", "float"),
    ("duration_ms", "float"),
    ("n_steps", "int"),
    ("protocol_errors", "int"),
    ("policy_failures", "int"),
    ("total_actions", "int"),
    ("invalid_actions", "int"),
    ("termination_reason", "str"),
    ("category", "str"),
)
INDEX_STATS: tuple[str, ...] = ("attempts", "completed_lines", "endpoint_faults")
"""Per-episode sums over its lines in the compacted snapshot: counted lines, completed lines, failed
attempts whose error type is ``ModelEndpointFault`` (the summary's ``counts.endpoint_faults``, issue 24)."""


def index_schema(fixed: tuple[tuple[str, str], ...] = _FIXED, stats: tuple[str, ...] = INDEX_STATS) -> str:
    """The run index's schema version, derived from its columns (``shopsimrl-run-index-v1-<digest>``).

    Adding, renaming or retyping a column changes it, so an index written before is rebuilt from the
    traces rather than read with nulls in the new column (issue 25).
    """
    layout = {
        "fixed": [list(column) for column in fixed],
        "stats": list(stats),
        "prefixes": ["c::", "t::", "m::"],
        "metrics": [[metric.name, metric.kind] for metric in _metrics.EPISODE_METRICS],
    }
    digest = hashlib.sha256(json.dumps(layout, sort_keys=True).encode()).hexdigest()[:12]
    return f"shopsimrl-run-index-v1-{digest}"


RUN_INDEX_SCHEMA = index_schema()

def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class EpisodeRow(TypedDict):
    """The per-episode row of the summary (``episode_row``): the fixed episode columns of the run index."""

    episode_id: str
    task_id: int | None
    sample_id: int | None
    complete: bool
    error_type: str | None
    reward: float | None
    r_success: float | None
    duration_ms: float | None
    n_steps: int
    protocol_errors: int
    policy_failures: int
    total_actions: int
    invalid_actions: int
    termination_reason: str | None
    category: str | None
    components: dict[str, float]
    """The numeric ``r_*`` keys of ``final.reward_detail``."""
    tokens: dict[str, int]
    """Usage counts summed over the steps."""


def episode_row(record: dict[str, Any]) -> EpisodeRow:
    """Flatten one record into the per-episode row the summary aggregates (runtime-semantics §13).

    ``components`` holds the numeric ``r_*`` keys of ``final.reward_detail``; ``tokens`` the summed
    usage counts of the steps. Failed records keep only their ``error_type``.
    """
    complete = is_complete(record)
    job = json_object(record.get("job"))
    row: EpisodeRow = {
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
        row["components"] = {
            k: float(v) for k, v in detail.items() if isinstance(k, str) and k.startswith("r_") and _number(v)
        }
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
    steps = json_list(record.get("steps"))
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


def index_row(value: Any, *, offset: int, length: int, line: int, blank: bool = False) -> dict[str, Any]:
    """The flat index row of one trace line (*value* is its parsed JSON, None when it did not parse).

    A counted line (a JSON object with a string ``episode_id``, runtime-semantics §6.5) gets the summary fields and
    the viewer's filter fields; any other line is a skipped row with ``episode_id`` null.
    """
    row: dict[str, Any] = {
        "offset": offset,
        "length": length,
        "line": line,
        "blank": blank,
        "exported": isinstance(value, dict) and "redaction" in value,
    }
    if not (isinstance(value, dict) and isinstance(value.get("episode_id"), str)):
        row["episode_id"] = None
        return row
    flat = episode_row(value)
    row.update(flat)
    components: dict[str, float] = row.pop("components")
    tokens: dict[str, int] = row.pop("tokens")
    status = value.get("status")
    row["status"] = status if isinstance(status, str) else None
    attempt = value.get("attempt")
    number = attempt.get("number") if isinstance(attempt, dict) else None
    row["attempt"] = number if _int(number) else None
    job = json_object(value.get("job"))
    row["split"] = job.get("split") if isinstance(job.get("split"), str) else None
    error = value.get("error")
    stage = error.get("stage") if isinstance(error, dict) else None
    row["error_stage"] = str(stage) if stage is not None else None
    for key, number_ in components.items():
        row[f"c::{key}"] = number_
    for key, count in tokens.items():
        row[f"t::{key}"] = count
    if flat["complete"]:
        row.update(_metrics.metric_values(value))
    return row


def _dtype(kind: str) -> Any:
    import polars as pl

    return {"int": pl.Int64, "str": pl.Utf8, "bool": pl.Boolean, "float": pl.Float64}[kind]


def _frame(rows: list[dict[str, Any]]) -> Any:
    """Rows -> a polars frame with the fixed columns typed and one column per dynamic key."""
    import polars as pl

    schema: dict[str, Any] = {name: _dtype(kind) for name, kind in _FIXED}
    extra = sorted({key for row in rows for key in row if key.startswith(("c::", "t::", "m::"))})
    metric_kinds = {metric.column: metric.kind for metric in _metrics.EPISODE_METRICS}
    for key in extra:
        if key.startswith("m::"):
            schema[key] = _dtype(metric_kinds.get(key, "float"))
        else:
            schema[key] = pl.Float64 if key.startswith("c::") else pl.Int64
    columns = {name: [row.get(name) for row in rows] for name in schema}
    return pl.DataFrame(columns, schema=schema)


def _align(frames: list[Any]) -> Any:
    import polars as pl

    frames = [f for f in frames if f is not None]
    if not frames:
        return _frame([])
    if len(frames) == 1:
        return frames[0]
    return pl.concat(frames, how="diagonal_relaxed")


_CHUNK = 50_000  # rows turned into a typed frame at a time while streaming, so memory stays columnar


def _scan_traces(path: Path, start: int, first_line: int) -> tuple[list[Any], list[dict[str, Any]], int, int, int, int]:
    """Index the complete lines from byte *start*.

    Returns ``(frames, rows, count, covered, tail_lines, tail_skipped)``: the new rows as typed frames
    (chunks of :data:`_CHUNK`) and, when fewer than one chunk, also as dicts for the append log.
    """
    frames: list[Any] = []
    rows: list[dict[str, Any]] = []
    count = 0
    covered = start
    tail_lines = tail_skipped = 0
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return frames, rows, 0, start, 0, 0
    with handle:
        handle.seek(start)
        number = first_line
        for raw in handle:
            if not raw.endswith(b"\n"):
                # A torn tail (or a line still being written): not covered, counted as skipped.
                tail_lines = 1
                tail_skipped = 1
                break
            number += 1
            try:
                value = loads(raw)
                blank = False
            except (ValueError, UnicodeDecodeError):
                value, blank = None, not raw.strip()
            rows.append(index_row(value, offset=covered, length=len(raw), line=number, blank=blank))
            covered += len(raw)
            count += 1
            if len(rows) >= _CHUNK:
                frames.append(_frame(rows))
                rows = []
    if frames:
        if rows:
            frames.append(_frame(rows))
        rows = []
    elif rows:
        frames.append(_frame(rows))
    return frames, rows, count, covered, tail_lines, tail_skipped


_ENTRY_COLUMNS = ("offset", "length", "attempts", "completed_lines", "complete", "status", "reward")


class EntryView(Mapping[str, Any]):
    """``TraceIndex.entries`` backed by :attr:`RunIndex.episodes`: entries are built on access."""

    def __init__(self, index: Any, factory: Any) -> None:
        self._index = index
        self._factory = factory

    def __getitem__(self, key: str) -> Any:
        row = self._index.entry(key)
        if row is None:
            raise KeyError(key)
        return self._factory(row)

    def __iter__(self) -> Iterator[str]:
        return iter(self._index.episodes.get_column("episode_id").to_list())

    def __len__(self) -> int:
        return int(self._index.episodes.height)

    def values(self) -> Any:
        """Every entry, in id order, built from the cached columns (no per-key lookup)."""
        index = self._index
        columns = [index.entry_column(name) for name in _ENTRY_COLUMNS]
        return [self._factory(dict(zip(_ENTRY_COLUMNS, values))) for values in zip(*columns)]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._index.position(key) is not None
