"""The trace viewer in a real headless Chromium over real val runs made by the core against the sandbox:
filter to failures, open one, see its steps and reward detail, open the checkpoint comparison."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.ui,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: install Debian chromium (scripts/setup.sh --ui)"
    ),
]
REPO_ROOT = Path(__file__).resolve().parents[2]
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def test_filter_failures_open_episode_and_compare_checkpoints(val_runs: Path, viewer_for) -> None:
    from playwright.sync_api import sync_playwright

    shots = REPO_ROOT / "test-output" / "viewer"
    shots.mkdir(parents=True, exist_ok=True)
    server = viewer_for([val_runs])
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(server.base_url + "/")
            assert page.locator("#runs a", has_text="val/ckpt-a").count() == 1
            page.screenshot(path=str(shots / "runs.png"), full_page=True)

            page.locator("#runs a", has_text="val/ckpt-a").click()
            total = page.locator("#episodes a.episode").count()
            assert total == 8
            page.select_option("select[name=success]", "no")
            page.click("#apply")
            page.wait_for_url("**success=no**")
            failures = page.locator("#episodes a.episode")
            assert 0 < failures.count() < total
            assert page.locator("#episodes td.ok", has_text="completed").count() == failures.count()
            assert page.locator("#episodes span.ok", has_text="yes").count() == 0  # no success among the filtered
            page.screenshot(path=str(shots / "run-failures.png"), full_page=True)

            first = failures.first.inner_text()
            failures.first.click()
            page.wait_for_url(f"**/episode/{first}")
            steps = page.locator("div.step[id^=step-]")
            assert steps.count() >= 1
            assert page.locator("#step-1 code.action").inner_text().startswith("search[")
            assert page.locator("#reward-detail td", has_text="r_success").count() == 1
            assert "PRIVATE" in page.locator("#goal").inner_text()
            assert page.locator("details.reasoning").first.get_attribute("open") is None  # collapsed
            page.screenshot(path=str(shots / "episode.png"), full_page=True)

            page.goto(server.base_url + "/compare?a=val/ckpt-a&b=val/ckpt-b")
            assert "8 paired episodes" in page.inner_text("body")
            # The paired statistics: reward and success with their minimum detectable difference (issue 23);
            # ckpt-b ran with another step limit, and the page says so.
            metrics = page.locator("#paired-metrics tr.metric")
            assert metrics.count() == 2 and metrics.first.locator("td").first.inner_text() == "reward"
            assert all(float(cell) >= 0 for cell in page.locator("#paired-metrics td.mde").all_inner_texts())
            verdicts = page.locator("#paired-metrics td.verdict").all_inner_texts()
            assert all(v.startswith(("within noise", "detected")) for v in verdicts), verdicts
            assert "runtime.max_steps" in page.inner_text("#comparison-differences")
            lost = page.locator("#lost a.task-compare")
            assert lost.count() >= 1  # ckpt-b ran with 3 steps: it loses every purchase ckpt-a made
            page.screenshot(path=str(shots / "compare.png"), full_page=True)
            lost.first.click()
            page.wait_for_url("**task=**")
            assert page.locator("div.cols h2").count() == 2
            page.screenshot(path=str(shots / "compare-task.png"), full_page=True)
        finally:
            browser.close()
    for name in ["runs", "run-failures", "episode", "compare", "compare-task"]:
        assert (shots / f"{name}.png").stat().st_size > 5_000
