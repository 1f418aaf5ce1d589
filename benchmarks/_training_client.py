"""The training path as a trainer's rollout process runs it, for ``benchmarks.training_overhead``.

    python -m benchmarks._training_client EVAL_CONFIG OUT_DIR --episodes N --group-size G --concurrency C

Plays ``N`` episodes (``N / G`` groups of the split's first tasks) through a :class:`TrainingSession` with the
vLLM chat token backend, at most ``C`` episodes in flight, then exits. Start-up (imports, config, plan) included.
"""

from __future__ import annotations

import argparse
import asyncio
import sys


async def _play(config: str, out: str, episodes: int, group_size: int, concurrency: int) -> int:
    from shopsimrl_core.runs.config._config import load_config
    from shopsimrl_core.training import SamplingSpec, TrainingSession, VLLMChatBackend

    evaluation = load_config(config)
    backend = VLLMChatBackend.from_model_config(evaluation.model)
    sampling = SamplingSpec(temperature=1.0, max_tokens=evaluation.model.max_tokens)
    session = TrainingSession.from_config(evaluation, backend=backend, out_dir=out, group_size=group_size,
                                          sampling=sampling)
    tasks = list(session.plan.split.task_ids)[: max(1, episodes // group_size)]
    gate = asyncio.Semaphore(concurrency)
    failed = 0

    async def one(task: int, index: int) -> None:
        nonlocal failed
        async with gate:
            episode = await session.play(task, index)
            failed += episode.aborted

    async with session:
        await asyncio.gather(*(one(t, i) for t in tasks for i in range(group_size)))
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Run the training client; exit 1 when an episode aborted."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config")
    parser.add_argument("out")
    parser.add_argument("--episodes", type=int, required=True)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args(argv)
    return asyncio.run(_play(args.config, args.out, args.episodes, args.group_size, args.concurrency))


if __name__ == "__main__":
    sys.exit(main())
