"""Core runtime throughput: `run_evaluation` end to end over real loopback HTTP.

    .venv/bin/python -m benchmarks.core_throughput [--repeats 3] [--quick] [--out PATH]

Every server runs in its own subprocess (the sandbox environment, the stub model of
`benchmarks._stub_model`, or the sandbox baseline policy), so the client CPU measured here with
`time.process_time()` in this process is the runtime's own cost: episode state machine, httpx,
JSON, trace writing (fsync included).

Scenarios (each repeated `--repeats` times, interleaved, medians reported; the machine is shared):

* ``zero_latency``: stub model answering at once; concurrency 1, 8, 64 → steps/s, client CPU ms per
  step, server CPU ms per step, and the per-step timing split (model/env/harness) from the traces.
* ``latency_bound``: model latency 200 ms, concurrency 64 → achieved steps/s as a fraction of the
  ideal ``concurrency / 0.200 s`` (the earlier harness reached 57–64 %). Measured with the stub
  model (its ``--latency-ms``) and with the sandbox baseline policy (its latency knob,
  ``FaultConfig.latency_ms``); the latter shares one server process with the environment.
* ``thread_reference``: the earlier harness's shape (thread pool, new HTTP session per episode,
  same prompts and servers) measured in the same run, for a same-machine ratio.
* ``sharded_httpx``: our runtime with httpx's single pool replaced, through the transport seam,
  by 8 small httpx pools (httpcore's pool bookkeeping grows with connections × requests).
* ``stream_transport``: our runtime with httpx's pool swapped for a minimal asyncio-streams
  transport through the transport seam, to show what httpx itself costs.

The two transport variants also run in the latency-bound scenario (stub model).

Writes benchmarks/results/core_throughput.json and core_throughput.png (steps/s vs concurrency; the
table and the chart are drawn by ``benchmarks/_core_throughput_report.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._core_throughput_report import LEGACY, format_table, plot
from benchmarks._measure import (  # noqa: F401
    SPLIT,
    _quantile,
    _round,
    machine_facts,
    proc_cpu_seconds,
    steady_rate,
    timing_split,
)
from benchmarks._stub_model import StubModelServer
from shopsim_sandbox.faults import FaultConfig
from shopsim_sandbox.testing import SandboxServer

RESULTS_DIR = Path(__file__).resolve().parent / "results"
RESULTS = RESULTS_DIR / "core_throughput.json"
SCHEMA = "shopsimrl-bench-core-throughput-v1"


# -- one measurement of the real runtime ---------------------------------------------------------


def _config_mapping(*, name: str, workdir: Path, env_url: str, split_file: Path, model_url: str, model: str,
                    concurrency: int, episodes: int, max_steps: int, task_count: int,
                    http_transport: str = "auto") -> dict[str, Any]:
    repeats = max(1, math.ceil(episodes / task_count))
    return {
        "experiment": {"name": name, "output_dir": str(workdir / "runs"), "seed": 20261129,
                       "concurrency": concurrency, "max_episode_retries": 0},
        "tasks": {"split_file": str(split_file), "split": SPLIT, "sample_size": min(episodes, task_count),
                  "repeats": repeats},
        "environment": {"base_url": env_url, "timeout": 120, "max_connections": max(64, concurrency),
                        "http_transport": http_transport},
        "runtime": {"max_steps": max_steps},
        "model": {"name": model, "base_url": model_url, "api_key_env": None, "checkpoint_id": "bench",
                  "max_retries": 1, "timeout": 120, "trust_env": False, "max_connections": max(64, concurrency),
                  "http_transport": http_transport},
    }


def _task_count(split_file: Path) -> int:
    return int(json.loads(split_file.read_text(encoding="utf-8"))["splits"][SPLIT]["task_count"])


def measure_runtime(*, env_url: str, split_file: Path, model_url: str, model: str, concurrency: int, episodes: int,
                    max_steps: int, server_pids: list[int | None], transport: Callable[[], Any] | None = None,
                    http_transport: str = "auto") -> dict[str, Any]:
    """Run `arun_evaluation` once on a fresh run directory and measure it.

    Returns steps, episodes, failed episodes, wall and client CPU seconds of the episode window
    (first worker start → last attempt stored; plan building and the summary are left out),
    steps/s (overall and steady), client and server CPU ms per step and the per-step timing split.
    *transport* builds a fresh httpx transport for each of the two endpoints (the seam).
    """
    from shopsimrl_core import arun_evaluation, config_from_mapping

    workdir = Path(tempfile.mkdtemp(prefix="bench-core-"))
    try:
        mapping = _config_mapping(
            name=f"bench-c{concurrency}",
            workdir=workdir,
            env_url=env_url,
            split_file=split_file,
            model_url=model_url,
            model=model,
            concurrency=concurrency,
            episodes=episodes,
            max_steps=max_steps,
            task_count=_task_count(split_file),
            http_transport=http_transport,
        )
        config = config_from_mapping(mapping, base_dir=workdir)
        marks: dict[str, Any] = {"ends": {}}

        def on_progress(event: Any) -> None:
            if event.kind == "start":
                marks["wall0"], marks["cpu0"] = time.perf_counter(), time.process_time()
                marks["srv0"] = [proc_cpu_seconds(pid) for pid in server_pids]
            elif event.kind == "attempt":
                marks["wall1"], marks["cpu1"] = time.perf_counter(), time.process_time()
                marks["srv1"] = [proc_cpu_seconds(pid) for pid in server_pids]
                marks["ends"][event.episode_id] = marks["wall1"]

        kwargs: dict[str, Any] = {}
        if transport is not None:
            kwargs = {"model_transport": transport(), "env_transport": transport()}
        result = asyncio.run(arun_evaluation(config, progress=on_progress, **kwargs))
        records = [json.loads(line) for line in result.traces_path.read_text(encoding="utf-8").splitlines() if line]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    steps = sum(len(r.get("steps") or []) for r in records)
    failed = sum(1 for r in records if r.get("status") != "completed")
    wall = marks["wall1"] - marks["wall0"]
    cpu = marks["cpu1"] - marks["cpu0"]
    intervals = []
    for r in records:
        end = marks["ends"].get(r["episode_id"])
        if end is not None and isinstance(r.get("duration_ms"), (int, float)):
            intervals.append((end - r["duration_ms"] / 1000.0, end, len(r.get("steps") or [])))
    server_cpu = None
    if all(a is not None and b is not None for a, b in zip(marks["srv0"], marks["srv1"])):
        server_cpu = sum(after - before for before, after in zip(marks["srv0"], marks["srv1"]))
    return {
        "episodes": len(records),
        "failed": failed,
        "errors": sorted(
            {(r.get("error") or {}).get("message", "")[:200] for r in records if r.get("status") != "completed"}
        )[:3],
        "steps": steps,
        "wall_s": _round(wall),
        "client_cpu_s": _round(cpu),
        "steps_per_s": _round(steps / wall if wall > 0 else None, 1),
        # with fewer than two episodes per worker there is no period where every worker is busy
        "steady_steps_per_s": _round(steady_rate(intervals, marks["wall0"]), 1)
        if len(records) >= 2 * concurrency
        else None,
        "client_cpu_ms_per_step": _round(cpu * 1000.0 / steps if steps else None),
        "server_cpu_ms_per_step": _round(server_cpu * 1000.0 / steps if steps and server_cpu is not None else None),
        "timing": timing_split(records),
    }


def _median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over repeats of the numeric headline fields, plus min/max of steps/s and the raw runs."""
    keys = (
        "steps_per_s",
        "steady_steps_per_s",
        "client_cpu_ms_per_step",
        "server_cpu_ms_per_step",
        "fraction_of_ideal",
        "steady_fraction_of_ideal",
    )
    row: dict[str, Any] = {}
    for key in keys:
        values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
        if values:
            row[key] = _round(statistics.median(values), 3)
    rates = [r["steps_per_s"] for r in runs if r.get("steps_per_s") is not None]
    row["steps_per_s_min"], row["steps_per_s_max"] = (min(rates), max(rates)) if rates else (None, None)
    row["steps"] = int(statistics.median([r["steps"] for r in runs]))
    row["failed_total"] = sum(r["failed"] for r in runs)
    split = [r["timing"] for r in runs]
    row["timing_p50_ms"] = {
        key: _round(statistics.median([t[key]["p50"] for t in split if t[key]["p50"] is not None]))
        if any(t[key]["p50"] is not None for t in split)
        else None
        for key in ("model_ms", "env_ms", "harness_ms")
    }
    row["timing_mean_ms"] = {
        key: _round(statistics.median([t[key]["mean"] for t in split if t[key]["mean"] is not None]))
        if any(t[key]["mean"] is not None for t in split)
        else None
        for key in ("model_ms", "env_ms", "harness_ms")
    }
    row["runs"] = runs
    return row


# -- scenarios ----------------------------------------------------------------------------------


@contextmanager
def _servers(*, model_latency_ms: float, policy: str, slots: int) -> Iterator[dict[str, Any]]:
    """Start the environment and the model endpoint (stub, or the sandbox policy) as subprocesses."""
    if policy == "stub":
        with SandboxServer(slots=slots, policy=False) as env, StubModelServer(latency_ms=model_latency_ms) as stub:
            env_pid = getattr(getattr(env, "_process", None), "pid", None)
            yield {
                "env_url": env.env_url,
                "split_file": env.split_file,
                "model_url": stub.base_url,
                "model": stub.model,
                "pids": [env_pid, stub.pid],
            }
    else:
        faults = FaultConfig(latency_ms=model_latency_ms) if model_latency_ms else None
        with SandboxServer(slots=slots, policy=True, policy_faults=faults) as env:
            env_pid = getattr(getattr(env, "_process", None), "pid", None)
            yield {
                "env_url": env.env_url,
                "split_file": env.split_file,
                "model_url": env.policy_url,
                "model": env.served_model,
                "pids": [env_pid],
            }


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


TRANSPORTS: dict[str, Callable[[], Any]] = {}
"""Alternative transports handed to the runtime through its httpx seam (filled lazily)."""

SCENARIOS = ("zero_latency", "latency_bound", "thread_reference", "sharded_httpx", "stream_transport", "httpx_pool")
# httpx_pool: the runtime with `http_transport: httpx` (httpx's own pool, the default before the
# in-house transport and aiohttp); it runs alongside zero_latency / latency_bound whenever those
# run, for a same-run comparison


def _transports() -> dict[str, Callable[[], Any]]:
    if not TRANSPORTS:
        from benchmarks._sharded_transport import ShardedHttpxTransport
        from benchmarks._stream_transport import StreamTransport

        TRANSPORTS["sharded_httpx"] = lambda: ShardedHttpxTransport(shards=8, per_shard=16)
        TRANSPORTS["stream_transport"] = StreamTransport
    return TRANSPORTS


#: versions of the HTTP stack; sniffio matters: without it httpcore retries a failing import per request
_HTTP_STACK = ("httpx", "httpcore", "anyio", "sniffio", "h11", "uvicorn")


def run_benchmark(*, repeats: int, quick: bool, only: set[str] | None = None) -> dict[str, Any]:
    """Run every scenario (or those in *only*) and return the JSON-ready result document."""
    from benchmarks._thread_reference import run_thread_reference

    max_steps = 2 if quick else 10
    levels = (1, 8, 64)
    # episodes per level: a few seconds of work each; the same plan seed → the same episodes
    zero_episodes = {1: 3, 8: 8, 64: 16} if quick else {1: 30, 8: 96, 64: 128}
    latency_ms = 200.0
    lat_c = 8 if quick else 64
    lat_episodes = 8 if quick else 128
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_facts(_HTTP_STACK),
        "settings": {
            "repeats": repeats,
            "quick": quick,
            "max_steps": max_steps,
            "split": SPLIT,
            "zero_latency_episodes": {str(k): v for k, v in zero_episodes.items()},
            "latency_ms": latency_ms,
            "latency_concurrency": lat_c,
            "latency_episodes": lat_episodes,
            "sharded_httpx": {"shards": 8, "per_shard": 16},
        },
        "legacy": LEGACY,
        **{name: {} for name in SCENARIOS},
    }
    def wanted(name: str) -> bool:
        return only is None or name in only or (name == "httpx_pool" and bool(only & {"zero_latency", "latency_bound"}))

    transports = {name: factory for name, factory in _transports().items() if wanted(name)}

    if wanted("zero_latency") or wanted("thread_reference") or transports:
        with _servers(model_latency_ms=0.0, policy="stub", slots=64) as srv:
            common = dict(
                env_url=srv["env_url"],
                split_file=srv["split_file"],
                model_url=srv["model_url"],
                model=srv["model"],
                max_steps=max_steps,
                server_pids=srv["pids"],
            )
            runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
            for rep in range(repeats):
                for c in levels:  # interleaved, so a burst of load on the shared machine hits every row alike
                    n = zero_episodes[c]
                    if wanted("zero_latency"):
                        _log(f"zero_latency c={c} repeat {rep + 1}/{repeats}")
                        runs.setdefault(("zero_latency", c), []).append(
                            measure_runtime(concurrency=c, episodes=n, **common)
                        )
                    if wanted("httpx_pool"):
                        _log(f"httpx_pool c={c} repeat {rep + 1}/{repeats}")
                        runs.setdefault(("httpx_pool", c), []).append(
                            measure_runtime(concurrency=c, episodes=n, http_transport="httpx", **common)
                        )
                    if wanted("thread_reference"):
                        _log(f"thread_reference c={c} repeat {rep + 1}/{repeats}")
                        runs.setdefault(("thread_reference", c), []).append(
                            run_thread_reference(concurrency=c, episodes=n, **common)
                        )
                    for name, factory in transports.items():
                        _log(f"{name} c={c} repeat {rep + 1}/{repeats}")
                        runs.setdefault((name, c), []).append(
                            measure_runtime(concurrency=c, episodes=n, transport=factory, **common)
                        )
            for (section, c), value in runs.items():
                doc[section][f"c{c}"] = _median_row(value)

    if wanted("latency_bound"):
        ideal = lat_c / (latency_ms / 1000.0)
        for policy in ("stub", "sandbox_policy"):
            with _servers(model_latency_ms=latency_ms, policy=policy, slots=64) as srv:
                common = dict(
                    env_url=srv["env_url"],
                    split_file=srv["split_file"],
                    model_url=srv["model_url"],
                    model=srv["model"],
                    concurrency=lat_c,
                    episodes=lat_episodes,
                    max_steps=max_steps,
                    server_pids=srv["pids"],
                )
                variants: dict[str, list[dict[str, Any]]] = {}
                for rep in range(repeats):
                    _log(f"latency_bound {policy} c={lat_c} repeat {rep + 1}/{repeats}")
                    variants.setdefault(policy, []).append(_with_fraction(measure_runtime(**common), ideal))
                    if wanted("httpx_pool"):
                        _log(f"latency_bound {policy} + httpx_pool c={lat_c} repeat {rep + 1}/{repeats}")
                        variants.setdefault(f"{policy}_httpx_pool", []).append(
                            _with_fraction(measure_runtime(http_transport="httpx", **common), ideal)
                        )
                    if policy != "stub":
                        continue
                    for name, factory in transports.items():
                        _log(f"latency_bound stub + {name} c={lat_c} repeat {rep + 1}/{repeats}")
                        variants.setdefault(f"stub_{name}", []).append(
                            _with_fraction(measure_runtime(transport=factory, **common), ideal)
                        )
                    if wanted("thread_reference"):
                        _log(f"thread_reference latency c={lat_c} repeat {rep + 1}/{repeats}")
                        variants.setdefault("thread_reference", []).append(
                            _with_fraction(run_thread_reference(**common), ideal)
                        )
                for name, runs_v in variants.items():
                    row = {"concurrency": lat_c, "ideal_steps_per_s": ideal, **_median_row(runs_v)}
                    if name == "thread_reference":
                        doc["thread_reference"][f"latency_c{lat_c}"] = row
                    else:
                        doc["latency_bound"][name] = row
    doc["ratios"] = _ratios(doc)
    return doc


def _with_fraction(run: dict[str, Any], ideal: float) -> dict[str, Any]:
    run["fraction_of_ideal"] = _round(run["steps_per_s"] / ideal if run.get("steps_per_s") else None)
    run["steady_fraction_of_ideal"] = _round(
        run["steady_steps_per_s"] / ideal if run.get("steady_steps_per_s") else None
    )
    return run


def _ratios(doc: dict[str, Any]) -> dict[str, Any]:
    """Same-run ratios of the runtime (default httpx) to each alternative: steps/s and client CPU per step."""
    out: dict[str, Any] = {}
    pairs = [
        (key, row, other, doc[other].get(key))
        for key, row in doc["zero_latency"].items()
        for other in ("thread_reference", "sharded_httpx", "stream_transport")
    ]
    stub = doc["latency_bound"].get("stub")
    if stub:
        pairs.append(
            ("latency", stub, "thread_reference", doc["thread_reference"].get(f"latency_c{stub['concurrency']}"))
        )
        pairs += [
            ("latency", stub, name, doc["latency_bound"].get(f"stub_{name}"))
            for name in ("sharded_httpx", "stream_transport")
        ]
    for key, row in doc["zero_latency"].items():
        ref = doc["httpx_pool"].get(key)
        if ref and ref.get("steps_per_s") and row.get("steps_per_s"):
            out[f"{key}_default_vs_httpx_pool"] = {
                "steps_per_s_ratio": round(row["steps_per_s"] / ref["steps_per_s"], 3),
                "client_cpu_ratio": round(row["client_cpu_ms_per_step"] / ref["client_cpu_ms_per_step"], 3)
                if ref.get("client_cpu_ms_per_step")
                else None,
            }
    for policy in ("stub", "sandbox_policy"):
        row, ref = doc["latency_bound"].get(policy), doc["latency_bound"].get(f"{policy}_httpx_pool")
        if row and ref and ref.get("steps_per_s") and row.get("steps_per_s"):
            out[f"latency_{policy}_default_vs_httpx_pool"] = {
                "steps_per_s_ratio": round(row["steps_per_s"] / ref["steps_per_s"], 3),
                "client_cpu_ratio": round(row["client_cpu_ms_per_step"] / ref["client_cpu_ms_per_step"], 3)
                if ref.get("client_cpu_ms_per_step")
                else None,
            }
    for key, row, other, ref in pairs:
        if ref and ref.get("steps_per_s") and row.get("steps_per_s"):
            out[f"{key}_httpx_vs_{other}"] = {
                "steps_per_s_ratio": round(row["steps_per_s"] / ref["steps_per_s"], 3),
                "client_cpu_ratio": round(row["client_cpu_ms_per_step"] / ref["client_cpu_ms_per_step"], 3)
                if ref.get("client_cpu_ms_per_step")
                else None,
            }
    return out


# -- output (the table and the PNG: benchmarks/_core_throughput_report.py) ---------------------


def write_json(doc: dict[str, Any], path: Path) -> None:
    """Write *doc* atomically (temporary file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON and the PNG."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="repeats per scenario (medians reported; default 3)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test; numbers meaningless)")
    parser.add_argument("--only", default=None, help="comma list of scenarios: " + ",".join(SCENARIOS))
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"JSON output (default {RESULTS}; with --quick a temporary directory, so a smoke run "
        "never replaces measured results)",
    )
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats: must be >= 1")
    if args.out is None:
        args.out = Path(tempfile.gettempdir()) / "shopsimrl-bench-quick" / RESULTS.name if args.quick else RESULTS
    only = {s.strip() for s in args.only.split(",")} if args.only else None
    valid = set(SCENARIOS)
    if only and not only <= valid:
        parser.error(f"--only: unknown scenario(s) {sorted(only - valid)}; choose from {sorted(valid)}")
    started = time.perf_counter()
    doc = run_benchmark(repeats=args.repeats, quick=args.quick, only=only)
    doc["duration_s"] = round(time.perf_counter() - started, 1)
    png = None if args.no_plot else plot(doc, args.out.with_suffix(".png"))
    doc["plot"] = png.name if png else None
    write_json(doc, args.out)
    print(format_table(doc))
    print(f"wrote {args.out}" + (f" and {png}" if png else "") + f" in {doc['duration_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
