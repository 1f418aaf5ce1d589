"""Dagster overhead per checkpoint evaluation, with the core CLI beside it.

    .venv/bin/python -m benchmarks.dagster_overhead [--episodes 60] [--repeats 3]

Against a local sandbox (environment + baseline policy on loopback), for one checkpoint of the val
suite, whole processes as a user starts them:

- ``dagster job execute -m shopsimrl_dagster.definitions -a defs -j evaluate_val`` (rollout → summary → comparison, the
  rollout's five checks; the project's instance and settings);
- ``shopsimrl run <the generated config>`` on the same config (the CLI's own time).

Both are measured *fresh* (no episode done yet; each in its own run directory) and *resumed* (every
episode done: what a retried or re-launched partition costs). Wall time from the parent, CPU
(user+system of the child and its children) from the OS (``getrusage(RUSAGE_CHILDREN)``). Prints a
table and writes ``benchmarks/results/dagster_overhead.json``. The acceptance bound of issue 9 is
"Dagster resumed ≤ CLI resumed + 5 s".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "benchmarks" / "results" / "dagster_overhead.json"
BIN = Path(sys.executable).parent


def _timed(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(
            f"benchmark: {' '.join(argv[:4])}… failed ({proc.returncode}):\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}


def _median(samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {key: round(statistics.median(s[key] for s in samples), 3) for key in ("wall_s", "cpu_s")} | {
        "samples": samples
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the table; write the JSON. Exit 0."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dagster_overhead", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--episodes", type=int, default=60, help="val episodes per checkpoint (default 60, the whole sandbox val split)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="measurements of each resumed case (median reported)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes (default: benchmarks/results/)")
    args = parser.parse_args(argv)

    import dagster as dg

    from shopsim_sandbox.testing import SandboxServer
    from shopsimrl_dagster.instance import prepare_dagster_home
    from shopsimrl_dagster.registry import Checkpoint, register_checkpoint
    from shopsimrl_dagster.settings import load_pipeline_settings

    with tempfile.TemporaryDirectory(prefix="shopsimrl-dagster-bench-") as tmp, SandboxServer(slots=16) as sandbox:
        work = Path(tmp)
        base = yaml.safe_load((REPO_ROOT / "configs" / "pipeline" / "pipeline.yaml").read_text(encoding="utf-8"))
        base.update(
            runs_root=str(work / "runs"), checkpoint_registry=str(work / "registry"), split_file=str(sandbox.split_file)
        )
        base["environment"]["base_url"] = sandbox.env_url
        # external mode: the benchmark measures Dagster around a rollout, not a server start per run
        base["inference"].update(mode="external", base_url=sandbox.policy_url, name=sandbox.served_model)
        base["suites"]["val"]["sample_size"] = args.episodes if args.episodes < 60 else None
        base["automation"].update(sensor_running=False, schedule_running=False)
        settings_path = work / "pipeline.yaml"
        settings_path.write_text(yaml.safe_dump(base, sort_keys=False), encoding="utf-8")
        settings = load_pipeline_settings(settings_path)
        for checkpoint_id, step in (("bench-a", 100),):
            register_checkpoint(settings.checkpoint_registry, Checkpoint(checkpoint_id, step))
        home = prepare_dagster_home(work / "dagster_home")
        env = {**os.environ, "DAGSTER_HOME": str(home), "SHOPSIMRL_PIPELINE_CONFIG": str(settings_path)}
        instance = dg.DagsterInstance.from_config(str(home))
        try:
            instance.add_dynamic_partitions("checkpoints", ["bench-a"])
        finally:
            instance.dispose()
        dagster = [str(BIN / "dagster"), "job", "execute", "-m", "shopsimrl_dagster.definitions", "-a", "defs"]
        _timed([*dagster, "-j", "prepare_plans"], env)  # once per settings change; not part of a checkpoint evaluation
        evaluate = [*dagster, "-j", "evaluate_val", "--tags", json.dumps({"dagster/partition": "bench-a"})]

        results: dict[str, Any] = {}
        results["dagster_fresh"] = _timed(evaluate, env)
        config = settings.runs_root / "_configs" / "val" / "bench-a.yaml"
        fresh_cli = yaml.safe_load(config.read_text(encoding="utf-8"))
        fresh_cli["experiment"]["name"] = "bench-cli-fresh"
        cli_config = work / "cli-fresh.yaml"
        cli_config.write_text(yaml.safe_dump(fresh_cli, sort_keys=False), encoding="utf-8")
        shopsimrl = [str(BIN / "shopsimrl"), "run", "--quiet"]
        results["cli_fresh"] = _timed([*shopsimrl, str(cli_config)], env)
        results["dagster_resumed"] = _median([_timed(evaluate, env) for _ in range(args.repeats)])
        results["cli_resumed"] = _median([_timed([*shopsimrl, str(config)], env) for _ in range(args.repeats)])
        episodes = len(
            (settings.runs_root / "val" / "bench-a" / "traces.jsonl").read_text(encoding="utf-8").splitlines()
        )

    rows = []
    for case in ("fresh", "resumed"):
        cli, dag = results[f"cli_{case}"], results[f"dagster_{case}"]
        rows.append(
            {
                "case": case,
                "cli_wall_s": cli["wall_s"],
                "cli_cpu_s": cli["cpu_s"],
                "dagster_wall_s": dag["wall_s"],
                "dagster_cpu_s": dag["cpu_s"],
                "overhead_wall_s": round(dag["wall_s"] - cli["wall_s"], 3),
                "wall_ratio": round(dag["wall_s"] / cli["wall_s"], 2) if cli["wall_s"] else None,
            }
        )
    report = {
        "benchmark": "dagster_overhead",
        "episodes": episodes,
        "repeats": args.repeats,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg": os.getloadavg()},
        "bound": "dagster resumed wall <= cli resumed wall + 5 s",
        "bound_holds": rows[1]["overhead_wall_s"] <= 5.0,
        "rows": rows,
        "raw": results,
    }
    header = (f"{'case':<8} {'CLI wall':>9} {'CLI CPU':>8} {'Dagster wall':>13} {'Dagster CPU':>12} "
              f"{'overhead':>9} {'ratio':>6}")
    print(
        f"Dagster overhead per checkpoint evaluation ({episodes} val episodes, sandbox on loopback, "
        f"load avg {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)"
    )
    print(header)
    for row in rows:
        print(
            f"{row['case']:<8} {row['cli_wall_s']:>8.2f}s {row['cli_cpu_s']:>7.2f}s {row['dagster_wall_s']:>12.2f}s "
            f"{row['dagster_cpu_s']:>11.2f}s {row['overhead_wall_s']:>+8.2f}s {row['wall_ratio']:>6}"
        )
    print(f"bound (resumed overhead <= 5 s): {'holds' if report['bound_holds'] else 'VIOLATED'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
