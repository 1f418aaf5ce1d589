"""Canonical JSON, fingerprints, JSON documents on disk and atomic file writes (runtime spec §2)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ConfigError

__all__ = ["canonical_json", "fingerprint", "sha256_file", "write_json_atomic", "write_text_atomic", "dumps_pretty",
           "parse_json_text", "read_json_file"]


def canonical_json(value: Any) -> str:
    """Return the canonical JSON text of *value*: sorted keys, no whitespace, non-ASCII literal."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def fingerprint(value: Any) -> str:
    """Return lowercase hex SHA-256 of ``canonical_json(value)``.

    A string is hashed as its JSON encoding, quotes included (the spec's §2.2 quirk), so
    ``fingerprint("abc")`` hashes the 5 bytes ``"abc"``.
    """
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Return the lowercase hex SHA-256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def dumps_pretty(value: Any) -> str:
    """JSON as written to documents: ``indent=2``, non-ASCII literal, NaN refused, trailing newline."""
    return json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json_atomic(path: str | os.PathLike[str], value: Any) -> Path:
    """Write *value* as a pretty JSON document so that readers never see a half-written file.

    See :func:`write_text_atomic` for how. Returns the target path.
    """
    return write_text_atomic(path, [dumps_pretty(value)])


def write_text_atomic(path: str | os.PathLike[str], chunks: Iterable[str]) -> Path:
    """Write the concatenated *chunks* (UTF-8) so that readers never see a half-written file.

    The text goes to ``.<name>.<pid>.<thread>.tmp`` in the same folder, is fsynced, then renamed
    over the target (spec §2.4); if producing a chunk raises, the target is untouched and the
    temporary file removed. Chunks are written as they come, so a large file need not fit in memory.
    Returns the target path.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


def parse_json_text(text: str, where: str, what: str) -> Any:
    """Parse a JSON document read from *where*.

    Raises:
        ConfigError: ``<where>: <what> is not valid JSON (<reason> at line N)``.
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: {what} is not valid JSON ({exc.msg} at line {exc.lineno})") from exc


def read_json_file(path: str | os.PathLike[str], what: str, *, fix: str) -> Any:
    """Read and parse the JSON document at *path* (*what* names it in errors, *fix* says what to change).

    Raises:
        ConfigError: one line naming the file — unreadable (``...; <fix>``), not UTF-8, or not JSON.
    """
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {what} ({exc.strerror}); {fix}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: {what} is not UTF-8 text") from exc
    return parse_json_text(text, where, what)
