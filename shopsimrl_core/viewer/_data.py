"""What the viewer's pages read: run metadata, labels tables, opened run indexes, a page of rows.

Everything here only reads; the one write that can happen is the run index sidecar when
``open_run_index`` may persist (no process holds the run directory).
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

from shopsimrl_core._hashing import json_object
from shopsimrl_core.adapters._json import loads
from shopsimrl_core.viewer._paths import RunRef

__all__ = ["IndexCache", "json_text", "labels_of", "number_param", "page_of", "read_json", "run_meta"]


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True, default=str)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class IndexCache:
    """Opened run indexes, reopened when ``traces.jsonl`` changes size or mtime."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[Path, tuple[tuple[int, int], Any]] = {}

    def get(self, path: Path) -> Any:
        from shopsimrl_core.runs.storage._index import open_run_index

        try:
            stat = (path / "traces.jsonl").stat()
            key = (stat.st_size, stat.st_mtime_ns)
        except FileNotFoundError:
            key = (0, 0)
        with self._lock:
            hit = self._items.get(path)
            if hit is not None and hit[0] == key:
                return hit[1]
            index = open_run_index(path)
            self._items[path] = (key, index)
            return index


_META_CACHE: dict[Path, tuple[tuple[int, int], dict[str, Any]]] = {}
_MANIFEST_PARSE_MAX = 2 << 20  # bigger manifests (a million jobs is ~70 MB) are not parsed for a page


def run_meta(run: RunRef) -> dict[str, Any]:
    """Split, checkpoint and model of a run: from a small manifest, else from the first trace line."""
    path = run.path / "manifest.json"
    try:
        stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
    except FileNotFoundError:
        stamp = (0, 0)
    hit = _META_CACHE.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    meta: dict[str, Any] | None = None
    if 0 < stamp[1] <= _MANIFEST_PARSE_MAX:
        try:
            manifest = loads(path.read_bytes())
            meta = _meta_of(manifest if isinstance(manifest, dict) else {})
        except (OSError, ValueError):
            meta = None
    if meta is None:
        meta = _meta_from_trace(run.path / "traces.jsonl")
    _META_CACHE[path] = (stamp, meta)
    return meta


def _meta_from_trace(path: Path) -> dict[str, Any]:

    record: Any = {}
    try:
        with open(path, "rb") as handle:
            record = loads(handle.readline())
    except (OSError, ValueError):
        record = {}
    record = json_object(record)
    provenance = json_object(record.get("provenance"))
    model = json_object(provenance.get("model"))
    job = json_object(record.get("job"))
    return {
        "checkpoint": model.get("checkpoint_id") or model.get("model") or "?",
        "model": model.get("model") or "?",
        "split": job.get("split") or "?",
    }


def _meta_of(manifest: dict[str, Any]) -> dict[str, Any]:
    plan = json_object(manifest.get("plan"))
    model = json_object(plan.get("model"))
    split = json_object(plan.get("task_split"))
    return {
        "checkpoint": model.get("checkpoint_id") or plan.get("model_id") or model.get("model") or "?",
        "model": model.get("model") or "?",
        "split": split.get("name") or "?",
    }


def labels_of(run: RunRef) -> Any:
    path = run.path / "labels.parquet"
    if not path.is_file():
        return None
    from shopsimrl_core.analysis._labels import read_labels

    try:
        return read_labels(path)
    except Exception:  # a foreign or broken table is simply not offered
        return None


def number_param(params: Any, name: str, cast: Any) -> Any:
    raw = params.get(name, "")
    if raw == "":
        return None
    try:
        value = cast(raw)
    except ValueError:
        return None
    return value if not isinstance(value, float) or math.isfinite(value) else None


def page_of(frame: Any, column: str, descending: bool, start: int, length: int) -> Any:
    """Rows ``start … start+length`` of *frame* ordered by *column* (stable, nulls last)."""
    import numpy as np

    if column == "episode_id":
        # The index keeps episodes sorted by id: no million-row string sort per page.
        return (frame.reverse() if descending else frame).slice(start, length)
    values = frame.get_column(column).cast(float).to_numpy()
    # A stable argsort of the numbers (negated for descending, so ties keep id order), nulls last.
    key = np.where(np.isnan(values), np.inf, -values if descending else values)
    order = np.argsort(key, kind="stable")[start : start + length]
    return frame[order.tolist()] if len(order) else frame.head(0)
