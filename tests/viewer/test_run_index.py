"""The run index sidecar: appended with each record, caught up when the traces grow, rebuilt when
they were replaced, compacted to parquet, never written by a reader while a writer holds the lock;
the summary from the index equals the summary from the records."""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from testkit.core_runkit import record, step

from shopsimrl_core import RunStore, build_summary
from shopsimrl_core.analysis._exact import _stdev
from shopsimrl_core.analysis._summary import summary_from_index
from shopsimrl_core.runs.storage import _index
from shopsimrl_core.runs.storage._index import INDEX_LOG_NAME, INDEX_SNAPSHOT_NAME, RUN_INDEX_SCHEMA, open_run_index


def _records() -> list[dict]:
    out = []
    for task in range(12):
        steps = [
            step(usage={"prompt_tokens": 10 * task, "completion_tokens": 3, "total_tokens": 10 * task + 3}),
            step(protocol_error=task % 3 == 0),
            step(valid=task % 4 != 0),
        ]
        if task % 5 == 4:
            out.append(record(task, status="failed", error_type="ModelRequestError"))
        else:
            out.append(
                record(
                    task,
                    reward=(task % 4) / 3,
                    steps=steps,
                    category=f"cat-{task % 3}",
                    reason="purchase" if task % 2 else "action_limit",
                )
            )
    out.append(record(3, reward=1.0))  # a retry: the latest line wins
    return out


def _latest(records: list[dict]) -> list[dict]:
    latest = {r["episode_id"]: r for r in records}
    return [latest[k] for k in sorted(latest)]


def _log_rows(run_dir: Path) -> list[bytes]:
    """The log's rows after its schema header (which every log written now starts with)."""
    lines = (run_dir / INDEX_LOG_NAME).read_bytes().splitlines()
    assert json.loads(lines[0]) == {"offset": -1, "length": 0, "index_schema": RUN_INDEX_SCHEMA}
    return lines[1:]


def test_appends_keep_the_sidecar_current_and_the_summary_matches_the_records(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    records = _records()
    for rec in records:
        store.append(rec)
    store.close_traces()
    log = _log_rows(tmp_path)
    assert len(log) == len(records)  # one row per trace line, written by the appender
    index = open_run_index(tmp_path, persist=False)
    assert index.covered_bytes == (tmp_path / "traces.jsonl").stat().st_size
    planned = {r["episode_id"] for r in records} - {"task-000011__sample-000"}
    kwargs = dict(planned=planned, duplicate_completed=store.index().duplicate_completed, created_at="t")
    from_index = summary_from_index(index, len(planned), **kwargs)
    from_records = build_summary(_latest(records), len(planned), **kwargs)
    assert json.dumps(from_index.to_json()) == json.dumps(from_records.to_json())  # values and key order
    assert from_index.counts.unplanned_episodes == 1 and from_index.counts.failed == 2
    assert store.index().attempts("task-000003__sample-000") == 2


def test_reader_catches_up_from_the_tail_and_rebuilds_replaced_traces(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    for rec in _records()[:5]:
        store.append(rec)
    store.close_traces()
    traces = tmp_path / "traces.jsonl"
    with open(traces, "ab") as handle:  # lines written by something that did not update the index
        handle.write((json.dumps(record(40)) + "\n").encode())
        handle.write(b'{"episode_id": "task-000041__sa')  # and a torn tail
    index = open_run_index(tmp_path)
    assert index.episode("task-000040__sample-000")["complete"] is True
    assert index.line_count == 7 and index.skipped_lines == 1
    assert len(_log_rows(tmp_path)) == 6  # the torn tail is never covered
    # replace the traces with different content: the stale index must not be trusted
    traces.write_text(json.dumps(record(90, reward=0.0)) + "\n", encoding="utf-8")
    rebuilt = open_run_index(tmp_path)
    assert rebuilt.episodes.get_column("episode_id").to_list() == ["task-000090__sample-000"]
    assert rebuilt.episode("task-000090__sample-000")["reward"] == 0.0


def test_snapshot_compaction_and_merge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_index, "COMPACT_AT", 4)
    store = RunStore(tmp_path)
    records = _records()
    for rec in records[:6]:
        store.append(rec)
    store.index()  # a persisting open with ≥ COMPACT_AT rows beyond the snapshot compacts
    assert (tmp_path / INDEX_SNAPSHOT_NAME).is_file() and _log_rows(tmp_path) == []
    for rec in records[6:]:
        store.append(rec)
    store.close_traces()
    assert len(_log_rows(tmp_path)) == len(records) - 6
    merged = open_run_index(tmp_path, persist=False)
    assert merged.covered_lines == len(records) and merged.tail.height == len(records) - 6
    assert merged.episode("task-000003__sample-000")["attempts"] == 2  # one line in the snapshot, one in the log
    expected = build_summary(_latest(records), 12, created_at="t")
    assert json.dumps(summary_from_index(merged, 12, created_at="t").to_json()) == json.dumps(expected.to_json())


def test_a_reader_never_writes_while_a_writer_holds_the_lock(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    for rec in _records()[:3]:
        store.append(rec)
    store.close_traces()
    (tmp_path / INDEX_LOG_NAME).unlink()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        import sys
        from shopsimrl_core import RunStore
        store = RunStore(sys.argv[1]); store.acquire_lock("holder"); print("locked", flush=True); sys.stdin.readline()
    """),
            str(tmp_path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        index = open_run_index(tmp_path)
        assert index.episodes.height == 3  # caught up in memory
        assert not (tmp_path / INDEX_LOG_NAME).exists()  # but nothing written beside a live writer
    finally:
        holder.communicate("\n", timeout=30)
    open_run_index(tmp_path)
    assert len(_log_rows(tmp_path)) == 3


def test_fast_mean_and_stdev_are_fsum_and_statistics_bit_for_bit() -> None:
    import math

    import polars as pl

    from shopsimrl_core.analysis._exact import _fmean

    rng = random.Random(5)
    draws = [
        lambda: rng.random(),
        lambda: rng.choice([0.0, 0.5, 1.0, 1 / 3]),
        lambda: rng.gauss(0, 1e-6),
        lambda: rng.uniform(-1e9, 1e9),
        lambda: rng.choice([0.0, 1e-300, 2.5]),
    ]
    for draw in draws:
        values = [draw() for _ in range(20_000)]
        assert _stdev(values) == statistics.stdev(values)
        assert _stdev(pl.Series(values)) == statistics.stdev(values)
        assert _fmean(pl.Series(values)) == math.fsum(values) / len(values)


def test_planned_ids_as_a_sorted_series_give_the_same_summary(tmp_path: Path) -> None:
    import polars as pl

    store = RunStore(tmp_path)
    records = _records()
    for rec in records:
        store.append(rec)
    index = open_run_index(tmp_path, persist=False)
    every = sorted({r["episode_id"] for r in records})
    for planned in (set(every), set(every[2:9]) | {"task-000500__sample-000"}):
        as_series = pl.Series(sorted(planned), dtype=pl.Utf8).set_sorted()
        expected = json.dumps(summary_from_index(index, len(planned), planned=planned, created_at="t").to_json())
        from_series = summary_from_index(index, len(planned), planned=as_series, created_at="t")
        assert json.dumps(from_series.to_json()) == expected
        from_records = build_summary(_latest(records), len(planned), planned=planned, created_at="t")
        assert json.dumps(from_records.to_json()) == expected


def test_large_plans_are_parsed_once_and_the_cache_follows_the_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shopsimrl_core.analysis import _summary
    from shopsimrl_core.analysis._summary import PLANNED_CACHE_NAME, summarize_run

    monkeypatch.setattr(_summary, "_PLANNED_CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(_summary, "_VECTOR_MIN_JOBS", 1)
    store = RunStore(tmp_path)
    records = _records()
    for rec in records:
        store.append(rec)
    jobs = [r["job"] for r in records[:-1]]
    store.write_manifest({"jobs": jobs}, "f", {})
    first = summarize_run(tmp_path, write=False, created_at="t")
    assert (tmp_path / PLANNED_CACHE_NAME).is_file()
    again = summarize_run(tmp_path, write=False, created_at="t")  # from the cache
    assert json.dumps(again.to_json()) == json.dumps(first.to_json())
    store.write_manifest({"jobs": jobs[:5]}, "f", {})  # a new manifest: the cache no longer applies
    assert summarize_run(tmp_path, write=False, created_at="t").counts.requested == 5


def test_the_schema_is_derived_from_the_columns_so_a_new_column_cannot_go_unversioned() -> None:
    from shopsimrl_core.runs.storage import _index_rows

    assert _index_rows.index_schema() == RUN_INDEX_SCHEMA
    assert _index_rows.index_schema((*_index_rows._FIXED, ("new_metric", "float"))) != RUN_INDEX_SCHEMA
    retyped = tuple((name, "str" if name == "reward" else kind) for name, kind in _index_rows._FIXED)
    assert _index_rows.index_schema(retyped) != RUN_INDEX_SCHEMA
    assert _index_rows.index_schema(stats=(*_index_rows.INDEX_STATS, "x")) != RUN_INDEX_SCHEMA


@pytest.mark.parametrize("header", [None, {"offset": -1, "length": 0, "index_schema": "shopsimrl-run-index-v1-old"}])
def test_a_log_of_another_schema_is_rewritten_from_the_traces_not_read_with_gaps(
    tmp_path: Path, header: dict[str, object] | None
) -> None:
    store = RunStore(tmp_path)
    records = _records()[:5]
    for rec in records:
        store.append(rec)
    store.close_traces()
    # The same rows as an older writer left them: without the `reward` column, under no or another header.
    rows = [json.loads(line) for line in _log_rows(tmp_path)]
    old = [json.dumps(header)] if header else []
    old += [json.dumps({k: v for k, v in row.items() if k != "reward"}) for row in rows]
    (tmp_path / INDEX_LOG_NAME).write_text("\n".join(old) + "\n", encoding="utf-8")
    index = open_run_index(tmp_path)
    expected = {r["episode_id"]: r["final"]["reward"] for r in records if r.get("status") == "completed"}
    assert expected and {e: index.episode(e)["reward"] for e in expected} == expected
    assert [json.loads(line) for line in _log_rows(tmp_path)] == rows  # rewritten under the current header
