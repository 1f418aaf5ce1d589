"""Every example config under configs/examples/ loads and plans offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from shopsimrl_core import build_plan, load_config

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "configs" / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_plans(path: Path) -> None:
    plan = build_plan(load_config(path))
    assert plan.jobs and plan.fingerprint


def test_val_example_uses_the_frozen_split() -> None:
    plan = build_plan(load_config(EXAMPLES[0].parent / "val-bare.yaml"))
    assert len(plan.jobs) == 400 and plan.split.task_ids_sha256.startswith("103c72fd") and not plan.guarded
    assert (plan.jobs[0].task_id, plan.jobs[0].seed) == (19, 2694671387)
    assert build_plan(load_config(EXAMPLES[0].parent / "test-bare.yaml")).guarded
