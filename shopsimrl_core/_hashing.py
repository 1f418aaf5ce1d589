"""Canonical JSON, fingerprints and atomic file writes (runtime spec §2)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

__all__ = ["canonical_json", "fingerprint", "sha256_file", "write_json_atomic", "dumps_pretty"]


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

    The text goes to ``.<name>.<pid>.<thread>.tmp`` in the same folder, is fsynced, then renamed
    over the target (spec §2.4). Returns the target path.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = dumps_pretty(value)
    tmp = target.parent / f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return target
