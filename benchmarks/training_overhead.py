"""What exact tokens cost: CPU per step of a training episode against an evaluation episode, on the same stubs.

    .venv/bin/python -m benchmarks.training_overhead [--rounds 3] [--quick] [--out PATH]

Both clients are whole processes started as a user or a trainer's rollout worker starts them, start-up included,
their CPU (user + system) read from the OS (``os.wait4``): the evaluation is ``shopsimrl run`` (the tuned aiohttp /
h1 model client), the training path is ``benchmarks._training_client`` (a ``TrainingSession`` over the vLLM chat
token backend: ``return_token_ids`` and ``logprobs`` asked for, every turn's tokens checked, samples built, the
training block and ``samples.jsonl`` written). Same stub environment (10-step episodes, 1–8 KB pages) and stub
model (``benchmarks._stub_model``; with ``return_token_ids`` it answers prompt ids sized like a real tokenizer's,
about one per 3.5 request bytes, so the prompt ids grow with the conversation as they do on vLLM), same tasks,
same number of episodes; rows vary the episodes in flight and the pages' size. Each round runs both, the order
flipped every round; reported per row: the medians of CPU ms per step of each and the ratio training /
evaluation (and each round's pair). Writes benchmarks/results/training_overhead.json (``--quick``: a temporary file).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._measure import SPLIT, _round, machine_facts
from benchmarks._stub_env import DEFAULT_OBS_KB, StubEnvServer
from benchmarks._stub_model import StubModelServer, model_section
from benchmarks.client_shape import EPISODE_STEPS, _run_child, _shopsimrl

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "training_overhead.json"
SCHEMA = "shopsimrl-bench-training-overhead-v1"
#: (label, episodes in flight, tasks, samples per task (group size), observation KB per page or None for the mix)
SETTINGS: list[tuple[str, int, int, int, tuple[int, ...] | None]] = [
    ("c8_mix", 8, 16, 4, None),
    ("c32_mix", 32, 32, 4, None),
    ("c32_obs8k", 32, 32, 4, (8,)),
]
QUICK_SETTINGS: list[tuple[str, int, int, int, tuple[int, ...] | None]] = [("c4_mix", 4, 2, 2, None)]


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _split(workdir: Path, tasks: int) -> Path:
    from shopsim_sandbox.cli import write_catalog

    _, split_file = write_catalog(workdir, 400, 0)
    data = json.loads(split_file.read_text(encoding="utf-8"))
    body = data["splits"][SPLIT]
    body["task_ids"] = list(body["task_ids"])[:tasks]
    for key in ("task_ids_sha256", "task_count"):
        body.pop(key, None)
    data.pop("checks", None)
    path = workdir / "split.json"
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def _config(workdir: Path, split: Path, env_url: str, model_url: str, model: str, concurrency: int,
            repeats: int) -> Path:
    mapping = {
        "experiment": {"name": "training-overhead", "output_dir": str(workdir / "runs"), "seed": 20261204,
                       "concurrency": concurrency, "max_episode_retries": 0},
        "tasks": {"split_file": str(split), "split": SPLIT, "repeats": repeats},
        "environment": {"base_url": env_url, "timeout": 120, "max_connections": max(64, concurrency)},
        "runtime": {"max_steps": EPISODE_STEPS + 2},
        "model": model_section(model, model_url, max_connections=max(64, concurrency), temperature=1.0),
    }
    path = workdir / "eval.yaml"
    path.write_text(json.dumps(mapping, indent=2), encoding="utf-8")
    return path


def _steps(traces: Path) -> tuple[int, int]:
    steps = failed = 0
    with open(traces, "rb") as handle:
        for raw in handle:
            record = json.loads(raw)
            steps += len(record.get("steps") or [])
            failed += record.get("status") != "completed"
    return steps, failed


def _one(kind: str, workdir: Path, config: Path, episodes: int, group: int, concurrency: int,
         pids: list[int | None]) -> dict[str, Any]:
    out = workdir / f"{kind}-out"
    if kind == "evaluation":
        command = [*_shopsimrl(), "run", str(config), "--progress", "none", "--quiet"]
        traces = workdir / "runs" / "training-overhead" / "traces.jsonl"
    else:
        command = [sys.executable, "-m", "benchmarks._training_client", str(config), str(out), "--episodes",
                   str(episodes), "--group-size", str(group), "--concurrency", str(concurrency)]
        traces = out / "traces.jsonl"
    child = _run_child(command, workdir if kind == "evaluation" else ROOT, pids)  # ROOT: `-m benchmarks...`
    if child["returncode"] not in (0, 1) or not traces.is_file():
        raise RuntimeError(f"{kind} exited {child['returncode']}: {child['stderr'][-2000:]}")
    steps, failed = _steps(traces)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(workdir / "runs", ignore_errors=True)
    return {"cpu_s": _round(child["cpu_s"]), "wall_s": _round(child["wall_s"]), "steps": steps, "failed": failed,
            "cpu_ms_per_step": _round(1000.0 * child["cpu_s"] / max(steps, 1)), "load": _round(child["load"], 2),
            "server_cpu_s": _round(child["server_cpu_s"])}


def measure(settings: list[tuple[str, int, int, int, tuple[int, ...] | None]], rounds: int) -> dict[str, Any]:
    """Run every row *rounds* times (both clients per round, order flipped); return the results document."""
    doc: dict[str, Any] = {"schema_version": SCHEMA, "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                           "machine": machine_facts(("httpx", "aiohttp", "orjson")), "rounds": rounds, "rows": {}}
    for label, concurrency, tasks, group, obs in settings:
        workdir = Path(tempfile.mkdtemp(prefix="bench-training-"))
        try:
            split = _split(workdir, tasks)
            with StubEnvServer(EPISODE_STEPS, obs or DEFAULT_OBS_KB) as env, StubModelServer() as model:
                config = _config(workdir, split, env.env_url, model.base_url, model.model, concurrency, group)
                pairs = []
                for number in range(rounds):
                    order = ["evaluation", "training"] if number % 2 == 0 else ["training", "evaluation"]
                    got = {kind: _one(kind, workdir, config, tasks * group, group, concurrency, [env.pid, model.pid])
                           for kind in order}
                    pairs.append(got)
                    _log(f"{label} round {number + 1}: evaluation {got['evaluation']['cpu_ms_per_step']} ms/step, "
                         f"training {got['training']['cpu_ms_per_step']} ms/step")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        evaluation = [p["evaluation"]["cpu_ms_per_step"] for p in pairs]
        training = [p["training"]["cpu_ms_per_step"] for p in pairs]
        doc["rows"][label] = {
            "concurrency": concurrency, "episodes": tasks * group, "group_size": group,
            "obs_kb": list(obs or DEFAULT_OBS_KB), "rounds": pairs,
            "evaluation_cpu_ms_per_step": _round(statistics.median(evaluation)),
            "training_cpu_ms_per_step": _round(statistics.median(training)),
            "ratio": _round(statistics.median(training) / statistics.median(evaluation), 2),
            "ratio_per_round": [_round(t / e, 2) for t, e in zip(training, evaluation)],
        }
    return doc


def table(doc: dict[str, Any]) -> str:
    """The printed (and docs) table."""
    lines = ["| row | in flight | episodes | evaluation CPU ms/step | training CPU ms/step | training / evaluation "
             "(median; per round) |", "|---|---|---|---|---|---|"]
    for label, row in doc["rows"].items():
        spread = ", ".join(f"{r:.2f}" for r in row["ratio_per_round"])
        lines.append(f"| {label} | {row['concurrency']} | {row['episodes']} | {row['evaluation_cpu_ms_per_step']} | "
                     f"{row['training_cpu_ms_per_step']} | {row['ratio']:.2f}× ({spread}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per row (default 3)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test; numbers meaningless)")
    parser.add_argument("--out", type=Path, default=None, help=f"JSON output (default {RESULTS})")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds: must be >= 1")
    doc = measure(QUICK_SETTINGS if args.quick else SETTINGS, 1 if args.quick else args.rounds)
    out = args.out or (Path(tempfile.mkdtemp()) / "training_overhead.json" if args.quick else RESULTS)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(table(doc))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
