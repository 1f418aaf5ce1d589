"""Every example config under configs/examples/ loads and plans offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shopsimrl_core import build_plan, fingerprint, load_config

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "configs" / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_plans(path: Path) -> None:
    config = load_config(path)
    plan = build_plan(config)
    tasks = config.tasks
    planned_tasks = tasks.sample_size if tasks.sample_size is not None else len(plan.split.task_ids)
    assert len(plan.jobs) == planned_tasks * tasks.repeats
    assert [j.sample_id for j in plan.jobs] == [s for _ in range(planned_tasks) for s in range(tasks.repeats)]
    assert {j.task_id for j in plan.jobs} <= set(plan.split.task_ids)
    assert plan.fingerprint == fingerprint(plan.semantic)


def test_val_example_uses_the_frozen_split() -> None:
    plan = build_plan(load_config(EXAMPLES[0].parent / "val-bare.yaml"))
    splits = json.loads((EXAMPLES[0].parents[1] / "persona_splits.v1.json").read_text(encoding="utf-8"))
    val_ids = splits["splits"]["val"]["task_ids"]
    assert [j.task_id for j in plan.jobs] == val_ids and len(val_ids) == 400
    assert plan.split.task_ids_sha256 == fingerprint(val_ids)
    assert plan.split.task_ids_sha256 == "103c72fd5da76870d2406420a8d7eab0c616780cb6fb8ac27875b5424dae872e"
    assert not plan.guarded
    assert (plan.jobs[0].task_id, plan.jobs[0].seed) == (19, 2694671387)
    assert build_plan(load_config(EXAMPLES[0].parent / "test-bare.yaml")).guarded
