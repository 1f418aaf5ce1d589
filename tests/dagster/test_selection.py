"""Regression alert and best checkpoint: a checkpoint made worse on purpose trips the blocking
`no_regression_vs_best` check; `<suite>/best_checkpoint` names the best one, its interval and whether the paired
comparison tells it from the runner-up — the same numbers as the core's compare_runs on the same runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from dagster_helpers import materialized, run_job

import shopsimrl_core as core
from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.settings import load_pipeline_settings

LAPSES = {"good": 0.0, "base": 0.45, "bad": 0.95}


def _weights(folder: Path, name: str) -> str:
    rate = LAPSES[name]
    path = folder / f"policy-{name}.json"
    path.write_text(json.dumps({
        "format": "shopsim-policy-checkpoint-v1", "step": 1,
        "lapses": {"ignore_budget": rate, "first_option": rate, "impatient": rate, "terse_query": rate,
                   "runner_up": rate / 10},
    }))  # fmt: skip
    return str(path)


@pytest.mark.slow
def test_a_worse_checkpoint_trips_the_regression_check_and_best_checkpoint_names_the_best(
    tmp_path: Path, settings_writer, register, sandbox
) -> None:
    path = settings_writer(tmp_path, env_url=sandbox.env_url, split_file=sandbox.split_file, val_sample=30)
    settings_map: dict[str, Any] = yaml.safe_load(path.read_text())
    settings_map["inference"].update(mode="launch", launch={"server": "shopsim_sandbox"})
    path.write_text(yaml.safe_dump(settings_map))
    settings = load_pipeline_settings(path)
    for checkpoint_id, step, name in (("c-100", 100, "base"), ("c-200", 200, "good"), ("c-300", 300, "bad")):
        register(settings, checkpoint_id, step, weights=_weights(tmp_path, name))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["c-100", "c-200", "c-300"])
        location = build_definitions(settings)
        run_job(location, "prepare_plans", instance)
        checks: dict[str, Any] = {}
        for checkpoint_id in ("c-100", "c-200", "c-300"):
            result = run_job(location, "evaluate_val", instance, checkpoint_id, raise_on_error=False)
            for evaluation in result.get_asset_check_evaluations():
                if evaluation.check_name == "no_regression_vs_best":
                    checks[checkpoint_id] = evaluation
        best = run_job(location, "progress_charts", instance)
        meta = materialized(best, "val/best_checkpoint")

    runs = settings.runs_root / "val"
    # Nothing earlier to regress from: "no baseline" is materialized and the check says why it passes.
    assert checks["c-100"].passed and checks["c-100"].partition == "c-100"
    assert checks["c-100"].description == (
        "c-100: no earlier checkpoint with a summary on this suite, nothing to regress from"
    )
    assert checks["c-200"].passed
    bad = checks["c-300"]
    assert not bad.passed and bad.severity == dg.AssetCheckSeverity.ERROR
    assert bad.description.startswith("c-300: regressed: Δ reward vs best earlier checkpoint c-200 (step 200)")
    assert bad.partition == "c-300"  # the check's page names each result's checkpoint
    # The check's numbers are the core's paired comparison of c-300 against the best earlier one, c-200.
    expected = core.compare_runs(runs / "c-200", runs / "c-300", bootstrap_samples=200).paired.metrics["reward"]
    values = {k: getattr(v, "value", v) for k, v in bad.metadata.items()}
    assert values["best_earlier"] == "c-200"
    assert values["delta_reward"] == expected.mean_difference
    assert expected.confidence_interval is not None
    assert values["delta_reward_ci"] == list(expected.confidence_interval)
    assert expected.confidence_interval[1] < 0

    assert meta["best_checkpoint"] == "c-200" and meta["runner_up"] == "c-100"
    summary = json.loads((runs / "c-200" / "summary.json").read_text())
    assert meta["best_reward"] == summary["primary"]["reward_mean"]
    difference = core.compare_runs(runs / "c-100", runs / "c-200", bootstrap_samples=200).paired.metrics["reward"]
    assert difference.confidence_interval is not None
    assert meta["distinguishable"] is (difference.confidence_interval[0] > 0)
    assert meta["verdict"].startswith("best: c-200 (step 200), reward ")
    assert "; distinguishable from c-100" in meta["verdict"] or "; not distinguishable from c-100" in meta["verdict"]
    on_disk = json.loads((settings.runs_root / "_progress" / "val" / "best_checkpoint.json").read_text())
    assert [row["checkpoint_id"] for row in on_disk["ranking"]] == ["c-200", "c-100", "c-300"]
