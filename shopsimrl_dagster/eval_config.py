"""Turn (suite, checkpoint, endpoint, environment, storage) into a core evaluation config file.

The pipeline never hands the core an in-memory config: it writes an ordinary evaluation YAML
(runtime spec §3.1 keys) to ``<runs_root>/_configs/<suite>/<checkpoint_id>.yaml`` and loads it with
``shopsimrl_core.load_config``. So every rollout the pipeline starts can be repeated by hand with
``shopsimrl run <that file>``, and the core's validation applies unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["RolloutTarget", "eval_config_document", "write_eval_config"]


@dataclass(frozen=True)
class RolloutTarget:
    """Everything that decides one rollout, already resolved to plain values."""

    suite_name: str
    checkpoint_id: str
    served_model: str
    model_base_url: str
    api_key_env: str | None
    max_in_flight: int
    model_timeout_s: float
    model_max_retries: int
    env_base_url: str
    env_timeout_s: float
    persona: bool | None
    runs_root: Path
    split_file: Path


def eval_config_document(target: RolloutTarget, suite: Any) -> dict[str, Any]:
    """The evaluation config mapping (spec §3.1 keys) for *target* under *suite*.

    The run directory is ``<runs_root>/<suite>/<checkpoint_id>`` (experiment name = checkpoint id).
    """
    sampling = suite.sampling
    return {
        "experiment": {
            "name": target.checkpoint_id,
            "output_dir": str(target.runs_root / target.suite_name),
            "seed": suite.seed,
            "concurrency": target.max_in_flight,
            "resume": True,
            # One project-level ledger for every suite (spec §22.6), not one per suite folder.
            "test_access_ledger": str(target.runs_root / "test-access.jsonl"),
        },
        "tasks": {
            "split_file": str(target.split_file),
            "split": suite.split,
            "sample_size": suite.sample_size,
            "repeats": suite.repeats,
        },
        "environment": {
            "base_url": target.env_base_url,
            "timeout": target.env_timeout_s,
            "persona": target.persona,
        },
        "runtime": {"max_steps": suite.max_steps},
        "skills": {"path": suite.skills, "max_skills": suite.max_skills},
        "model": {
            "id": target.checkpoint_id,
            "checkpoint_id": target.checkpoint_id,
            "name": target.served_model,
            "base_url": target.model_base_url,
            "api_key_env": target.api_key_env,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "timeout": target.model_timeout_s,
            "max_retries": target.model_max_retries,
            "trust_env": False,
            "send_seed": sampling.send_seed,
            "extra_body": dict(sampling.extra_body),
        },
    }


def write_eval_config(target: RolloutTarget, suite: Any) -> Path:
    """Write the config of *target* and return its path (overwrites: it is derived, never edited)."""
    path = target.runs_root / "_configs" / target.suite_name / f"{target.checkpoint_id}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "# Written by the shopsimrl Dagster pipeline; rerun by hand with `shopsimrl run <this file>`.\n"
    text += yaml.safe_dump(eval_config_document(target, suite), sort_keys=False, allow_unicode=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
