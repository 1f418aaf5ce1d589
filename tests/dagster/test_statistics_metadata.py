"""What the Dagster pages show of the core's statistics (issue 23), on run directories written here.

The summary, comparison and progress assets are materialized in process by the location's own jobs
over real core documents (``summarize_run``, ``compare_runs``); every shown number is checked against
the document it comes from. No server is needed: the rollout is not part of these runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster_helpers import materialized, run_job
from testkit.core_runkit import record

import shopsimrl_core as core
from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.settings import PipelineSettings

SUMMARY = dg.AssetKey(["val", "eval_summary"])
COMPARISON = dg.AssetKey(["val", "checkpoint_comparison"])


def _write_run(settings: PipelineSettings, checkpoint: str, *, tasks: int, repeats: int, better: bool) -> Path:
    """A val run of *tasks* × *repeats* scored episodes in three categories; its summary.json by the core.

    Tasks differ in difficulty (so repeats of one task agree more than two tasks do: a design effect
    above 1). The *better* checkpoint gains 0.25 reward on every task while its success changes on
    one task only, so a comparison finds the reward difference and not the success difference.
    """
    run_dir = settings.runs_root / "val" / checkpoint
    store = core.RunStore(run_dir)
    for task in range(tasks):
        for sample in range(repeats):
            base = 0.1 + 0.06 * (task % 6) + 0.03 * sample
            success = int(task % 3 == 0 or (better and task == 1))
            store.append(
                record(
                    task,
                    sample,
                    reward=round(min(1.0, base + (0.25 if better else 0.0)), 4),
                    r_success=success,
                    category="ABC"[task % 3],
                )
            )
    core.summarize_run(run_dir)
    return run_dir


def _summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))


def _materialize(settings: PipelineSettings, instance: dg.DagsterInstance, checkpoint: str) -> Any:
    job = build_definitions(settings).resolve_job_def("evaluate_val")
    return job.execute_in_process(
        instance=instance, partition_key=checkpoint, asset_selection=[SUMMARY, COMPARISON]
    )


def test_a_one_repeat_summary_keeps_its_labels_and_adds_category_intervals(offline_settings, register) -> None:
    register(offline_settings, "ckpt-one", 100)
    run_dir = _write_run(offline_settings, "ckpt-one", tasks=14, repeats=1, better=False)
    doc = _summary(run_dir)
    primary = doc["primary"]
    assert "sampling_design" not in primary  # one episode per task: the published intervals
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-one"])
        meta = materialized(_materialize(offline_settings, instance, "ckpt-one"), "val/eval_summary")
    s, r = primary["success_ci"], primary["reward_ci"]
    # Exactly the labels shown before issue 23 for one-repeat runs.
    assert meta["success_display"] == (
        f"{primary['success_rate']:.3f} [{s['low']:.3f}, {s['high']:.3f}] (Wilson 95%, n=14)"
    )
    assert meta["reward_display"] == (
        f"{primary['reward_mean']:.3f} [{r['low']:.3f}, {r['high']:.3f}] (percentile_bootstrap 95%)"
    )
    assert not {"tasks", "design_effect_reward", "design_effect_success", "sampling_design"} & set(meta)

    rows = {row.data["category"]: row.data for row in meta["per_category"].records}
    # summary.json keeps the published rows; the table's intervals are the core's category_intervals
    published = ["episodes", "reward_mean", "success_rate"]
    assert all(list(row) == published for row in doc["breakdowns"]["category"].values())
    categories = core.category_intervals(core.EvalSummary.parse(doc, "summary.json"), run_dir)
    assert set(rows) == set(categories) == {"A", "B", "C"}
    for name, row in rows.items():
        core_row = categories[name]
        assert row["tasks"] == core_row.tasks == 5 - (name == "C")
        assert row["episodes"] == core_row.episodes
        assert row["small_n"] is core_row.small_n is True
        success_ci, reward_ci = core_row.success_ci, core_row.reward_ci
        assert success_ci is not None and reward_ci is not None
        assert row["success_95"] == f"[{success_ci.low:.3f}, {success_ci.high:.3f}]"
        assert row["reward_95"] == f"[{reward_ci.low:.3f}, {reward_ci.high:.3f}]"
        assert row["intervals"] == f"Wilson 95%, n={core_row.episodes}; percentile_bootstrap 95%"


def test_repeats_show_task_cluster_intervals_and_comparisons_their_detectable_difference(
    offline_settings, register, capsys
) -> None:
    register(offline_settings, "ckpt-a", 100)
    register(offline_settings, "ckpt-b", 200)
    runs = {
        key: _write_run(offline_settings, key, tasks=12, repeats=3, better=key == "ckpt-b")
        for key in ("ckpt-a", "ckpt-b")
    }
    location = build_definitions(offline_settings)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-a", "ckpt-b"])
        first = _materialize(offline_settings, instance, "ckpt-a")
        second = _materialize(offline_settings, instance, "ckpt-b")
        progress = materialized(run_job(location, "progress_charts", instance), "val/progress")

    # The summary page: labels from the interval's own method, the design's numbers as the core has them.
    meta = materialized(second, "val/eval_summary")
    primary = _summary(runs["ckpt-b"])["primary"]
    design, s, r = primary["sampling_design"], primary["success_ci"], primary["reward_ci"]
    assert s["method"] == "wilson_design_effect" and r["method"] == "task_cluster_percentile_bootstrap"
    assert design["design_effect"]["reward"] > 1.5  # tasks differ more than repeats: clustering matters
    assert meta["success_display"] == (
        f"{primary['success_rate']:.3f} [{s['low']:.3f}, {s['high']:.3f}] "
        f"(task-cluster Wilson 95%, n=12 tasks × 3, design effect {s['design_effect']:.2f})"
    )
    assert meta["reward_display"] == (
        f"{primary['reward_mean']:.3f} [{r['low']:.3f}, {r['high']:.3f}] "
        f"(task-cluster bootstrap 95%, n=12 tasks × 3, design effect {design['design_effect']['reward']:.2f})"
    )
    assert meta["tasks"] == design["tasks"] == 12
    assert meta["design_effect_reward"] == design["design_effect"]["reward"]
    assert meta["design_effect_success"] == design["design_effect"]["success"]
    assert meta["reward_sem_task_cluster"] == design["reward_sem"]
    assert meta["sampling_design"].startswith("12 tasks × 3, design effect success ")
    assert (meta["success_ci_low"], meta["success_ci_high"]) == (s["low"], s["high"])
    rows = {row.data["category"]: row.data for row in meta["per_category"].records}
    category = _summary(runs["ckpt-b"])["breakdowns"]["category"]["A"]
    assert rows["A"]["tasks"] == category["tasks"] == 4 and rows["A"]["small_n"] is True
    assert rows["A"]["intervals"].startswith("task-cluster Wilson 95%, n=4 tasks, 12 episodes, design effect ")
    assert rows["A"]["reward_95"] == f"[{category['reward_ci']['low']:.3f}, {category['reward_ci']['high']:.3f}]"

    # The comparison page: the core's power fields per metric, and a verdict in words.
    # The first checkpoint has no baseline: materialized as such (issue 33), with no comparison numbers.
    assert materialized(first, "val/checkpoint_comparison")["verdict"].startswith("no baseline: ")
    cmp_meta = materialized(second, "val/checkpoint_comparison")
    doc = json.loads((runs["ckpt-b"] / "comparison_vs_ckpt-a.json").read_text(encoding="utf-8"))
    metrics = doc["paired"]["metrics"]
    for metric in ("reward", "r_success"):
        assert cmp_meta[f"mde_{metric}"] == metrics[metric]["minimum_detectable_difference"]
        assert cmp_meta[f"sd_difference_{metric}"] == metrics[metric]["sd_difference"]
        assert cmp_meta[f"within_noise_{metric}"] is metrics[metric]["within_noise"]
    reward, success = metrics["reward"], metrics["r_success"]
    assert reward["within_noise"] is False and success["within_noise"] is True
    low, high = reward["confidence_interval"]
    assert cmp_meta["verdict_reward"] == (
        f"detected: Δ {reward['mean_difference']:+.3f}, interval [{low:+.3f}, {high:+.3f}] excludes 0 "
        f"(MDE {reward['minimum_detectable_difference']:.3f})"
    )
    assert cmp_meta["verdict_r_success"].startswith(
        f"within noise: |Δ| {abs(success['mean_difference']):.3f} < MDE {success['minimum_detectable_difference']:.3f}"
    )
    table = {row.data["metric"]: row.data for row in cmp_meta["deltas"].records}
    assert table["reward"]["mde"] == round(reward["minimum_detectable_difference"], 4)
    assert table["r_success"]["verdict"] == cmp_meta["verdict_r_success"]
    assert cmp_meta["power"] == doc["paired"]["power"]

    # The progress page: per point its design, and the MDE of the comparison with the point before it.
    points = {row.data["checkpoint"]: row.data for row in progress["points"].records}
    assert points["ckpt-a"]["mde_reward"] is None and points["ckpt-a"]["vs_previous"] == "–"
    assert points["ckpt-b"]["mde_reward"] == round(reward["minimum_detectable_difference"], 4)
    assert points["ckpt-b"]["mde_success"] == round(success["minimum_detectable_difference"], 4)
    assert points["ckpt-b"]["vs_previous"] == (
        f"vs ckpt-a: reward {cmp_meta['verdict_reward']}; success {cmp_meta['verdict_r_success']}"
    )
    assert points["ckpt-b"]["design"] == meta["sampling_design"]
    assert "success: task-cluster Wilson 95%, n=12 tasks × 3" in points["ckpt-b"]["intervals"]
    assert progress["latest_mde_reward"] == reward["minimum_detectable_difference"]
    assert progress["latest_mde_success_rate"] == success["minimum_detectable_difference"]
    saved = json.loads((offline_settings.runs_root / "_progress" / "val" / "progress.json").read_text())
    assert saved["points"][1]["vs_previous"]["reward"]["minimum_detectable_difference"] == (
        reward["minimum_detectable_difference"]
    )

    # The demo's headline prints both differences with their intervals and MDEs.
    from shopsimrl_dagster.demo import _print_headlines

    row = {"checkpoint": "ckpt-b", "step": 200, "suite": "val", "wall_s": 1.0, "checkpoint_comparison": cmp_meta}
    _print_headlines([row], offline_settings, offline_settings.runs_root)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  comparison"))
    s_low, s_high = success["confidence_interval"]
    assert line == (
        f"  comparison   vs ckpt-a: Δ reward {reward['mean_difference']:+.3f} [{low:+.3f}, {high:+.3f}] "
        f"(MDE {reward['minimum_detectable_difference']:.3f}, detected), "
        f"Δ success {success['mean_difference']:+.3f} [{s_low:+.3f}, {s_high:+.3f}] "
        f"(MDE {success['minimum_detectable_difference']:.3f}, within noise)"
    )


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            {"mean_difference": 0.018, "confidence_interval": [-0.021, 0.057], "within_noise": True,
             "minimum_detectable_difference": 0.063},
            "within noise: |Δ| 0.018 < MDE 0.063 (interval [-0.021, +0.057] covers 0)",
        ),
        (
            {"mean_difference": -0.2, "confidence_interval": [-0.3, -0.1], "within_noise": False,
             "minimum_detectable_difference": None},
            "detected: Δ -0.200, interval [-0.300, -0.100] excludes 0 (MDE n/a)",
        ),
        (
            {"mean_difference": 0.0, "confidence_interval": None, "within_noise": None,
             "minimum_detectable_difference": None},
            "no interval (fewer than 2 paired tasks); MDE n/a",
        ),
    ],
)
def test_comparison_verdict_says_what_the_core_decided(values: dict[str, Any], expected: str) -> None:
    from shopsimrl_core.documents._comparisons import ComparisonMetric
    from shopsimrl_dagster.report import comparison_verdict

    metric = ComparisonMetric.model_validate({"a_mean": 0.5, "b_mean": 0.5, "pairs": 2, **values})
    assert comparison_verdict(metric) == expected
