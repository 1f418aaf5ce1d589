"""What the viewer's pages read: run metadata, labels tables, opened run indexes, a page of rows.

Everything here only reads; the one write that can happen is the run index sidecar when
``open_run_index`` may persist (no process holds the run directory).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from shopsimrl_core._hashing import json_object
from shopsimrl_core.adapters._json import loads
from shopsimrl_core.documents._base import DocumentError
from shopsimrl_core.documents._runs import EvalSummary
from shopsimrl_core.viewer._paths import RunRef

__all__ = [
    "DOCUMENT_MAX_BYTES",
    "LABELS_MAX_BYTES",
    "IndexCache",
    "RunRows",
    "json_text",
    "labels_of",
    "number_param",
    "page_of",
    "read_json",
    "read_summary",
    "run_meta",
    "size_note",
    "too_large",
]

DOCUMENT_MAX_BYTES = 16 << 20
"""The largest JSON document a page parses (summary, SkillBank, candidates, comparison, contributions).

A real ``summary.json`` is a few hundred KB even at a million episodes; a bigger file is a foreign or
broken one, and parsing it would cost the viewer its memory (a 2 GiB summary took 10 GB) and every
page that reads it its time. Such a file is shown as "too large to show" instead (:func:`size_note`).
"""
LABELS_MAX_BYTES = 256 << 20
"""The largest ``labels.parquet`` a page loads (a million labelled episodes is well below this)."""


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True, default=str)


def read_json(path: Path, limit: int = DOCUMENT_MAX_BYTES) -> Any:
    """The JSON document at *path*; None when missing, unreadable, not JSON or over *limit* bytes.

    At most ``limit + 1`` bytes are ever read (the size is checked on the open file, and the read is
    bounded too, so a file that grows meanwhile costs no more), so memory stays flat whatever the file.
    """
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size > limit:
                return None
            data = handle.read(limit + 1)
        if len(data) > limit:
            return None
        return json.loads(data.decode("utf-8"))
    except (OSError, ValueError):
        return None


def size_note(path: Path, limit: int = DOCUMENT_MAX_BYTES) -> str | None:
    """"<name> is N MiB, over the viewer's limit of M MiB: too large to show" when *path* exceeds *limit*, else None."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if size <= limit:
        return None
    return f"{path.name} is {_mib(size)}, over the viewer's limit of {_mib(limit)}: too large to show"


def _mib(size: int) -> str:
    return f"{size / (1 << 30):.1f} GiB" if size >= 1 << 30 else f"{size / (1 << 20):.1f} MiB"


def read_summary(path: Path) -> EvalSummary | None:
    """A run's ``summary.json`` as its typed document; None when it is missing, unreadable or of another format.

    The viewer shows any folder: a summary it cannot read leaves the run's pages without one (the run
    list then counts from the run index) rather than failing them.
    """
    value = read_json(path)
    if value is None:
        return None
    try:
        return EvalSummary.parse(value, str(path))
    except DocumentError:
        return None


class IndexCache:
    """Opened run indexes, reopened when ``traces.jsonl`` changes size or mtime.

    Each run directory has its own lock, so opening (or building) one run's index never holds up a
    page of another run; at most :attr:`KEEP` indexes are kept, the least recently used dropped
    first (a million-episode index holds hundreds of MB).
    """

    KEEP = 32

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[Path, tuple[tuple[int, int], Any]] = OrderedDict()
        self._opening: dict[Path, threading.Lock] = {}

    def get(self, path: Path) -> Any:
        """The run index of the run directory *path*, current as of this call."""
        from shopsimrl_core.runs import open_run_index

        try:
            stat = (path / "traces.jsonl").stat()
            key = (stat.st_size, stat.st_mtime_ns)
        except FileNotFoundError:
            key = (0, 0)
        with self._lock:
            opening = self._opening.setdefault(path, threading.Lock())
        with opening:  # two requests for one run open it once; other runs are not waited for
            with self._lock:
                hit = self._items.get(path)
                if hit is not None and hit[0] == key:
                    self._items.move_to_end(path)
                    return hit[1]
            index = open_run_index(path)
            with self._lock:
                self._items[path] = (key, index)
                self._items.move_to_end(path)
                while len(self._items) > self.KEEP:
                    self._items.popitem(last=False)
            return index


_ROW_STAMPED = (
    "summary.json",
    "manifest.json",
    "labels.parquet",
    "traces.jsonl",
    "traces.index.jsonl",
    "traces.index.parquet",
)
"""The files a run-list row is read from: the row is kept while each keeps its (mtime, size)."""


class RunRows:
    """Each run's row of the run list, read once per state of its files.

    A row comes from ``summary.json`` (a finished run); without one, from the run index when the run
    has one (a run in flight: its counts so far, ``source`` ``index``); otherwise it holds only the
    run's split and checkpoint. It is kept, keyed by the run folder, while every file of
    :data:`_ROW_STAMPED` keeps its mtime and size, so a second view of a page reads no file, only
    ``stat``s them. Files are read outside the lock: a slow disk (or a folder that blocks) holds up
    that row's page, never another request.
    """

    def __init__(self, indexes: IndexCache) -> None:
        self._indexes = indexes
        self._lock = threading.Lock()
        self._items: dict[Path, tuple[tuple[tuple[int, int] | None, ...], dict[str, Any]]] = {}

    def row(self, run: RunRef) -> dict[str, Any]:
        """The list row of *run*: split, checkpoint, counts, reward mean, success rate, labels, source."""
        stamp = tuple(_stamp(run.path / name) for name in _ROW_STAMPED)
        with self._lock:
            hit = self._items.get(run.path)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        row = self._read(run, has_index=stamp[4] is not None or stamp[5] is not None)
        row["labels"] = stamp[2] is not None
        row["too_large"] = too_large(run)
        with self._lock:
            self._items[run.path] = (stamp, row)
        return row

    def _read(self, run: RunRef, *, has_index: bool) -> dict[str, Any]:
        # Listed before a link out was planted in it (run folders are not rescanned): read nothing.
        link = run.escaping_link()
        if link is not None:
            return {"checkpoint": "?", "model": "?", "split": "?", "requested": None, "source": None,
                    "refused": f"{link} is a symlink pointing out of the viewer roots; not served"}
        meta = run_meta(run)
        row: dict[str, Any] = {**meta, "source": None}
        summary = read_summary(run.path / "summary.json")
        if summary is not None:
            counts = summary.counts
            row.update(
                source="summary",
                completed=counts.completed,
                requested=counts.requested,
                coverage=counts.coverage,
                failed=counts.failed,
                reward_mean=summary.primary.reward_mean,
                success_rate=summary.primary.success_rate,
            )
        elif has_index:
            row.update(source="index", **_counts_from_index(self._indexes.get(run.path), meta.get("requested")))
        return row


def too_large(run: RunRef) -> list[str]:
    """The notes of the run's documents the viewer will not read for their size (summary, labels)."""
    notes = (
        size_note(run.path / "summary.json"),
        size_note(run.path / "labels.parquet", LABELS_MAX_BYTES),
    )
    return [note for note in notes if note is not None]


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size)


def _counts_from_index(index: Any, requested: Any) -> dict[str, Any]:
    """The summary's headline counts over the run index's latest rows (as ``build_summary`` counts them)."""
    import polars as pl

    episodes = index.episodes
    done = episodes.filter(pl.col("complete"))
    rewards = done.get_column("reward").drop_nulls()
    success = done.get_column("r_success").drop_nulls()
    completed = done.height
    return {
        "completed": completed,
        "requested": requested,
        "coverage": completed / requested if isinstance(requested, int) and requested else None,
        "failed": episodes.height - completed,
        "reward_mean": float(rewards.mean()) if rewards.len() else None,
        "success_rate": float(success.mean()) if success.len() else None,
    }


_META_CACHE: dict[Path, tuple[tuple[int, int], dict[str, Any]]] = {}
_MANIFEST_PARSE_MAX = 2 << 20  # bigger manifests (a million jobs is ~70 MB) are not parsed for a page


def run_meta(run: RunRef) -> dict[str, Any]:
    """Split, checkpoint and model of a run: from a small manifest, else from the first trace line.

    ``requested`` is the number of planned jobs when the manifest was read, else None.
    """
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
            # bounded: a first line without an end (a broken or foreign file) is not read whole
            record = loads(handle.readline(DOCUMENT_MAX_BYTES))
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
        "requested": None,
    }


def _meta_of(manifest: dict[str, Any]) -> dict[str, Any]:
    plan = json_object(manifest.get("plan"))
    model = json_object(plan.get("model"))
    split = json_object(plan.get("task_split"))
    jobs = plan.get("jobs")
    return {
        "checkpoint": model.get("checkpoint_id") or plan.get("model_id") or model.get("model") or "?",
        "model": model.get("model") or "?",
        "split": split.get("name") or "?",
        "requested": len(jobs) if isinstance(jobs, list) else None,
    }


def labels_of(run: RunRef) -> Any:
    """The run's ``labels.parquet`` as a frame; None when missing, unreadable or over :data:`LABELS_MAX_BYTES`."""
    path = run.path / "labels.parquet"
    if not path.is_file() or size_note(path, LABELS_MAX_BYTES) is not None:
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
