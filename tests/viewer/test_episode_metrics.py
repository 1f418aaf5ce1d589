"""Per-episode metrics (``episode/_metrics.py``): computed into the run index, shown everywhere from it.

Issue 25's newcomer change "add a per-episode metric and show it in the UI": the last test adds a
metric the way a newcomer would — one entry in ``EPISODE_METRICS``, nothing else — and finds it in
the run index, ``episode_metrics``, ``shopsimrl summarize --metrics``' function, the viewer's run
page and the Dagster ``eval_summary`` metadata, on real runs against the sandbox.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import pytest
from viewer.conftest import _config

from shopsimrl_core import episode_metrics, iter_latest_records
from shopsimrl_core.episode import _metrics
from shopsimrl_core.episode._metrics import EpisodeMetric, metric_values
from shopsimrl_core.runs.config._config import load_config
from shopsimrl_core.runs.execution._evaluator import run_evaluation
from shopsimrl_core.runs.storage._index import open_run_index


def _step(action: str, *, valid: bool = True, page: str = "search_results", asin: Any = None) -> dict[str, Any]:
    state: dict[str, Any] = {"page_type": page}
    if asin is not None:
        state["product"] = {"asin": asin}
    return {"action": action, "environment": {"action_feedback": {"valid": valid}, "observation_state": state}}


def test_the_shipped_metrics_on_a_hand_made_record() -> None:
    record = {
        "steps": [
            _step("search[红色 连衣裙]"),
            _step("search[]", valid=False),
            _step("click[B01]", page="product_detail", asin="B01"),
            _step("click[< prev]", page="search_results"),
            _step("click[B01]", page="product_detail", asin="B01"),
            _step("click[B02]", page="product_detail", asin="B02"),
            {"action": "search[x]", "protocol_error": {"code": "bad"}},  # no environment block: not counted
            "garbage",
        ]
    }
    assert metric_values(record) == {"m::searches": 1, "m::products_viewed": 2}
    assert metric_values({"steps": "not a list"}) == {"m::searches": 0, "m::products_viewed": 0}


def test_a_metric_that_raises_leaves_the_episode_out_and_indexing_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = EpisodeMetric("broken", "broken", "int", lambda record: 1 // 0)
    monkeypatch.setattr(_metrics, "EPISODE_METRICS", (*_metrics.EPISODE_METRICS, broken))
    assert "m::broken" not in metric_values({"steps": []})


def _means_from_records(run_dir: Path, extract: Any) -> float:
    values = [extract(r) for r in iter_latest_records(run_dir / "traces.jsonl") if r.get("status") == "completed"]
    return math.fsum(values) / len(values)


def test_the_shipped_metrics_over_a_real_run_match_the_records(val_runs: Path) -> None:
    run_dir = val_runs / "val" / "ckpt-a"
    rows = {row["name"]: row for row in episode_metrics(run_dir)}
    assert set(rows) == {m.name for m in _metrics.EPISODE_METRICS}
    for metric in _metrics.EPISODE_METRICS:
        assert rows[metric.name]["episodes"] == 8
        assert rows[metric.name]["mean"] == _means_from_records(run_dir, metric.extract)
    assert rows["searches"]["mean"] >= 1  # the baseline policy searches in every episode


def test_a_new_metric_is_one_registry_entry_and_shows_everywhere(
    tmp_path: Path, sandbox: Any, viewer_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def steps_taken(record: Any) -> int:
        return len(record.get("steps") or [])

    # the newcomer's whole change (in the file it is one more line in the tuple)
    added = EpisodeMetric("steps_taken", "steps taken", "int", steps_taken, "steps of the episode")
    monkeypatch.setattr(_metrics, "EPISODE_METRICS", (*_metrics.EPISODE_METRICS, added))
    run_dir = tmp_path / "runs" / "val" / "ckpt-new"
    run_evaluation(load_config(_config(tmp_path, sandbox, "ckpt-new", 30)))

    index = open_run_index(run_dir, persist=False)
    assert "m::steps_taken" in index.episodes.columns
    row = {r["name"]: r for r in episode_metrics(run_dir)}["steps_taken"]
    assert row["label"] == "steps taken" and row["episodes"] == 8
    assert row["mean"] == _means_from_records(run_dir, steps_taken)

    viewer = viewer_for([tmp_path / "runs"])
    page = httpx.get(f"{viewer.base_url}/run/val/ckpt-new", timeout=60).text
    assert "<th>steps taken</th>" in page  # a column of the episode table and a row of the metrics table
    assert '<td title="steps of the episode">steps taken</td>' in page
    sorted_page = httpx.get(f"{viewer.base_url}/run/val/ckpt-new?sort=m::steps_taken&order=desc", timeout=60).text
    assert '<option value="m::steps_taken" selected>' in sorted_page

    from shopsimrl_dagster.defs.summaries import _episode_metrics_metadata

    metadata = _episode_metrics_metadata(episode_metrics(run_dir))
    assert metadata["metric_steps_taken"] == row["mean"]
    assert [r.data["metric"] for r in metadata["episode_metrics"].records][-1] == "steps taken"
