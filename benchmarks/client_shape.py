"""The client on the issue's shape: the whole `shopsimrl run` process, as a user runs it.

    .venv/bin/python -m benchmarks.client_shape [--repeats 1] [--quick] [--transports auto,httpx] [--out PATH]

Loopback stubs, each its own process: the environment of `benchmarks._stub_env` (10-step episodes
ending in a purchase, observations of 1–8 KB, mean 3 KB, in the real server's escaped compact JSON;
some rows 1 KB or 8 KB pages) and the model of `benchmarks._stub_model` (one valid tool call per
answer, optional latency). Every measured client is a separate process started like a user starts
it — `shopsimrl run CONFIG --progress none --quiet`, so start-up (imports, config, plan, preflight)
and the summary are included — and its CPU (user + system) comes from the OS (`os.wait4` rusage of
the child). Beside it, in the same rounds and on the same stubs, the reference
(`benchmarks._thread_reference`: requests + a thread pool, shaped like the earlier harness, also its
own process, start-up included).

Settings (`SETTINGS`): one episode (start-up), 1 and 64 episodes in flight with a zero-latency model
(64 at 400 and 1,024 episodes, and with 1 KB and 8 KB pages), 64 in flight with 50 and 200 ms model
latency, 256 in flight with 200 ms. Each round runs both clients once, the order flipped every round;
every run records the 1-minute load average at its start. Reported per row: steps/s over the whole
process, steady steps/s (from the traces: while every worker was busy), the fraction of the ideal
``concurrency / latency`` for latency rows, client CPU ms per step, stub CPU ms per step, and the
ratios to the reference — of the medians and of each round's pair (the spread README.md quotes,
``headline`` in the JSON). Writes benchmarks/results/client_shape.json (``--quick``: a temporary
file; numbers meaningless).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._measure import SPLIT, _round, child_env, compile_sources, machine_facts, proc_cpu_seconds, steady_rate
from benchmarks._shape_report import fixed_and_marginal, format_table, headline, markdown_table, merge_rows
from benchmarks._stub_env import DEFAULT_OBS_KB, StubEnvServer
from benchmarks._stub_model import StubModelServer, model_section

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "client_shape.json"
SCHEMA = "shopsimrl-bench-client-shape-v1"
EPISODE_STEPS = 10
LATENCY_MS = 200.0
#: (label, in flight, model latency ms, tasks sampled, repeats per task, observation KB per step or None for the
#: default 1–8 KB mix) — episodes = tasks × repeats
SETTINGS: list[tuple[str, int, float, int, int, tuple[int, ...] | None]] = [
    ("start_1ep", 1, 0.0, 1, 1, None),  # one episode: the whole process is mostly start-up
    ("c1_0ms", 1, 0.0, 60, 1, None),
    ("c64_0ms", 64, 0.0, 100, 4, None),
    ("c64_0ms_1024", 64, 0.0, 64, 16, None),  # the top of the 400–1024 episodes: start-up weighs less
    ("c64_0ms_obs1k", 64, 0.0, 100, 4, (1,)),  # small pages
    ("c64_0ms_obs8k", 64, 0.0, 100, 4, (8,)),  # large pages
    ("c64_50ms", 64, 50.0, 64, 4, None),
    ("c64_200ms", 64, LATENCY_MS, 64, 4, None),
    ("c256_200ms", 256, LATENCY_MS, 100, 10, None),
]
QUICK_SETTINGS: list[tuple[str, int, float, int, int, tuple[int, ...] | None]] = [
    ("c1_0ms", 1, 0.0, 2, 1, None),
    ("c8_200ms", 8, LATENCY_MS, 8, 2, None),
]
#: the reference plays fewer episodes where it is slow (its rate, not its total, is compared)
REFERENCE_EPISODES = {"c256_200ms": 512, "c64_0ms_1024": 400}


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _split_file(workdir: Path) -> Path:
    from shopsim_sandbox.cli import write_catalog

    _, split = write_catalog(workdir, 400, 0)
    return split


def _shopsimrl() -> list[str]:
    script = Path(sys.executable).with_name("shopsimrl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "shopsimrl_core.cli._main"]


#: "cached" (the default) or "inherit": see ``--bytecode`` and :func:`benchmarks._measure.child_env`
BYTECODE = "cached"


def _run_child(cmd: list[str], cwd: Path, pids: list[int | None]) -> dict[str, Any]:
    # wait4 gives exactly this child's rusage (getrusage(RUSAGE_CHILDREN) would sum all children)
    load = os.getloadavg()[0]  # the machine's load as this run starts (other jobs share the 2 cores)
    srv0 = [proc_cpu_seconds(pid) for pid in pids]
    wall0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, env=child_env(BYTECODE))
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - wall0
        process.returncode = os.waitstatus_to_exitcode(status)
        srv1 = [proc_cpu_seconds(pid) for pid in pids]
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    server_cpu = sum(b - a for a, b in zip(srv0, srv1)) if all(x is not None for x in srv0 + srv1) else None
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "returncode": process.returncode,
        "load": load,
        "stdout": stdout,
        "stderr": stderr,
        "server_cpu_s": server_cpu,
    }


def _config(
    workdir: Path,
    *,
    env_url: str,
    model_url: str,
    model: str,
    split_file: Path,
    concurrency: int,
    tasks: int,
    repeats: int,
    transport: str,
    start_spacing: float | None = None,
) -> Path:
    mapping: dict[str, Any] = {
        "experiment": {
            "name": "client-shape",
            "output_dir": str(workdir / "runs"),
            "seed": 20261201,
            "concurrency": concurrency,
            "max_episode_retries": 0,
        },
        "tasks": {"split_file": str(split_file), "split": SPLIT, "sample_size": tasks, "repeats": repeats},
        "environment": {"base_url": env_url, "timeout": 120, "max_connections": max(64, concurrency)},
        "runtime": {"max_steps": EPISODE_STEPS + 2},
        "model": model_section(model, model_url, max_connections=max(64, concurrency)),
    }
    if start_spacing is not None:
        mapping["experiment"]["start_spacing_seconds"] = start_spacing
    if transport != "default":
        mapping["environment"]["http_transport"] = transport
        mapping["model"]["http_transport"] = transport
    path = workdir / "eval.yaml"
    path.write_text(json.dumps(mapping, indent=2), encoding="utf-8")  # JSON is YAML
    return path


def _trace_stats(run_root: Path, concurrency: int | None = None) -> dict[str, Any]:
    traces = list(run_root.rglob("traces.jsonl"))
    if len(traces) != 1:
        raise RuntimeError(f"expected one traces.jsonl under {run_root}, found {len(traces)}")
    intervals, steps, failed, errors = [], 0, 0, set()
    with open(traces[0], "rb") as handle:
        for raw in handle:
            record = json.loads(raw)
            count = len(record.get("steps") or [])
            steps += count
            if record.get("status") != "completed":
                failed += 1
                errors.add(str((record.get("error") or {}).get("message", ""))[:200])
                continue
            start = datetime.fromisoformat(record["started_at"]).timestamp()
            intervals.append((start, datetime.fromisoformat(record["ended_at"]).timestamp(), count))
    t0 = min((a for a, _, _ in intervals), default=0.0)
    return {
        "steps": steps,
        "episodes": len(intervals) + failed,
        "failed": failed,
        "errors": sorted(errors)[:3],
        "steady_steps_per_s": steady_rate(intervals, t0, workers=concurrency),
    }


def measure_shopsimrl(
    *, concurrency: int, tasks: int, repeats: int, transport: str, servers: dict[str, Any], run_root: Path | None = None
) -> dict[str, Any]:
    """One `shopsimrl run` process on a fresh run directory (under *run_root*; default: the temp dir)."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-shape-", dir=run_root))
    try:
        config = _config(
            workdir,
            env_url=servers["env_url"],
            model_url=servers["model_url"],
            model=servers["model"],
            split_file=servers["split_file"],
            concurrency=concurrency,
            tasks=tasks,
            repeats=repeats,
            transport=transport,
            start_spacing=servers.get("start_spacing"),
        )
        command = [*_shopsimrl(), "run", str(config), "--progress", "none", "--quiet"]
        child = _run_child(command, workdir, servers["pids"])
        if child["returncode"] not in (0, 1):
            raise RuntimeError(f"shopsimrl run exited {child['returncode']}: {child['stderr'][-2000:]}")
        stats = _trace_stats(workdir / "runs", concurrency)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return _row(child, stats, concurrency)


def measure_reference(*, concurrency: int, episodes: int, servers: dict[str, Any]) -> dict[str, Any]:
    """One thread-reference process."""
    cmd = [
        sys.executable,
        "-m",
        "benchmarks._thread_reference",
        "--env-url",
        servers["env_url"],
        "--model-url",
        servers["model_url"],
        "--model",
        servers["model"],
        "--split-file",
        str(servers["split_file"]),
        "--concurrency",
        str(concurrency),
        "--episodes",
        str(episodes),
        "--max-steps",
        str(EPISODE_STEPS + 2),
    ]
    child = _run_child(cmd, ROOT, servers["pids"])
    if child["returncode"] != 0:
        raise RuntimeError(f"thread reference exited {child['returncode']}: {child['stderr'][-2000:]}")
    inner = json.loads(child["stdout"].strip().splitlines()[-1])
    stats = {
        "steps": inner["steps"],
        "episodes": inner["episodes"],
        "failed": inner["failed"],
        "errors": [],
        "steady_steps_per_s": inner.get("steady_steps_per_s"),
    }
    return _row(child, stats, concurrency)


def _row(child: dict[str, Any], stats: dict[str, Any], concurrency: int) -> dict[str, Any]:
    steps = stats["steps"]
    return {
        **stats,
        "concurrency": concurrency,
        "load_1min": round(child["load"], 2),
        "wall_s": _round(child["wall_s"]),
        "cpu_s": _round(child["cpu_s"]),
        "steps_per_s": _round(steps / child["wall_s"], 1) if steps else None,
        "steady_steps_per_s": _round(stats["steady_steps_per_s"], 1),
        "cpu_ms_per_step": _round(child["cpu_s"] * 1000.0 / steps) if steps else None,
        "server_cpu_ms_per_step": _round(child["server_cpu_s"] * 1000.0 / steps)
        if steps and child["server_cpu_s"] is not None
        else None,
    }


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    row = dict(runs[0]) if len(runs) == 1 else {}
    if len(runs) > 1:
        for key in ("steps", "episodes", "concurrency"):
            row[key] = runs[0][key]
        row["failed"] = sum(r["failed"] for r in runs)
        row["errors"] = sorted({e for r in runs for e in r["errors"]})[:3]
        for key in (
            "wall_s",
            "cpu_s",
            "steps_per_s",
            "steady_steps_per_s",
            "cpu_ms_per_step",
            "server_cpu_ms_per_step",
        ):
            values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
            row[key] = _round(statistics.median(values), 3) if values else None
        row["load_1min"] = [r["load_1min"] for r in runs]
        row["runs"] = runs
    return row


def run_benchmark(
    *,
    repeats: int,
    quick: bool,
    transports: list[str],
    reference: bool,
    only: set[str] | None = None,
    run_root: Path | None = None,
    start_spacing: float | None = None,
) -> dict[str, Any]:
    """Every setting (or those in *only*) × (each `shopsimrl run` variant, the reference), in rounds.

    A round runs every client of a setting once, back to back; the order flips every round (ABBA)
    so that a burst of load from other jobs on the machine hits both clients alike. Every run
    records the 1-minute load average at its start; each row keeps the per-round ratios to the
    reference (their spread is the benchmark's own noise) beside the ratio of the medians.
    """
    settings = [row for row in (QUICK_SETTINGS if quick else SETTINGS) if only is None or row[0] in only]
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_facts(
            ("httptools", "httpx", "aiohttp", "orjson", "msgspec", "uvloop", "requests", "urllib3")
        ),
        "settings": {
            "repeats": repeats,
            "quick": quick,
            "episode_steps": EPISODE_STEPS,
            "obs_kb": list(DEFAULT_OBS_KB),
            "latency_ms": LATENCY_MS,
            "transports": transports,
            "reference": "benchmarks/_thread_reference.py: requests.Session per worker thread, ThreadPoolExecutor",
            "run_root": str(run_root) if run_root else tempfile.gettempdir(),
            "start_spacing_seconds": start_spacing,  # None: the config default
            "bytecode": BYTECODE,
            "rows": {
                label: {
                    "concurrency": c,
                    "model_latency_ms": lat,
                    "episodes": t * r,
                    "obs_kb": list(obs or DEFAULT_OBS_KB),
                }
                for label, c, lat, t, r, obs in settings
            },
        },
        "rows": {},
    }
    workdir = Path(tempfile.mkdtemp(prefix="bench-shape-split-"))
    try:
        split_file = _split_file(workdir)
        shapes = sorted({(lat, obs or DEFAULT_OBS_KB) for _, _, lat, _, _, obs in settings})
        for latency, obs_kb in shapes:
            with StubEnvServer(EPISODE_STEPS, obs_kb) as env, StubModelServer(latency_ms=latency) as model:
                servers = {
                    "env_url": env.env_url,
                    "model_url": model.base_url,
                    "model": model.model,
                    "split_file": split_file,
                    "pids": [env.pid, model.pid],
                    "start_spacing": start_spacing,
                }
                for label, c, lat, tasks, reps, obs in settings:
                    if (lat, obs or DEFAULT_OBS_KB) != (latency, obs_kb):
                        continue
                    doc["rows"][label] = _measure_setting(
                        label,
                        c,
                        lat,
                        tasks,
                        reps,
                        repeats=repeats,
                        quick=quick,
                        transports=transports,
                        reference=reference,
                        servers=servers,
                        run_root=run_root,
                    )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    doc["rows"] = {label: doc["rows"][label] for label, *_ in settings if label in doc["rows"]}  # SETTINGS order
    doc["fixed_and_marginal"] = fixed_and_marginal(doc["rows"])
    doc["headline"] = headline(doc["rows"])
    return doc


def _measure_setting(
    label: str,
    c: int,
    lat: float,
    tasks: int,
    reps: int,
    *,
    repeats: int,
    quick: bool,
    transports: list[str],
    reference: bool,
    servers: dict[str, Any],
    run_root: Path | None,
) -> dict[str, Any]:
    """The rounds of one setting: every client once per round, order flipped every round."""
    runs: dict[str, list[dict[str, Any]]] = {}
    clients = list(transports) + (["reference"] if reference else [])
    for rep in range(repeats):
        for name in clients if rep % 2 == 0 else clients[::-1]:
            _log(
                f"{label}: {'thread reference' if name == 'reference' else f'shopsimrl run ({name})'} "
                f"round {rep + 1}/{repeats} (load {os.getloadavg()[0]:.2f})"
            )
            if name == "reference":
                episodes = 4 if quick else REFERENCE_EPISODES.get(label, tasks * reps)
                run = measure_reference(concurrency=c, episodes=episodes, servers=servers)
            else:
                run = measure_shopsimrl(
                    concurrency=c, tasks=tasks, repeats=reps, transport=name, servers=servers, run_root=run_root
                )
            run["round"] = rep + 1
            runs.setdefault(name, []).append(run)
    rows = {name: _median(value) for name, value in runs.items()}
    for row in rows.values():
        if lat:
            ideal = c / (lat / 1000.0)
            row["ideal_steps_per_s"] = ideal
            row["fraction_of_ideal"] = _round(row["steps_per_s"] / ideal) if row.get("steps_per_s") else None
            row["steady_fraction_of_ideal"] = (
                _round(row["steady_steps_per_s"] / ideal) if row.get("steady_steps_per_s") else None
            )
    ref = rows.get("reference")
    for name, row in rows.items():
        if name == "reference" or not (ref and ref.get("steps_per_s") and row.get("steps_per_s")):
            continue
        pairs = list(zip(runs[name], runs["reference"]))  # the same round: the same minute of the machine
        cpu = [_round(a["cpu_ms_per_step"] / b["cpu_ms_per_step"], 3) for a, b in pairs]
        rate = [_round(a["steps_per_s"] / b["steps_per_s"], 2) for a, b in pairs]
        loads = [r["load_1min"] for pair in pairs for r in pair]
        row["vs_reference"] = {
            "steps_per_s_ratio": _round(row["steps_per_s"] / ref["steps_per_s"], 2),
            "cpu_per_step_ratio": _round(row["cpu_ms_per_step"] / ref["cpu_ms_per_step"], 3),
            "cpu_per_step_ratio_by_round": cpu,
            "steps_per_s_ratio_by_round": rate,
            "cpu_s_ratio_by_round": [_round(a["cpu_s"] / b["cpu_s"], 2) for a, b in pairs],
            "load_1min_range": [min(loads), max(loads)],
        }
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="repeats per row (medians reported; default 1)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test; numbers meaningless)")
    parser.add_argument(
        "--transports",
        default="default",
        help="comma list of `shopsimrl run` variants: default (no http_transport key) or an "
        "http_transport value (e.g. default,httpx)",
    )
    parser.add_argument("--no-reference", action="store_true", help="leave out the thread reference")
    parser.add_argument(
        "--run-root",
        type=Path,
        default=None,
        help="where the measured runs write (default: the temp dir, on disk here); e.g. /dev/shm "
        "to see the client without the disk's fsync latency",
    )
    parser.add_argument(
        "--start-spacing",
        type=float,
        default=None,
        help="experiment.start_spacing_seconds of the measured runs (default: the config default; 0: every "
        "worker starts at once)",
    )
    parser.add_argument(
        "--markdown", type=Path, default=None, help="only print the docs table of an existing results JSON"
    )
    parser.add_argument("--only", default=None, help="comma list of rows: " + ",".join(row[0] for row in SETTINGS))
    parser.add_argument(
        "--bytecode",
        choices=("cached", "inherit"),
        default="cached",
        help="cached (default): the measured processes read compiled bytecode, as from an install; inherit: "
        "the environment as given (PYTHONDONTWRITEBYTECODE=1 makes every start compile the sources)",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="with --only: replace only these rows in the existing results file (the others keep their run; "
        "`remeasured` in the JSON says which rows came from which run)",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help=f"JSON output (default {RESULTS}; with --quick a temporary directory)"
    )
    args = parser.parse_args(argv)
    if args.markdown is not None:
        print(markdown_table(json.loads(args.markdown.read_text(encoding="utf-8"))))
        return 0
    if args.repeats < 1:
        parser.error("--repeats: must be >= 1")
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if args.out is None:
        args.out = Path(tempfile.gettempdir()) / "shopsimrl-bench-quick" / RESULTS.name if args.quick else RESULTS
    global BYTECODE
    BYTECODE = args.bytecode
    if BYTECODE == "cached":
        compile_sources(ROOT)
    started = time.perf_counter()
    only = {x.strip() for x in args.only.split(",")} if args.only else None
    known = {row[0] for row in SETTINGS + QUICK_SETTINGS}
    if only and not only <= known:
        parser.error(f"--only: unknown row(s) {sorted(only - known)}; choose from {sorted(known)}")
    doc = run_benchmark(
        repeats=args.repeats,
        quick=args.quick,
        transports=transports,
        reference=not args.no_reference,
        only=only,
        run_root=args.run_root,
        start_spacing=args.start_spacing,
    )
    doc["duration_s"] = round(time.perf_counter() - started, 1)
    if args.merge:
        if not only or not args.out.exists():
            parser.error("--merge: needs --only and an existing results file")
        doc = merge_rows(json.loads(args.out.read_text(encoding="utf-8")), doc, [row[0] for row in SETTINGS])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, args.out)
    print(format_table(doc))
    print(f"wrote {args.out} in {doc['duration_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
