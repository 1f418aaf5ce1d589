"""Time to results when checkpoints are served by launched servers: model loads, and wall time against the ideal.

    .venv/bin/python -m benchmarks.time_to_results [--load-time 10] [--episodes 12] [--latency-ms 20]

The sandbox policy server stands in for vLLM: ``--load-time`` seconds of sleep before it listens (vLLM's
weights, compile and CUDA graphs), and vLLM's runtime LoRA endpoints. Two backfills, each run a process
of its own as a Dagster run is (``shopsimrl run``'s path: ``run_evaluation`` with the checkpoint's
``serve`` section), one after the other:

- **full**: 3 checkpoints with their own weights × 2 suites (val, train), a checkpoint's suites back to back;
- **lora**: 4 LoRA adapters over one base × 1 suite (val);
- then each backfill again: everything is complete, so nothing is left to do.

Two serving modes, in the same session: **before** = ``idle_timeout: 0`` (a server stops when its run
ends, so every run starts one: what every run paid before the pool), **after** = ``idle_timeout: 600``
(the server pool: one load per base model; adapters hot-loaded). For each: server starts (counted
from the runs' own "started inference server" lines) and wall time from the first run's start to the
last run's summary. The **ideal** is measured in the same session: one load per base model (a bare start
of the stand-in with the same load time, from spawn to answering ``/v1/models``) + the rollouts (the same
runs, as processes, against servers started beforehand and left out of the clock: no ``serve`` section).
Prints a table and writes ``benchmarks/results/time_to_results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "benchmarks" / "results" / "time_to_results.json"
LAPSES = {"ckpt-100": 0.8, "ckpt-200": 0.5, "ckpt-300": 0.2}
ADAPTERS = {"lora-100": 0.9, "lora-200": 0.6, "lora-300": 0.3, "lora-400": 0.0}


def _child(config_path: str) -> int:
    """One run (a process, as a Dagster run is): print its server starts and how long it waited for a server."""
    from shopsimrl_core.runs import load_config, run_evaluation

    config = load_config(config_path)

    seen: dict[str, Any] = {"starts": 0, "ready_s": None, "nothing_left": False}

    def progress(event: Any) -> None:
        if event.kind == "notice":
            message = str(getattr(event, "message", ""))
            seen["starts"] += message.startswith("started inference server")
            seen["nothing_left"] |= message.startswith("nothing left to run")
        elif event.kind == "start" and seen["ready_s"] is None:
            seen["ready_s"] = round(time.monotonic() - t0, 3)  # the server answered: episodes begin

    t0 = time.monotonic()  # the run asks for its server here: what follows until "start" is waiting for it
    result = run_evaluation(config, progress=progress)
    seen["completed"] = result.counts.completed
    print("RESULT " + json.dumps(seen), flush=True)
    return 0


def _policy(path: Path, rate: float) -> Path:
    rates = {"ignore_budget": rate, "first_option": rate, "impatient": rate, "terse_query": rate}
    path.write_text(json.dumps({"format": "shopsim-policy-checkpoint-v1", "lapses": rates}), encoding="utf-8")
    return path


def _config(work: Path, sandbox: Any, args: argparse.Namespace, *, mode: str, name: str, suite: str,
            serve: dict[str, Any] | None = None, base_url: str | None = None) -> Path:  # fmt: skip
    document: dict[str, Any] = {
        "experiment": {"name": f"{suite}-{name}", "output_dir": str(work / mode / "runs"), "concurrency": 8},
        "tasks": {"split_file": str(sandbox.split_file), "split": suite, "sample_size": args.episodes},
        "environment": {"base_url": sandbox.env_url},
        "model": {"name": name, "api_key_env": None, **({"base_url": base_url} if base_url else {})},
    }
    if serve is not None:
        document["serve"] = {
            "server": "shopsim_sandbox",
            "state_dir": str(work / mode / "servers"),
            "start_timeout": args.load_time + 120,
            "idle_timeout": 0 if mode == "before" else 600,
            "extra_args": ["--load-time", str(args.load_time), "--latency-ms", str(args.latency_ms)],
            **serve,
        }
    path = work / mode / "configs" / f"{suite}-{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def _backfill(configs: list[Path]) -> dict[str, Any]:
    runs = []
    started = time.monotonic()
    for config in configs:
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.time_to_results", "--child", str(config)],
            cwd=REPO_ROOT, capture_output=True, text=True,
        )  # fmt: skip
        wall = time.monotonic() - t0
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            raise SystemExit(f"benchmark: {config.name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        seen = json.loads(lines[-1][len("RESULT ") :])
        runs.append({"config": config.name, "wall_s": round(wall, 3), **seen})
    wall = time.monotonic() - started
    return {"runs": runs, "starts": sum(r["starts"] for r in runs), "wall_s": round(wall, 3)}


def _policy_server(
    checkpoint: Path, name: str, work: Path, args: argparse.Namespace, load_time: float = 0.0
) -> tuple[subprocess.Popen[bytes], str, float]:
    """A stand-in server started by hand (its process, its base URL, seconds from spawn to serving /v1/models)."""
    import httpx

    ready = work / f"{name}-{time.monotonic_ns()}.ready"
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "shopsim_sandbox.policy", "serve", "--checkpoint", str(checkpoint), "--port", "0",
         "--served-model-name", name, "--ready-file", str(ready), "--latency-ms", str(args.latency_ms),
         "--load-time", str(load_time)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    while True:
        if ready.exists():
            try:
                url = f"http://127.0.0.1:{json.loads(ready.read_text())['port']}/v1"
                if httpx.get(f"{url}/models", timeout=5, trust_env=False).status_code == 200:
                    return process, url, time.monotonic() - started
            except (ValueError, KeyError, httpx.HTTPError):
                pass
        if process.poll() is not None:
            raise SystemExit(f"benchmark: the stand-in server for {name} exited ({process.returncode})")
        time.sleep(0.02)


def _stop_pool(state_dir: Path) -> None:
    from shopsimrl_core.serving._pool import Pool

    if not (state_dir / "pool").is_dir():
        return
    pool = Pool(state_dir)
    for path in sorted(pool.folder.glob("*.json")):
        entry = pool.entry(path.stem)
        if entry is not None:
            pool.stop(path.stem, entry, timeout=10)


def _loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


BASES = {"full_3x2": 3, "lora_4x1": 1, "full_rerun": 0, "lora_rerun": 0}
"""Model loads the ideal pays per backfill: one per base model (3 full checkpoints; 4 adapters over 1 base)."""


def _four(configs: dict[str, list[Path]]) -> dict[str, Any]:
    """A backfill of each kind, then each again with nothing left to do."""
    return {
        "full_3x2": _backfill(configs["full"]),
        "lora_4x1": _backfill(configs["lora"]),
        "full_rerun": _backfill(configs["full"]),
        "lora_rerun": _backfill(configs["lora"]),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with ``--child``, one run of it); print the table; write the JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.time_to_results", description=__doc__.split("\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--load-time", type=float, default=10.0, help="seconds the stand-in server loads (default 10)")
    parser.add_argument("--episodes", type=int, default=12, help="episodes per run (default 12)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="policy latency per completion (default 20)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes (default: benchmarks/results/)")
    args = parser.parse_args(argv)
    if args.child:
        return _child(args.child)

    from shopsim_sandbox.policy.adapter import write_adapter
    from shopsim_sandbox.testing import SandboxServer

    results: dict[str, Any] = {
        "benchmark": "time_to_results",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "loadavg_before": _loadavg()},
        "parameters": {"load_time_s": args.load_time, "episodes": args.episodes, "latency_ms": args.latency_ms},
        "modes": {},
    }
    with tempfile.TemporaryDirectory(prefix="shopsimrl-ttr-") as tmp, SandboxServer(slots=16, policy=False) as sandbox:
        work = Path(tmp)
        weights = {name: _policy(work / f"{name}.json", rate) for name, rate in LAPSES.items()}
        base = _policy(work / "base.json", 0.5)
        adapters = {
            name: write_adapter(work / "adapters" / name, rank=8, lapses={"ignore_budget": rate, "impatient": rate})
            for name, rate in ADAPTERS.items()
        }
        launched = {
            mode: {
                "full": [
                    _config(work, sandbox, args, mode=mode, name=name, suite=suite, serve={"weights": str(path)})
                    for name, path in weights.items()
                    for suite in ("val", "train")
                ],
                "lora": [
                    _config(
                        work,
                        sandbox,
                        args,
                        mode=mode,
                        name=name,
                        suite="val",
                        serve={"weights": str(base), "adapter": str(path)},
                    )  # fmt: skip
                    for name, path in adapters.items()
                ],
            }
            for mode in ("before", "after")
        }
        # The ideal's parts: one bare load of the stand-in, and every run against servers already up.
        loader, _, load_s = _policy_server(base, "load-probe", work, args, load_time=args.load_time)
        loader.terminate()
        loader.wait(timeout=30)
        results["measured_load_s"] = round(load_s, 3)
        servers = {name: _policy_server(path, name, work, args) for name, path in weights.items()}
        # An adapter's rollouts against a server started on its own rates (adapter_model.json is a policy checkpoint).
        for name, path in adapters.items():
            servers[name] = _policy_server(path / "adapter_model.json", name, work, args)
        reference = {
            "full": [_config(work, sandbox, args, mode="reference", name=name, suite=suite, base_url=servers[name][1])
                     for name in weights for suite in ("val", "train")],
            "lora": [_config(work, sandbox, args, mode="reference", name=name, suite="val", base_url=servers[name][1])
                     for name in adapters],
        }  # fmt: skip
        try:
            _backfill(reference["lora"][:1])  # warm-up, not counted: the first processes read cold files
            shutil.rmtree(work / "reference" / "runs")
            # The reference before and after the two modes: the machine's load drifts between them.
            results["modes"]["reference"] = _four(reference)
            for mode in ("before", "after"):
                try:
                    results["modes"][mode] = _four(launched[mode])
                finally:
                    _stop_pool(work / mode / "servers")
            shutil.rmtree(work / "reference" / "runs")
            results["modes"]["reference_again"] = _four(reference)
        finally:
            for process, _, _ in servers.values():
                process.terminate()
                process.wait(timeout=30)
    first, again = results["modes"]["reference"], results["modes"]["reference_again"]
    for mode in ("before", "after"):
        for name, row in results["modes"][mode].items():
            ideal = (first[name]["wall_s"] + again[name]["wall_s"]) / 2 + BASES[name] * load_s
            row["ideal_s"] = round(ideal, 3)
            row["ratio_to_ideal"] = round(row["wall_s"] / ideal, 3)
    results["machine"]["loadavg_after"] = _loadavg()
    print(f"measured load of the stand-in: {load_s:.1f} s (--load-time {args.load_time:g})")
    print(f"{'backfill':<12} {'mode':<7} {'starts':>6} {'wall s':>8} {'ideal s':>8} {'wall/ideal':>10}")
    for mode in ("before", "after"):
        for name, row in results["modes"][mode].items():
            print(
                f"{name:<12} {mode:<7} {row['starts']:>6} {row['wall_s']:>8.1f} {row['ideal_s']:>8.1f} "
                f"{row['ratio_to_ideal']:>10.2f}"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
