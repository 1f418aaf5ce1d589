"""Ctrl-C over real HTTP: SIGINT to a running `shopsimrl run` releases every lease, leaves only whole
trace lines, writes a summary, frees the lock and exits 130; rerunning resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from shopsim_sandbox.testing import SandboxServer

EXE = [sys.executable, "-m", "shopsimrl_core.cli._main"]


@pytest.mark.slow
def test_sigint_stops_cleanly_and_resumes(tmp_path: Path) -> None:
    with SandboxServer(slots=4, latency_ms=250) as server:
        config = tmp_path / "slow.yaml"
        config.write_text(yaml.safe_dump({
            "experiment": {"name": "slow", "output_dir": "runs", "seed": 20260830, "concurrency": 4},
            "tasks": {"split_file": str(server.split_file), "split": "val", "sample_size": 12},
            "environment": {"base_url": server.env_url},
            "model": {"name": server.served_model, "base_url": server.policy_url, "api_key_env": None},
        }), encoding="utf-8")
        traces = tmp_path / "runs" / "slow" / "traces.jsonl"
        proc = subprocess.Popen(
            [*EXE, "run", "--progress", "none", str(config)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 120  # a wait for progress, not an assertion on speed
        while time.monotonic() < deadline and proc.poll() is None:
            if traces.exists() and len(traces.read_bytes().splitlines()) >= 2:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "run finished before it could be interrupted"
        os.kill(proc.pid, signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 130, stderr
        assert "interrupted" in stderr

        health = httpx.get(f"{server.env_url}/healthz", timeout=10).json()
        assert health["free_slots"] == health["environment_slots"] == 4  # every in-flight lease released

        raw = traces.read_bytes()
        assert raw.endswith(b"\n")
        stored = [json.loads(line) for line in raw.splitlines()]  # every line whole
        assert 2 <= len(stored) < 12
        run_dir = traces.parent
        assert json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["counts"]["requested"] == 12
        assert (run_dir / "run.lock").read_text() == ""

        done = subprocess.run(
            [*EXE, "run", "--progress", "none", str(config)], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        assert summary["counts"]["completed"] == 12
        completed_ids = [r["episode_id"] for r in stored if r["status"] == "completed"]
        after = [json.loads(line) for line in traces.read_bytes().splitlines()]
        assert all(sum(1 for r in after if r["episode_id"] == eid) == 1 for eid in completed_ids)
