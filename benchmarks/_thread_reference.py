"""The earlier harness's execution shape, rebuilt minimally for a same-machine comparison.

A thread pool runs one episode per thread, and every episode opens its own synchronous
``httpx.Client`` (a new HTTP session: new connections, no pool shared across episodes). The
requests are the same as the runtime's: the same built-in prompt, the same dynamic tool schemas,
the same environment envelope. It checks less than the runtime (no §7.3 validation, no repair
turns, no trace provenance) and writes one JSON line per episode without fsync, so it is, if
anything, favoured. It is a reference point, not a second implementation to maintain.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from shopsimrl_core import load_prompt

_SEED = 20261129


def _episode(task_id: int, seed: int, *, env_url: str, model_url: str, model: str, max_steps: int,
             prompt: Any, sink: Any, lock: threading.Lock) -> tuple[list[dict[str, Any]], bool, float, float]:
    """Play one episode on a fresh HTTP session; return (step timings, completed, start, end)."""
    started = time.perf_counter()
    url = env_url + "/api/shop_agent"
    steps: list[dict[str, Any]] = []
    completed = False
    with httpx.Client(timeout=120, trust_env=False) as http:
        reset = http.post(
            url,
            json={
                "action": "reset",
                "idx": task_id,
                "if_persona": True,
                "include_private_goal": False,
                "interaction_mode": "multi_turn",
            },
        ).json()["result"]
        lease = {"env_idx": reset["env_idx"], "lease_id": reset["lease_id"]}
        try:
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": prompt.system_message(reset.get("user_persona"), [])},
                {"role": "user", "content": prompt.first_user_message(reset["task_instruction"], reset["observation"])},
            ]
            state = reset["observation_state"]
            for index in range(1, max_steps + 1):
                step_started = time.perf_counter()
                tools = prompt.tool_schemas(state.get("search_available") is True, state.get("actions") or [])
                t0 = time.perf_counter()
                body = http.post(
                    model_url + "/chat/completions",
                    json={
                        "model": model,
                        "messages": messages,
                        "stream": False,
                        "temperature": 0.0,
                        "max_tokens": 512,
                        "seed": seed + index - 1,
                        "tools": tools,
                        "tool_choice": "auto",
                    },
                ).json()
                t1 = time.perf_counter()
                call = body["choices"][0]["message"]["tool_calls"][0]
                arguments = json.loads(call["function"]["arguments"])
                name = call["function"]["name"]
                action = f"search[{arguments['query']}]" if name == "search" else f"click[{arguments['value']}]"
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
                result = http.post(url, json={"action": "interact", **lease, "response": action}).json()["result"]
                t2 = time.perf_counter()
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result["observation"]})
                steps.append(
                    {
                        "model_ms": (t1 - t0) * 1000,
                        "env_ms": (t2 - t1) * 1000,
                        "harness_ms": (t2 - step_started) * 1000 - (t2 - t0) * 1000,
                    }
                )
                if result.get("done") is True:
                    completed = True
                    break
                state = result["observation_state"]
            if not completed:
                final = http.post(url, json={"action": "terminate", **lease, "termination_reason": "action_limit"})
                completed = final.status_code == 200
        finally:
            http.post(url, json={"action": "release_one", **lease})
    line = json.dumps({"task_id": task_id, "seed": seed, "steps": steps, "conversation": messages}, ensure_ascii=False)
    with lock:
        sink.write(line + "\n")
        sink.flush()
    return steps, completed, started, time.perf_counter()


def run_thread_reference(
    *,
    env_url: str,
    split_file: Path,
    model_url: str,
    model: str,
    concurrency: int,
    episodes: int,
    max_steps: int,
    server_pids: list[int | None],
) -> dict[str, Any]:
    """Run *episodes* episodes on a pool of *concurrency* threads and measure steps/s and client CPU."""
    from benchmarks._measure import SPLIT, _round, proc_cpu_seconds, steady_rate, timing_split

    task_ids = json.loads(split_file.read_text(encoding="utf-8"))["splits"][SPLIT]["task_ids"]
    jobs = [(task_ids[i % len(task_ids)], _SEED + 1000 * i) for i in range(episodes)]
    prompt = load_prompt()
    lock = threading.Lock()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as sink, ThreadPoolExecutor(concurrency) as pool:
        srv0 = [proc_cpu_seconds(pid) for pid in server_pids]
        wall0, cpu0 = time.perf_counter(), time.process_time()
        futures = [
            pool.submit(
                _episode,
                task,
                seed,
                env_url=env_url,
                model_url=model_url,
                model=model,
                max_steps=max_steps,
                prompt=prompt,
                sink=sink,
                lock=lock,
            )
            for task, seed in jobs
        ]
        outcomes: list[tuple[list[dict[str, Any]], bool, float, float]] = []
        for future in futures:
            try:
                outcomes.append(future.result())
            except Exception:  # a broken episode counts as failed, like the runtime's failed records
                outcomes.append(([], False, 0.0, 0.0))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        srv1 = [proc_cpu_seconds(pid) for pid in server_pids]
    steps = sum(len(s) for s, _, _, _ in outcomes)
    server_cpu = None
    if all(a is not None and b is not None for a, b in zip(srv0, srv1)):
        server_cpu = sum(after - before for before, after in zip(srv0, srv1))
    return {
        "episodes": len(outcomes),
        "failed": sum(1 for _, ok, _, _ in outcomes if not ok),
        "steps": steps,
        "wall_s": _round(wall),
        "client_cpu_s": _round(cpu),
        "steps_per_s": _round(steps / wall if wall > 0 else None, 1),
        "steady_steps_per_s": _round(
            steady_rate([(a, b, len(s)) for s, ok, a, b in outcomes if ok], wall0, workers=concurrency), 1
        )
        if episodes >= 2 * concurrency
        else None,
        "client_cpu_ms_per_step": _round(cpu * 1000.0 / steps if steps else None),
        "server_cpu_ms_per_step": _round(server_cpu * 1000.0 / steps if steps and server_cpu is not None else None),
        "timing": timing_split([{"steps": [{"timing": t} for t in s]} for s, _, _, _ in outcomes]),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the reference once as its own process and print its measurement as one JSON line.

    ``client_shape`` starts it like a user starts a program, so its start-up counts like ours.
    """
    import argparse

    parser = argparse.ArgumentParser(description="thread-pool reference (the earlier harness's shape)")
    parser.add_argument("--env-url", required=True)
    parser.add_argument("--model-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--split-file", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, required=True)
    parser.add_argument("--episodes", type=int, required=True)
    parser.add_argument("--max-steps", type=int, default=10)
    args = parser.parse_args(argv)
    result = run_thread_reference(
        env_url=args.env_url,
        split_file=args.split_file,
        model_url=args.model_url,
        model=args.model,
        concurrency=args.concurrency,
        episodes=args.episodes,
        max_steps=args.max_steps,
        server_pids=[],
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
