"""The summary's task clusters (polars grouping, issue 25) equal ``task_clusters`` over per-episode keys, to the bit.

``_task_clusters`` groups a run's rows by task in polars instead of building a Python key per episode;
published intervals must not move, so every total, size and variance is compared exactly with the
reference definition in ``analysis/_design.py`` (keys ``(0, task_id)``, an episode without a task its
own cluster ``(1, episode_id)``, keys sorted).
"""

from __future__ import annotations

import random
from typing import Any

import polars as pl
import pytest

from shopsimrl_core.analysis._design import TaskClusters, task_clusters
from shopsimrl_core.analysis._summary import _task_clusters

_SCHEMA = {"task_id": pl.Int64, "episode_id": pl.Utf8, "reward": pl.Float64, "r_success": pl.Float64}


def _by_keys(frame: Any, column: str) -> TaskClusters:
    rows = frame.filter(pl.col(column).is_not_null())
    keys = [
        (0, task, "") if task is not None else (1, 0, eid)
        for task, eid in zip(rows.get_column("task_id").to_list(), rows.get_column("episode_id").to_list())
    ]
    return task_clusters(rows.get_column(column).to_list(), keys)


def _frame(rng: random.Random, n: int, *, no_tasks: bool) -> pl.DataFrame:
    tasks = [None if no_tasks or rng.random() < 0.15 else rng.randint(0, 40) for _ in range(n)]
    # ids out of order, some beyond ASCII (the sort must be by code point, as Python's)
    eids = [f"task-{rng.randint(0, 10**6):06d}__sample-{i:03d}{rng.choice(['', 'ä', '商'])}" for i in range(n)]
    # values whose float sums depend on order unless they are correctly rounded
    reward = [
        None if rng.random() < 0.1 else rng.choice([rng.random(), round(rng.random(), 6), 1e-17, 1e17, 0.1])
        for _ in range(n)
    ]
    success = [None if rng.random() < 0.1 else float(rng.randint(0, 1)) for _ in range(n)]
    return pl.DataFrame({"task_id": tasks, "episode_id": eids, "reward": reward, "r_success": success}, schema=_SCHEMA)


@pytest.mark.parametrize("seed", range(6))
def test_polars_grouping_gives_the_same_clusters_to_the_bit(seed: int) -> None:
    rng = random.Random(seed)
    for n in (0, 1, 2, 3, 17, 400):
        frame = _frame(rng, n, no_tasks=seed == 5)
        for column in ("reward", "r_success"):
            assert _task_clusters(frame, column) == _by_keys(frame, column), (seed, n, column)


def test_a_frame_whose_task_column_is_all_null_keeps_one_cluster_per_episode() -> None:
    frame = pl.DataFrame({"task_id": [None, None, None], "episode_id": ["c", "a", "b"], "reward": [0.5, 0.25, 1.0]})
    clusters = _task_clusters(frame, "reward")
    assert clusters == _by_keys(frame, "reward")
    assert clusters.totals == (0.25, 1.0, 0.5) and clusters.sizes == (1, 1, 1)  # sorted by episode id
