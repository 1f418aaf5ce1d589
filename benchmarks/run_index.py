"""Resume + summary at scale (issue 25): fresh runs of today's trace format, measured as a user runs them.

    .venv/bin/python -m benchmarks.run_index --episodes 10000,100000,1000000 [--steps 5] [--obs-kb 1]
        [--repeats 3] [--work DIR] [--viewer] [--keep]

For each size N, in a work folder on disk (default: the temp dir):

1. ``seed``      a real ``shopsimrl run`` of 64 episodes against the loopback stubs of ``client_shape``
                 (``--steps`` interactions per episode, ``--obs-kb`` KB pages): trace records of today's
                 schema, written by today's runtime;
2. ``generate``  the plan of a config of N jobs (up to 5,000 train tasks of a generated sandbox split ×
                 repeats) from ``build_plan``, its manifest from ``RunStore.write_manifest`` and every trace
                 line from ``RunStore.append`` under the run lock — the writers ``shopsimrl run`` uses,
                 so the index log is written beside each line as in a real run. Each line is a seed record
                 with the job's ids and seed, and varied reward, success, outcome, category and duration;
3. ``build``     the index sidecar removed, ``open_run_index`` from scratch in its own process (streams
                 every trace line once; what the first resume of a run without a sidecar pays);
4. ``resume``    ``shopsimrl run CONFIG --progress none --quiet`` on the complete run, as a user resumes
                 it: start-up, preflight of the stubs, index, nothing left to do, summary written. The
                 first one after the build (it writes the compacted snapshot and, for big manifests,
                 the planned-ids file), then ``--repeats`` more;
5. ``summarize`` ``shopsimrl summarize RUN_DIR`` (stdout to a file), ``--repeats`` times;
6. ``page``      (``--viewer``) ``shopsimrl view`` and its first run page.

Each measured phase is its own process: wall, CPU (user + system) and peak RSS from the OS
(``os.wait4``), start-up included, with the 1-minute load average at its start. Writes
``benchmarks/results/run_index-<N>.json`` per size and, over every such file present, the curve
``run_index_curve.json`` + ``run_index_curve.png``. Deletes the generated run unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: `benchmarks` is a top-level folder, not an installed package
    sys.path.insert(0, str(REPO))

from benchmarks._index_report import SCHEMA, curve, format_row, markdown_curve, plot  # noqa: E402
from benchmarks._measure import child_env, compile_sources, machine_facts  # noqa: E402
from benchmarks._stub_model import model_section  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
CURVE = "run_index_curve"
TASKS = 5_000  # train tasks sampled per run (the sandbox split of a 20,000-product catalog has ~5,600)
SEED_EPISODES = 64
_CATEGORIES = ["服饰›男装›短袖衬衫", "母婴›喂养用品›奶瓶", "家居›厨具›炒锅", "数码›耳机›蓝牙耳机", "美妆›护肤›面霜"]
_REASONS = ["purchase", "purchase", "purchase", "action_limit", "generation_length"]


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _shopsimrl() -> list[str]:
    script = Path(sys.executable).with_name("shopsimrl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "shopsimrl_core.cli._main"]


def measure(cmd: list[str], *, cwd: Path = REPO, stdout: Path | None = None, tries: int = 3) -> dict[str, Any]:
    """Run *cmd* as its own process; wall, CPU (user+sys) and peak RSS from ``os.wait4``, load at the start.

    A failed process is run again after 30 s, up to *tries* times in all (the work tree may be in the
    middle of someone's edit; a generated 1 M-episode run is too dear to lose to that); the
    measurement is of the run that succeeded.
    """
    for attempt in range(1, tries + 1):
        load = os.getloadavg()[0]
        started = time.perf_counter()
        with tempfile.TemporaryFile() as err, open(stdout or os.devnull, "wb") as out:
            # compiled bytecode read as from an install (benchmarks/_measure.child_env)
            proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, env=child_env("cached"))
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - started
            err.seek(0)
            stderr = err.read().decode(errors="replace")
        code = os.waitstatus_to_exitcode(status)
        if code == 0:
            return {
                "wall_s": round(wall, 3),
                "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
                "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
                "load_1min": round(load, 2),
            }
        _log(f"{' '.join(cmd[:4])}… exited {code} (try {attempt}/{tries}):\n{stderr[-3000:]}")
        if attempt < tries:
            time.sleep(30)
    raise SystemExit(f"{' '.join(cmd[:4])}… failed {tries} times; see above")


def _python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


_BUILD = """
import sys
from shopsimrl_core.runs import open_run_index
index = open_run_index(sys.argv[1])
print(index.covered_lines)
"""


def config_mapping(
    work: Path, *, episodes: int, split_file: Path, env_url: str, model_url: str, model: str, name: str
) -> dict[str, Any]:
    """The evaluation config of an N-episode run (JSON is YAML)."""
    tasks = min(TASKS, episodes)
    if episodes % tasks:
        raise SystemExit(f"--episodes: {episodes} is not a multiple of {tasks} tasks; pick a multiple")
    return {
        "experiment": {
            "name": name,
            "output_dir": str(work / "runs"),
            "seed": 20261225,
            "concurrency": 64,
            "max_episode_retries": 0,
            "max_planned_episodes": max(episodes, 100_000),
        },
        "tasks": {"split_file": str(split_file), "split": "train", "sample_size": tasks, "repeats": episodes // tasks},
        "environment": {"base_url": env_url, "timeout": 120},
        "runtime": {"max_steps": 30},
        "model": model_section(model, model_url),
    }


def seed_records(work: Path, *, split_file: Path, env_url: str, model_url: str, model: str) -> list[dict[str, Any]]:
    """Trace records of a real ``shopsimrl run`` of :data:`SEED_EPISODES` episodes against the stubs."""
    seed_dir = work / "seed"
    seed_dir.mkdir(parents=True, exist_ok=True)
    mapping = config_mapping(
        seed_dir,
        episodes=SEED_EPISODES,
        split_file=split_file,
        env_url=env_url,
        model_url=model_url,
        model=model,
        name="seed",
    )
    config = seed_dir / "seed.yaml"
    config.write_text(json.dumps(mapping), encoding="utf-8")
    measure([*_shopsimrl(), "run", str(config), "--progress", "none", "--quiet"], cwd=seed_dir)
    traces = next((seed_dir / "runs").rglob("traces.jsonl"))
    records = [json.loads(line) for line in traces.read_text(encoding="utf-8").splitlines()]
    if len(records) != SEED_EPISODES or any(r.get("status") != "completed" for r in records):
        raise SystemExit(f"seed run: expected {SEED_EPISODES} completed records in {traces}")
    return records


def generate(config_path: Path, seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """Write the run of *config_path* with the project's writers: manifest, invocation, every trace line.

    Runs in this process (its cost is not one of the measured phases). Returns sizes and times.
    """
    from shopsimrl_core.runs import RunStore, build_plan, load_config

    started = time.perf_counter()
    plan = build_plan(load_config(config_path))
    store = RunStore(plan.run_dir)
    invocation = "bench-generate-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    store.acquire_lock(invocation)
    rng = random.Random(20261225)
    try:
        store.write_manifest(plan.semantic, plan.fingerprint, {**plan.execution, "invocation_id": invocation})
        store.append_invocation(
            {
                "invocation_id": invocation,
                "started_at": datetime.now(UTC).isoformat(),
                "pid": os.getpid(),
                "mode": "new",
                "plan_fingerprint": plan.fingerprint,
                "note": "benchmarks/run_index.py: generated from seed records",
            }
        )
        for number, job in enumerate(plan.jobs):
            seed = seeds[number % len(seeds)]
            reason = _REASONS[number % len(_REASONS)]
            r_att = rng.choice([0.0, 0.5, 1.0])
            success = 1.0 if reason == "purchase" and r_att == 1.0 else 0.0
            category = _CATEGORIES[job.task_id % len(_CATEGORIES)]
            final = {
                **seed["final"],
                "reward": round(rng.random(), 6) if reason == "purchase" else 0.0,
                "reward_detail": {"r_type": 1.0, "r_att": r_att, "r_option": 1.0, "r_price": 1.0, "r_success": success},
                "termination_reason": reason,
                "goal": {"category": category},
            }
            record = {
                **seed,
                "episode_id": job.episode_id,
                "job": job.to_dict(),
                "duration_ms": round(2000.0 + rng.random() * 500.0, 3),
                "final": final,
                "attempt": {"number": 1, "invocation_id": invocation},
            }
            store.append(record, finite=("reset", "conversation", "steps", "final", "provenance"))
        store.close_traces()
    finally:
        _wait_durable()
        store.release_lock()
    size = store.traces_path.stat().st_size
    return {
        "generate_s": round(time.perf_counter() - started, 1),
        "traces_bytes": size,
        "line_bytes_mean": round(size / max(1, len(plan.jobs))),
        "run_dir": str(plan.run_dir),
    }


def _wait_durable() -> None:
    # The group commit's last fsync round (the module moved with the runs/ reorganisation; either place).
    try:
        from shopsimrl_core.runs.storage._durability import wait_durable
    except ImportError:  # pragma: no cover — the flat layout before the reorganisation
        from shopsimrl_core.runs._durability import wait_durable  # type: ignore[no-redef]
    wait_durable(600)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def first_page(root: Path, rel: str) -> dict[str, float]:
    """Spawn ``shopsimrl view`` and time the first run page (the index is already built)."""
    import httpx

    port = _free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*_shopsimrl(), "view", str(root), "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/favicon-probe", timeout=120, trust_env=False)
                break
            except httpx.TransportError:
                if proc.poll() is not None:
                    raise SystemExit(proc.stderr.read().decode()[-2000:]) from None  # type: ignore[union-attr]
                time.sleep(0.02)
        cpu0, t0 = _cpu_s(proc.pid), time.perf_counter()
        response = httpx.get(f"http://127.0.0.1:{port}/run/{rel}", timeout=600, trust_env=False)
        request_s, request_cpu = time.perf_counter() - t0, _cpu_s(proc.pid) - cpu0
        if response.status_code != 200:
            raise SystemExit(f"viewer: HTTP {response.status_code}: {response.text[:500]}")
        return {
            "first_page_request_s": round(request_s, 3),
            "first_page_server_cpu_s": round(request_cpu, 3),
            "spawn_to_first_page_s": round(time.perf_counter() - started, 3),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _stats(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": runs}
    for key in ("wall_s", "cpu_s", "peak_rss_mb"):
        values = [r[key] for r in runs]
        out[key] = {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}
    out["load_1min"] = [r["load_1min"] for r in runs]
    return out


def measure_size(
    episodes: int,
    *,
    work: Path,
    split_file: Path,
    servers: dict[str, str],
    seeds: list[dict[str, Any]],
    repeats: int,
    viewer: bool,
    keep: bool = False,
) -> dict[str, Any]:
    """Generate one run of *episodes* episodes and measure build, resume no-op and summarize on it."""
    name = f"bench-{episodes}"
    mapping = config_mapping(work, episodes=episodes, split_file=split_file, name=name, **servers)
    config = work / f"{name}.yaml"
    config.write_text(json.dumps(mapping), encoding="utf-8")
    _log(f"{episodes}: generating")
    result: dict[str, Any] = {
        "episodes": episodes,
        "tasks": mapping["tasks"]["sample_size"],
        "repeats_per_task": mapping["tasks"]["repeats"],
        "generate": generate(config, seeds),
    }
    run = Path(result["generate"].pop("run_dir"))
    try:
        for sidecar in run.glob("traces.index.*"):
            sidecar.unlink()
        _log(f"{episodes}: index build from scratch")
        result["build"] = measure(_python(_BUILD, str(run)))
        result["index_bytes"] = sum(p.stat().st_size for p in run.glob("traces.index.*"))
        resume_cmd = [*_shopsimrl(), "run", str(config), "--progress", "none", "--quiet"]
        _log(f"{episodes}: first resume after the build")
        result["resume_first"] = measure(resume_cmd, cwd=work)
        resumes, summaries = [], []
        for rep in range(repeats):  # interleaved, so both see the same minutes of the machine
            _log(f"{episodes}: resume no-op + summarize, round {rep + 1}/{repeats} (load {os.getloadavg()[0]:.2f})")
            resumes.append(measure(resume_cmd, cwd=work))
            summaries.append(measure([*_shopsimrl(), "summarize", str(run)], cwd=work, stdout=work / "summary.out"))
        result["resume"] = _stats(resumes)
        result["summarize"] = _stats(summaries)
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        result["summary_counts"] = {k: summary["counts"].get(k) for k in ("requested", "completed", "failed")}
        if summary["counts"].get("completed") != episodes:
            raise SystemExit(f"{run}: the summary counts {summary['counts']} completed, expected {episodes}")
        if viewer:
            result["page"] = first_page(work / "runs", str(run.relative_to(work / "runs")))
    finally:
        if not keep:
            shutil.rmtree(run, ignore_errors=True)
    return result


def write_curve(results: Path = RESULTS) -> Path:
    """Rebuild ``run_index_curve.json`` and ``.png`` from every ``run_index-<N>.json`` in *results*."""
    sizes: dict[int, dict[str, Any]] = {}
    for path in results.glob("run_index-*.json"):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("schema") == SCHEMA:
            sizes[int(doc["episodes"])] = doc
    data = curve(sizes)
    out = results / f"{CURVE}.json"
    out.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    plot(data, results / f"{CURVE}.png")
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure every size in ``--episodes``; print a table; write the JSON files and the curve."""
    from benchmarks._stub_env import StubEnvServer
    from benchmarks._stub_model import StubModelServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", default="10000,100000,1000000", help="comma list of run sizes")
    parser.add_argument("--steps", type=int, default=5, help="interactions per seed episode (default 5)")
    parser.add_argument("--obs-kb", default="1", help="page KB per step of the seed run, comma list cycled")
    parser.add_argument("--repeats", type=int, default=3, help="resume and summarize rounds per size (medians)")
    parser.add_argument("--work", type=Path, default=None, help="folder for the generated runs (default: temp dir)")
    parser.add_argument("--viewer", action="store_true", help="also time the viewer's first run page")
    parser.add_argument(
        "--results", type=Path, default=None, help=f"where the JSON and PNG go (default {RESULTS}; --quick: a temp dir)"
    )
    parser.add_argument("--quick", action="store_true", help="40 and 80 episodes, one round, temporary results")
    parser.add_argument("--keep", action="store_true", help="keep the work folder and the generated runs")
    parser.add_argument(
        "--curve-only", action="store_true", help="only rebuild the curve (JSON, PNG) and print its table"
    )
    args = parser.parse_args(argv)
    if args.results is None and not args.quick:
        args.results = RESULTS
    if args.curve_only:
        print(f"wrote {write_curve(args.results)}")
        print(markdown_curve(json.loads((args.results / f"{CURVE}.json").read_text(encoding="utf-8"))))
        return 0
    if args.quick:  # a smoke run: tiny sizes, meaningless numbers, never the committed results
        args.episodes, args.repeats = "40,80", 1
        args.results = args.results or Path(tempfile.mkdtemp(prefix="shopsimrl-bench-quick-"))
    sizes = [int(x) for x in args.episodes.split(",") if x.strip()]
    compile_sources(REPO)
    work = Path(tempfile.mkdtemp(prefix="bench-run-index-", dir=args.work))
    try:
        from shopsim_sandbox.cli import write_catalog

        _, split_file = write_catalog(work, 20_000, 0)
        obs = tuple(int(x) for x in args.obs_kb.split(","))
        with StubEnvServer(args.steps, obs) as env, StubModelServer() as model:
            servers = {"env_url": env.env_url, "model_url": model.base_url, "model": model.model}
            seeds = seed_records(work, split_file=split_file, **servers)
            for episodes in sizes:
                doc = {
                    "schema": SCHEMA,
                    "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "machine": machine_facts(("polars", "orjson", "msgspec", "numpy")),
                    "seed": {"episodes": SEED_EPISODES, "steps": args.steps, "obs_kb": list(obs)},
                }
                doc.update(
                    measure_size(
                        episodes,
                        work=work,
                        split_file=split_file,
                        servers=servers,
                        seeds=seeds,
                        repeats=args.repeats,
                        viewer=args.viewer,
                        keep=args.keep,
                    )
                )
                out = args.results / f"run_index-{episodes}.json"
                out.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
                print(format_row(doc), flush=True)
                print(f"wrote {out}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {write_curve(args.results)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
