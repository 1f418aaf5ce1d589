r"""The checkpoint registry: the source of truth for which checkpoints exist.

Training jobs drop one small JSON file per checkpoint into a folder::

    {"checkpoint_id": "grpo-4b-step-000400", "step": 400,
     "served_model": "grpo-4b-step400", "endpoint": "http://gpu-3:30000/v1"}

``endpoint`` may be null (the pipeline's default inference endpoint serves it). The file name is
free; the id inside is what counts. A sensor turns new entries into Dagster partitions.

Command line (what a training job calls after it has started serving a checkpoint)::

    python -m shopsimrl_dagster.registry add --id grpo-4b-step-000400 --step 400 \\
        --served-model grpo-4b-step400 [--endpoint http://gpu-3:30000/v1] [--registry DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from shopsimrl_core import ConfigError, write_json_atomic

__all__ = ["Checkpoint", "read_registry", "register_checkpoint", "latest_checkpoint", "previous_checkpoint"]

_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_KEYS = ("checkpoint_id", "step", "served_model", "endpoint", "registered_at")


@dataclass(frozen=True, order=False)
class Checkpoint:
    """One registered model checkpoint."""

    checkpoint_id: str
    """Partition key and run-directory name; letters, digits, '.', '_' and '-' only."""
    step: int
    """Training step; "latest" means the highest step, never the newest file."""
    served_model: str | None = None
    """Model name the endpoint serves this checkpoint under; null uses the endpoint's default."""
    endpoint: str | None = None
    """OpenAI base URL serving it; null uses the pipeline's default inference endpoint."""
    registered_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The registry file content."""
        return asdict(self)


def _bad(path: Path, key: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: {key}: {message}", code="checkpoint-registry-invalid")


def _parse(path: Path, data: Any) -> Checkpoint:
    if not isinstance(data, dict):
        raise _bad(path, "(file)", "must be a JSON object with checkpoint_id and step")
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise _bad(path, unknown[0], f"unknown key; valid keys: {', '.join(_KEYS)}")
    checkpoint_id = data.get("checkpoint_id")
    if not isinstance(checkpoint_id, str) or not _ID_PATTERN.match(checkpoint_id):
        raise _bad(
            path,
            "checkpoint_id",
            f"must be a non-empty string of letters, digits, '.', '_', '-' (got {checkpoint_id!r})",
        )
    step = data.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise _bad(path, "step", f"must be a non-negative integer training step (got {step!r})")
    for key in ("served_model", "endpoint", "registered_at"):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise _bad(path, key, f"must be a non-empty string or null (got {value!r})")
    endpoint = data.get("endpoint")
    if endpoint is not None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _bad(
                path, "endpoint", f"must be an http(s) URL such as http://gpu-3:30000/v1, or null (got {endpoint!r})"
            )
    return Checkpoint(
        checkpoint_id=checkpoint_id,
        step=step,
        served_model=data.get("served_model"),
        endpoint=data.get("endpoint"),
        registered_at=data.get("registered_at"),
    )


def read_registry(folder: str | Path, *, problems: list[str] | None = None) -> list[Checkpoint]:
    """Read every ``*.json`` entry of the registry folder, sorted by (step, checkpoint_id).

    A missing folder is an empty registry. Files whose names start with '.' (temp files of an
    atomic write) are ignored. One bad file never hides the others: a file that is not UTF-8, not
    valid JSON (e.g. half-written), breaks a rule (bad id, step or endpoint URL) or claims an id
    another file holds with other values is skipped, and one line naming the file, the key and the
    fix is appended to *problems* (when given).
    """
    root = Path(folder)
    if not root.is_dir():
        return []
    found: dict[str, tuple[Path, Checkpoint]] = {}
    for path in sorted(root.glob("*.json")):
        if path.name.startswith("."):
            continue
        try:
            entry = _read_entry(path)
            previous = found.get(entry.checkpoint_id)
            if previous is not None and previous[1] != entry:
                raise _bad(
                    path,
                    "checkpoint_id",
                    f"{entry.checkpoint_id!r} is also registered by {previous[0].name} "
                    "with other values; remove one of the two files",
                )
        except ConfigError as exc:
            if problems is not None:
                problems.append(f"skipped {exc.one_line()}")
            continue
        found[entry.checkpoint_id] = (path, entry)
    return sorted((entry for _, entry in found.values()), key=lambda c: (c.step, c.checkpoint_id))


def _read_entry(path: Path) -> Checkpoint:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(path, "(file)", f"not UTF-8 text (byte {exc.start}); rewrite the entry as UTF-8 JSON") from None
    except OSError as exc:
        raise _bad(path, "(file)", f"cannot be read ({exc.strerror}); fix its permissions or remove it") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(
            path,
            "(file)",
            f"not valid JSON ({exc.msg} at line {exc.lineno}; half-written?); "
            "rewrite the entry with `python -m shopsimrl_dagster.registry add`",
        ) from None
    return _parse(path, data)


def register_checkpoint(folder: str | Path, checkpoint: Checkpoint) -> Path:
    """Write *checkpoint* as ``<folder>/<checkpoint_id>.json`` atomically and return the path.

    Re-registering the same content is a no-op; readers never see a half-written entry.

    Raises:
        ConfigError: the id is not directory-safe, or it is already registered with other values.
    """
    root = Path(folder)
    target = root / f"{checkpoint.checkpoint_id}.json"
    entry = _parse(target, checkpoint.to_dict())
    if entry.registered_at is None:
        entry = Checkpoint(**{**entry.to_dict(), "registered_at": datetime.now(UTC).isoformat()})
    for existing in read_registry(root, problems=[]):
        if existing.checkpoint_id == entry.checkpoint_id:
            same = (existing.step, existing.served_model, existing.endpoint) == (
                entry.step,
                entry.served_model,
                entry.endpoint,
            )
            if same:
                return target
            raise _bad(
                target,
                "checkpoint_id",
                f"{entry.checkpoint_id!r} is already registered with other values; use a new id",
            )
    return write_json_atomic(target, entry.to_dict())


def latest_checkpoint(checkpoints: Iterable[Checkpoint]) -> Checkpoint | None:
    """The checkpoint with the highest training step (ties: the larger id), or None when empty."""
    return max(checkpoints, key=lambda c: (c.step, c.checkpoint_id), default=None)


def previous_checkpoint(checkpoints: Iterable[Checkpoint], checkpoint_id: str) -> Checkpoint | None:
    """The checkpoint registered just below *checkpoint_id* by training step, or None."""
    ordered = sorted(checkpoints, key=lambda c: (c.step, c.checkpoint_id))
    for index, entry in enumerate(ordered):
        if entry.checkpoint_id == checkpoint_id:
            return ordered[index - 1] if index > 0 else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m shopsimrl_dagster.registry add …``: register one checkpoint; exit 2 on bad input."""
    from .settings import load_pipeline_settings

    parser = argparse.ArgumentParser(prog="python -m shopsimrl_dagster.registry")
    sub = parser.add_subparsers(dest="verb", required=True)
    add = sub.add_parser("add", help="register a checkpoint")
    add.add_argument("--id", required=True, dest="checkpoint_id")
    add.add_argument("--step", required=True, type=int)
    add.add_argument("--served-model")
    add.add_argument("--endpoint")
    add.add_argument("--registry", help="registry folder (default: checkpoint_registry of the pipeline settings)")
    sub.add_parser("list", help="print the registry").add_argument("--registry")
    args = parser.parse_args(argv)
    try:
        folder = Path(args.registry) if args.registry else load_pipeline_settings().checkpoint_registry
        if args.verb == "add":
            path = register_checkpoint(
                folder, Checkpoint(args.checkpoint_id, args.step, args.served_model, args.endpoint)
            )
            print(f"registered {args.checkpoint_id} (step {args.step}) in {path}")
        else:
            problems: list[str] = []
            for entry in read_registry(folder, problems=problems):
                print(json.dumps(entry.to_dict(), ensure_ascii=False))
            for line in problems:
                print(f"warning: {line}", file=sys.stderr)
            return 1 if problems else 0
    except ConfigError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc.filename}: {exc.strerror}; check the --registry folder", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
