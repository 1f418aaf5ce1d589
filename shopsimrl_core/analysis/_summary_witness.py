"""What a ``summary.json`` was computed from, so that a resume with nothing to do need not compute it again (issue 33).

A summary is a function of the run index (the traces up to a covered byte), the manifest (the planned
episodes), the requested count and the code that computes it. ``summarize_run`` writes, beside each
``summary.json`` of a large run (:data:`WITNESS_MIN_EPISODES`), ``traces.index.summary.json``: those inputs, keyed as

- the run index's state: covered bytes and lines, skipped lines, the last covered line (offset, length,
  episode id) and the first exported one — what the index itself checks before trusting its rows;
- the manifest's size, mtime and inode (a manifest is written once and never rewritten);
- the requested count, the summary schema, and the SHA-256 of the source of every module the summary
  and the index rows are computed by (another version of them is another summary);

and the SHA-256 of the ``summary.json`` bytes it wrote. A resumed run that made no attempt hands its run
index to ``summarize_run``, which returns the stored summary — ``created_at`` included, the file left as
it is — when the witness still matches everything above; anything else (no witness, another key, an
edited or missing ``summary.json``, a source file that cannot be read) computes and writes it as before.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from shopsimrl_core._versions import SUMMARY_SCHEMA

__all__ = ["WITNESS_MIN_EPISODES", "WITNESS_NAME", "witness_key", "stored_summary_bytes", "write_witness"]

WITNESS_NAME = "traces.index.summary.json"
WITNESS_MIN_EPISODES = 50_000
"""Smaller runs write no witness and always compute their summary."""
_PACKAGE = Path(__file__).resolve().parents[1]
_SOURCES = (
    "_versions.py",
    "analysis/_summary.py",
    "analysis/_summary_witness.py",
    "analysis/_intervals.py",
    "analysis/_category_rows.py",
    "analysis/_exact.py",
    "analysis/_stats.py",
    "analysis/_design.py",
    "documents/_base.py",
    "documents/_runs.py",
    "runs/storage/_index.py",
    "runs/storage/_index_rows.py",
    "runs/storage/_index_log.py",
)
_code: str | None = None


def _code_digest() -> str | None:
    """SHA-256 over the source of the modules a summary depends on (None when one cannot be read)."""
    global _code
    if _code is None:
        digest = hashlib.sha256()
        try:
            for name in _SOURCES:
                digest.update(name.encode("utf-8") + b"\0" + (_PACKAGE / name).read_bytes() + b"\0")
        except OSError:
            return None
        _code = digest.hexdigest()
    return _code


def witness_key(run_index: Any, manifest_path: Path, requested: int | None) -> dict[str, Any] | None:
    """The inputs of a summary of *run_index* (a ``RunIndex``), or None when they cannot all be named.

    None as well for runs under :data:`WITNESS_MIN_EPISODES` episodes: their summary costs less than a
    second, and their folders keep the files they always had.
    """
    if run_index.episodes.height < WITNESS_MIN_EPISODES:
        return None
    code = _code_digest()
    if code is None:
        return None
    try:
        stat = manifest_path.stat()
        manifest: str | None = f"{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}"
    except FileNotFoundError:
        manifest = None
    return {
        "index": run_index.state_key,
        "manifest": manifest,
        "requested": requested,
        "schema": SUMMARY_SCHEMA,
        "code": code,
    }


def stored_summary_bytes(run_dir: Path, summary_path: Path, key: dict[str, Any] | None) -> bytes | None:
    """The bytes of ``summary.json`` when the witness in *run_dir* says they were computed from *key*, else None."""
    if key is None:
        return None
    try:
        witness = json.loads((run_dir / WITNESS_NAME).read_text(encoding="utf-8"))
        data = summary_path.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(witness, dict) or witness.get("key") != json.loads(json.dumps(key)):
        return None
    if witness.get("summary_sha256") != hashlib.sha256(data).hexdigest():
        return None
    return data


def write_witness(run_dir: Path, summary_path: Path, key: dict[str, Any] | None) -> None:
    """Record that ``summary.json`` (as it is now on disk) was computed from *key*; remove a stale record."""
    from shopsimrl_core._hashing import write_json_atomic

    target = run_dir / WITNESS_NAME
    try:
        if key is None:
            if target.exists():  # (a run that shrank below the size, or whose sources cannot be read)
                target.unlink()
            return
        data = summary_path.read_bytes()
        write_json_atomic(target, {"key": key, "summary_sha256": hashlib.sha256(data).hexdigest()})
    except OSError:
        try:
            target.unlink(missing_ok=True)  # (disk full): no witness, so the next resume computes
        except OSError:
            pass
