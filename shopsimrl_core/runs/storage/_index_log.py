"""The index log ``traces.index.jsonl``: a header naming the index schema, then one row per trace line.

The header (``{"offset": -1, "length": 0, "index_schema": ...}``) is what keeps a new index column from
going unversioned: the schema is derived from the row columns (``_index_rows.RUN_INDEX_SCHEMA``), so a
log written before a column existed — or before headers existed — no longer matches and is rewritten
once from the traces instead of yielding nulls for that column. Rows are keyed by their trace byte
offset; the header's offset −1 sorts before every row, so readers that filter on offsets skip it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

from shopsimrl_core.adapters._json import dumps_strict, loads
from shopsimrl_core.runs.storage._index_rows import RUN_INDEX_SCHEMA

__all__ = ["INDEX_LOG_NAME", "LogRead", "dump_rows", "log_path", "open_for_append", "read_log"]

INDEX_LOG_NAME = "traces.index.jsonl"
_HEADER: dict[str, Any] = {"offset": -1, "length": 0, "index_schema": RUN_INDEX_SCHEMA}


def log_path(run_dir: Path) -> Path:
    """Where *run_dir*'s index log lives."""
    return run_dir / INDEX_LOG_NAME


class LogRead:
    """What reading the log found: its rows, and whether the file exists and is of the current schema."""

    def __init__(self, rows: list[dict[str, Any]], exists: bool, current: bool) -> None:
        self.rows, self.exists, self.current = rows, exists, current

    @property
    def stale(self) -> bool:
        """A log file written under another schema (or before headers): it must be rewritten."""
        return self.exists and not self.current


def read_log(run_dir: Path) -> LogRead:
    """The rows of the log up to its first torn or malformed line; none from a log of another schema."""
    rows: list[dict[str, Any]] = []
    try:
        handle = open(log_path(run_dir), "rb")
    except FileNotFoundError:
        return LogRead(rows, exists=False, current=False)
    with handle:
        first = handle.readline()
        if not first.endswith(b"\n"):
            return LogRead(rows, exists=True, current=False)
        try:
            header = loads(first)
        except (ValueError, UnicodeDecodeError):
            return LogRead(rows, exists=True, current=False)
        if not isinstance(header, dict) or header.get("index_schema") != RUN_INDEX_SCHEMA:
            return LogRead(rows, exists=True, current=False)
        for raw in handle:
            if not raw.endswith(b"\n"):
                break  # a torn index line: the traces still hold the truth, catch-up rescans
            try:
                value = loads(raw)
            except (ValueError, UnicodeDecodeError):
                break
            if (
                not isinstance(value, dict)
                or not isinstance(value.get("offset"), int)
                or not isinstance(value.get("length"), int)
            ):
                break
            rows.append(value)
    return LogRead(rows, exists=True, current=True)


def dump_rows(rows: list[dict[str, Any]], *, header: bool = False) -> bytes:
    """Rows as log lines (with the schema header first when *header*)."""
    # compact, non-ASCII literal, a NaN read from a hand-edited trace kept as the stdlib writes it
    body = b"".join(
        dumps_strict({k: v for k, v in row.items() if v is not None or k == "episode_id"}) + b"\n" for row in rows
    )
    return (dumps_strict(_HEADER) + b"\n" + body) if header else body


def open_for_append(run_dir: Path) -> IO[bytes]:
    """The log opened for appending rows; a new or empty log gets its header first."""
    handle = open(log_path(run_dir), "ab")
    if os.fstat(handle.fileno()).st_size == 0:
        handle.write(dump_rows([], header=True))
    return handle
