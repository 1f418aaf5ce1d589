"""benchmarks.training_overhead runs end to end (tiny sizes) and reports both clients' CPU per step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_training_overhead_quick(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.training_overhead", "--quick", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text(encoding="utf-8"))
    [row] = doc["rows"].values()
    assert row["evaluation_cpu_ms_per_step"] > 0 and row["training_cpu_ms_per_step"] > 0
    assert row["rounds"][0]["training"]["steps"] > 0 and row["rounds"][0]["training"]["failed"] == 0
    assert "training / evaluation" in done.stdout
