"""Helpers shared by the Dagster tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

from typing import Any


def run_job(
    definitions: Any,
    name: str,
    instance: Any,
    partition_key: str | None = None,
    tags: dict[str, str] | None = None,
    raise_on_error: bool = True,
) -> Any:
    """Execute the location's job *name* in process (the job object the UI and CLI launch)."""
    job = definitions.resolve_job_def(name)
    return job.execute_in_process(
        instance=instance, partition_key=partition_key, tags=tags or {}, raise_on_error=raise_on_error
    )


def trace_lines(traces: Any) -> list[dict[str, Any]]:
    """The whole JSON lines of a ``traces.jsonl`` (none when it does not exist); a torn last line is skipped."""
    import json
    from pathlib import Path

    path = Path(traces)
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a torn line left by a kill
    return records


def materialized(result: Any, key: str) -> dict[str, Any]:
    """Metadata values of the last materialization of asset *key* (``val/eval_summary``) in *result*."""
    events = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == key]
    assert events, f"{key} was not materialized"
    return {name: getattr(value, "value", value) for name, value in events[-1].materialization.metadata.items()}
