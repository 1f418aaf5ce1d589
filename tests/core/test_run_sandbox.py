"""End to end over real HTTP: `shopsimrl run` (subprocess) against the sandbox environment and its
baseline policy, then `shopsimrl summarize` reproduces the summary bytes except created_at."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

# The installed console script when present (what users type), else the module.
_SCRIPT = Path(sys.executable).with_name("shopsimrl")
EXE = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "shopsimrl_core.cli._main"]


def _config(tmp_path: Path, sandbox: Any, **experiment: Any) -> Path:
    data = {
        "experiment": {"name": "sandbox-val", "output_dir": "runs", "seed": 20260830, "concurrency": 4, **experiment},
        "tasks": {"split_file": str(sandbox.split_file), "split": "val", "sample_size": 8},
        "environment": {"base_url": sandbox.env_url, "timeout": 30},
        "model": {"name": sandbox.served_model, "base_url": sandbox.policy_url, "api_key_env": None,
                  "checkpoint_id": "sandbox-baseline", "max_retries": 3, "retry_backoff_seconds": 0.05},
    }
    path = tmp_path / "sandbox.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EXE, *args], capture_output=True, text=True, timeout=300)


def _without_created_at(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.lstrip().startswith('"created_at"')]


@pytest.mark.slow
def test_run_then_summarize_reproduces_summary(tmp_path: Path, sandbox: Any) -> None:
    config = _config(tmp_path, sandbox)
    done = _run("run", "--progress", "lines", str(config))
    assert done.returncode in (0, 1), done.stderr
    run_dir = tmp_path / "runs" / "sandbox-val"
    assert done.stdout.splitlines()[0] == f"run={run_dir} episodes=8 model={sandbox.served_model}"
    attempt_lines = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert len(attempt_lines) >= 8 and all(" status=" in line and " reward=" in line for line in attempt_lines)
    written = (run_dir / "summary.json").read_text(encoding="utf-8")
    summary = json.loads(written)
    assert summary["counts"]["requested"] == 8 and summary["counts"]["coverage"] <= 1.0
    assert summary["counts"]["completed"] == 8, summary["errors"]

    traces = [json.loads(line) for line in (run_dir / "traces.jsonl").read_text(encoding="utf-8").splitlines()]
    first = traces[0]
    assert first["schema_version"] == "shopsimrl-episode-v4" and first["attempt"]["number"] == 1
    assert first["provenance"]["model"]["checkpoint_id"] == "sandbox-baseline"
    assert first["provenance"]["environment"]["observation_version"] == "shopping-observation-v7"
    assert all(set(step["timing"]) == {"model_ms", "env_ms", "harness_ms"} for step in first["steps"])

    again = _run("summarize", str(run_dir))
    assert again.returncode == 0, again.stderr
    rewritten = (run_dir / "summary.json").read_text(encoding="utf-8")
    assert _without_created_at(rewritten) == _without_created_at(written)
    assert json.loads(again.stdout)["counts"] == summary["counts"]


@pytest.mark.slow
def test_resume_after_torn_tail_over_real_http(tmp_path: Path, sandbox: Any) -> None:
    config = _config(tmp_path, sandbox)
    assert _run("run", "--progress", "none", str(config)).returncode == 0
    traces = tmp_path / "runs" / "sandbox-val" / "traces.jsonl"
    lines = traces.read_bytes().splitlines(keepends=True)
    torn_id = json.loads(lines[-1])["episode_id"]
    traces.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # writer died mid-line
    # concurrency and timeouts changed: still the same semantic plan
    config = _config(tmp_path, sandbox, concurrency=2)
    done = _run("run", "--progress", "lines", str(config))
    assert done.returncode == 0, done.stderr
    rerun = [line for line in done.stdout.splitlines() if line.startswith("[")]
    assert len(rerun) == 1 and torn_id in rerun[0]
    records = []
    for raw in traces.read_bytes().splitlines():
        try:
            records.append(json.loads(raw))
        except ValueError:
            continue
    assert len(records) == 8 and records[-1]["episode_id"] == torn_id
    summary = json.loads((traces.parent / "summary.json").read_text(encoding="utf-8"))
    assert summary["counts"]["completed"] == 8 and summary["counts"]["trace_files"] == 8
    invocations = (traces.parent / "invocations.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["mode"] for line in invocations] == ["new", "resume"]
