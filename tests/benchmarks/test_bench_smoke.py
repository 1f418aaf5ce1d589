"""Smoke test of the benchmarks: tiny sizes, real servers on loopback, checks the output structure.

No speed is asserted here (speed lives in benchmarks/); only that the benchmark runs every
scenario without failed episodes and writes a well-formed JSON document and plot.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from testkit.deadlines import run_watched

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `benchmarks` is a top-level folder, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.core_throughput import steady_rate  # noqa: E402
from benchmarks.run_all import discover  # noqa: E402

TIMING_KEYS = {"model_ms", "env_ms", "harness_ms"}
# Each benchmark prints a line per scenario and repeat: fail only after this long without one (issue 24:
# fixed totals of 120-300 s failed these smoke runs at load 20 on 2 cores while they were progressing).
STALL_S = 180


def _check_row(row: dict, where: str) -> None:
    assert row["failed_total"] == 0, f"{where}: failed episodes: {[r.get('errors') for r in row['runs']]}"
    assert row["steps"] > 0 and row["steps_per_s"] > 0, where
    assert row["client_cpu_ms_per_step"] > 0, where
    assert len(row["runs"]) == 1 and row["runs"][0]["steps"] == row["steps"], where


@pytest.mark.slow
def test_core_throughput_quick_run_writes_complete_results(tmp_path: Path) -> None:
    out = tmp_path / "core.json"
    done = run_watched([sys.executable, "-m", "benchmarks.core_throughput", "--quick", "--repeats", "1",
                        "--out", str(out)], cwd=ROOT, stall_seconds=STALL_S)
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
    assert {"c64_httpx_vs_thread_reference", "c8_httpx_vs_stream_transport", "latency_httpx_vs_sharded_httpx"} <= set(
        doc["ratios"]
    )
    assert (tmp_path / doc["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "c64_default_vs_httpx_pool" in doc["ratios"]
    assert "runtime, default (aiohttp engine)" in done.stdout and "wrote" in done.stdout


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


def test_client_shape_quick_run_measures_whole_processes_beside_the_reference(tmp_path: Path) -> None:
    out = tmp_path / "shape.json"
    done = run_watched(
        [sys.executable, "-m", "benchmarks.client_shape", "--quick", "--out", str(out)], cwd=ROOT, stall_seconds=STALL_S
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["schema"] == "shopsimrl-bench-client-shape-v1"
    assert set(doc["rows"]) == {"c1_0ms", "c8_200ms"}
    for label, rows in doc["rows"].items():
        assert set(rows) == {"default", "reference"}, label
        for name, row in rows.items():
            assert row["failed"] == 0, (label, name, row.get("errors"))
            assert row["steps"] > 0 and row["cpu_s"] > 0 and row["wall_s"] > 0, (label, name)
        # the stub's 10-step episodes end in a purchase: every episode of ours plays all ten steps
        assert rows["default"]["steps"] == 10 * rows["default"]["episodes"], label
        assert rows["default"]["vs_reference"]["steps_per_s_ratio"] > 0
    latency = doc["rows"]["c8_200ms"]["default"]
    assert latency["ideal_steps_per_s"] == 8 / 0.2 and 0 < latency["fraction_of_ideal"] <= 1.0
    assert "shopsimrl run (default)" in done.stdout and "thread reference" in done.stdout


def test_http_engines_quick_run_compares_every_available_engine(tmp_path: Path) -> None:
    out = tmp_path / "engines.json"
    done = run_watched(
        [
            sys.executable,
            "-m",
            "benchmarks.http_engines",
            "--quick",
            "--engines",
            "aiohttp,httpx_aiohttp,httpx_aiohttp_bypass,httpx",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        stall_seconds=STALL_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert set(doc["engines"]) == {"aiohttp", "httpx_aiohttp", "httpx_aiohttp_bypass", "httpx"}
    steps = {row["steps"] for row in doc["engines"].values()}
    assert len(steps) == 1 and steps.pop() > 0  # every engine played the same episodes to the end
    assert min(row["loop_cpu_vs_best"] for row in doc["engines"].values()) == 1.0


def test_dagster_overhead_quick_run_measures_both_paths(tmp_path: Path) -> None:
    # the benchmark drives the shipped pipeline.yaml: a settings change that breaks it fails here, not in a release
    out = tmp_path / "overhead.json"
    done = run_watched(
        [sys.executable, "-m", "benchmarks.dagster_overhead", "--episodes", "6", "--repeats", "1", "--out", str(out)],
        cwd=ROOT,
        stall_seconds=STALL_S,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    raw = json.loads(out.read_text(encoding="utf-8"))["raw"]
    assert {"dagster_fresh", "cli_fresh", "dagster_resumed", "cli_resumed"} <= set(raw)
    assert all(raw[case]["wall_s"] > 0 and raw[case]["cpu_s"] > 0 for case in ("dagster_fresh", "cli_fresh"))
