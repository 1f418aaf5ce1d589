"""Acceptance 1 of "checkpoints, not URLs": a backfill of evaluate_val over three checkpoints given as weights,
through the real webserver and daemon, in `launch` mode with a pool of 2 GPU slots. Dagster's queue runs at
most 2 launched servers at once (from the servers' start/stop times in the run logs), every checkpoint gets
its own numbers, and no launched server outlives the backfill. Then a fourth checkpoint made worse on purpose
trips the blocking regression check, and Chromium shows the check and the comparison's detectable difference
(issue 23, acceptance 6)."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from shopsimrl_core.serving import group_alive
from shopsimrl_dagster.registry import Checkpoint, register_checkpoint
from shopsimrl_dagster.settings import load_pipeline_settings

pytestmark = [pytest.mark.ui, pytest.mark.slow]

CHECKPOINTS = {"launch-step-000100": 100, "launch-step-000200": 200, "launch-step-000300": 300}
# Lapse rates far apart, so that even the UI suite's 8 val tasks tell the three checkpoints apart.
LAPSES = {100: 0.9, 200: 0.45, 300: 0.0, 400: 0.95}
CHROMIUM = Path("/usr/bin/chromium")


def _server_spans(instance: dg.DagsterInstance, run_id: str) -> list[tuple[int, float, float]]:
    """(pgid, started, stopped) of every server a run launched, from its run log."""
    started: dict[int, float] = {}
    spans = []
    for entry in instance.all_logs(run_id):
        message = entry.user_message or ""
        if message.startswith("started inference server pgid "):
            started[int(message.split("pgid ")[1].split(" ")[0])] = entry.timestamp
        elif message.startswith("stopped inference server pgid "):
            pgid = int(message.split("pgid ")[1].split(" ")[0])
            spans.append((pgid, started.pop(pgid), entry.timestamp))
    assert not started, f"run {run_id} started servers it never logged stopping: {started}"
    return spans


def _register(dagster_dev, settings, folder: Path, checkpoint_id: str, step: int) -> None:
    weights = folder / f"policy-{step}.json"
    rate = LAPSES[step]
    weights.write_text(json.dumps({
        "format": "shopsim-policy-checkpoint-v1", "step": step,
        "lapses": {"ignore_budget": rate, "first_option": rate, "impatient": rate, "terse_query": rate,
                   "runner_up": rate / 10},
    }))  # fmt: skip
    register_checkpoint(settings.checkpoint_registry, Checkpoint(checkpoint_id, step, weights=str(weights)))
    dagster_dev.add_partition(checkpoint_id)


def test_a_backfill_over_weights_runs_at_most_the_gpu_pools_servers_at_once(dagster_dev, tmp_path: Path) -> None:
    settings = load_pipeline_settings(dagster_dev.settings_path)
    assert settings.inference.mode == "launch" and settings.inference.launch is not None
    assert settings.inference.launch.slots == 2
    for checkpoint_id, step in CHECKPOINTS.items():
        _register(dagster_dev, settings, tmp_path, checkpoint_id, step)
    run_id = dagster_dev.launch_assets(["frozen_split", "job_plan"], {})
    assert dagster_dev.wait_run(run_id) == "SUCCESS", dagster_dev.log_tail()

    backfill = dagster_dev.launch_backfill("evaluate_val", list(CHECKPOINTS))
    runs = dagster_dev.wait_runs("dagster/backfill", backfill, 3)
    assert [r["status"] for r in runs] == ["SUCCESS"] * 3, runs
    for run in runs:  # queued by the GPU pool, each checkpoint its own "endpoint"
        tags = {t["key"]: t["value"] for t in run["tags"]}
        assert tags["shopsimrl/gpu-pool"] == "launch"
        assert tags["shopsimrl/endpoint"] == f"launch:{tags['dagster/partition']}"

    instance = dg.DagsterInstance.from_config(str(dagster_dev.home))
    try:
        spans = [span for run in runs for span in _server_spans(instance, run["runId"])]
    finally:
        instance.dispose()
    assert len(spans) == 3, spans
    events = sorted([(start, 1) for _, start, _ in spans] + [(stop, -1) for _, _, stop in spans])
    running, most = 0, 0
    for _, change in events:
        running += change
        most = max(most, running)
    assert most <= 2, f"{most} launched servers ran at once: {spans}"
    assert not any(group_alive(pgid) for pgid, _, _ in spans)

    success = {key: dagster_dev.partition_metadata(["val", "eval_summary"], key)["success_rate"] for key in CHECKPOINTS}
    assert success["launch-step-000100"] < success["launch-step-000200"] < success["launch-step-000300"], success

    # A checkpoint made worse on purpose, after the others: its comparison's blocking check fails the run.
    _register(dagster_dev, settings, tmp_path, "launch-step-000400", 400)
    worse = dagster_dev.launch_backfill("evaluate_val", ["launch-step-000400"])
    [run] = dagster_dev.wait_runs("dagster/backfill", worse, 1)
    assert run["status"] == "FAILURE", run
    assert dagster_dev.partition_metadata(["val", "checkpoint_comparison"], "launch-step-000400") is not None
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: the browser part needs Debian chromium (scripts/setup.sh --ui)")
    from playwright.sync_api import sync_playwright

    base = dagster_dev.base_url
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            page.goto(f"{base}/assets/val/checkpoint_comparison?view=checks", wait_until="networkidle")
            skip = page.get_by_role("button", name="Skip")
            if skip.count():
                skip.first.click()
            page.get_by_text("no_regression_vs_best").first.wait_for(timeout=30000)
            checks = page.inner_text("body")
            assert "Failed" in checks, checks[:2000]
            # The backfill ran two checkpoints at once, so only the later launch compared with a finished baseline.
            page.goto(
                f"{base}/assets/val/checkpoint_comparison?view=partitions&partition=launch-step-000400",
                wait_until="networkidle",
            )
            skip = page.get_by_role("button", name="Skip")
            if skip.count():
                skip.first.click()
            page.get_by_text("mde_reward", exact=True).first.wait_for(timeout=30000)
            text = page.inner_text("body")
            assert "launch-step-000300" in text and "detected: Δ -" in text, text[:3000]
        finally:
            browser.close()
