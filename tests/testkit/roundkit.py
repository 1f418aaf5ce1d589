"""Helpers of the training-round tests: a first round's bank and curriculum, and the ``training`` settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from testkit.training_sandbox import training_config, write_split_subset

__all__ = ["CHUNKS", "write_first_round", "add_training_section", "TRAINER"]

TRAINER = Path(__file__).resolve().parent / "scripted_trainer.py"
# chunks whose text addresses one sandbox-policy lapse each: with every lapse at 1 the bare groups fail, and the
# diagnostic retry with the full text fixes some tasks (not internalized) and not others (pending analysis)
CHUNKS = {"budget": "注意预算：价格不要超出预算。", "options": "每个规格都选与要求最接近的值，不要保留默认值。",
          "compare": "比较两三个商品，不合适就返回结果页换一个商品。", "query": "搜索词要包含商品的属性关键词。"}


def write_first_round(folder: Path) -> tuple[Path, Path]:
    """The first round's SkillBank and frozen curriculum (q = 1: skill-free groups, full text in retries)."""
    from shopsimrl_core.skills._curriculum import build_curriculum

    bank = {"schema_version": "shopsimrl-skillbank-v1", "bank_version": "1", "skills": [
        {"skill_id": skill_id, "content": text, "version": "1", "enabled": True,
         "metadata": {"estimated_effect": 0.1}} for skill_id, text in CHUNKS.items()]}
    bank_path = folder / "skillbank-first.json"
    bank_path.write_text(json.dumps(bank, ensure_ascii=False), encoding="utf-8")
    curriculum = build_curriculum(bank, round_id="round-000", seed=5, skill_free_probability=1.0,
                                  skillbank_path=bank_path.name)
    curriculum_path = folder / "curriculum-first.json"
    curriculum_path.write_text(json.dumps(curriculum, ensure_ascii=False), encoding="utf-8")
    return bank_path, curriculum_path


def add_training_section(settings_path: Path, sandbox: Any, *, train_tasks: int = 3, steps: int = 2,
                         trainer_args: tuple[str, ...] = (), analyst_url: str | None = None,
                         **training: Any) -> dict[str, Any]:
    """Add a ``training`` section (the scripted trainer, groups of 2 on *train_tasks* train tasks) to the file."""
    folder = settings_path.parent
    split = write_split_subset(folder, Path(sandbox.split_file), {"train": train_tasks})
    evaluation = training_config(folder, split_file=split, env_url=sandbox.env_url, policy_url=sandbox.policy_url,
                                 model=sandbox.served_model, name="round-training")
    bank, curriculum = write_first_round(folder)
    document = yaml.safe_load(settings_path.read_text(encoding="utf-8"))
    document["training"] = {
        "evaluation": str(evaluation), "group_size": 2, "stop_timeout_s": 5,
        "command": ["{python}", str(TRAINER), "--steps", str(steps), "--resume_from", "{resume_from}",
                    *trainer_args],
        "initial_skillbank": str(bank), "initial_curriculum": str(curriculum), **training}
    if analyst_url is not None:
        document["analyst"] = {"base_url": analyst_url, "name": "shopsim-analyst", "api_key_env": None}
    settings_path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return document
