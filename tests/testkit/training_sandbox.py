"""Sandbox helpers of the training tests: a policy server on a checkpoint, configs, curricula, split subsets."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

__all__ = ["policy_server", "training_config", "lapse_curriculum", "write_split_subset"]


@contextlib.contextmanager
def policy_server(folder: Path, lapses: dict[str, float], *, model: str = "policy") -> Iterator[str]:
    """A baseline policy server (own process, free port) on a checkpoint with *lapses*; yields its ``/v1`` URL.

    The wait for readiness follows the process: it ends when the ready file appears or the process exits.
    """
    checkpoint = folder / f"policy-{abs(hash(json.dumps(lapses, sort_keys=True)))}.json"
    checkpoint.write_text(json.dumps({"format": "shopsim-policy-checkpoint-v1", "lapses": lapses}), encoding="utf-8")
    ready = checkpoint.with_suffix(".ready")
    ready.unlink(missing_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "shopsim_sandbox.policy", "serve", "--checkpoint", str(checkpoint), "--port", "0",
         "--served-model-name", model, "--ready-file", str(ready)],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        while not ready.exists():
            if process.poll() is not None:
                said = process.stderr.read().decode() if process.stderr else ""
                raise AssertionError(f"policy server exited: {said}")
            time.sleep(0.05)
        while True:  # the file may be seen before it is written whole
            try:
                port = json.loads(ready.read_text(encoding="utf-8"))["port"]
                break
            except (ValueError, KeyError):
                time.sleep(0.02)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        if process.stderr:
            process.stderr.close()


def write_split_subset(folder: Path, source: Path, sizes: dict[str, int]) -> Path:
    """A split file with the first *sizes[name]* task ids of each split of *source* (the checks dropped)."""
    data = json.loads(source.read_text(encoding="utf-8"))
    splits = {}
    for name, body in data["splits"].items():
        body = dict(body)
        body["task_ids"] = list(body["task_ids"])[: sizes.get(name, len(body["task_ids"]))]
        body.pop("task_ids_sha256", None)
        body.pop("task_count", None)
        splits[name] = body
    out = {key: value for key, value in data.items() if key not in ("splits", "checks")}
    out["splits"] = splits
    path = folder / "splits.json"
    path.write_text(json.dumps(out, ensure_ascii=False), encoding="utf-8")
    return path


def training_config(folder: Path, *, split_file: Path, env_url: str, policy_url: str, model: str, split: str = "train",
                    seed: int = 7, temperature: float = 1.0, name: str = "training", **model_extra: Any) -> Path:
    """An evaluation YAML the training session and `shopsimrl run` both read (temperature > 0 for exact tokens)."""
    data = {
        "experiment": {"name": name, "output_dir": str(folder / "runs"), "seed": seed, "concurrency": 4},
        "tasks": {"split_file": str(split_file), "split": split},
        "environment": {"base_url": env_url, "timeout": 30},
        "model": {"name": model, "base_url": policy_url, "api_key_env": None, "temperature": temperature,
                  "max_retries": 2, "retry_backoff_seconds": 0.05, **model_extra},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def lapse_curriculum(chunks: dict[str, str], *, round_id: str = "round-001", seed: int = 5,
                     skill_free_probability: float = 1.0) -> dict[str, Any]:
    """A frozen curriculum of *chunks* (id → text); q = 1: every group skill-free (the full text only in retries)."""
    from shopsimrl_core.skills._curriculum import build_curriculum

    bank = {"schema_version": "shopsimrl-skillbank-v1", "bank_version": "1", "skills": [
        {"skill_id": skill_id, "content": text, "version": "1", "enabled": True,
         "metadata": {"estimated_effect": 0.1}} for skill_id, text in chunks.items()]}
    return build_curriculum(bank, round_id=round_id, seed=seed, skill_free_probability=skill_free_probability)
