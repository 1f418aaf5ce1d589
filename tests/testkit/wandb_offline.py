"""Read an offline W&B run folder: its history rows and the names of its artifacts (tests only).

The ``.wandb`` file is a LevelDB-style log (a 7-byte header, 32 KiB blocks, records of checksum, length,
type) of ``wandb_internal_pb2.Record`` protobufs; wandb 0.31 ships no Python reader of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["offline_run"]

_BLOCK = 32768


def _records(data: bytes) -> list[bytes]:
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        if _BLOCK - pos % _BLOCK < 7:  # a block's tail too short for a header is padding
            pos += _BLOCK - pos % _BLOCK
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            records.append(pending + chunk)
    return records


def offline_run(folder: Path) -> dict[str, Any]:
    """``{"history": [row, ...], "artifacts": [(type, name), ...]}`` of the offline run in *folder*."""
    from wandb.proto import wandb_internal_pb2 as pb

    [path] = list(folder.glob("run-*.wandb"))
    history, artifacts = [], []
    for raw in _records(path.read_bytes()):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
        elif kind == "artifact":
            artifacts.append((record.artifact.type, record.artifact.name))
    return {"history": history, "artifacts": artifacts}
