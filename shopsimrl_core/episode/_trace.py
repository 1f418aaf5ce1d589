"""The trace record ``shopsimrl-episode-v4`` (runtime-semantics §12): building, checking, completion.

One line of ``traces.jsonl`` is one attempt of one episode. Field order of the top level is part of
the format (§12.1); this project adds only additive keys: ``steps[].timing`` ``{model_ms, env_ms,
harness_ms}``, ``steps[].request_seed`` (§22.10) and a top-level ``timing`` block.
"""

from __future__ import annotations

import traceback as _traceback
from typing import Any

from shopsimrl_core._clock import utc_now
from shopsimrl_core._errors import TraceFormatError
from shopsimrl_core._versions import TRACE_SCHEMA

__all__ = [
    "TOP_LEVEL_KEYS",
    "utc_now",
    "new_trace",
    "error_block",
    "evaluator_boundary_record",
    "is_complete",
    "validate_trace",
]

TOP_LEVEL_KEYS = (
    "schema_version",
    "episode_id",
    "status",
    "job",
    "provenance",
    "started_at",
    "ended_at",
    "duration_ms",
    "reset",
    "selected_skills",
    "conversation",
    "steps",
    "final",
    "error",
)
_STEP_KEYS = ("step_index", "observation", "tools", "model", "action", "environment")
_MODEL_KEYS = (
    "content",
    "reasoning",
    "tool_calls",
    "finish_reason",
    "usage",
    "response_id",
    "metadata",
    "latency_ms",
    "protocol_error",
    "policy_failure",
    "raw_response",
)


def new_trace(
    job: dict[str, Any], episode_id: str, provenance: dict[str, Any], started_at: str | None
) -> dict[str, Any]:
    """An empty failed-until-proven-otherwise record with the §12.1 keys in order."""
    return {
        "schema_version": TRACE_SCHEMA,
        "episode_id": episode_id,
        "status": "failed",
        "job": job,
        "provenance": provenance,
        "started_at": started_at,
        "ended_at": None,
        "duration_ms": None,
        "reset": None,
        "selected_skills": [],
        "conversation": [],
        "steps": [],
        "final": None,
        "error": None,
    }


def error_block(stage: str, exc: BaseException, *, with_traceback: bool = True) -> dict[str, Any]:
    """``{stage, type, message, traceback}`` for an exception (§9.6); ``type`` is the class name."""
    block: dict[str, Any] = {"stage": stage, "type": type(exc).__name__, "message": str(exc)}
    if with_traceback:
        block["traceback"] = "".join(_traceback.format_exception(type(exc), exc, exc.__traceback__))
    return block


def evaluator_boundary_record(job: dict[str, Any], episode_id: str, exc: BaseException) -> dict[str, Any]:
    """The synthetic failed record the evaluator stores when a runtime raises out of its episode (§6.7, §12.3).

    ``error`` carries the traceback, since nothing else records where the runtime broke.
    """
    record = new_trace(job, episode_id, {}, None)
    record["ended_at"] = utc_now()
    record["error"] = error_block("evaluator_boundary", exc)
    return record


def is_complete(record: Any) -> bool:
    """The completion predicate of §6.6: v4, completed, ``final`` an object with ``done is true``."""
    return (
        isinstance(record, dict)
        and record.get("schema_version") == TRACE_SCHEMA
        and record.get("status") == "completed"
        and isinstance(record.get("final"), dict)
        and record["final"].get("done") is True
    )


def validate_trace(record: Any) -> None:
    """Check the structure of one trace record (schema, keys, types, step shapes).

    Raises:
        TraceFormatError: naming the first offending field, e.g. ``steps[2].model.tool_calls``.
    """
    if not isinstance(record, dict):
        raise TraceFormatError("trace record must be a JSON object")
    version = record.get("schema_version")
    if version != TRACE_SCHEMA:
        raise TraceFormatError(
            f"schema_version: unknown trace schema {version!r}; this reader accepts {TRACE_SCHEMA!r}"
        )
    missing = [key for key in TOP_LEVEL_KEYS if key not in record]
    if missing:
        raise TraceFormatError(f"trace record lacks keys: {', '.join(missing)}")
    if record["status"] not in ("completed", "failed"):
        raise TraceFormatError(f"status: must be 'completed' or 'failed' (got {record['status']!r})")
    job = record["job"]
    if not isinstance(job, dict) or list(job) != ["task_id", "sample_id", "seed", "split"]:
        raise TraceFormatError("job: must be {task_id, sample_id, seed, split} in that order")
    for key in ("selected_skills", "conversation", "steps"):
        if not isinstance(record[key], list):
            raise TraceFormatError(f"{key}: must be a list")
    for i, step in enumerate(record["steps"]):
        where = f"steps[{i}]"
        if not isinstance(step, dict):
            raise TraceFormatError(f"{where}: must be an object")
        for key in _STEP_KEYS:
            if key not in step:
                raise TraceFormatError(f"{where}.{key}: missing")
        if step["step_index"] != i + 1:
            raise TraceFormatError(f"{where}.step_index: expected {i + 1} (got {step['step_index']!r})")
        model = step["model"]
        if not isinstance(model, dict) or list(model)[: len(_MODEL_KEYS)] != list(_MODEL_KEYS):
            raise TraceFormatError(f"{where}.model: must hold the ModelOutput keys in order")
        if not isinstance(model["tool_calls"], list):
            raise TraceFormatError(f"{where}.model.tool_calls: must be a list")
        if "protocol_error" in step and (step["action"] is not None or step["environment"] is not None):
            raise TraceFormatError(f"{where}: a protocol-error step has no action and no environment")
        if "policy_failure" in step and (step["action"] is not None or step["environment"] is not None):
            raise TraceFormatError(f"{where}: a policy-failure step has no action and no environment")
    if record["status"] == "completed" and not is_complete(record):
        raise TraceFormatError("final: a completed record needs final.done == true")
    error = record["error"]
    if error is not None and (not isinstance(error, dict) or not {"stage", "type", "message"} <= set(error)):
        raise TraceFormatError("error: must be null or {stage, type, message, ...}")
    if record["status"] == "failed" and error is None:
        raise TraceFormatError("error: a failed record must carry an error")
