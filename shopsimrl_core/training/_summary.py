"""What a training round did, from its folder: ``shopsimrl training summarize DIR``.

One report per round folder (``DIR`` itself when it holds ``traces.jsonl``, else each sub-folder that does):
groups finished, the success histogram over groups (how many groups had k successful samples), the frontier share
(groups whose samples' rewards differ: the ones GRPO learns from), the triage classification counts, the abort rate,
sampled tokens per second of model time, and samples per episode (more than one: the chat template drifted).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ConfigError
from shopsimrl_core.documents._training import TRIAGE_CLASSES, GroupTriage
from shopsimrl_core.training._session import TRIAGE_DIR

__all__ = ["summarize_training", "round_folders"]


def round_folders(root: str | Path) -> list[Path]:
    """The round folders under *root*: itself when it holds ``traces.jsonl``, else its sub-folders that do.

    Raises:
        ConfigError (``input-missing``): *root* is not a folder or holds no training round.
    """
    base = Path(root)
    if not base.is_dir():
        raise ConfigError(f"{root}: not a folder; pass a training output folder (training.out_dir)",
                          code="input-missing")
    if (base / "traces.jsonl").is_file():
        return [base]
    found = sorted(p for p in base.iterdir() if p.is_dir() and (p / "traces.jsonl").is_file())
    if not found:
        raise ConfigError(f"{root}: holds no training round (no traces.jsonl in it or its sub-folders); pass "
                          "training.out_dir", code="input-missing")
    return found


def _round(folder: Path) -> dict[str, Any]:
    episodes = aborted = samples = sampled = forks = retries = 0
    model_ms = 0.0
    for line in (folder / "traces.jsonl").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        block = record.get("training")
        if not isinstance(block, dict):
            continue
        if block.get("diagnostic_retry"):
            retries += 1
            continue
        episodes += 1
        aborted += bool(block.get("aborted"))
        samples += len(block.get("samples") or [])
        sampled += int((block.get("token_counts") or {}).get("sampled", 0))
        forks += int((block.get("checks") or {}).get("drift_forks", 0))
        model_ms += sum(float((s.get("timing") or {}).get("model_ms", 0.0)) for s in record.get("steps") or [])
    triage = [GroupTriage.parse(json.loads(p.read_text(encoding="utf-8")), str(p))
              for p in sorted((folder / TRIAGE_DIR).glob("*.json"))] if (folder / TRIAGE_DIR).is_dir() else []
    classes: Counter[str] = Counter(str(t.classification) for t in triage)
    histogram = Counter(sum(1 for m in t.members if m.success) for t in triage)
    frontier = sum(1 for t in triage if len({r for r in t.rewards if r is not None}) > 1)
    rounds = sorted({t.round_id for t in triage if t.round_id is not None})
    return {
        "folder": str(folder),
        "round_id": rounds[0] if len(rounds) == 1 else (rounds or None),
        "groups": len(triage),
        "episodes": episodes,
        "success_histogram": {str(k): histogram[k] for k in sorted(histogram)},
        "frontier_share": frontier / len(triage) if triage else None,
        "classifications": {name: classes.get(name, 0) for name in TRIAGE_CLASSES},
        "abort_rate": aborted / episodes if episodes else None,
        "diagnostic_retries": retries,
        "sampled_tokens": sampled,
        "tokens_per_second": sampled / (model_ms / 1000.0) if model_ms > 0 else None,
        "samples_per_episode": samples / episodes if episodes else None,
        "drift_forks": forks,
        "pending_analysis_episode_ids": [e for t in triage for e in t.pending_analysis_episode_ids],
    }


def summarize_training(root: str | Path) -> list[dict[str, Any]]:
    """One report per round folder under *root* (module docstring), in folder order.

    Raises:
        ConfigError: *root* holds no training round; a triage document that does not parse (one line).
    """
    return [_round(folder) for folder in round_folders(root)]

