"""The run index: a compact sidecar of ``traces.jsonl`` that resume, the summary and the viewer read.

A run of a million episodes holds ~35 GB of traces; nothing that only needs *which episodes are
done and how they scored* may re-read that. So every trace line gets one small row — its byte
offset and length, the episode id, status, attempt, completion and the per-episode fields the
summary and the viewer's filters use — kept next to the traces in two files:

- ``traces.index.jsonl``   rows appended by the writer as it appends trace lines (one JSON object
  per trace line, flat keys; ``c::r_*`` reward components, ``t::*`` token counts);
- ``traces.index.parquet`` a compacted snapshot — the latest row of every episode sorted by id, with
  ``attempts``, ``completed_lines`` and ``endpoint_faults`` — written when the appended tail grows past
  :data:`COMPACT_AT` rows; its metadata holds what the covered lines add up to (``_State``).

Log rows are keyed by their trace byte offset, so merging is idempotent (a crash between a snapshot
and the log truncation only leaves rows that are ignored), and opening a compacted index is a single
parquet read: the merge of a short tail touches only the episodes in it (``merge_sorted``).
On open the index checks that it still describes the traces file (the last covered line ends
where the index says and holds the same episode id) and catches up by streaming only the bytes
beyond what it covers; a file that shrank or was replaced is re-indexed from the start. A torn tail
(no newline yet) is never covered.

Only a writer persists: the process holding ``run.lock``, or a reader that can take its ``flock`` at
once (nobody is running). Any other reader catches up in memory and leaves the files alone.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl_core.adapters._json import loads
from shopsimrl_core.runs.storage._index_log import INDEX_LOG_NAME, dump_rows, log_path, open_for_append, read_log
from shopsimrl_core.runs.storage._index_rows import (
    _ENTRY_COLUMNS,
    INDEX_STATS,
    RUN_INDEX_SCHEMA,
    _align,
    _frame,
    _scan_traces,
    episode_row,
    index_row,
)

__all__ = [
    "RUN_INDEX_SCHEMA",
    "COMPACT_AT",
    "INDEX_LOG_NAME",
    "INDEX_SNAPSHOT_NAME",
    "RunIndex",
    "open_run_index",
    "index_row",
    "episode_row",
    "IndexAppender",
]

INDEX_SNAPSHOT_NAME = "traces.index.parquet"
COMPACT_AT = 10_000
"""Rows beyond the snapshot after which a persisting open writes a new snapshot."""

_STATS = INDEX_STATS
ENDPOINT_FAULT_TYPE = "ModelEndpointFault"


@dataclass
class _State:
    """What the rows up to ``trace_bytes`` add up to (kept in the snapshot's metadata)."""

    trace_bytes: int = 0
    lines: int = 0
    skipped: int = 0
    last: tuple[int, int, str | None] | None = None
    """(offset, length, episode_id) of the last covered line, to check the traces still match."""
    exported: tuple[int, int, int] | None = None
    """(line, offset, length) of the first exported (redacted) record."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "trace_bytes": self.trace_bytes,
                "lines": self.lines,
                "skipped": self.skipped,
                "last": self.last,
                "exported": self.exported,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> _State:
        data = json.loads(text)
        last = data.get("last")
        exported = data.get("exported")
        return cls(
            int(data["trace_bytes"]),
            int(data["lines"]),
            int(data["skipped"]),
            (int(last[0]), int(last[1]), last[2]) if last else None,
            (int(exported[0]), int(exported[1]), int(exported[2])) if exported else None,
        )

    def add(self, tail: Any) -> _State:
        """The state after the rows of *tail* (a frame of line rows in file order)."""
        import polars as pl

        if tail.height == 0:
            return self
        last = tail.row(tail.height - 1, named=True)
        exported = self.exported
        if exported is None:
            hits = tail.filter(pl.col("exported"))
            if hits.height:
                first = hits.row(0, named=True)
                exported = (first["line"], first["offset"], first["length"])
        return _State(
            last["offset"] + last["length"],
            self.lines + tail.height,
            self.skipped + int(tail.filter(pl.col("episode_id").is_null()).height),
            (last["offset"], last["length"], last["episode_id"]),
            exported,
        )


def _latest(tail: Any) -> Any:
    """Line rows (file order) -> latest row per episode id, sorted by id, with attempt counts."""
    import polars as pl

    fault = (pl.col("status") == "failed") & (pl.col("error_type") == ENDPOINT_FAULT_TYPE)
    counted = tail.filter(pl.col("episode_id").is_not_null()).with_columns(
        pl.lit(1, dtype=pl.Int64).alias("attempts"),
        pl.col("complete").cast(pl.Int64).alias("completed_lines"),
        fault.fill_null(False).cast(pl.Int64).alias("endpoint_faults"),
    )
    return _collapse(counted)


def _collapse(rows: Any) -> Any:
    """Rows carrying ``attempts``/``completed_lines`` weights, oldest first -> one row per id."""
    import polars as pl

    others = [c for c in rows.columns if c not in ("episode_id", *_STATS)]
    return (
        rows.group_by("episode_id")
        .agg(*[pl.col(c).last() for c in others], *[pl.col(c).sum() for c in _STATS])
        .select(rows.columns)
        .sort("episode_id")
    )


def _conform(frame: Any, columns: dict[str, Any]) -> Any:
    import polars as pl

    missing = [pl.lit(None, dtype=dtype).alias(name) for name, dtype in columns.items() if name not in frame.columns]
    return frame.with_columns(missing).select([pl.col(n).cast(t) for n, t in columns.items()])


def _merge(base: Any, tail: Any) -> Any:
    """Episodes of *base* (sorted, with weights) updated by the line rows of *tail* (file order)."""
    import polars as pl

    latest = _latest(tail)
    if latest.height == 0:
        return base
    if base.height == 0:
        return latest
    columns = dict(base.schema)
    for name, dtype in latest.schema.items():
        columns.setdefault(name, dtype)
    base, latest = _conform(base, columns), _conform(latest, columns)
    touched = latest.select("episode_id")
    old = base.join(touched, on="episode_id", how="semi")
    rest = base.join(touched, on="episode_id", how="anti", maintain_order="left")
    updated = _collapse(pl.concat([old, latest])) if old.height else latest
    return rest.merge_sorted(updated, key="episode_id")


class RunIndex:
    """The index of one run directory, as of the moment it was opened.

    ``episodes`` is the latest row of each episode id, sorted by id, with ``attempts`` (counted lines),
    ``completed_lines`` and ``endpoint_faults`` (its failed attempts of type ``ModelEndpointFault``); a
    polars frame. ``tail`` holds the line rows written since the last
    snapshot. Nothing of the traces themselves is held.
    """

    def __init__(self, run_dir: Path, base: Any, tail: Any, state: _State, tail_lines: int, tail_skipped: int) -> None:
        self.run_dir = run_dir
        self._base = base
        self.tail = tail
        self._state = state
        self.covered_bytes = state.trace_bytes
        """Trace bytes the rows describe (the traces file may hold a torn tail beyond)."""
        self.covered_lines = state.lines
        """Complete trace lines the rows describe."""
        self._tail_lines = tail_lines
        self._tail_skipped = tail_skipped
        self._episodes: Any = None
        self._positions: dict[str, int] | None = None
        self._entry_columns: dict[str, list[Any]] | None = None

    @property
    def traces_path(self) -> Path:
        return self.run_dir / "traces.jsonl"

    @property
    def state_key(self) -> list[Any]:
        """What the rows describe: covered bytes, lines and skipped lines, last and first exported line, torn tail.

        JSON values; equal keys of one run directory mean equal rows (the summary's witness relies on it).
        """
        state = self._state
        return [state.trace_bytes, state.lines, state.skipped,
                None if state.last is None else list(state.last),
                None if state.exported is None else list(state.exported),
                self._tail_lines, self._tail_skipped]

    @property
    def line_count(self) -> int:
        """Lines of the traces file, a torn tail included (as a skipped line)."""
        return self._state.lines + self._tail_lines

    @property
    def skipped_lines(self) -> int:
        """Lines that are not counted records (blank, not JSON, no string ``episode_id``)."""
        return self._state.skipped + self._tail_skipped

    @property
    def episodes(self) -> Any:
        """Latest row per episode id (sorted by id) plus ``attempts`` and ``completed_lines``."""
        if self._episodes is None:
            self._episodes = _merge(self._base, self.tail)
        return self._episodes

    def position(self, episode_id: str) -> int | None:
        """Row number of *episode_id* in :attr:`episodes`, or None."""
        if self._positions is None:
            ids = self.episodes.get_column("episode_id").to_list()
            self._positions = dict(zip(ids, range(len(ids))))
        return self._positions.get(episode_id)

    _ENTRY_COLUMNS = _ENTRY_COLUMNS

    def entry_column(self, name: str) -> list[Any]:
        """One resume column (:attr:`_ENTRY_COLUMNS`) as a cached list, aligned with :meth:`position`."""
        if self._entry_columns is None:
            self._entry_columns = {}
        if name not in self._entry_columns:  # column by column: resume needs two of the seven
            self._entry_columns[name] = self.episodes.get_column(name).to_list()
        return self._entry_columns[name]

    def entry(self, episode_id: str) -> dict[str, Any] | None:
        """The resume fields of *episode_id* from cached columns (a dict lookup, for per-job loops).

        Keys: offset, length, attempts, completed_lines, complete, status, reward.
        """
        at = self.position(episode_id)
        if at is None:
            return None
        return {name: self.entry_column(name)[at] for name in self._ENTRY_COLUMNS}

    def episode(self, episode_id: str) -> dict[str, Any] | None:
        """The latest row of *episode_id* as a dict (a binary search on the sorted ids), or None."""
        ids = self.episodes.get_column("episode_id")
        at = int(ids.search_sorted(episode_id))
        if at >= ids.len() or ids[at] != episode_id:
            return None
        row: dict[str, Any] = self.episodes.row(at, named=True)
        return row

    def read_record(self, episode_id: str) -> dict[str, Any] | None:
        """Read and parse the latest trace record of *episode_id* (one seek), or None."""
        row = self.episode(episode_id)
        if row is None:
            return None
        with open(self.traces_path, "rb") as handle:
            handle.seek(row["offset"])
            record: dict[str, Any] | None = loads(handle.read(row["length"]))
            return record

    def first_exported(self) -> tuple[int, int, int] | None:
        """``(line, offset, length)`` of the first exported (redacted) record, or None (runtime-semantics §22.7)."""
        return self._state.exported


# --------------------------------------------------------------------------- persistence


def _snapshot_path(run_dir: Path) -> Path:
    return run_dir / INDEX_SNAPSHOT_NAME


def _read_snapshot(run_dir: Path) -> tuple[Any, _State] | None:
    path = _snapshot_path(run_dir)
    if not path.exists():
        return None  # a run without a snapshot (fresh, or small) never pays for importing polars here
    import polars as pl

    try:
        meta = pl.read_parquet_metadata(path)
        if meta.get("schema_version") != RUN_INDEX_SCHEMA:
            return None
        state = _State.from_json(meta["state"])
        frame = pl.read_parquet(path)
        if any(stat not in frame.columns for stat in _STATS):
            return None  # written before a per-episode sum existed: rebuilt once from the traces
        return frame, state
    except FileNotFoundError:
        return None
    except Exception:  # a broken or foreign snapshot is simply rebuilt
        return None


def _still_describes(path: Path, last: tuple[int, int, str | None] | None) -> bool:
    """The last covered line is still where it was, ends in a newline and holds the same episode id."""
    if last is None:
        return True
    offset, length, episode_id = last
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size < offset + length:
                return False
            handle.seek(offset)
            raw = handle.read(length)
    except FileNotFoundError:
        return False
    if len(raw) != length or not raw.endswith(b"\n"):
        return False
    if episode_id is None:
        return True
    try:
        value = loads(raw)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(value, dict) and value.get("episode_id") == episode_id


def _entries(run_dir: Path) -> list[os.DirEntry[str]]:
    try:
        return list(os.scandir(run_dir))
    except OSError:
        return []


@contextmanager
def _writer(run_dir: Path, locked: bool) -> Iterator[bool]:
    """Yield whether this process may write the index files (holds or can take ``run.lock``)."""
    if locked:
        yield True
        return
    if any(entry.is_symlink() for entry in _entries(run_dir)):
        yield False  # a folder holding a link is refused by every writer (runs/storage/_run_folder.py)
        return
    try:
        fd = os.open(run_dir / "run.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _write_snapshot(run_dir: Path, episodes: Any, state: _State) -> None:
    target = _snapshot_path(run_dir)
    tmp = run_dir / f".{INDEX_SNAPSHOT_NAME}.{os.getpid()}.tmp"
    try:
        episodes.write_parquet(
            tmp,
            metadata={"schema_version": RUN_INDEX_SCHEMA, "state": state.to_json()},
            compression="zstd",
            statistics=False,
        )
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def open_run_index(run_dir: str | os.PathLike[str], *, persist: bool | None = None, locked: bool = False) -> RunIndex:
    """Open the index of *run_dir*, catching up with (or rebuilding from) ``traces.jsonl`` by streaming.

    *persist*: ``None``/``True`` write the caught-up index back when this process may write (it holds
    the run lock — say so with *locked* — or can take it at once); ``False`` never writes. Reading
    holds at most one trace line at a time.
    """
    run = Path(run_dir)
    traces = run / "traces.jsonl"
    snapshot = _read_snapshot(run)
    base, state = snapshot if snapshot is not None else (_frame([]).head(0), _State())
    if snapshot is None:
        base = _latest(_frame([]))
    fresh: list[dict[str, Any]] = []
    expected = state.trace_bytes
    log = read_log(run)
    logged = [row for row in log.rows if row["offset"] >= state.trace_bytes]
    # (rows below trace_bytes are already in the snapshot: a crash between snapshot and truncation)
    for row in logged:
        if row["offset"] != expected:
            break  # a gap: everything from here is rescanned from the traces
        fresh.append(row)
        expected = row["offset"] + row["length"]
    last = state.last
    if fresh:
        tail_row = fresh[-1]
        last = (tail_row["offset"], tail_row["length"], tail_row.get("episode_id"))
    rebuilt = False
    if not _still_describes(traces, last):
        base, state, fresh, rebuilt = _latest(_frame([])), _State(), [], True
    log_dirty = len(logged) != len(fresh) or log.stale
    tail = _frame(fresh) if fresh else _frame([])
    covered_state = state.add(tail)
    frames, new_rows, count, covered, tail_lines, tail_skipped = _scan_traces(
        traces, covered_state.trace_bytes, covered_state.lines
    )
    if frames:
        tail = _align([tail, *frames])
    current = state.add(tail)
    index = RunIndex(run, base, tail, current, tail_lines, tail_skipped)
    beyond = tail.height
    if persist is not False and (count or rebuilt or log_dirty or beyond >= COMPACT_AT) and run.is_dir():
        with _writer(run, locked) as allowed:
            if allowed:
                if beyond >= COMPACT_AT:
                    _write_snapshot(run, index.episodes, current)
                    # Rows are keyed by offset, so a crash right here leaves only rows that are ignored.
                    with open(log_path(run), "wb") as handle:
                        handle.write(dump_rows([], header=True))
                elif rebuilt or log_dirty:
                    from shopsimrl_core._hashing import write_bytes_atomic

                    write_bytes_atomic(log_path(run), dump_rows([*fresh, *new_rows], header=True))
                    if rebuilt:
                        _snapshot_path(run).unlink(missing_ok=True)
                elif count:
                    with open_for_append(run) as handle:
                        handle.write(dump_rows(new_rows))
    return index


class IndexAppender:
    """Keeps the index log in step with a writer's appends (used by ``RunStore.append``).

    The first append opens the index (catching up and persisting); later ones add one row each.
    If the index could not be made current (another writer holds the lock), it stays silent and a
    later open catches up from the traces instead.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._covered: int | None = None
        self._lines = 0
        self._handle: Any = None
        self._disabled = False

    def reset(self) -> None:
        """Forget the state (the files were moved or the store closed its traces)."""
        if self._handle is not None:
            self._handle.close()
        self._handle, self._covered, self._lines, self._disabled = None, None, 0, False

    def _catch_up_small(self, offset: int, line: bytes, *, locked: bool) -> bool:
        """A small run's first catch-up without polars (``_small_index.py``): one log row for *line*."""
        from shopsimrl_core.runs.storage._small_index import open_small_index
        small = open_small_index(self.run_dir, upto=offset)  # the log alone covers the traces before *line*
        try:
            whole = small is not None and os.stat(self.run_dir / "traces.jsonl").st_size == offset + len(line)
        except OSError:
            return False
        if small is None or not whole or not line.endswith(b"\n"):
            return False
        try:
            value, blank = loads(line), False
        except (ValueError, UnicodeDecodeError):
            value, blank = None, not line.strip()
        row = index_row(value, offset=offset, length=len(line), line=len(small.lines) + 1, blank=blank)
        with _writer(self.run_dir, locked) as allowed:
            if allowed:
                with open_for_append(self.run_dir) as handle:
                    handle.write(dump_rows([row]))
        self._disabled = not allowed
        self._covered, self._lines = offset + len(line), len(small.lines) + 1
        return True

    def after_write(self, offset: int, line: bytes, record: dict[str, Any], *, locked: bool) -> None:
        """Record the trace line just written at *offset* (the bytes *line* of *record*)."""
        if self._disabled:
            return
        if self._covered != offset:
            # First append of this store, or the file moved under us: catch up first (this also
            # indexes the line just written, so nothing is appended twice).
            self.reset()
            if self._catch_up_small(offset, line, locked=locked):
                return
            index = open_run_index(self.run_dir, persist=True, locked=locked)
            with _writer(self.run_dir, locked) as allowed:
                if not allowed:
                    self._disabled = True
                    return
            self._covered, self._lines = index.covered_bytes, index.covered_lines
            return
        self._lines += 1
        row = index_row(record, offset=offset, length=len(line), line=self._lines)
        if self._handle is None:
            self._handle = open_for_append(self.run_dir)
        self._handle.write(dump_rows([row]))
        self._handle.flush()
        self._covered = offset + len(line)
