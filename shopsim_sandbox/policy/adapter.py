"""LoRA adapters of the sandbox policy: what a runtime-loaded adapter changes, in vLLM's folder layout.

An adapter is a folder, like a PEFT adapter, so the pipeline treats it exactly as a real one:

- ``adapter_config.json`` — PEFT's config; the pipeline reads its ``r`` (the rank) and passes the
  server a rank limit; the policy server refuses an adapter whose rank is above its limit, as vLLM does;
- ``adapter_model.json`` — a policy checkpoint (``shopsim-policy-checkpoint-v1``): the lapse rates the
  policy plays with when a request names the adapter.
"""

from __future__ import annotations

import json
from pathlib import Path

from shopsim_sandbox.policy.checkpoint import CheckpointError, load_policy_checkpoint
from shopsim_sandbox.policy.decide import LapseRates

__all__ = ["AdapterError", "load_adapter", "write_adapter"]


class AdapterError(ValueError):
    """An adapter folder is unreadable or invalid; the message is one line naming the file."""


def load_adapter(folder: str | Path) -> tuple[int, LapseRates]:
    """The rank and the lapse rates of the adapter in *folder*.

    Raises:
        AdapterError: a file is missing or invalid (one line naming it).
    """
    root = Path(folder)
    config = root / "adapter_config.json"
    try:
        rank = json.loads(config.read_text(encoding="utf-8")).get("r")
    except (OSError, ValueError, AttributeError) as exc:
        raise AdapterError(f"{config}: cannot read the adapter config ({exc})") from None
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise AdapterError(f"{config}: r: must be a positive integer rank (got {rank!r})")
    try:
        checkpoint = load_policy_checkpoint(root / "adapter_model.json")
    except CheckpointError as exc:
        raise AdapterError(str(exc)) from None
    return rank, checkpoint.lapses


def write_adapter(folder: str | Path, *, rank: int, lapses: dict[str, float], base: str = "policy") -> Path:
    """Write an adapter folder of *rank* whose policy plays with *lapses*; returns the folder."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "base_model_name_or_path": base}
    (root / "adapter_config.json").write_text(json.dumps(config), encoding="utf-8")
    model = {"format": "shopsim-policy-checkpoint-v1", "lapses": lapses}
    (root / "adapter_model.json").write_text(json.dumps(model), encoding="utf-8")
    return root
