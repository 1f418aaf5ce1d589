"""What the evaluation assets read back from a run directory, and where the trace viewer shows it."""

import json
from pathlib import Path
from typing import Any, TypeVar

from shopsimrl_core.documents import Document

from ..settings import PipelineSettings
from .resources import RunStorage

__all__ = ["read_document", "read_json_object", "viewer_run_url"]

_D = TypeVar("_D", bound=Document)


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


def read_document(path: Path, model: type[_D]) -> _D | None:
    """The document in *path* read through *model*, or None when the file is missing or not a JSON object.

    Raises:
        DocumentError: the object does not follow the model's format (one line naming the file and field).
    """
    value = read_json_object(path)
    return None if value is None else model.parse(value, str(path))
