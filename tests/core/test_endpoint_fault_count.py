"""The summary counts endpoint faults apart (issue 24): ``counts.endpoint_faults`` is the number of failed
attempts of planned episodes whose ``error.type`` is ``ModelEndpointFault``, over every trace line — a fault
retried into a completed episode still counts, other failures and unplanned episodes do not."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from testkit.core_runkit import record

from shopsimrl_core import EvalSummary, RunStore, summarize_run
from shopsimrl_core.runs.storage import _index
from shopsimrl_core.runs.storage._index import open_run_index

FAULT = "ModelEndpointFault"


def _store(run_dir: Path) -> RunStore:
    store = RunStore(run_dir)
    jobs = [{"task_id": task, "sample_id": 0, "seed": 1, "split": "val"} for task in (1, 2, 3, 4)]
    store.write_manifest({"jobs": jobs}, "f", {})
    store.append(record(1, status="failed", error_type=FAULT))
    store.append(record(1, status="failed", error_type=FAULT))
    store.append(record(1))  # two faults, then completed: both faults count
    store.append(record(2, status="failed", error_type=FAULT))  # latest attempt a fault
    store.append(record(3, status="failed", error_type="ShopSimulatorError"))  # not an endpoint fault
    store.append(record(4))
    store.append(record(9, status="failed", error_type=FAULT))  # unplanned: not counted
    return store


def test_summary_counts_every_failed_endpoint_attempt_of_planned_episodes(tmp_path: Path) -> None:
    store = _store(tmp_path / "run")
    summary = summarize_run(store.run_dir)
    counts = summary.counts
    assert counts.endpoint_faults == 3
    assert (counts.completed, counts.failed, counts.unplanned_episodes) == (2, 2, 1)
    assert summary.errors == {FAULT: 1, "ShopSimulatorError": 1}  # the latest records, as before
    # additive, in the document model, and in the file as written
    assert list(counts.to_json())[:7] == ["requested", "trace_files", "completed", "failed", "scored", "coverage",
                                          "endpoint_faults"]
    written = json.loads(store.summary_path.read_text(encoding="utf-8"))
    assert json.dumps(written) == json.dumps(summary.to_json())
    parsed = EvalSummary.parse(written, "summary")
    assert parsed.counts.endpoint_faults == 3
    assert written["counts"]["endpoint_faults"] == 3


def test_a_clean_run_counts_zero(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run")
    store.append(record(1))
    assert summarize_run(store.run_dir, write=False).counts.endpoint_faults == 0


def test_the_count_survives_snapshot_compaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past COMPACT_AT rows the index keeps one row per episode; the per-episode sum keeps the count."""
    monkeypatch.setattr(_index, "COMPACT_AT", 3)
    store = _store(tmp_path / "run")
    store.close_traces()
    open_run_index(store.run_dir, persist=True)
    assert (store.run_dir / _index.INDEX_SNAPSHOT_NAME).exists()
    store = RunStore(store.run_dir)
    store.append(record(2, status="failed", error_type=FAULT))  # one more, beyond the snapshot
    assert summarize_run(store.run_dir, write=False).counts.endpoint_faults == 4


def test_a_snapshot_without_the_column_is_rebuilt_not_miscounted(tmp_path: Path) -> None:
    store = _store(tmp_path / "run")
    index = open_run_index(store.run_dir, persist=False)
    # a snapshot written before the per-episode sum existed
    old = index.episodes.drop("endpoint_faults")
    _index._write_snapshot(store.run_dir, old, index._state)
    (store.run_dir / _index.INDEX_LOG_NAME).write_bytes(b"")
    assert "endpoint_faults" not in pl.read_parquet(store.run_dir / _index.INDEX_SNAPSHOT_NAME).columns
    assert summarize_run(store.run_dir, write=False).counts.endpoint_faults == 3
