"""The gate's estimates beyond the legacy coefficients: correctly rounded means, the sign-flip noise bar."""

from __future__ import annotations

import math
import random
from typing import Any

from shopsimrl_core.skills._gate import estimate


def _rows(n_tasks: int, repeats: int, chunks: int, effects: list[float], seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for task in range(n_tasks):
        task_level = rng.gauss(0.0, 0.15)
        for sample in range(repeats):
            mask = [int(rng.random() < 0.5) for _ in range(chunks)]
            bare = rng.choice([0.1, 0.2, 0.3, 0.7, 1 / 3, 0.6])
            delta = sum(m * e for m, e in zip(mask, effects)) + task_level + rng.gauss(0.0, 0.3)
            rows.append({
                "task_id": task, "sample_id": sample, "mask": mask,
                "reward": bare + delta, "bare_reward": bare, "delta_reward": delta,
                "reward_detail": {}, "bare_reward_detail": {}, "delta_reward_detail": {},
            })
    return rows


def test_estimate_means_are_correctly_rounded() -> None:
    rows = _rows(40, 2, 3, [0.0, 0.0, 0.0], seed=5)
    out = estimate(rows, ["a", "b", "c"], bootstrap_samples=0)["reward"]
    masked, bare, deltas = ([r[k] for r in rows] for k in ("reward", "bare_reward", "delta_reward"))
    assert out["masked_mean"] == math.fsum(masked) / 80 and out["bare_mean"] == math.fsum(bare) / 80
    assert out["delta_mean"] == math.fsum(deltas) / 80
    assert (sum(masked) / 80, sum(bare) / 80, sum(deltas) / 80) != (
        out["masked_mean"], out["bare_mean"], out["delta_mean"])
