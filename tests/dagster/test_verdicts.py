"""The Dagster pages lead with the verdict (issue 33, items 8–11), on run directories written by the core.

Item 8: the first metadata rows of ``checkpoint_comparison``, ``progress`` and ``best_checkpoint`` are a
verdict in rounded text with intervals; the raw floats are still there for the Plots tab; the chart is
a short markdown image (drawn in place by Dagster) that the real trace viewer app serves, pinned to its
hash. Item 9: every check of a partitioned asset is partitioned like it, and the regression check's
results record their checkpoint. Item 10: the first checkpoint's comparison materializes "no baseline"
(not Missing) and its run logs no "did not yield or return expected outputs". Item 11: the demo prints
the README's ``server-logs/`` line, and the README's UI directions are the ones that work.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import dagster as dg
from dagster_helpers import materialized, run_job
from testkit.core_runkit import record

import shopsimrl_core as core
from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.settings import PipelineSettings

REPO = Path(__file__).resolve().parents[2]
SUMMARY = dg.AssetKey(["val", "eval_summary"])
COMPARISON = dg.AssetKey(["val", "checkpoint_comparison"])
LONG_FLOAT = re.compile(r"\d\.\d{5,}")  # 0.7527777777777778: what a verdict must not show


def _write_run(settings: PipelineSettings, checkpoint: str, *, better: bool) -> Path:
    run_dir = settings.runs_root / "val" / checkpoint
    store = core.RunStore(run_dir)
    for task in range(18):
        reward = round(min(1.0, 0.1 + 0.05 * (task % 7) + (0.3 if better else 0.0)), 4)
        store.append(record(task, reward=reward, r_success=int(task % 3 == 0 or (better and task % 3 == 1))))
    core.summarize_run(run_dir)
    return run_dir


def _evaluate(settings: PipelineSettings, instance: dg.DagsterInstance, checkpoint: str) -> Any:
    job = build_definitions(settings).resolve_job_def("evaluate_val")
    return job.execute_in_process(instance=instance, partition_key=checkpoint, asset_selection=[SUMMARY, COMPARISON])


def _messages(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [entry.user_message or "" for entry in instance.all_logs(run_id)]


def _served_chart(settings: PipelineSettings, markdown: str) -> tuple[str, Any]:
    """The chart URL of a ``chart`` entry and the real viewer app's answer to it (in process)."""
    from starlette.testclient import TestClient

    from shopsimrl_core.viewer import create_app

    assert len(markdown) < 1000, "Dagster draws markdown in place only under 1,000 characters"
    found = re.fullmatch(r"!\[[^\]]*\]\((http://[^)]+)\)", markdown)
    assert found, markdown
    url = urlparse(found.group(1))
    assert f"{url.scheme}://{url.netloc}" == settings.viewer.base_url.rstrip("/") and url.path == "/chart"
    client = TestClient(create_app([str(settings.runs_root)]), base_url="http://127.0.0.1")
    return found.group(1), client.get(url.path, params={k: v[0] for k, v in parse_qs(url.query).items()})


def test_pages_lead_with_the_verdict_checks_name_their_checkpoint_and_the_first_has_no_baseline(
    offline_settings, register
) -> None:
    settings = offline_settings
    register(settings, "ckpt-a", 100)
    register(settings, "ckpt-b", 200)
    runs = {key: _write_run(settings, key, better=key == "ckpt-b") for key in ("ckpt-a", "ckpt-b")}
    location = build_definitions(settings)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", ["ckpt-a", "ckpt-b"])
        first = _evaluate(settings, instance, "ckpt-a")
        second = _evaluate(settings, instance, "ckpt-b")
        charts = run_job(location, "progress_charts", instance)

        # Item 10: the first checkpoint's comparison is materialized as "no baseline", with no document.
        none = materialized(first, "val/checkpoint_comparison")
        assert list(none)[0] == "verdict"
        assert none["verdict"] == (
            "no baseline: ckpt-a is the first registered checkpoint on val: nothing earlier to compare with"
        )
        assert none["baseline"] is None and not list(runs["ckpt-a"].glob("comparison*.json"))
        assert not [m for m in _messages(instance, first.run_id) if "did not yield or return expected outputs" in m]

        # Item 9: the regression check's result of each checkpoint records that checkpoint.
        check = dg.AssetCheckKey(COMPARISON, "no_regression_vs_best")
        history = instance.event_log_storage.get_asset_check_execution_history(check, limit=10)
        evaluations = [r.event.dagster_event.event_specific_data for r in history if r.event is not None]
        assert sorted(e.partition for e in evaluations) == ["ckpt-a", "ckpt-b"]
        assert all(e.description.startswith(f"{e.partition}: ") for e in evaluations)
        assert {e.partition: e.metadata["checkpoint"].value for e in evaluations} == {"ckpt-a": "ckpt-a",
                                                                                      "ckpt-b": "ckpt-b"}

    # Item 8: the comparison page leads with its verdict, rounded; the raw floats stay.
    cmp_meta = materialized(second, "val/checkpoint_comparison")
    assert list(cmp_meta)[:3] == ["verdict", "reward_delta_display", "success_delta_display"]
    doc = core.CheckpointComparison.parse(
        json.loads((runs["ckpt-b"] / "comparison_vs_ckpt-a.json").read_text()), "comparison"
    )
    reward = doc.paired.metrics["reward"]
    low, high = reward.confidence_interval
    assert cmp_meta["reward_delta_display"] == (
        f"{reward.mean_difference:+.3f} [{low:+.3f}, {high:+.3f}] (MDE {reward.minimum_detectable_difference:.3f}, "
        f"{'within noise' if reward.within_noise else 'detected'})"
    )
    assert cmp_meta["verdict"].startswith(f"vs ckpt-a: Δ reward {cmp_meta['reward_delta_display']}; Δ success ")
    assert cmp_meta["delta_reward"] == reward.mean_difference  # the raw float, for the Plots tab
    assert not LONG_FLOAT.search(cmp_meta["verdict"])

    # The progress page: verdict, then the chart drawn in place, then the points; raw floats after.
    progress = materialized(charts, "val/progress")
    assert list(progress)[:3] == ["verdict", "chart", "points"]
    assert progress["verdict"].startswith("ckpt-b (step 200): reward ")
    assert f"; vs ckpt-a: Δ reward {cmp_meta['reward_delta_display']}, Δ success " in progress["verdict"]
    assert not LONG_FLOAT.search(progress["verdict"])
    assert isinstance(progress["latest_reward"], float) and "latest_mde_success_rate" in progress
    assert not [key for key in progress if key.startswith("latest_") and "r_success" in key]  # one naming
    chart_path = settings.runs_root / "_progress" / "val" / "progress.png"
    url, answer = _served_chart(settings, progress["chart"])
    assert answer.status_code == 200 and answer.headers["content-type"] == "image/png"
    assert answer.content == chart_path.read_bytes()
    assert progress["chart_png"].startswith("![") and "data:image/png;base64," in progress["chart_png"]

    best = materialized(charts, "val/best_checkpoint")
    assert list(best)[:2] == ["verdict", "ranking"]
    assert best["verdict"].startswith("best: ckpt-b (step 200), reward ")
    assert re.search(r"reward \d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]", best["verdict"])
    assert not LONG_FLOAT.search(best["verdict"])
    assert isinstance(best["best_reward"], float) and isinstance(best["best_reward_ci_low"], float)
    assert "seed_derivation" not in repr(best)  # the interval's JSON blob stays in best_checkpoint.json

    summary = materialized(second, "val/eval_summary")
    assert list(summary)[:4] == ["suite", "reward_display", "success_display", "chart"]
    _, served = _served_chart(settings, summary["chart"])
    assert served.status_code == 200 and served.content == (runs["ckpt-b"] / "summary_chart.png").read_bytes()

    # A chart redrawn since its materialization is not shown as that materialization's.
    chart_path.write_bytes(chart_path.read_bytes() + b"\0")
    assert _served_chart(settings, progress["chart"])[1].status_code == 404


def test_every_check_of_a_partitioned_asset_is_partitioned_like_it(offline_settings) -> None:
    repository = build_definitions(offline_settings).get_repository_def()
    graph = repository.asset_graph
    checked = 0
    for key in graph.asset_check_keys:
        asset = graph.get(key.asset_key)
        spec = graph.get_check_spec(key)
        assert spec.partitions_def == asset.partitions_def, f"{key.to_user_string()}: not partitioned like its asset"
        checked += 1
    assert checked >= 6  # the rollout checks, the regression check, the skills checks


def test_the_demo_prints_the_readme_run_dir_line_and_the_readme_ui_directions(offline_settings, capsys) -> None:
    from shopsimrl_dagster.demo import _print_headlines

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    sample = next(line for line in readme.splitlines() if line.startswith("  run dir "))
    run_dir = offline_settings.runs_root / "val" / "demo-step-000300"
    (run_dir / "server-logs").mkdir(parents=True)
    rows = [
        {"checkpoint": "demo-step-000100", "step": 100, "suite": "val", "wall_s": 1.0,
         "rollout_traces": {"run_dir": str(offline_settings.runs_root / "val" / "demo-step-000100")},
         "checkpoint_comparison": {"verdict": "no baseline: …", "baseline": None}},
        {"checkpoint": "demo-step-000300", "step": 300, "suite": "val", "wall_s": 1.0,
         "rollout_traces": {"run_dir": str(run_dir)}},
    ]
    _print_headlines(rows, offline_settings, offline_settings.runs_root)
    out = capsys.readouterr().out.splitlines()
    printed = [line for line in out if line.startswith("  run dir ")]
    assert printed[1] == sample.replace("<repo>/runs/val/demo-step-000300", str(run_dir))
    assert "server-logs" not in printed[0]  # no launched server there: no note
    # The first checkpoint's "no baseline" comparison reads as before.
    assert "  comparison   none (no earlier checkpoint with this suite)" in out
    assert not [line for line in out if "http://127.0.0.1:3000" in line]  # the UI's port is printed by make ui

    assert "**Jobs → evaluate_val → Partitions → Materialize… → All → Launch backfill**" in readme
    assert "open http://127.0.0.1:3000" not in readme
    assert "UI on http://127.0.0.1:<port>" in readme
    script = (REPO / "scripts" / "dagster-dev.sh").read_text(encoding="utf-8")
    assert 'UI on http://${DAGSTER_HOST:-127.0.0.1}:$ui_port"' in script  # the line the README points at
