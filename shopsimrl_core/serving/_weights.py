"""What a checkpoint is: the weights' reference plus a cheap content identity.

A checkpoint's identity must not depend on where it was served (the port a launched server got), but
it must change when the weights do. Hashing tens of gigabytes per run is not cheap, so the identity
reads, for every file, its relative path, its size and its first and last 1 MiB: a retrained or
re-exported checkpoint changes its headers (safetensors, GGUF) or its size, while a copy to another
folder keeps the identity. A reference that is not a local path (a hub id marked ``hub:``, an ``s3://``
URI) is identified by the reference alone: nothing local can be read. Anything else is a local path and
must exist: a typo is refused here instead of being sent to a server that would try to download it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ConfigError

__all__ = ["HUB_MARKER", "WEIGHTS_IDENTITY_SCHEME", "adapter_rank", "is_remote", "server_reference", "weights_identity"]

HUB_MARKER = "hub:"
"""Prefix of a hub id (``hub:Qwen/Qwen3-4B``): without it a value is a local path, which must exist."""

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


def is_remote(reference: str) -> bool:
    """Whether *reference* names something no local file holds (``hub:`` id or a URI)."""
    return reference.startswith(HUB_MARKER) or "://" in reference


def server_reference(reference: str) -> str:
    """What the server is given for *reference*: a hub id without its ``hub:`` marker, anything else as is."""
    return reference[len(HUB_MARKER) :] if reference.startswith(HUB_MARKER) else reference


def weights_identity(reference: str, key: str = "serve.weights") -> dict[str, Any]:
    """The identity of *reference*: ``{"ref", "content"}`` with ``content`` null for remote references.

    Promise: the same bytes at another path give the same ``content``; a file whose size or first or
    last MiB differs gives another. Folders are walked in sorted order (hidden files skipped: editors'
    and downloaders' leftovers are not weights). A hub id's ``ref`` is the id without its marker.

    Raises:
        ConfigError: ``weights-missing`` — a local path (no ``hub:`` marker, no URI) that does not exist.
        OSError: a local path exists but cannot be read (permissions).
    """
    if is_remote(reference):
        return {"ref": server_reference(reference), "content": None}
    path = Path(reference)
    if not path.exists():
        raise ConfigError(
            f"{key}: {reference!r} does not exist; fix the path, or write a hub id as {HUB_MARKER}<id> "
            "(e.g. hub:Qwen/Qwen3-4B) so that the server downloads it",
            code="weights-missing",
        )
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


def adapter_rank(adapter: str, key: str = "serve.adapter") -> int:
    """The LoRA rank of the adapter folder *adapter*: ``r`` of its ``adapter_config.json`` (PEFT's format).

    Raises:
        ConfigError: ``config-invalid`` — the adapter is remote (set ``serve.max_lora_rank``), or its
            ``adapter_config.json`` is missing, not JSON or has no positive integer ``r``.
    """
    if is_remote(adapter):
        raise ConfigError(
            f"{key}: {adapter!r} is not local, so its rank cannot be read from adapter_config.json; "
            "set serve.max_lora_rank",
            code="config-invalid",
        )
    config_path = Path(adapter) / "adapter_config.json"
    try:
        rank = json.loads(config_path.read_text(encoding="utf-8")).get("r")
    except (OSError, ValueError, AttributeError) as exc:
        raise ConfigError(
            f"{config_path}: cannot read the adapter's rank ({exc}); a LoRA adapter folder holds PEFT's "
            'adapter_config.json with "r" (or set serve.max_lora_rank)',
            code="config-invalid",
        ) from None
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ConfigError(
            f"{config_path}: r: must be a positive integer LoRA rank (got {rank!r}); or set serve.max_lora_rank",
            code="config-invalid",
        )
    return rank
