"""What a checkpoint is: the weights' reference plus a cheap content identity.

A checkpoint's identity must not depend on where it was served (the port a launched server got), but
it must change when the weights do. Hashing tens of gigabytes per run is not cheap, so the identity
reads, for every file, its relative path, its size and its first and last 1 MiB: a retrained or
re-exported checkpoint changes its headers (safetensors, GGUF) or its size, while a copy to another
folder keeps the identity. A reference that is not a local path (a hub id, an ``s3://`` URI) is
identified by the reference alone: nothing local can be read.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

__all__ = ["WEIGHTS_IDENTITY_SCHEME", "weights_identity"]

WEIGHTS_IDENTITY_SCHEME = "sampled-sha256-v1"
"""Names the rule below; a new rule gets a new name so old identities are never silently compared."""

_EDGE = 1 << 20  # bytes read from each end of a file


def _file_digest(digest: Any, path: Path, rel: str) -> None:
    size = path.stat().st_size
    digest.update(f"{rel}\0{size}\0".encode())
    with path.open("rb") as handle:
        digest.update(handle.read(_EDGE))
        if size > 2 * _EDGE:
            handle.seek(size - _EDGE)
            digest.update(handle.read(_EDGE))
        elif size > _EDGE:
            digest.update(handle.read())


def weights_identity(reference: str) -> dict[str, Any]:
    """The identity of *reference*: ``{"ref", "content"}`` with ``content`` null for non-local references.

    Promise: the same bytes at another path give the same ``content``; a file whose size or first or
    last MiB differs gives another. Folders are walked in sorted order (hidden files skipped: editors'
    and downloaders' leftovers are not weights).

    Raises:
        OSError: a local path exists but cannot be read (permissions).
    """
    path = Path(reference)
    if "://" in reference or not path.exists():
        return {"ref": reference, "content": None}
    digest = hashlib.sha256()
    if path.is_file():
        _file_digest(digest, path, "")
    else:
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(f for f in files if not f.startswith(".")):
                full = Path(root) / name
                _file_digest(digest, full, full.relative_to(path).as_posix())
    return {"ref": reference, "content": f"{WEIGHTS_IDENTITY_SCHEME}:{digest.hexdigest()}"}
