"""A training round's page data: its GRPO groups from ``triage/<group>.json`` (the training session's documents).

Per group: the task, the curriculum assignment, every sample's reward and success (linked to its episode),
the diagnostic retry with every active skill (its chunks and outcome) and the classification. Documents
that do not parse are listed by name, not hidden; each is read under the viewer's size cap.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from shopsimrl_core.viewer._data import read_json, size_note

__all__ = ["round_groups"]


def round_groups(folder: Path) -> dict[str, Any]:
    """``{groups: [...], classes: {class: count}, unreadable: [line, ...]}`` of the round folder *folder*."""
    from shopsimrl_core.documents._base import DocumentError
    from shopsimrl_core.documents._training import GroupTriage

    groups: list[dict[str, Any]] = []
    unreadable: list[str] = []
    triage_dir = folder / "triage"
    for path in sorted(triage_dir.glob("*.json")) if triage_dir.is_dir() else []:
        data = read_json(path)
        try:
            if data is None:
                raise ValueError(size_note(path) or "not JSON")
            triage = GroupTriage.parse(data, str(path))
        except (ValueError, DocumentError) as exc:
            unreadable.append(f"{path.name}: {str(exc).splitlines()[0]}")
            continue
        retry = triage.diagnostic_retry
        groups.append({
            "group_key": triage.group_key, "task_id": triage.task_id,
            "mode": str(triage.assignment.get("mode", "")),
            "chunks": _chunk_ids(triage.assignment.get("included_chunk_ids")),
            "members": [{"episode_id": m.episode_id, "sample": m.sample_in_group, "reward": m.reward,
                         "success": m.success, "scored": m.scored} for m in triage.members],
            "retry": None if retry is None else {"episode_id": retry.episode_id, "reward": retry.reward,
                                                 "chunks": list(retry.included_chunk_ids), "success": retry.success},
            "classification": str(triage.classification),
            "pending": list(triage.pending_analysis_episode_ids),
        })
    classes = Counter(g["classification"] for g in groups)
    return {"groups": groups, "classes": dict(sorted(classes.items())), "unreadable": unreadable}


def _chunk_ids(value: object) -> list[str]:
    return [str(c) for c in value] if isinstance(value, list) else []
