"""The trainer-side helper ``shopsimrl_pipes`` works without Dagster: a trainer's environment needs only
``dagster-pipes`` (and shopsimrl for the registry), and outside a Pipes process it prints its reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, sys
from pathlib import Path
from shopsimrl_pipes import open_trainer_report
with open_trainer_report() as report:
    assert not report.under_dagster
    report.step(1, reward=0.25, success=0.25, frontier_share=0.5, tokens_per_s=100.0)
    weights = Path(report.extras["checkpoint_dir"]) / "w.json"
    weights.write_text("{}")
    print(report.checkpoint(weights, 1))
    try:
        report.step(2, reward=float("nan"), success=0.0)
    except ValueError as exc:
        print("refused:", exc)
    report.finish(note="done")
print("dagster imported:", sorted(m for m in sys.modules if m == "dagster" or m.startswith("dagster.")))
"""


def test_the_helper_reports_and_registers_outside_dagster_without_importing_it(tmp_path: Path) -> None:
    from shopsimrl_dagster.registry import read_registry

    extras = {"round": "round-009", "checkpoint_dir": str(tmp_path), "registry": str(tmp_path / "registry")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SHOPSIMRL_ROUND_EXTRAS": json.dumps(extras)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "round-009-step-000001"
    assert lines[1] == "refused: reward: nan is not a finite number; report a finite value or None"
    assert json.loads(lines[2]) == {"steps": 1, "reward": 0.25, "success": 0.25, "frontier_share": 0.5,
                                    "tokens_per_s": 100.0, "checkpoints": ["round-009-step-000001"], "note": "done"}
    assert lines[3] == "dagster imported: []"
    assert "trainer step 1: reward=0.25" in done.stderr
    [entry] = read_registry(tmp_path / "registry")
    assert (entry.checkpoint_id, entry.step, entry.weights) == ("round-009-step-000001", 1, str(tmp_path / "w.json"))
