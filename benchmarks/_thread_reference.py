"""The reference client: a requests + thread-pool harness, shaped like the earlier one (issue 25).

What a typical earlier harness did, written for this benchmark: a
``concurrent.futures.ThreadPoolExecutor`` with one worker thread per episode in flight, one
``requests.Session`` per worker thread (kept alive across that thread's episodes, so each thread reuses
its own connections), request bodies encoded and responses decoded with the standard ``json`` module.
Each episode sends what ``shopsimrl run`` sends, in the same order: ``reset``, then per step a chat
completion (the built-in prompt and the dynamic tool schemas of :mod:`shopsimrl_core.prompts`) and an
``interact``; ``terminate`` if the step limit ends the episode; ``release_one`` always. It appends one
JSON line per episode to a trace file (flushed, not fsynced).

It checks less than the runtime (no §7.3 validation, no repair turns, no provenance, no lease journal,
no fsync), so if anything it is favoured. It is a yardstick, not a second implementation to maintain.
``requests.Session.trust_env`` is off (no proxy or ``.netrc`` look-up per request): the loopback stubs
need none, and it keeps the reference's cost free of whatever the machine's environment holds.

Two entry points: :func:`run_thread_reference` in-process (``core_throughput`` calls it), and
``python -m benchmarks._thread_reference ...`` as its own process (``client_shape`` starts it like a
user starts a program, so its start-up counts like ours and its CPU comes from the OS).
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

import requests

from shopsimrl_core import load_prompt

_SEED = 20261129
_JSON = {"Content-Type": "application/json"}
_local = threading.local()


def _session() -> requests.Session:
    """This worker thread's session (created on its first episode, reused for the rest)."""
    session = getattr(_local, "session", None)
    if session is None:
        session = requests.Session()
        session.trust_env = False
        _local.session = session
    return session


def _post(session: requests.Session, url: str, payload: dict[str, Any]) -> Any:
    """POST *payload* as stdlib-encoded JSON; return the decoded answer (HTTP errors raise)."""
    response = session.post(
        url, data=json.dumps(payload, ensure_ascii=False).encode("utf-8"), headers=_JSON, timeout=120
    )
    response.raise_for_status()
    return json.loads(response.content)


def _episode(
    task_id: int,
    seed: int,
    *,
    env_url: str,
    model_url: str,
    model: str,
    max_steps: int,
    prompt: Any,
    sink: TextIO,
    lock: threading.Lock,
) -> tuple[list[dict[str, Any]], bool, float, float]:
    """Play one episode on this thread's session; return (step timings, completed, start, end)."""
    started = time.perf_counter()
    session = _session()
    url = env_url + "/api/shop_agent"
    steps: list[dict[str, Any]] = []
    completed = False
    reset = _post(
        session,
        url,
        {
            "action": "reset",
            "idx": task_id,
            "if_persona": True,
            "include_private_goal": False,
            "interaction_mode": "multi_turn",
        },
    )["result"]
    lease = {"env_idx": reset["env_idx"], "lease_id": reset["lease_id"]}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": prompt.system_message(reset.get("user_persona"), [])},
        {"role": "user", "content": prompt.first_user_message(reset["task_instruction"], reset["observation"])},
    ]
    try:
        state = reset["observation_state"]
        for index in range(1, max_steps + 1):
            tools = prompt.tool_schemas(state.get("search_available") is True, state.get("actions") or [])
            t0 = time.perf_counter()
            answer = _post(
                session,
                model_url + "/chat/completions",
                {
                    "model": model,
                    "messages": messages,
                    "stream": False,
                    "temperature": 0.0,
                    "max_tokens": 512,
                    "seed": seed + index - 1,
                    "tools": tools,
                    "tool_choice": "auto",
                },
            )
            t1 = time.perf_counter()
            call = answer["choices"][0]["message"]["tool_calls"][0]
            arguments = json.loads(call["function"]["arguments"])
            name = call["function"]["name"]
            action = f"search[{arguments['query']}]" if name == "search" else f"click[{arguments['value']}]"
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            result = _post(session, url, {"action": "interact", **lease, "response": action})["result"]
            t2 = time.perf_counter()
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result["observation"]})
            steps.append(
                {
                    "model_ms": (t1 - t0) * 1000,
                    "env_ms": (t2 - t1) * 1000,
                    "action": action,
                    "reward": result.get("reward"),
                }
            )
            if result.get("done") is True:
                completed = True
                break
            state = result["observation_state"]
        if not completed:
            _post(session, url, {"action": "terminate", **lease, "termination_reason": "action_limit"})
            completed = True
    finally:
        _post(session, url, {"action": "release_one", **lease})
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
    """Run *episodes* episodes on *concurrency* worker threads; measure steps/s and this process's CPU.

    The CPU is ``time.process_time()`` over the episode window (all threads); start-up is outside.
    A broken episode counts as failed, like the runtime's failed records.
    """
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
            except Exception:  # noqa: BLE001 — a broken episode is a failed one; the count is reported
                outcomes.append(([], False, 0.0, 0.0))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        srv1 = [proc_cpu_seconds(pid) for pid in server_pids]
    steps = sum(len(s) for s, _, _, _ in outcomes)
    pairs = [(a, b) for a, b in zip(srv0, srv1) if a is not None and b is not None]
    server_cpu = sum(b - a for a, b in pairs) if len(pairs) == len(srv0) else None
    timings = [{"steps": [{"timing": {**t, "harness_ms": 0.0}} for t in s]} for s, _, _, _ in outcomes]
    return {
        "client": "requests + ThreadPoolExecutor",
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
        "timing": timing_split(timings),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the reference once as its own process and print its measurement as one JSON line."""
    import argparse

    parser = argparse.ArgumentParser(description="requests + thread-pool reference (the earlier harness's shape)")
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
