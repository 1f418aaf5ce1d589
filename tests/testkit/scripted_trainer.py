"""A scripted trainer for training-round tests: plays GRPO groups for real, "learns" by a schedule.

Started by ``round_training`` through Dagster Pipes (``training.command``:
``["{python}", "tests/testkit/scripted_trainer.py", "--steps", "2"]``). Per step it serves its current
sandbox-policy checkpoint (a JSON file of lapse rates) on a free port, plays one GRPO group of every task
of the round's task data with ``TrainingSession`` (the round's training YAML: curriculum, exact tokens,
triage), reports the step's reward, success, frontier share and tokens/s, then writes the next checkpoint
(every lapse rate times ``--decay``: rising competence) and registers it. ``--resume_from`` (the round's
last checkpoint, ``{resume_from}``) starts from that checkpoint's lapse rates and step.

``--hang-after-step N`` sleeps after step N's checkpoint (the fault tests kill or terminate it there); a
resumed trainer does not hang.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shopsimrl_pipes import open_trainer_report

STUCK_WORKER = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(3600)")
DEFAULT_LAPSES = {"ignore_budget": 1.0, "first_option": 1.0, "impatient": 1.0, "terse_query": 1.0, "runner_up": 0.0}


@contextlib.contextmanager
def serve(checkpoint: Path, model: str, folder: Path) -> Iterator[str]:
    """The sandbox policy on *checkpoint* (own process group, free port); yields its ``/v1`` URL."""
    ready = folder / f".{checkpoint.stem}.ready"
    ready.unlink(missing_ok=True)
    process = subprocess.Popen([sys.executable, "-m", "shopsim_sandbox.policy", "serve", "--checkpoint",
                                str(checkpoint), "--port", "0", "--served-model-name", model, "--ready-file",
                                str(ready)], stdout=subprocess.DEVNULL)
    try:
        while True:
            if process.poll() is not None:
                raise SystemExit(f"policy server on {checkpoint} exited with {process.returncode}")
            with contextlib.suppress(OSError, ValueError, KeyError):
                port = json.loads(ready.read_text(encoding="utf-8"))["port"]
                break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def write_checkpoint(folder: Path, step: int, lapses: dict[str, float]) -> Path:
    """Write the sandbox-policy checkpoint of *step* atomically (a reader never sees half a file)."""
    path = folder / f"policy-step-{step:06d}.json"
    tmp = folder / f".{path.name}.tmp"
    tmp.write_text(json.dumps({"format": "shopsim-policy-checkpoint-v1", "step": step, "lapses": lapses}),
                   encoding="utf-8")
    os.replace(tmp, path)
    return path


async def play_step(session: Any, tasks: list[int]) -> dict[str, float]:
    """One group of every task; the step's reward, success, frontier share and sampled tokens per second."""
    started = time.monotonic()
    groups = [await session.play_group(task) for task in tasks]
    elapsed = time.monotonic() - started
    episodes = [e for group in groups for e in group]
    sampled = sum(sum(s.loss_mask) if hasattr(s, "loss_mask") else 0 for e in episodes for s in e.samples)
    frontier = sum(1 for group in groups if len({e.reward for e in group}) > 1)
    return {"reward": sum(e.reward for e in episodes) / len(episodes),
            "success": sum(e.success for e in episodes) / len(episodes),
            "frontier_share": frontier / len(groups), "tokens_per_s": sampled / elapsed if elapsed > 0 else 0.0}


async def train(report: Any, steps: int, decay: float, hang_after: int | None, resume_from: str) -> None:
    from shopsimrl_core.training import VLLMChatBackend
    from shopsimrl_core.training._factory import session_from_training_config

    extras = report.extras
    folder = Path(extras["checkpoint_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    lapses, step = dict(DEFAULT_LAPSES), 0
    if resume_from:
        state = json.loads(Path(resume_from).read_text(encoding="utf-8"))
        lapses, step = dict(state["lapses"]), int(state["step"])
        report.log(f"resumed from step {step} ({resume_from})")
    tasks = [json.loads(line)["metadata"]["task_id"]
             for line in Path(extras["task_data"]).read_text(encoding="utf-8").splitlines() if line.strip()]
    current = Path(resume_from) if resume_from else write_checkpoint(folder, step, lapses)
    session = session_from_training_config(extras["training_config"], backend=None)
    model = session.plan.config.model
    async with session:
        for _ in range(steps):
            with serve(current, model.name, folder) as url:
                if session.backend is not None:  # the YAML's own backend, or the last step's
                    await session.backend.aclose()
                session.backend = VLLMChatBackend.from_model_config(model.model_copy(update={"base_url": url}))
                metrics = await play_step(session, tasks)
                await session.backend.aclose()
                session.backend = None
            step += 1
            report.step(step, **metrics)
            lapses = {name: round(rate * decay, 6) for name, rate in lapses.items()}
            current = write_checkpoint(folder, step, lapses)
            report.checkpoint(current, step)
            if hang_after is not None and step >= hang_after and not resume_from:
                # a worker of the trainer that ignores SIGTERM (a stuck data loader): only its group's SIGKILL ends it
                worker = subprocess.Popen([sys.executable, "-c", STUCK_WORKER, str(folder / "worker.pid")])
                report.log(f"hanging after step {step} (--hang-after-step), worker pid {worker.pid}")
                await asyncio.sleep(3600)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--decay", type=float, default=0.5)
    parser.add_argument("--hang-after-step", type=int, default=None)
    parser.add_argument("--resume_from", default="", help="the round's last checkpoint ({resume_from}); empty: none")
    args = parser.parse_args()
    with open_trainer_report() as report:
        asyncio.run(train(report, args.steps, args.decay, args.hang_after_step, args.resume_from))
        report.finish(trainer="tests/testkit/scripted_trainer.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
