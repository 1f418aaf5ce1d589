"""Acceptance 4: the Dagster UI in a real headless Chromium shows a val and a train partition of one
checkpoint with their own numbers, the per-suite progress chart, and a skill's text.

Needs Debian's chromium at /usr/bin/chromium (scripts/setup.sh --ui installs it); Playwright drives
that browser, so no browser download is involved.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
CHECKPOINTS = ["ui-step-000100", "ui-step-000200"]
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


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


def _launch_job(dagster_dev, job: str, assets: list[list[str]] | None = None) -> str:
    data = dagster_dev.gql(
        """mutation Launch($params: ExecutionParams!) { launchRun(executionParams: $params) {
             __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }""",
        {
            "params": {
                "selector": {
                    "repositoryLocationName": "shopsimrl",
                    "repositoryName": "__repository__",
                    "pipelineName": job,
                    **({"assetSelection": [{"path": a} for a in assets]} if assets else {}),
                },
                "mode": "default",
            }
        },
    )
    assert data["launchRun"]["__typename"] == "LaunchRunSuccess", data
    return data["launchRun"]["run"]["runId"]


def _page_text(page, url: str, wait_for: str, shot: Path) -> str:
    page.goto(url, wait_until="networkidle")
    _dismiss_community_dialog(page, timeout_ms=1500)
    page.get_by_text(wait_for, exact=True).first.wait_for(timeout=30000)
    page.screenshot(path=str(shot), full_page=True)
    return page.inner_text("body")


def test_suite_partitions_progress_chart_and_skill_text_render_in_chromium(dagster_dev, output_dir: Path) -> None:
    from playwright.sync_api import sync_playwright

    for key in CHECKPOINTS:
        dagster_dev.add_partition(key)
    assert dagster_dev.wait_run(dagster_dev.launch_assets(["frozen_split", "job_plan"], {})) == "SUCCESS"
    for suite in ("val", "train"):
        # test_backfills may have evaluated these partitions already in this shared instance.
        if all(dagster_dev.partition_metadata([suite, "eval_summary"], key) for key in CHECKPOINTS):
            continue
        backfill = dagster_dev.launch_backfill(f"evaluate_{suite}", CHECKPOINTS)
        runs = dagster_dev.wait_runs("dagster/backfill", backfill, 2)
        assert all(r["status"] == "SUCCESS" for r in runs), dagster_dev.log_tail()
    assert dagster_dev.wait_run(_launch_job(dagster_dev, "progress_charts")) == "SUCCESS", dagster_dev.log_tail()
    # Labels and candidates of one checkpoint (the gate needs the full val split; not needed for the text).
    skills = dagster_dev.gql(
        """mutation Launch($params: ExecutionParams!) { launchRun(executionParams: $params) {
             __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }""",
        {
            "params": {
                "selector": {
                    "repositoryLocationName": "shopsimrl",
                    "repositoryName": "__repository__",
                    "pipelineName": "build_skills",
                    "assetSelection": [{"path": ["episode_labels"]}, {"path": ["skill_candidates"]}],
                },
                "executionMetadata": {"tags": [{"key": "dagster/partition", "value": CHECKPOINTS[1]}]},
                "mode": "default",
            }
        },
    )
    assert skills["launchRun"]["__typename"] == "LaunchRunSuccess", skills
    assert dagster_dev.wait_run(skills["launchRun"]["run"]["runId"]) == "SUCCESS", dagster_dev.log_tail()

    key = CHECKPOINTS[1]
    val = dagster_dev.partition_metadata(["val", "eval_summary"], key)
    train = dagster_dev.partition_metadata(["train", "eval_summary"], key)
    assert val["suite"] == "val" and train["suite"] == "train"
    assert val["success_display"] != train["success_display"] or val["reward_display"] != train["reward_display"]
    candidates = json.loads(
        (dagster_dev.runs_root / "skills" / key / "skill_candidates.json").read_text(encoding="utf-8")
    )
    accepted = [c for c in candidates["candidates"] if c["status"] == "accepted"]
    assert accepted, "the miner found no candidate to show"
    skill_words = accepted[0]["content"].split("\n")[0][:40]

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            base = dagster_dev.base_url
            texts = {}
            for suite, meta in (("val", val), ("train", train)):
                texts[suite] = _page_text(
                    page,
                    f"{base}/assets/{suite}/eval_summary?view=partitions&partition={key}",
                    "success_display",
                    output_dir / f"{suite}-eval-summary.png",
                )
                assert key in texts[suite]
                assert meta["success_display"] in texts[suite] and meta["reward_display"] in texts[suite]
            # Each page shows its own suite's numbers, not the other's.
            if val["success_display"] != train["success_display"]:
                assert train["success_display"] not in texts["val"]

            progress = _page_text(page, f"{base}/assets/val/progress", "verdict", output_dir / "val-progress-table.png")
            assert "ui-step-000200" in progress and "ui-step-000100" in progress
            # Issue 33: the verdict leads, rounded, and the chart is drawn in place (from the viewer), no click.
            assert progress.index("verdict") < progress.index("latest_reward")
            inline = page.locator(f'img[src^="{dagster_dev.viewer_url}/chart?"]').first
            inline.wait_for(timeout=30000)
            page.wait_for_function("img => img.complete && img.naturalWidth > 200", arg=inline.element_handle())
            box = inline.bounding_box()
            assert box is not None and box["width"] > 200 and box["height"] > 100
            page.screenshot(path=str(output_dir / "val-progress-inline.png"), full_page=True)
            # The chart is a markdown image: the metadata table links to it ("[Show Markdown]" opens it).
            page.get_by_text("[Show Markdown]").first.click()
            chart = page.locator('img[src^="data:image/png;base64,"]').first
            chart.wait_for(timeout=30000)
            box = chart.bounding_box()
            assert box is not None and box["width"] > 200 and box["height"] > 100
            page.screenshot(path=str(output_dir / "val-progress.png"))
            page.keyboard.press("Escape")

            text = _page_text(
                page,
                f"{base}/assets/skill_candidates?view=partitions&partition={key}",
                "candidates",
                output_dir / "skill-candidates.png",
            )
            assert skill_words in text, f"skill text {skill_words!r} not shown"
        finally:
            browser.close()
    for name in ("val-eval-summary.png", "train-eval-summary.png", "val-progress.png", "skill-candidates.png"):
        assert (output_dir / name).stat().st_size > 10_000
