"""Smoke run of benchmarks/run_index.py (issue 25): tiny runs from today's writers, measured as a user runs them.

No speed is asserted (speed lives in benchmarks/); only that the seed run, the generated runs, the index
build, the resume no-op and ``shopsimrl summarize`` all ran as real processes and that the results and the
curve are well formed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from testkit.deadlines import run_watched

ROOT = Path(__file__).resolve().parents[2]
STALL_S = 180  # fail only after this long without a line of progress (a loaded 2-core machine)


@pytest.mark.slow
def test_run_index_quick_measures_every_phase_and_draws_the_curve(tmp_path: Path) -> None:
    done = run_watched(
        [sys.executable, "-m", "benchmarks.run_index", "--quick", "--work", str(tmp_path), "--results", str(tmp_path)],
        cwd=ROOT,
        stall_seconds=STALL_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    wrote = [line.split(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith("wrote ")]
    curve_path = Path(wrote[-1])
    assert curve_path.name == "run_index_curve.json"
    assert curve_path.parent != ROOT / "benchmarks" / "results", "--quick must not replace the committed results"
    curve = json.loads(curve_path.read_text(encoding="utf-8"))
    assert [row["episodes"] for row in curve["rows"]] == [40, 80]
    for episodes in (40, 80):
        doc = json.loads((curve_path.parent / f"run_index-{episodes}.json").read_text(encoding="utf-8"))
        # every planned episode is in the summary `shopsimrl run` wrote on the resume that had nothing to do
        assert doc["summary_counts"] == {"requested": episodes, "completed": episodes, "failed": 0}
        assert doc["generate"]["traces_bytes"] > 1000 * episodes  # real records of the seed run, not stubs
        for phase in ("build", "resume_first"):
            assert doc[phase]["cpu_s"] > 0 and doc[phase]["peak_rss_mb"] > 0, phase
        for phase in ("resume", "summarize"):
            assert len(doc[phase]["runs"]) == 1 and doc[phase]["cpu_s"]["median"] > 0, phase
    assert (curve_path.parent / "run_index_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob("bench-run-index-*")), "the generated runs are deleted without --keep"
