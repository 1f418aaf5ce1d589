"""Training exports: task data for slime-style GRPO rollouts and SFT records (runtime-semantics §19.1, §22.8).

- ``export_slime_tasks`` writes one line per task of a split, in split order, exactly as §19.1:
  ``{"prompt": "<task_id>", "metadata": {"schema_version": "shopsimrl-slime-tasks-v1", "task_id",
  "split"}}``. The rollout side resolves the prompt id to a ShopSimulator episode, so the prompt
  the trainer's policy sees is built by the same runtime (system prompt, persona, skill block,
  tools) as in evaluation, and its reward is the environment's ``reward`` — the same numbers an
  evaluation would report. Guarded splits (test) are refused: training never sees them.
  With a frozen curriculum (``shopsimrl-skill-curriculum-v1``) each line also carries
  ``metadata.skill_curriculum = {state_id, mode, included_chunk_ids}`` for its rollout group
  (group key = the prompt), the assignment ``assign_group`` gives.
- ``export_training_sft`` reuses ``export_sft`` (same filter, same ``shopsimrl-sft-v1`` records:
  the messages as sent, skill block included, and the environment's reward) and refuses guarded
  splits the same way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ConfigError
from shopsimrl_core._hashing import write_text_atomic

__all__ = ["SLIME_TASKS_SCHEMA", "export_slime_tasks", "export_training_sft", "slime_task_line"]

SLIME_TASKS_SCHEMA = "shopsimrl-slime-tasks-v1"


def slime_task_line(task_id: int, split: str, curriculum: dict[str, Any] | None = None) -> dict[str, Any]:
    """One §19.1 line (plus the curriculum assignment when a state is given)."""
    line: dict[str, Any] = {"prompt": str(task_id),
                            "metadata": {"schema_version": SLIME_TASKS_SCHEMA, "task_id": task_id, "split": split}}
    if curriculum is not None:
        from shopsimrl_core.skills._curriculum import assign_group

        line["metadata"]["skill_curriculum"] = {"state_id": curriculum["state_id"],
                                                **assign_group(curriculum, str(task_id))}
    return line


def export_slime_tasks(split_file: str | Path, split: str, out_path: str | Path, *,
                       curriculum: dict[str, Any] | None = None) -> Path:
    """Write the slime task data of *split* to *out_path* (JSONL, atomic); return the path.

    Raises:
        ConfigError: unknown split, a guarded (test) split (``training-guarded-split``), or an
            output named ``traces.jsonl``.
    """
    from shopsimrl_core.runs.planning._splits import load_split_file

    out = Path(out_path)
    if out.name == "traces.jsonl":
        raise ConfigError(f"{out}: refusing to write training data over a traces file; choose another name")
    chosen = load_split_file(split_file).get(split)
    if chosen.guarded:
        raise ConfigError(f"{split_file}: split {split!r} is guarded (role {chosen.role!r}); training data come "
                          "from train splits only", code="training-guarded-split")
    lines = [json.dumps(slime_task_line(t, split, curriculum), ensure_ascii=False) + "\n" for t in chosen.task_ids]
    return write_text_atomic(out, lines)


def export_training_sft(run_dirs: Sequence[str | Path], out_path: str | Path, **options: Any) -> Any:
    """SFT records of the runs' successful episodes via ``export_sft`` (same options); refuses test runs.

    Raises:
        ConfigError (``training-guarded-split``): a run's plan is on a guarded split.
    """
    from shopsimrl_core.export._records import export_sft

    for run_dir in run_dirs:
        manifest = Path(run_dir) / "manifest.json"
        if manifest.is_file():
            plan = json.loads(manifest.read_text(encoding="utf-8")).get("plan") or {}
            split = plan.get("task_split") or {}
            if split.get("name") == "test" or split.get("role") == "test":
                raise ConfigError(f"{manifest}: run is on the test split; SFT records come from train runs only",
                                  code="training-guarded-split")
    return export_sft(run_dirs, out_path, **options)
