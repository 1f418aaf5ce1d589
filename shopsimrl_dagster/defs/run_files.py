"""What the evaluation assets read back from a run directory, and where the trace viewer shows it."""

import json
from pathlib import Path
from typing import Any

from ..settings import PipelineSettings
from .resources import RunStorage

__all__ = ["read_json_object", "viewer_run_url"]


def viewer_run_url(settings: PipelineSettings, run_storage: RunStorage, suite: str, checkpoint_id: str) -> str:
    """The trace viewer's page of one run (``<viewer.base_url>/run/<suite>/<checkpoint_id>``)."""
    return f"{settings.viewer.base_url.rstrip('/')}/run/{run_storage.run_rel(suite, checkpoint_id)}"


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in *path*, or None when the file is missing, unreadable JSON or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None
