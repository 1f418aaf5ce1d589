"""Run index benchmark: build the sidecar, then resume index + summary and the viewer's first page.

    .venv/bin/python benchmarks/run_index.py --episodes 1000000 --line-kb 35 --out /work/tmp-bench

Generates a run directory of N episodes whose trace lines have realistic shape and ~K KB size
(templated from one demo-like record: 10 steps of Chinese observations, reasoning, tool calls,
environment payloads; ids, rewards, outcomes and categories vary per line) and a manifest whose plan
lists every job. Each phase runs in its own process; wall time, CPU (user+sys) and peak RSS come
from the OS (``os.wait4``), imports included:

1. ``build``   open_run_index on a run without index (streams every trace line once);
2. ``resume``  RunStore.index() + is_complete() for every planned job + summarize_run(write=False),
               with the index already built (the issue 11 target: ≤ 5 s, ≤ 2 GB);
3. ``page``    start ``shopsimrl view`` and GET the run page (time from spawn to the first page, and
               the request alone; target ≤ 1 s once the index is built);
4. ``reference`` (only with --reference) the earlier path: stream all traces, summary from records.

Prints a table and writes JSON to benchmarks/results/run_index-<N>x<K>kb.json. Deletes the generated
run unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
PY = sys.executable

_CATEGORIES = ["服饰›男装›短袖衬衫", "母婴›喂养用品›奶瓶", "家居›厨具›炒锅", "数码›耳机›蓝牙耳机", "美妆›护肤›面霜"]
_REASONS = ["purchase", "purchase", "purchase", "action_limit", "generation_length"]


def _record_template(line_kb: int, n_steps: int = 10) -> tuple[str, str]:
    """One demo-like record as JSON text split around the per-episode fields (see _line)."""
    filler = (
        "商品列表：1. 玻璃耐摔奶瓶 热卖 ASIN：100000578089 价格：21"
        "7.0 品牌：云朵工坊 类别：母婴›喂养用品›奶瓶 关键属性：玻璃；耐摔；宽口径\n"
    )
    steps = []
    for i in range(1, n_steps + 1):
        steps.append(
            {
                "step_index": i,
                "observation": "",
                "tools": [{"type": "function", "function": {"name": "click", "parameters": {"type": "object"}}}],
                "model": {
                    "content": None,
                    "reasoning": "页面可以搜索，用任务里的关键词搜索：奶瓶" * 3,
                    "tool_calls": [
                        {
                            "call_id": f"call-{i}",
                            "name": "click",
                            "arguments": {"value": "100004497992"},
                            "raw_arguments": '{"value": "100004497992"}',
                        }
                    ],
                    "finish_reason": "tool_calls",
                    "usage": {"prompt_tokens": 600 + 300 * i, "completion_tokens": 34, "total_tokens": 634 + 300 * i},
                    "response_id": f"chatcmpl-{i}",
                    "metadata": {},
                    "latency_ms": 3.5,
                    "protocol_error": None,
                    "policy_failure": None,
                    "raw_response": None,
                },
                "action": "click[100004497992]",
                "environment": {
                    "done": False,
                    "reward": 0,
                    "observation": "",
                    "message": "Continue interaction",
                    "action_feedback": {
                        "action": "click[100004497992]",
                        "valid": True,
                        "reason": "executed",
                        "message": "已执行",
                    },
                },
                "request_seed": 1000 + i,
                "timing": {"model_ms": 3.5, "env_ms": 3.3, "harness_ms": 0.05},
            }
        )
    base = {
        "schema_version": "shopsimrl-episode-v4",
        "episode_id": "@EID@",
        "status": "completed",
        "job": {"task_id": -111111, "sample_id": 0, "seed": 1, "split": "val"},
        "provenance": {"model": {"checkpoint_id": "bench-ckpt", "model": "bench"}},
        "started_at": "2026-12-01T00:00:00+00:00",
        "ended_at": "2026-12-01T00:00:01+00:00",
        "duration_ms": -222222.5,
        "reset": {"task_instruction": "买一个奶瓶"},
        "selected_skills": [],
        "conversation": [{"role": "system", "content": "你是替用户在模拟电商平台上购物的助手。"}],
        "steps": steps,
        "final": {
            "done": True,
            "over": True,
            "reward": -333333.5,
            "termination_reason": "@REASON@",
            "reward_detail": {"r_type": 1.0, "r_att": -444444.5, "r_option": 1.0, "r_price": 1.0, "r_success": -555555},
            "purchase": {"asin": "100004497992", "category": "@CAT@"},
            "goal": {"category": "@CAT@", "asin": "1"},
        },
        "error": None,
        "attempt": {"number": 1, "invocation_id": "bench"},
    }
    text = json.dumps(base, ensure_ascii=False)
    size = len(text.encode("utf-8"))
    per_step = max(0, (line_kb * 1024 - size) // (2 * n_steps))
    pad = filler * (per_step // len(filler.encode("utf-8")) + 1)
    pad = pad.encode("utf-8")[:per_step].decode("utf-8", "ignore")
    for step in steps:
        step["observation"] = pad
        step["environment"]["observation"] = pad
    return json.dumps(base, ensure_ascii=False), ""


def generate(run: Path, episodes: int, line_kb: int, n_steps: int = 10) -> dict[str, float]:
    """Write manifest.json and traces.jsonl for *episodes* episodes; returns sizes and time."""
    started = time.perf_counter()
    run.mkdir(parents=True, exist_ok=True)
    template, _ = _record_template(line_kb, n_steps)
    parts = template
    for key in ('"@EID@"', "-111111", "-222222.5", "-333333.5", '"@REASON@"', "-444444.5", "-555555"):
        parts = parts.replace(key, "\x00", 1)
    chunks = parts.split("\x00")
    cat_chunks = chunks[-1].split("@CAT@")
    rng = random.Random(7)
    jobs = []
    with open(run / "traces.jsonl", "wb", buffering=8 << 20) as handle:
        for task in range(episodes):
            eid = f"task-{task:06d}__sample-000"
            jobs.append({"task_id": task, "sample_id": 0, "seed": task, "split": "val"})
            reason = _REASONS[task % len(_REASONS)]
            r_att = rng.choice([0.0, 0.5, 1.0])
            success = 1 if reason == "purchase" and r_att == 1.0 else 0
            reward = round(rng.random(), 6) if reason == "purchase" else 0.0
            category = _CATEGORIES[task % len(_CATEGORIES)]
            values = [
                json.dumps(eid),
                str(task),
                repr(1000.0 + task % 997),
                repr(reward),
                json.dumps(reason),
                repr(r_att),
                str(success),
            ]
            out = []
            for chunk, value in zip(chunks[:-1], values):
                out.append(chunk)
                out.append(value)
            out.append(category.join(cat_chunks))
            handle.write(("".join(out) + "\n").encode("utf-8"))
    plan = {
        "experiment": {"name": run.name},
        "model_id": "bench",
        "model": {"checkpoint_id": "bench-ckpt"},
        "task_split": {"name": "val"},
        "jobs": jobs,
    }
    manifest = {
        "schema_version": "shopsimrl-run-manifest-v1",
        "created_at": "2026-12-01T00:00:00+00:00",
        "plan_fingerprint": "bench",
        "fingerprint_scheme": "semantic-v2",
        "plan": plan,
        "execution": {},
    }
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    size = (run / "traces.jsonl").stat().st_size
    return {
        "generate_s": time.perf_counter() - started,
        "traces_bytes": size,
        "line_bytes_mean": size / max(1, episodes),
    }


def _measure(code: str, *args: str) -> dict[str, float]:
    started = time.perf_counter()
    proc = subprocess.Popen([PY, "-c", code, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()  # type: ignore[union-attr]
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"phase failed:\n{err[-2000:]}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "output": out.strip(),
    }


_BUILD = """
import sys
from shopsimrl_core.runs.storage._index import open_run_index
index = open_run_index(sys.argv[1])
print(index.covered_lines)
"""

_RESUME = """
import sys
from shopsimrl_core.runs.storage._store import RunStore
from shopsimrl_core.analysis._summary import summarize_run
store = RunStore(sys.argv[1])
index = store.index()
done = sum(index.is_complete(f"task-{t:06d}__sample-000") for t in range(int(sys.argv[2])))
summary = summarize_run(sys.argv[1], write=False, store=store)
print(done, summary["counts"]["completed"], summary["primary"]["reward_mean"])
"""

_REFERENCE = """
import sys, json
from shopsimrl_core.runs.storage._jsonl import iter_trace_lines
from shopsimrl_core.analysis._summary import build_summary
# The earlier path: stream every trace line for the latest offsets, then re-read the winners.
latest = {}
for line in iter_trace_lines(sys.argv[1] + "/traces.jsonl"):
    if isinstance(line.value, dict):
        latest[line.value["episode_id"]] = (line.offset, line.length)
def records():
    with open(sys.argv[1] + "/traces.jsonl", "rb") as handle:
        for eid in sorted(latest):
            handle.seek(latest[eid][0])
            yield json.loads(handle.read(latest[eid][1]))
summary = build_summary(records(), len(latest))
print(summary["counts"]["completed"], summary["primary"]["reward_mean"])
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu_s(pid: int) -> float:
    # utime + stime of a running process, from /proc (clock ticks).
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def first_page(root: Path, rel: str) -> dict[str, float]:
    """Spawn ``shopsimrl view`` and time the first run page (the index is already built)."""
    import httpx

    port = _free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [PY, "-m", "shopsimrl_core.cli._main", "view", str(root), "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}/run/{rel}"
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/favicon-probe", timeout=120, trust_env=False)  # server is up
                cpu0, t0 = _cpu_s(proc.pid), time.perf_counter()
                response = httpx.get(url, timeout=120, trust_env=False)
                break
            except httpx.TransportError:
                if proc.poll() is not None:
                    raise SystemExit(proc.stderr.read().decode()[-2000:]) from None  # type: ignore[union-attr]
                time.sleep(0.02)
        request_s = time.perf_counter() - t0
        request_cpu = _cpu_s(proc.pid) - cpu0
        spawn_to_page = time.perf_counter() - started
        assert response.status_code == 200, response.text[:500]
        cpu1, t1 = _cpu_s(proc.pid), time.perf_counter()
        again = httpx.get(url + "?success=no&sort=reward&order=desc&page=3", timeout=120, trust_env=False)
        filtered_s, filtered_cpu = time.perf_counter() - t1, _cpu_s(proc.pid) - cpu1
        assert again.status_code == 200
        return {
            "first_page_request_s": request_s,
            "first_page_server_cpu_s": request_cpu,
            "spawn_to_first_page_s": spawn_to_page,
            "filtered_page_s": filtered_s,
            "filtered_page_server_cpu_s": filtered_cpu,
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1_000_000)
    parser.add_argument("--line-kb", type=int, default=35)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / ".run_index_data"))
    parser.add_argument("--steps", type=int, default=10, help="steps per generated episode (realistic: 10)")
    parser.add_argument("--reference", action="store_true", help="also time the earlier full-read path")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="reuse an existing generated run (and its index) in --out")
    args = parser.parse_args()
    root = Path(args.out)
    rel = f"val/bench-{args.episodes}x{args.line_kb}kb"
    run = root / rel
    reuse = args.reuse and (run / "traces.index.parquet").is_file()
    if run.exists() and not reuse:
        shutil.rmtree(run)
    result: dict[str, object] = {
        "episodes": args.episodes,
        "line_kb_target": args.line_kb,
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
    }
    previous = RESULTS / f"run_index-{args.episodes}x{args.line_kb}kb.json"
    try:
        result["steps_per_episode"] = args.steps
        if reuse and previous.is_file():
            # Generation and the from-scratch build are kept from the run that made the data.
            old = json.loads(previous.read_text(encoding="utf-8"))
            result["generate"], result["build"], result["index_bytes"] = (
                old["generate"],
                old["build"],
                old["index_bytes"],
            )
            result["reused_data_from"] = str(previous)
        else:
            result["generate"] = generate(run, args.episodes, args.line_kb, args.steps)
            result["build"] = _measure(_BUILD, str(run))
            result["index_bytes"] = sum(p.stat().st_size for p in run.glob("traces.index.*"))
        result["resume_summary"] = _measure(_RESUME, str(run), str(args.episodes))
        result["page"] = first_page(root, rel)
        if args.reference:
            result["reference_full_read"] = _measure(_REFERENCE, str(run))
    finally:
        if not args.keep:
            shutil.rmtree(run, ignore_errors=True)
    gen, build, resume, page = result["generate"], result["build"], result["resume_summary"], result["page"]  # type: ignore[misc]
    rows = [
        ("traces", f"{gen['traces_bytes'] / 1e9:.2f} GB, {gen['line_bytes_mean'] / 1024:.1f} KB/line"),  # type: ignore[index]
        ("index sidecar", f"{result['index_bytes'] / 1e6:.1f} MB"),  # type: ignore[operator]
        (
            "index build (from scratch)",
            f"{build['wall_s']:.1f} s wall, {build['cpu_s']:.1f} s CPU, {build['peak_rss_mb']:.0f} MB peak",
        ),  # type: ignore[index]
        (
            "resume index + summary",
            f"{resume['wall_s']:.2f} s wall, {resume['cpu_s']:.2f} s CPU, {resume['peak_rss_mb']:.0f} MB peak (target ≤ 5 s, ≤ 2048 MB)",  # noqa: E501
        ),  # type: ignore[index]
        (
            "viewer first page (request)",
            f"{page['first_page_request_s']:.2f} s wall, {page['first_page_server_cpu_s']:.2f} s server CPU (target ≤ 1 s)",  # noqa: E501
        ),  # type: ignore[index]
        ("viewer spawn → first page", f"{page['spawn_to_first_page_s']:.2f} s"),  # type: ignore[index]
        (
            "viewer filtered page 3",
            f"{page['filtered_page_s']:.2f} s wall, {page['filtered_page_server_cpu_s']:.2f} s server CPU",
        ),  # type: ignore[index]
    ]
    if "reference_full_read" in result:
        ref = result["reference_full_read"]
        rows.append(
            (
                "reference: re-read all traces + summary",
                f"{ref['wall_s']:.1f} s wall, {ref['peak_rss_mb']:.0f} MB peak "  # type: ignore[index]
                f"(ratio {ref['wall_s'] / resume['wall_s']:.0f}x)",
            )
        )  # type: ignore[index]
    width = max(len(r[0]) for r in rows)
    print(f"run index benchmark: {args.episodes} episodes, target {args.line_kb} KB/line, {os.cpu_count()} CPUs")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"run_index-{args.episodes}x{args.line_kb}kb.json"
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
