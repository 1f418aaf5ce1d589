"""`shopsimrl compare` on a bare and a skills run of the same plan (real sandbox): refused as misaligned
unless the intended difference is named, and then every other field must still match."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from testkit.researchkit import run_config

EXE = [sys.executable, "-m", "shopsimrl_core.cli._main"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EXE, *args], capture_output=True, text=True, timeout=120)


def test_compare_bare_vs_skills_needs_the_intended_flag(sandbox, tmp_path: Path) -> None:
    from shopsimrl_core.runs.config._config import load_config
    from shopsimrl_core.runs.execution._evaluator import run_evaluation
    from shopsimrl_core.skills import build_skillbank

    bank = tmp_path / "bank.json"
    bank.write_text(json.dumps(build_skillbank(
        [{"skill_id": "check-options", "content": "### 核对规格\n\n- 购买前逐项核对规格"}], bank_version="t")))
    bare = run_evaluation(load_config(run_config(tmp_path / "a.yaml", sandbox, name="bare", split="val",
                                                 sample_size=4, seed=1)))
    skills = run_evaluation(load_config(run_config(tmp_path / "b.yaml", sandbox, name="skills", split="val",
                                                   sample_size=4, seed=1, skills=bank)))
    refused = _cli("compare", str(bare.run_dir), str(skills.run_dir), "--bootstrap-samples", "200")
    assert refused.returncode == 2 and "comparison-misaligned" in refused.stderr and "skills." in refused.stderr
    assert "--intended" in refused.stderr  # the refusal names the way out
    done = _cli("compare", str(bare.run_dir), str(skills.run_dir), "--bootstrap-samples", "200",
                "--intended", "skills")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["alignment"]["status"] == "mismatched" and result["alignment"]["unintended_differences"] == []
    assert result["alignment"]["intended"] == ["skills"]
    assert all(d.startswith("skills.") for d in result["alignment"]["differences"])
    assert result["paired"]["pairs"] == 4
    # naming an intended field does not excuse a different one: another split's run is still refused
    other = run_evaluation(load_config(run_config(tmp_path / "c.yaml", sandbox, name="other", split="train",
                                                  sample_size=4, seed=1, skills=bank)))
    still = _cli("compare", str(bare.run_dir), str(other.run_dir), "--intended", "skills")
    assert still.returncode == 2 and "task_split" in still.stderr
