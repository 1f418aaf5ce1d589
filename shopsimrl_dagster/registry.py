r"""The checkpoint registry: the source of truth for which checkpoints exist.

Training jobs drop one small JSON file per checkpoint into a folder::

    {"checkpoint_id": "grpo-4b-step-000400", "step": 400,
     "served_model": "grpo-4b-step400", "endpoint": "http://gpu-3:30000/v1"}

``endpoint`` may be null (the pipeline's default inference endpoint serves it). Instead of, or beside,
an endpoint an entry may name what to serve: ``weights`` (full weights: a local file or folder, or a
hub id marked ``hub:`` / a URI), or an ``adapter`` (LoRA) over ``base_model``. In ``launch`` mode the pipeline starts a
server for such a checkpoint's run (docs/pipeline.md, "Serving checkpoints")::

    {"checkpoint_id": "grpo-4b-step-000400", "step": 400, "weights": "/ckpt/grpo-4b/step-000400"}
    {"checkpoint_id": "lora-step-000400", "step": 400, "adapter": "/ckpt/lora/step-000400",
     "base_model": "hub:Qwen/Qwen3-4B"}

Local paths must exist; relative ones resolve against the registry folder (``registry add`` and
``list`` show a path that leaves the folder); a value starting with ``-`` is refused (it would become a
server flag). The file name is free; the id inside is
what counts. ``schema_version`` (``shopsimrl-checkpoint-entry-v1``, the ``CheckpointEntry`` document)
is optional: the CLI writes it first, an entry without it is read as that version. A sensor turns
new entries into Dagster partitions.

Command line (what a training job calls after it has saved, or started serving, a checkpoint)::

    python -m shopsimrl_dagster.registry add --id grpo-4b-step-000400 --step 400 \\
        [--weights /ckpt/step-000400 | --adapter DIR --base-model NAME] \\
        [--served-model grpo-4b-step400] [--endpoint http://gpu-3:30000/v1] [--registry DIR]
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
from shopsimrl_core.documents import CheckpointEntry
from shopsimrl_core.serving import HUB_MARKER

__all__ = [
    "Checkpoint",
    "read_entry",
    "read_registry",
    "register_checkpoint",
    "latest_checkpoint",
    "previous_checkpoint",
]

_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: the longest checkpoint id: it names files and folders (``<id>.json``, ``<suite>/<id>/``,
#: ``comparison_vs_<id>.json``), and a file name holds at most 255 bytes (issue 33: 300 characters were
#: registered and failed later as "File name too long")
MAX_ID_LENGTH = 128
_KEYS = (
    "schema_version",
    "checkpoint_id",
    "step",
    "served_model",
    "endpoint",
    "weights",
    "adapter",
    "base_model",
    "registered_at",
)


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
    """OpenAI base URL serving it; null uses the pipeline's default inference endpoint (or a launched server)."""
    weights: str | None = None
    """Full weights of the checkpoint (local path or URI); what ``launch`` mode serves."""
    adapter: str | None = None
    """A LoRA adapter (local path or URI) served over ``base_model`` in ``launch`` mode."""
    base_model: str | None = None
    """The weights the adapter applies to (required with ``adapter``)."""
    registered_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The registry file content (keys that are null and were added after the first format are left out)."""
        return {k: v for k, v in asdict(self).items() if v is not None or k not in _LATER_KEYS}

    @property
    def serves_weights(self) -> bool:
        """Whether the entry names what to serve (weights or an adapter)."""
        return self.weights is not None or self.adapter is not None

    @property
    def served_weights(self) -> str | None:
        """The full weights a launched server loads: ``weights``, or the adapter's ``base_model``."""
        return self.weights if self.adapter is None else self.base_model

    def content(self) -> tuple[Any, ...]:
        """Everything but ``registered_at``: two entries with equal content register the same checkpoint."""
        return tuple(v for k, v in asdict(self).items() if k != "registered_at")


_LATER_KEYS = ("weights", "adapter", "base_model")


def _bad(path: Path, key: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: {key}: {message}", code="checkpoint-registry-invalid")


def _parse(path: Path, data: Any) -> Checkpoint:
    if not isinstance(data, dict):
        raise _bad(path, "(file)", "must be a JSON object with checkpoint_id and step")
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise _bad(path, unknown[0], f"unknown key; valid keys: {', '.join(_KEYS)}")
    # Entries written by hand or by older versions have no schema_version: they are this version.
    version = data.get("schema_version", CheckpointEntry.SCHEMA)
    if version != CheckpointEntry.SCHEMA:
        raise _bad(
            path,
            "schema_version",
            f"is {version!r}; this reader accepts {CheckpointEntry.SCHEMA!r} or none "
            "(register it with the matching shopsimrl version)",
        )
    checkpoint_id = data.get("checkpoint_id")
    if not isinstance(checkpoint_id, str) or not _ID_PATTERN.match(checkpoint_id):
        raise _bad(
            path,
            "checkpoint_id",
            f"must be a non-empty string of letters, digits, '.', '_', '-' (got {checkpoint_id!r})",
        )
    if len(checkpoint_id) > MAX_ID_LENGTH:
        raise _bad(
            path,
            "checkpoint_id",
            f"is {len(checkpoint_id)} characters long, more than {MAX_ID_LENGTH} (it names files and run folders); "
            f"use a shorter id (got {checkpoint_id[:40]!r}…)",
        )
    step = data.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise _bad(path, "step", f"must be a non-negative integer training step (got {step!r})")
    for key in ("served_model", "endpoint", "weights", "adapter", "base_model", "registered_at"):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise _bad(path, key, f"must be a non-empty string or null (got {value!r})")
        if key in ("served_model", "weights", "adapter", "base_model") and value is not None and value.startswith("-"):
            # It would reach the server's command line as a flag (`vllm serve --trust-remote-code ...`).
            raise _bad(
                path, key, f"{value!r} starts with '-'; give a name or a path (./ before a relative one), never a flag"
            )
    if data.get("adapter") is not None and data.get("base_model") is None:
        raise _bad(path, "base_model", "required with adapter: name the weights the adapter applies to")
    if data.get("adapter") is not None and data.get("weights") is not None:
        raise _bad(path, "weights", "give either weights (full weights) or adapter with base_model, not both")
    if data.get("base_model") is not None and data.get("adapter") is None:
        raise _bad(path, "adapter", "base_model is only for an adapter; give weights for full weights")
    endpoint = data.get("endpoint")
    if endpoint is not None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _bad(
                path, "endpoint", f"must be an http(s) URL such as http://gpu-3:30000/v1, or null (got {endpoint!r})"
            )
    # The rules above are stricter than the model's types, so this parse cannot fail on its own.
    entry = CheckpointEntry.parse(data, str(path))
    return Checkpoint(
        checkpoint_id=entry.checkpoint_id,
        step=entry.step,
        served_model=entry.served_model,
        endpoint=entry.endpoint,
        weights=_local(path, "weights", entry.weights),
        adapter=_local(path, "adapter", entry.adapter),
        base_model=_local(path, "base_model", entry.base_model),
        registered_at=entry.registered_at,
    )


def _local(entry_path: Path, key: str, value: str | None) -> str | None:
    # A hub id is marked ("hub:Qwen/Qwen3-4B") and a URI has a scheme; anything else is a local path,
    # relative ones against the entry's folder, and must exist: a typo must not pass for a hub id that
    # the server would try to download.
    if value is None or "://" in value or value.startswith(HUB_MARKER):
        return value
    candidate = Path(value).expanduser()
    resolved = (candidate if candidate.is_absolute() else entry_path.parent / candidate).resolve()
    if not resolved.exists():
        raise _bad(
            entry_path, key,
            f"{value!r} does not exist (resolved: {resolved}); fix the path, or mark a hub id as {HUB_MARKER}<id>",
        )  # fmt: skip
    return str(resolved)


def outside_registry(folder: str | Path, entry: Checkpoint) -> list[str]:
    """One line per local path of *entry* outside the registry *folder* (shown, so a stray ``..`` is seen)."""
    root = Path(folder).resolve()
    lines = []
    for key in ("weights", "adapter", "base_model"):
        value = getattr(entry, key)
        if value is None or "://" in value or value.startswith(HUB_MARKER):
            continue
        if not Path(value).is_relative_to(root):
            lines.append(f"{entry.checkpoint_id}: {key} is outside the registry folder {root}: {value}")
    return lines


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
            entry = read_entry(path)
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


def read_entry(path: Path) -> Checkpoint:
    """The checkpoint entry in *path* (relative weights paths resolve against its folder).

    Raises:
        ConfigError: ``checkpoint-registry-invalid`` — unreadable, not JSON, or breaking a rule (one line).
    """
    try:
        # a byte-order mark (Windows editors write one) is no content, as for split files and .env files
        text = path.read_bytes().decode("utf-8").removeprefix("\ufeff")
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
    # an id too long for a file name is named by the folder, not by a path that cannot exist
    entry = _parse(target if len(checkpoint.checkpoint_id) <= MAX_ID_LENGTH else root, checkpoint.to_dict())
    if entry.registered_at is None:
        entry = Checkpoint(**{**entry.to_dict(), "registered_at": datetime.now(UTC).isoformat()})
    for existing in read_registry(root, problems=[]):
        if existing.checkpoint_id == entry.checkpoint_id:
            if existing.content() == entry.content():
                return target
            raise _bad(
                target,
                "checkpoint_id",
                f"{entry.checkpoint_id!r} is already registered with other values; use a new id",
            )
    document = CheckpointEntry.parse({"schema_version": CheckpointEntry.SCHEMA, **entry.to_dict()}, str(target))
    return write_json_atomic(target, document.to_json())


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
    add.add_argument("--weights", help="full weights to serve in launch mode (path or URI)")
    add.add_argument("--adapter", help="a LoRA adapter to serve over --base-model in launch mode")
    add.add_argument("--base-model", help="the weights --adapter applies to")
    add.add_argument("--registry", help="registry folder (default: checkpoint_registry of the pipeline settings)")
    sub.add_parser("list", help="print the registry").add_argument("--registry")
    args = parser.parse_args(argv)
    try:
        folder = Path(args.registry) if args.registry else load_pipeline_settings().checkpoint_registry
        if args.verb == "add":

            def absolute(value: str | None) -> str | None:
                # Paths given on the command line are the caller's (its working directory), not the registry's.
                if value is None or "://" in value or value.startswith((HUB_MARKER, "-")):
                    return value  # a dash value is refused by the entry's rules, naming the key
                return str(Path(value).expanduser().resolve())

            path = register_checkpoint(
                folder,
                Checkpoint(
                    args.checkpoint_id,
                    args.step,
                    args.served_model,
                    args.endpoint,
                    weights=absolute(args.weights),
                    adapter=absolute(args.adapter),
                    base_model=absolute(args.base_model),
                ),
            )
            print(f"registered {args.checkpoint_id} (step {args.step}) in {path}")
            for line in outside_registry(folder, read_entry(path)):
                print(f"note: {line}")
        else:
            problems: list[str] = []
            for entry in read_registry(folder, problems=problems):
                print(json.dumps(entry.to_dict(), ensure_ascii=False))
                for line in outside_registry(folder, entry):
                    print(f"note: {line}", file=sys.stderr)
            for line in problems:
                print(f"warning: {line}", file=sys.stderr)
            return 1 if problems else 0
    except ConfigError as exc:
        # the shape of the `shopsimrl` CLI's line, so the bad-input catalogue holds both (docs/errors.md)
        print(f"shopsimrl-registry: error[{exc.code}]: {exc.one_line()}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"shopsimrl-registry: error[os-error]: {exc.filename}: {exc.strerror}; check the --registry folder",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
