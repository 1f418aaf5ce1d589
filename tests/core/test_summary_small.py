"""A small run is indexed and summarised without polars, to the same bytes as the polars path (issue 33 item 14).

Importing polars costs about as much CPU as the rest of a one-episode ``shopsimrl run``
(benchmarks/client_shape.py, row ``start_1ep``). ``_small_index.py`` reads a small run's index from its log
and ``_summary_small.py`` computes its summary in plain Python; both must give exactly what the polars
path gives, or decline. Here both paths run on generated runs (failures, retries, repeats, categories,
components, tokens, planned and unplanned episodes) and are compared whole; the log the small catch-up
writes is compared with the one the polars catch-up writes; and a one-episode run is checked not to
import polars at all.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from testkit.core_runkit import FakeEpisodes, modules_after_one_episode_run, record, small_splits, step, write_config

from shopsimrl_core import RunStore, load_config, run_evaluation
from shopsimrl_core.analysis import _summary
from shopsimrl_core.runs.planning._jobs import episode_id
from shopsimrl_core.runs.storage import _small_index
from shopsimrl_core.runs.storage._index import open_run_index

CATEGORIES = ["服饰›男装›短袖衬衫", "家居›厨具›炒锅", "emoji 🛒", "A-z"]


def _random_record(rng: random.Random, task: int, sample: int) -> dict:
    status = rng.choice(["completed"] * 4 + ["failed"])
    steps = [
        step(
            protocol_error=rng.random() < 0.1,
            valid=rng.choice([True, True, False, None]),
            usage=rng.choice([{}, {"prompt_tokens": rng.randint(1, 900), "completion_tokens": rng.randint(1, 90)}]),
        )
        for _ in range(rng.randint(0, 4))
    ]
    rec = record(
        task,
        sample,
        status=status,
        reward=rng.choice([0.0, 1.0, 0.5, round(rng.random(), 6), rng.random()]),
        reason=rng.choice(["purchase", "action_limit", "工具"]),
        steps=steps,
        duration_ms=rng.choice([None, round(rng.uniform(10, 5000), 3)]),
        error_type=rng.choice(["ModelRequestError", "ModelEndpointFault", None]),
        category=rng.choice([None, *CATEGORIES]) if rng.random() < 0.5 else None,
        r_success=rng.choice([None, 0, 1]),
        components=rng.choice([None, {"r_extra": rng.random()}]),
    )
    if status == "completed" and rng.random() < 0.1:
        rec["final"]["reward"] = None  # unscored
    return rec


def _write_run(run_dir: Path, rng: random.Random) -> None:
    tasks = rng.sample(range(1, 60), rng.randint(1, 6))
    repeats = rng.choice([1, 1, 2, 3])
    store = RunStore(run_dir)
    store.acquire_lock("gen")
    try:
        jobs = [(t, s) for t in tasks for s in range(repeats)]
        if rng.random() < 0.7:  # a manifest: planned episodes (one of them maybe never run)
            planned = jobs if rng.random() < 0.8 else jobs[:-1]
            plan = {"jobs": [{"task_id": t, "sample_id": s, "seed": 1, "split": "val"} for t, s in planned]}
            store.write_manifest(plan, "fp", {})
        for _ in range(rng.randint(1, 3)):  # attempts: later lines win
            for t, s in rng.sample(jobs, rng.randint(1, len(jobs))):
                store.append(_random_record(rng, t, s))
        if rng.random() < 0.15:
            store.append(_random_record(rng, 999, 0))  # an unplanned episode
    finally:
        store.release_lock()


def _both(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict | None, dict]:
    store = RunStore(run_dir)
    small = _summary._small_run_summary(store, None, "2026-12-04T00:00:00+00:00")
    with monkeypatch.context() as patch:
        patch.setattr(_small_index, "open_small_index", lambda *a, **k: None)
        full = _summary.summarize_run(run_dir, write=False, created_at="2026-12-04T00:00:00+00:00")
    return (None if small is None else small.to_json()), full.to_json()


def test_the_small_summary_is_the_polars_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(20261204)
    compared = declined = 0
    for number in range(160):
        run_dir = tmp_path / f"run-{number}"
        _write_run(run_dir, rng)
        small, full = _both(run_dir, monkeypatch)
        if small is None:
            declined += 1
            continue
        compared += 1
        assert json.dumps(small, ensure_ascii=False) == json.dumps(full, ensure_ascii=False), run_dir
    assert compared >= 60 and declined >= 5, (compared, declined)  # both ways taken, many times


def test_the_small_index_is_the_run_index(tmp_path: Path) -> None:
    rng = random.Random(7)
    for number in range(40):
        run_dir = tmp_path / f"run-{number}"
        _write_run(run_dir, rng)
        small = _small_index.open_small_index(run_dir)
        assert small is not None
        full = open_run_index(run_dir, persist=False)
        ids = [row["episode_id"] for row in small.rows] + [episode_id(12345, 0)]
        assert ids[:-1] == full.episodes.get_column("episode_id").to_list()
        for name in ("attempts", "completed_lines", "endpoint_faults", "complete", "reward", "offset", "status"):
            assert [row.get(name) for row in small.rows] == full.episodes.get_column(name).to_list(), name
        assert small.first_exported == full.first_exported()


def test_the_small_index_declines_what_the_log_alone_does_not_describe(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _write_run(run_dir, random.Random(3))
    assert _small_index.open_small_index(run_dir) is not None
    with open(run_dir / "traces.jsonl", "ab") as handle:  # a line the log does not hold (a crash in between)
        handle.write(json.dumps(record(77)).encode() + b"\n")
    assert _small_index.open_small_index(run_dir) is None
    open_run_index(run_dir, persist=True)  # the full catch-up logs it
    assert _small_index.open_small_index(run_dir) is not None
    (run_dir / "traces.index.parquet").write_bytes(b"")  # a snapshot: the full index reads it
    assert _small_index.open_small_index(run_dir) is None


def test_the_small_catch_up_writes_the_log_the_full_one_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small_splits(tmp_path)
    config = load_config(write_config(tmp_path, overrides={"experiment": {"max_episode_retries": 0}}))
    run_evaluation(config, episode_fn=FakeEpisodes({episode_id(20, 0): ["fail"]}))
    run_evaluation(config, episode_fn=FakeEpisodes())  # a resume: the first append catches up on an existing log
    log = (config.run_dir / "traces.index.jsonl").read_bytes()
    rebuilt = tmp_path / "rebuilt"
    rebuilt.mkdir()
    (rebuilt / "traces.jsonl").write_bytes((config.run_dir / "traces.jsonl").read_bytes())
    open_run_index(rebuilt, persist=True)
    assert (rebuilt / "traces.index.jsonl").read_bytes() == log
    assert len(log.splitlines()) == 1 + 6  # header, 5 first attempts and the retried one


def test_a_one_episode_run_does_not_import_polars(tmp_path: Path) -> None:
    modules = modules_after_one_episode_run(tmp_path)
    assert sorted(name for name in modules if name.split(".")[0] in ("polars", "numpy", "pyarrow")) == []
