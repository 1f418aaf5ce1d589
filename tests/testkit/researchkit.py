"""Helpers of the research tests: the deterministic analyst endpoint as a subprocess, and run configs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml


class AnalystServer:
    """``python -m shopsim_sandbox.analyst`` on a free port; ``url`` is the OpenAI base URL (``.../v1``)."""

    def __init__(self, workdir: Path, *, seed: int = 0, malformed_rate: float = 0.25,
                 leak_card_rate: float = 0.0) -> None:
        self.ready = workdir / f"analyst-{seed}-{malformed_rate}-{leak_card_rate}.json"
        self.proc = subprocess.Popen([sys.executable, "-m", "shopsim_sandbox.analyst", "--port", "0", "--seed",
                                      str(seed), "--malformed-rate", str(malformed_rate), "--leak-card-rate",
                                      str(leak_card_rate), "--ready-file", str(self.ready)])
        for _ in range(600):
            if self.ready.exists():
                break
            if self.proc.poll() is not None:
                raise RuntimeError("analyst server exited at startup")
            time.sleep(0.05)
        self.url = json.loads(self.ready.read_text())["url"]
        base = self.url.rsplit("/v1", 1)[0]
        for _ in range(600):
            try:
                httpx.get(base + "/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        self.base = base

    def stats(self) -> dict:
        return httpx.get(self.base + "/stats", timeout=5).json()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def run_config(path: Path, sandbox, *, name: str, split: str, sample_size=None, seed=20260831, skills=None) -> Path:
    doc = {"experiment": {"name": name, "output_dir": str(path.parent / "runs"), "seed": seed, "concurrency": 4},
           "tasks": {"split_file": str(sandbox.split_file), "split": split, "sample_size": sample_size},
           "environment": {"base_url": sandbox.env_url},
           "skills": {"path": str(skills) if skills else None},
           "model": {"name": sandbox.served_model, "base_url": sandbox.policy_url, "api_key_env": None,
                     "checkpoint_id": "ckpt-research", "temperature": 0.7}}
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path
