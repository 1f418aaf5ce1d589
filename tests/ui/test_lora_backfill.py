"""Acceptance 3 of issue 32: a backfill of evaluate_val over 4 LoRA checkpoints of one base model, through the real
webserver and daemon in `launch` mode with a server pool (`launch.idle_timeout`), loads the base once: one
"started inference server" line in all four runs' logs, the other runs reuse it, each run hot-loads its own adapter,
and the four evaluations have four different numbers. Chromium shows each run's serving lines and each
checkpoint's success rate."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from shopsim_sandbox.policy.adapter import write_adapter
from shopsimrl_core.serving import group_alive
from shopsimrl_core.serving._pool import Pool
from shopsimrl_dagster.registry import Checkpoint, register_checkpoint
from shopsimrl_dagster.settings import load_pipeline_settings

pytestmark = [pytest.mark.ui, pytest.mark.slow]

ADAPTERS = {"lora-step-000100": (100, 0.95), "lora-step-000200": (200, 0.6), "lora-step-000300": (300, 0.3),
            "lora-step-000400": (400, 0.0)}  # fmt: skip
CHROMIUM = Path("/usr/bin/chromium")
SERVING = ("started inference server", "reusing inference server", "loaded adapter")


def _serving_lines(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [m for e in instance.all_logs(run_id) if (m := e.user_message or "").startswith(SERVING)]


def _with_idle_timeout(dagster_dev: Any, seconds: float) -> None:
    """Set `inference.launch.idle_timeout` in the session's settings (run workers read the file when they start)."""
    path = Path(dagster_dev.settings_path)
    settings = yaml.safe_load(path.read_text(encoding="utf-8"))
    settings["inference"]["launch"]["idle_timeout"] = seconds
    path.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")


def test_a_backfill_over_four_adapters_of_one_base_loads_the_base_once(dagster_dev, tmp_path: Path) -> None:
    settings = load_pipeline_settings(dagster_dev.settings_path)
    base = tmp_path / "base-policy.json"
    base.write_text(json.dumps({"format": "shopsim-policy-checkpoint-v1", "lapses": {}}))
    for checkpoint_id, (step, rate) in ADAPTERS.items():
        rates = {"ignore_budget": rate, "first_option": rate, "impatient": rate, "terse_query": rate,
                 "runner_up": rate / 10}  # fmt: skip
        adapter = write_adapter(tmp_path / "adapters" / checkpoint_id, rank=8, lapses=rates)
        register_checkpoint(
            settings.checkpoint_registry, Checkpoint(checkpoint_id, step, adapter=str(adapter), base_model=str(base))
        )
        dagster_dev.add_partition(checkpoint_id)
    run_id = dagster_dev.launch_assets(["frozen_split", "job_plan"], {})
    assert dagster_dev.wait_run(run_id) == "SUCCESS", dagster_dev.log_tail()

    servers_dir = settings.runs_root / "_servers"
    _with_idle_timeout(dagster_dev, 600)
    try:
        backfill = dagster_dev.launch_backfill("evaluate_val", list(ADAPTERS))
        runs = dagster_dev.wait_runs("dagster/backfill", backfill, 4, timeout_s=600)
    finally:
        _with_idle_timeout(dagster_dev, 0)  # the other UI tests expect a server per run
    assert [r["status"] for r in runs] == ["SUCCESS"] * 4, runs

    instance = dg.DagsterInstance.from_config(str(dagster_dev.home))
    try:
        lines = {run["runId"]: _serving_lines(instance, run["runId"]) for run in runs}
    finally:
        instance.dispose()
    every = [line for run_lines in lines.values() for line in run_lines]
    started = [line for line in every if line.startswith("started inference server")]
    assert len(started) == 1, every  # one base load for four checkpoints
    assert "--enable-lora --max-lora-rank 16" in started[0]
    assert sum(line.startswith("reusing inference server") for line in every) == 3, every
    loaded = sorted(line.split(" as ")[1].split(" ")[0] for line in every if line.startswith("loaded adapter"))
    assert loaded == sorted(ADAPTERS), every
    pgid = int(started[0].split("pgid ")[1].split(" ")[0])
    assert all(f"pgid {pgid} " in line for line in every if "inference server" in line), every

    success = {key: dagster_dev.partition_metadata(["val", "eval_summary"], key)["success_rate"] for key in ADAPTERS}
    assert len(set(success.values())) == 4, success  # four evaluations, four numbers
    assert success["lora-step-000100"] < success["lora-step-000400"], success

    # The base server stays in the pool for the next run; the test stops it (idle_timeout is 600 s).
    pool = Pool(servers_dir)
    for entry_path in pool.folder.glob("*.json"):
        entry = pool.entry(entry_path.stem)
        if entry is not None:
            pool.stop(entry_path.stem, entry, timeout=30)
    assert not group_alive(pgid)

    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: the browser part needs Debian chromium (scripts/setup.sh --ui)")
    from playwright.sync_api import sync_playwright

    base_url = dagster_dev.base_url
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            shown_starts = 0
            for run in runs:
                page.goto(f"{base_url}/runs/{run['runId']}", wait_until="networkidle")
                search = page.get_by_placeholder(re.compile("filter", re.IGNORECASE)).first
                search.fill("inference server")
                page.get_by_text(re.compile(r"(started|reusing) inference server pgid")).first.wait_for(timeout=30000)
                text = page.inner_text("body")
                assert f"pgid {pgid}" in text, text[:3000]
                shown_starts += "started inference server pgid" in text
            assert shown_starts == 1
            for checkpoint_id, rate in success.items():
                page.goto(
                    f"{base_url}/assets/val/eval_summary?view=partitions&partition={checkpoint_id}",
                    wait_until="networkidle",
                )
                skip = page.get_by_role("button", name="Skip")
                if skip.count():
                    skip.first.click()
                page.get_by_text("success_rate", exact=True).first.wait_for(timeout=30000)
                text = page.inner_text("body")
                assert f"{rate:.4g}"[:4] in text or str(rate)[:4] in text, (checkpoint_id, rate, text[:3000])
        finally:
            browser.close()
