"""The Dagster UI in a real headless Chromium: the lineage and a checkpoint partition's reward.

Needs Debian's chromium at /usr/bin/chromium (scripts/setup.sh --ui installs it); Playwright drives
that browser, so no browser download is involved.
"""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.ui,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: install Debian chromium "
                       "(scripts/setup.sh --ui) to run the browser test"),
]

REPO_ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = "ui-step-000100"
LINEAGE = ["frozen_split", "job_plan", "rollout_traces", "eval_summary", "checkpoint_comparison"]
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run"]


@pytest.fixture
def output_dir(request: pytest.FixtureRequest) -> Path:
    folder = REPO_ROOT / "test-output" / "ui" / request.node.name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _dismiss_community_dialog(page, timeout_ms: int = 5000) -> None:
    # A fresh instance greets the first visit with "Join the Dagster community"; it covers the page.
    skip = page.get_by_role("button", name="Skip")
    try:
        skip.wait_for(timeout=timeout_ms)
    except Exception:
        return
    skip.click()


def test_lineage_and_partition_reward_render_in_chromium(dagster_dev, output_dir: Path) -> None:
    from playwright.sync_api import sync_playwright

    dagster_dev.add_partition(CHECKPOINT)
    run_id = dagster_dev.launch_assets(LINEAGE, {"dagster/partition": CHECKPOINT, "shopsimrl/suite": "val"})
    assert dagster_dev.wait_run(run_id) == "SUCCESS", dagster_dev.log_tail()
    partition, summary = dagster_dev.latest_metadata("eval_summary")
    assert partition == CHECKPOINT
    reward = summary["reward"]
    assert isinstance(reward, float)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{dagster_dev.base_url}/locations/shopsimrl/asset-groups/evaluation", wait_until="networkidle")
            _dismiss_community_dialog(page)
            page.get_by_text("rollout_traces", exact=True).first.wait_for(timeout=30000)
            graph_text = page.inner_text("body")
            page.screenshot(path=str(output_dir / "asset-graph.png"))
            for name in ["frozen_split", "job_plan", "rollout_traces", "eval_summary"]:
                assert name in graph_text, f"{name} not shown in the asset graph"

            page.goto(f"{dagster_dev.base_url}/assets/eval_summary?view=partitions&partition={CHECKPOINT}",
                      wait_until="networkidle")
            _dismiss_community_dialog(page, timeout_ms=1000)
            page.get_by_text("success_interval", exact=True).first.wait_for(timeout=30000)
            partition_text = page.inner_text("body")
            page.screenshot(path=str(output_dir / "eval-summary-partition.png"))
            assert CHECKPOINT in partition_text
            # Dagster prints floats like JavaScript does, which for these values equals Python's repr.
            assert repr(reward) in partition_text, f"reward {reward!r} not on the partition page"
            assert summary["success_interval"] in partition_text
        finally:
            browser.close()
    assert (output_dir / "asset-graph.png").stat().st_size > 10_000
    assert (output_dir / "eval-summary-partition.png").stat().st_size > 10_000
