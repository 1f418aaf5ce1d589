"""Issue 23, acceptance 6: in the Dagster UI (real webserver and daemon, headless Chromium) the SkillBank
snapshot asset's page marks the chunks whose gate coefficient is within the noise bar.

The sandbox's baseline policy ignores the system prompt, so a gate over it sees every Δ = 0 and selects
nothing. The Gate A run here is the core's ``run_gate_a`` over the test kit's bare val run with a policy
whose reward moves by a fixed amount per injected chunk (+0.3, −0.2 and +0.05): the published rule
selects the +0.05 chunk, whose |β| is below the sign-flip noise bar. The location's own ``build_skills``
job then freezes the bank through the webserver, and the browser reads what the asset page shows.

Needs Debian's chromium at /usr/bin/chromium (scripts/setup.sh --ui installs it); Playwright drives it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from testkit.gatekit import EffectRunner, gate_setup

from shopsimrl_core import GateAConfig, run_gate_a
from shopsimrl_dagster.registry import Checkpoint, register_checkpoint
from shopsimrl_dagster.settings import load_pipeline_settings

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.ui,
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"{CHROMIUM} is missing: install Debian chromium (scripts/setup.sh --ui) to run the browser test",
    ),
]

REPO_ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = "ui-noise-000007"  # a step below the other UI tests' checkpoints, and no suite run: no comparison
EFFECTS = {"chunk-000000000000": 0.3, "chunk-000000000001": -0.2, "chunk-000000000002": 0.05}
NOISY, CLEAR = "chunk-000000000002", "chunk-000000000000"
STALL_S = 180  # a run that records no new event for this long is stuck (a slow one keeps logging)
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run"]


def _wait_run_following_events(dagster_dev: Any, run_id: str) -> str:
    """The run's final status; fails only when the run logs no new event for ``STALL_S`` (progress, not time)."""
    query = """query Run($id: ID!) { runOrError(runId: $id) { ... on Run { status } }
                 logsForRun(runId: $id) { ... on EventConnection { cursor } } }"""
    cursor, moved = None, time.monotonic()
    while True:
        data = dagster_dev.gql(query, {"id": run_id})
        status = data["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            return str(status)
        if data["logsForRun"].get("cursor") != cursor:
            cursor, moved = data["logsForRun"].get("cursor"), time.monotonic()
        assert time.monotonic() - moved < STALL_S, (
            f"run {run_id} ({status}) logged nothing for {STALL_S} s:\n{dagster_dev.log_tail()}"
        )
        time.sleep(1)


def _row_text(page: Any, cell: str) -> str:
    """The text of the innermost table row holding *cell* (tabs between cells); the metadata list is a table too."""
    row = page.locator("tr:not(:has(tr))", has_text=cell).first
    row.wait_for(timeout=120_000)
    return str(row.inner_text())


def test_the_skillbank_snapshot_page_marks_noise_level_chunks(dagster_dev, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    settings = load_pipeline_settings(dagster_dev.settings_path)
    register_checkpoint(settings.checkpoint_registry, Checkpoint(CHECKPOINT, 7))
    dagster_dev.add_partition(CHECKPOINT)
    bare_cfg, bare_run, draft_path = gate_setup(tmp_path)
    gate = run_gate_a(
        GateAConfig(output_dir=dagster_dev.runs_root / "gate-a" / CHECKPOINT, experiment_config=bare_cfg,
                    bare_run_dir=bare_run, draft_path=draft_path, bootstrap_samples=200),
        runner=EffectRunner(EFFECTS),
    )
    assert gate.contributions is not None and gate.selected_chunk_ids == [CLEAR, NOISY]
    doc = gate.contributions.to_json()  # as contributions.json holds it
    rows = {c["chunk_id"]: c for c in doc["contributions"]}
    bar = doc["estimates"]["reward"]["noise_bar"]["noise_bar"]
    assert rows[NOISY]["within_noise"] is True and rows[CLEAR]["within_noise"] is False

    launched = dagster_dev.gql(
        """mutation Launch($params: ExecutionParams!) { launchRun(executionParams: $params) {
             __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }""",
        {"params": {
            "selector": {"repositoryLocationName": "shopsimrl", "repositoryName": "__repository__",
                         "pipelineName": "build_skills", "assetSelection": [{"path": ["skillbank_snapshot"]}]},
            "executionMetadata": {"tags": [{"key": "dagster/partition", "value": CHECKPOINT}]},
            "mode": "default",
        }},
    )
    assert launched["launchRun"]["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["launchRun"]["run"]["runId"]
    assert _wait_run_following_events(dagster_dev, run_id) == "SUCCESS", dagster_dev.log_tail()
    meta = dagster_dev.partition_metadata(["skillbank_snapshot"], CHECKPOINT)
    assert meta is not None and meta["skills_within_noise"] == 1 and meta["selection_rule"] == "strictly_positive_top_k"

    shots = REPO_ROOT / "test-output" / "ui" / "skillbank-noise"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1200})
            page.goto(f"{dagster_dev.base_url}/assets/skillbank_snapshot?view=partitions&partition={CHECKPOINT}",
                      wait_until="networkidle")
            skip = page.get_by_role("button", name="Skip")
            try:
                skip.wait_for(timeout=3000)  # a fresh instance greets the first visit with a dialog
                skip.click()
            except Exception:
                pass
            page.get_by_text("selected_skills", exact=True).first.wait_for(timeout=120_000)
            noisy, clear = _row_text(page, NOISY), _row_text(page, CLEAR)
            page.screenshot(path=str(shots / "skillbank_snapshot.png"), full_page=True)
            body = page.inner_text("body")
        finally:
            browser.close()
    # Each frozen skill's row carries the verdict of the gate that selected it.
    assert "within noise" in noisy and "above noise bar" not in noisy, noisy
    assert "above noise bar" in clear and "within noise" not in clear, clear
    assert f"{round(rows[NOISY]['coefficient'], 4)}" in noisy and f"{round(bar, 4)}" in noisy
    assert f"{round(rows[NOISY]['adjusted_p_value'], 4)}" in noisy
    # The entries say which rule selected the bank and how many of its skills are noise-level.
    note = f"1 of 2 selected chunks within noise ({NOISY}: |beta| <= noise bar {bar:.4f})"
    assert meta["noise_note"].startswith(note)
    for text in ("selection_rule", "strictly_positive_top_k", "skills_within_noise", "noise_note", note):
        assert text in body, (text, body[:4000])
    assert (shots / "skillbank_snapshot.png").stat().st_size > 10_000
