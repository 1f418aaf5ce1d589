"""Smoke test of the benchmarks: tiny sizes, real servers on loopback, checks the output structure.

No speed is asserted here (speed lives in benchmarks/); only that the benchmark runs every
scenario without failed episodes and writes a well-formed JSON document and plot.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.core_throughput import steady_rate  # noqa: E402
from benchmarks.run_all import discover  # noqa: E402

TIMING_KEYS = {"model_ms", "env_ms", "harness_ms"}


def _check_row(row: dict, where: str) -> None:
    assert row["failed_total"] == 0, f"{where}: failed episodes: {[r.get('errors') for r in row['runs']]}"
    assert row["steps"] > 0 and row["steps_per_s"] > 0, where
    assert row["client_cpu_ms_per_step"] > 0, where
    assert len(row["runs"]) == 1 and row["runs"][0]["steps"] == row["steps"], where


def test_core_throughput_quick_run_writes_complete_results(tmp_path: Path) -> None:
    out = tmp_path / "core.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.core_throughput", "--quick", "--repeats", "1",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["schema"] == "shopsimrl-bench-core-throughput-v1"
    assert set(doc["zero_latency"]) == {"c1", "c8", "c64"}
    for key, row in doc["zero_latency"].items():
        _check_row(row, f"zero_latency.{key}")
        assert set(row["timing_p50_ms"]) == TIMING_KEYS and row["timing_p50_ms"]["model_ms"] > 0
    for section in ("httpx_pool", "sharded_httpx", "stream_transport"):  # other transports, same episodes
        assert set(doc[section]) == {"c1", "c8", "c64"}, section
        for key, row in doc[section].items():
            _check_row(row, f"{section}.{key}")
            assert row["steps"] == doc["zero_latency"][key]["steps"], "same plan, same stub: same episodes"
    assert {"c1", "c8", "c64"} <= set(doc["thread_reference"])
    for key, row in doc["thread_reference"].items():
        _check_row(row, f"thread_reference.{key}")
    assert set(doc["latency_bound"]) == {"stub", "stub_sharded_httpx", "stub_stream_transport", "sandbox_policy",
                                         "stub_httpx_pool", "sandbox_policy_httpx_pool"}
    for policy, row in doc["latency_bound"].items():
        _check_row(row, f"latency_bound.{policy}")
        assert row["ideal_steps_per_s"] == row["concurrency"] / 0.2
        assert 0 < row["fraction_of_ideal"] == row["steps_per_s"] / row["ideal_steps_per_s"] or \
            abs(row["fraction_of_ideal"] - row["steps_per_s"] / row["ideal_steps_per_s"]) < 0.01
        # the model latency knob is honoured: every model call took at least the 200 ms
        assert row["timing_p50_ms"]["model_ms"] >= 200
    assert {"c64_httpx_vs_thread_reference", "c8_httpx_vs_stream_transport", "latency_httpx_vs_sharded_httpx"} <= set(doc["ratios"])
    assert (tmp_path / doc["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "c64_default_vs_httpx_pool" in doc["ratios"]
    assert "runtime, default (streams transport)" in done.stdout and "wrote" in done.stdout


def test_steady_rate_ignores_the_tail_after_the_last_episode_start() -> None:
    # two workers from t=0: episodes of 10 steps over 1 s each, the last one starts at t=2 and
    # runs alone until t=3: steady window [0, 2] holds 40 steps → 20 steps/s (overall 50/3)
    intervals = [(0.0, 1.0, 10), (0.0, 1.0, 10), (1.0, 2.0, 10), (1.0, 2.0, 10), (2.0, 3.0, 10)]
    assert steady_rate(intervals, 0.0) == 20.0
    assert steady_rate([], 0.0) is None


def test_run_all_discovers_every_benchmark_module() -> None:
    names = discover()
    assert names[0] == "core_throughput"
    assert "run_all" not in names and not any(n.startswith("_") for n in names)
    if (ROOT / "benchmarks" / "sandbox_bench.py").exists():
        assert "sandbox_bench" in names
