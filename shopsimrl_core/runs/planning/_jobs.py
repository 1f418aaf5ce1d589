"""Episode jobs: sampling, job order, seeds and episode ids (runtime-semantics §4.2–§4.4)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["EpisodeJob", "episode_seed", "episode_id", "call_seed", "plan_jobs", "sample_task_ids"]


def episode_seed(experiment_seed: int, task_id: int, sample_id: int) -> int:
    """Return the episode seed: the first 4 bytes (big-endian) of SHA-256("{seed}:{task}:{sample}")."""
    digest = hashlib.sha256(f"{experiment_seed}:{task_id}:{sample_id}".encode("ascii")).digest()
    return int.from_bytes(digest[:4], "big")


def episode_id(task_id: int, sample_id: int) -> str:
    """Return ``task-{task_id:06d}__sample-{sample_id:03d}``; wider numbers are kept whole."""
    return f"task-{task_id:06d}__sample-{sample_id:03d}"


def call_seed(job_seed: int, step_index: int) -> int:
    """Return the per-call seed ``job_seed + step_index - 1`` (not reduced mod 2**32)."""
    return job_seed + step_index - 1


@dataclass(frozen=True, slots=True)
class EpisodeJob:
    """One planned unit of work: a task, a sample number, its seed, and the split it came from."""

    task_id: int
    sample_id: int
    seed: int
    split: str

    @property
    def episode_id(self) -> str:
        """The trace key of this job (§4.4)."""
        return episode_id(self.task_id, self.sample_id)

    def to_dict(self) -> dict[str, Any]:
        """The job as stored in manifests and traces, keys in the contract's order."""
        return {"task_id": self.task_id, "sample_id": self.sample_id, "seed": self.seed, "split": self.split}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeJob:
        """Rebuild a job from its stored form."""
        return cls(int(data["task_id"]), int(data["sample_id"]), int(data["seed"]), str(data["split"]))


def sample_task_ids(task_ids: Sequence[int], sample_size: int | None, experiment_seed: int) -> list[int]:
    """Select tasks: CPython ``random.Random(seed).sample`` order when sampling, else file order."""
    if sample_size is None:
        return list(task_ids)
    return random.Random(experiment_seed).sample(list(task_ids), sample_size)


def plan_jobs(
    task_ids: Sequence[int],
    *,
    split: str,
    experiment_seed: int,
    sample_size: int | None = None,
    repeats: int = 1,
) -> list[EpisodeJob]:
    """Return the task-major job list: every selected task, then ``sample_id = 0 … repeats-1``.

    Deterministic: the same inputs always give the same jobs in the same order.
    """
    jobs: list[EpisodeJob] = []
    # episode_seed inlined, the text before the sample number formatted once per task: a plan of a
    # million jobs is rebuilt on every resume (tests/core/test_plan.py checks each seed against episode_seed)
    sha256, from_bytes, append = hashlib.sha256, int.from_bytes, jobs.append
    for task_id in sample_task_ids(task_ids, sample_size, experiment_seed):
        stem = f"{experiment_seed}:{task_id}:"
        for sample_id in range(repeats):
            seed = from_bytes(sha256(f"{stem}{sample_id}".encode("ascii")).digest()[:4], "big")
            append(EpisodeJob(task_id, sample_id, seed, split))
    return jobs
